import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type NatsServer } from "../helpers/nats-server.js";
import { sqliteNativeBinding } from "../helpers/sqlite.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const tsx = join(root, "node_modules", ".bin", "tsx");

describe("engine examples run against a real server", () => {
  let srv: NatsServer;
  beforeAll(async () => {
    srv = await startServer();
  });
  afterAll(async () => {
    await srv?.dispose();
  });

  it("with-in-progress keeps a 5 s write alive through a 2 s AckWait while another worker pulls", async () => {
    const { stdout } = await run(tsx, [join(root, "examples", "with-in-progress.ts")], { cwd: root, env: { ...process.env, NATS_URL: srv.url }, timeout: 60_000 });
    const beats = Number(/heartbeats sent: (\d+)/.exec(stdout)?.[1]);
    expect(beats).toBeGreaterThanOrEqual(4);
    // Another worker pulled all along: one delivery in all, so the heartbeats kept it ours.
    expect(stdout).toContain("the other worker got: 0");
    expect(stdout).toContain("deliveries: 1, redelivered: 0, acked up to: 1");
  });

  it("sqlite-sink: synchronous imports longer than AckWait keep their leases through the heartbeat thread", async () => {
    const binding = sqliteNativeBinding();
    const env = { ...process.env, NATS_URL: srv.url, ...(binding !== undefined ? { SQLITE_NATIVE_BINDING: binding } : {}) };
    const { stdout } = await run(tsx, [join(root, "examples", "sqlite-sink.ts")], { cwd: root, env, timeout: 120_000 });
    expect(stdout).toContain("imports committed: 3, rows: 4500000");
    // Each import blocked the event loop past the 1 s AckWait...
    expect(Number(/longest commit: (\d+) ms/.exec(stdout)?.[1])).toBeGreaterThan(1000);
    expect(Number(/event-loop stalls: (\d+)/.exec(stdout)?.[1])).toBeGreaterThanOrEqual(1);
    // ...and none was delivered twice.
    expect(stdout).toContain("leases lost: 0,");
    expect(stdout).toContain("extra deliveries: 0, acked up to: 3");
  });

  it("commit-then-ack writes, retries, dead-letters and stops", async () => {
    const { stdout } = await run(tsx, [join(root, "examples", "commit-then-ack.ts")], { cwd: root, env: { ...process.env, NATS_URL: srv.url }, timeout: 60_000 });
    // "busy" failed once and was tried again in place: written in its turn, no redelivery.
    expect(stdout).toContain("written: ok-1, busy, ok-2");
    expect(stdout).toContain("dead-lettered: 1");
    expect(stdout).toContain("ack pending: 0, acked up to: 4");
  });
});
