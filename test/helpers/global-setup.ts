import { natsServerBinary, natsServerVersion } from "./nats-server.js";

/** Fails the whole run at once, with one line, when nats-server is missing. */
export default function setup(): void {
  let version: string;
  try {
    natsServerBinary();
    version = natsServerVersion();
  } catch (err) {
    // One line; no stack: the fix is an install, not a debug session.
    const e = new Error((err as Error).message);
    e.stack = e.message;
    throw e;
  }
  process.env["JSIP_NATS_SERVER_VERSION"] = version;
}
