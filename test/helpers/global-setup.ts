import { join } from "node:path";
import { ensureNatsServerBinary, natsServerVersion, serverAtLeast } from "./nats-server.js";
import { NEWEST_FEATURES_SINCE } from "./server-version.js";

/**
 * Finds (or, on a machine without one, fetches) nats-server, and fails the whole run at once,
 * with one line, when there is none. Says in one line when no 2.11+ server is at hand.
 */
export default function setup(): void {
  let version: string;
  try {
    version = natsServerVersion(ensureNatsServerBinary());
  } catch (err) {
    // One line; no stack: the fix is an install, not a debug session.
    const e = new Error((err as Error).message);
    e.stack = e.message;
    throw e;
  }
  process.env["JSIP_NATS_SERVER_VERSION"] = version;
  // A matrix row's client: child processes (examples, workers) resolve @nats-io/* there too
  // (or, on the legacy-client row, to the shims over nats 2.x).
  if (process.env["JSIP_NATS_CLIENT_DIR"] || process.env["JSIP_NATS_CLIENT"] === "legacy") {
    const hook = join(import.meta.dirname, "client", "register.mjs");
    const current = process.env["NODE_OPTIONS"] ?? "";
    if (!current.includes(hook)) process.env["NODE_OPTIONS"] = `${current} --import "${hook}"`.trim();
  }
  // Once per run (the setup runs once per vitest project).
  if (!serverAtLeast(NEWEST_FEATURES_SINCE) && !process.env["JSIP_SAID_NO_NEWEST_SERVER"]) {
    process.env["JSIP_SAID_NO_NEWEST_SERVER"] = "1";
    console.log(
      `note: no nats-server ${NEWEST_FEATURES_SINCE}+ here (only ${version}): the 2.11+ tests assert what ${version} does instead; ` +
        "scripts/fetch-nats-servers.sh puts one in .cache/nats-server",
    );
  }
}
