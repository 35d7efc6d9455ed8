/**
 * One heartbeat thread per process and connection: started on first use, shared, reused across
 * back-to-back batches, closed (its connection gone from the server) once nothing uses it, and
 * never keeping a finished host process alive.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HeartbeatThread } from "../../src/lease/heartbeat-thread.js";
import { nowEpochMs } from "../../src/lease/heartbeat-thread-protocol.js";
import { eventually } from "../helpers/jetstream.js";
import { freePort, startServer, type NatsServer } from "../helpers/nats-server.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const CHILD = join(root, "test", "helpers", "heartbeat-thread-child.ts");

let srv: NatsServer;
let monitor: number;

beforeAll(async () => {
  monitor = await freePort();
  srv = await startServer({ args: ["-m", String(monitor)] });
});

afterAll(async () => {
  await srv.dispose();
});

/** The names of the server's client connections (its monitoring endpoint). */
async function connectionNames(): Promise<string[]> {
  const res = await fetch(`http://127.0.0.1:${monitor}/connz?limit=1000`);
  const body = (await res.json()) as { connections?: Array<{ name?: string }> };
  return (body.connections ?? []).map((c) => c.name ?? "");
}

describe("the heartbeat thread's life", () => {
  it("a host that finished its work exits by itself, whether or not it stopped and released", async () => {
    const results = await Promise.all(
      ["tidy", "forgetful"].map(async (mode) => {
        const { stdout } = await run(process.execPath, ["--import", "tsx", CHILD, mode, srv.url], { cwd: root, timeout: 20_000 });
        return { exitedAt: Date.now(), out: JSON.parse(stdout.trim().split("\n").at(-1)!) as { mode: string; frames: number; beats: number; doneAt: number } };
      }),
    );
    for (const { exitedAt, out } of results) {
      // It beat while it worked...
      expect(out.beats, out.mode).toBeGreaterThanOrEqual(3);
      expect(out.frames, out.mode).toBeGreaterThanOrEqual(3);
      // ...and the process ended at once after its own work, not after an idle grace or a retry.
      expect(exitedAt - out.doneAt, out.mode).toBeLessThan(1500);
    }
  });

  it("one thread per connection; back-to-back batches reuse it; the last release closes its connection", async () => {
    const name = `lifecycle-${process.pid}`;
    const a = HeartbeatThread.acquire({ servers: srv.url, name }, { idleCloseMs: 300 });
    const b = HeartbeatThread.acquire({ servers: [srv.url], name });
    expect(b.threadId).toBe(a.threadId);
    const other = HeartbeatThread.acquire({ servers: srv.url, name: `${name}-other` }, { idleCloseMs: 0 });
    expect(other.threadId).not.toBe(a.threadId);
    await Promise.all([a.ready(), other.ready()]);
    await eventually(async () => (await connectionNames()).filter((n) => n.startsWith(name)).length === 2, "both connections");
    other.release();
    await other.exited;

    const lease = a.register(["lifecycle.beats"], { intervalMs: 50, maxHeartbeats: 2, firstDueAt: nowEpochMs() });
    await eventually(() => lease.state === "limit", "the limit");
    lease.stop();
    a.release();
    b.release();
    // Within the grace, the next batch finds the same thread.
    await new Promise((r) => setTimeout(r, 100));
    const c = HeartbeatThread.acquire({ servers: srv.url, name });
    expect(c.threadId).toBe(a.threadId);
    expect(c.state).toBe("connected");
    c.release();
    c.release();
    await a.exited;
    expect(a.state).toBe("closed");
    await eventually(async () => !(await connectionNames()).some((n) => n.startsWith(name)), "the connection gone from the server");
    // A new acquire starts a new thread.
    const d = HeartbeatThread.acquire({ servers: srv.url, name }, { idleCloseMs: 0 });
    expect(d.threadId).not.toBe(a.threadId);
    await d.ready();
    d.release();
    await d.exited;
  });

  it("a server that never answers: not ready, due rounds counted as failures, and release still ends the thread", async () => {
    const port = await freePort();
    const t = HeartbeatThread.acquire({ servers: `nats://127.0.0.1:${port}` }, { idleCloseMs: 0 });
    expect(t.state).toBe("starting");
    await expect(t.ready(300)).rejects.toMatchObject({ name: "HeartbeatThreadError", reason: "not_ready" });
    const lease = t.register(["nowhere.beats"], { intervalMs: 100, maxHeartbeats: 3, firstDueAt: nowEpochMs() });
    await eventually(() => lease.failures >= 3, "three failed rounds");
    expect(lease.beats).toBe(0);
    expect(lease.lastBeatAt).toBeUndefined();
    expect(t.state).toBe("starting");
    lease.stop();
    t.release();
    await t.exited;
    expect(t.state).toBe("closed");
  });
});
