/**
 * The heartbeat thread's own connection: its outages are counted like any heartbeat failure
 * and beats resume after a reconnect; `true` copies a user/password connection; a connection
 * that authenticates through a function is refused, and its plain seed works instead.
 */
import { connect, nkeyAuthenticator, nkeys } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { HeartbeatThread } from "../../src/lease/heartbeat-thread.js";
import { threadConnectionFrom } from "../../src/lease/heartbeat-thread-options.js";
import { nowEpochMs } from "../../src/lease/heartbeat-thread-protocol.js";
import { eventually } from "../helpers/jetstream.js";
import { startServer } from "../helpers/nats-server.js";

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A server with one user; the harness checks it is up without credentials, as an identity that may do nothing. */
function authConfig(user: string): string {
  return [
    "authorization {",
    "  users: [",
    `    ${user}`,
    '    { user: probe_nobody, password: probe_nobody_pw, permissions: { publish: { deny: [">"] }, subscribe: { deny: [">"] } } }',
    "  ]",
    "}",
    "no_auth_user: probe_nobody",
  ].join("\n");
}

describe("the heartbeat thread's connection", () => {
  it("server down: failures counted, no crash; server back: beats resume", async () => {
    await using srv = await startServer();
    const t = HeartbeatThread.acquire({ servers: srv.url, name: "outage" }, { idleCloseMs: 0 });
    await t.ready();
    const lease = t.register(["outage.beats"], { intervalMs: 100, maxHeartbeats: 1000, firstDueAt: nowEpochMs() });
    try {
      await eventually(() => lease.beats >= 3, "beats before the outage");
      await srv.stop();
      await eventually(() => t.state === "disconnected", "the disconnect");
      const beatsDown = lease.beats;
      await eventually(() => lease.failures >= 5, "failed rounds while the server is down");
      expect(t.disconnects).toBe(1);
      expect(lease.beats - beatsDown).toBeLessThanOrEqual(1);

      const restartedAt = nowEpochMs();
      await srv.restart();
      await eventually(() => t.state === "connected", "the reconnect", 15_000);
      await eventually(() => lease.beats >= beatsDown + 3, "beats after the reconnect");
      expect(lease.lastBeatAt).toBeGreaterThan(restartedAt);
    } finally {
      lease.stop();
      t.release();
    }
    await t.exited;
  });

  it("true copies a user/password connection; the thread connects with it", async () => {
    await using srv = await startServer({ config: authConfig("{ user: svc, password: s3cret-pass }") });
    const nc = await srv.connect({ user: "svc", pass: "s3cret-pass", name: "orders" });
    try {
      const c = threadConnectionFrom(nc);
      expect(c).toMatchObject({ name: "orders:heartbeats", user: "svc", pass: "s3cret-pass" });
      expect(c.servers[0]).toBe(`127.0.0.1:${srv.port}`);
      let frames = 0;
      nc.subscribe("auth.beats", { callback: () => void (frames += 1) });
      await nc.flush();
      const t = HeartbeatThread.acquire(c, { idleCloseMs: 0 });
      await t.ready();
      const lease = t.register(["auth.beats"], { intervalMs: 50, maxHeartbeats: 2, firstDueAt: nowEpochMs() });
      await eventually(() => frames === 2, "two beats");
      lease.stop();
      t.release();
      await t.exited;
    } finally {
      await nc.close();
    }
  });

  it("a function authenticator is refused with what to pass; the plain seed connects", async () => {
    const user = nkeys.createUser();
    const seed = new TextDecoder().decode(user.getSeed());
    await using srv = await startServer({ config: authConfig(`{ nkey: ${user.getPublicKey()} }`) });
    const nc = await connect({ servers: srv.url, authenticator: nkeyAuthenticator(new TextEncoder().encode(seed)) });
    try {
      expect(() => threadConnectionFrom(nc)).toThrow(/true cannot copy the host's connection: it authenticates through a function \(it sends nkey\), and a function cannot cross a thread\. Pass the connection data instead: heartbeat\.thread: \{ servers: \[.*\], creds: readFileSync/);
      expect(() => threadConnectionFrom(nc)).not.toThrow(new RegExp(seed));
      const t = HeartbeatThread.acquire({ servers: srv.url, nkeySeed: seed }, { idleCloseMs: 0 });
      await t.ready();
      expect(t.state).toBe("connected");
      t.release();
      await t.exited;

      // The wrong identity: the thread reports it instead of hanging.
      const wrong = HeartbeatThread.acquire({ servers: srv.url, nkeySeed: new TextDecoder().decode(nkeys.createUser().getSeed()) }, { idleCloseMs: 0 });
      await expect(wrong.ready(10_000)).rejects.toMatchObject({ name: "HeartbeatThreadError", reason: "closed" });
      expect(wrong.errors).toBeGreaterThanOrEqual(1);
      expect(wrong.state).toBe("closed");
      await wrong.exited;
      await sleep(10);
    } finally {
      await nc.close();
    }
  });
});
