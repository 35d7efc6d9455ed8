/**
 * Invariant 10 through the heartbeat thread: a `+WPI` that reaches the server after a delayed
 * NAK wipes the delay, so the NAK waits for `stopAndFlush()` (the thread stopped the batch and
 * the server answered a PING sent after its last beat). Many batches beat every 100 ms, their
 * beats spread over the interval; each is NAKed with a 4 s delay (twice AckWait) at a moment
 * that falls anywhere in its beat cycle.
 */
import { jetstream, type JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HeartbeatThread } from "../../src/lease/heartbeat-thread.js";
import type { ThreadLease } from "../../src/lease/heartbeat-thread-lease.js";
import { nowEpochMs } from "../../src/lease/heartbeat-thread-protocol.js";
import { replySubject } from "../../src/nats/message-access.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { createFixture, fetchBatch, publish, type Fixture } from "../helpers/jetstream.js";
import { startServer, type NatsServer } from "../helpers/nats-server.js";

let srv: NatsServer;
let nc: NatsConnection;
let thread: HeartbeatThread;

beforeAll(async () => {
  srv = await startServer();
  nc = await srv.connect();
  thread = HeartbeatThread.acquire({ servers: srv.url, name: "nak-test" }, { idleCloseMs: 100 });
  await thread.ready();
});

afterAll(async () => {
  thread.release();
  await thread.exited;
  await nc.close();
  await srv.dispose();
});

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const DELAY_MS = 4000;

describe("stopAndFlush before a delayed NAK", () => {
  it("no +WPI follows any -NAK of the same delivery, and no NAKed message returns before its delay", async () => {
    const f = await createFixture(nc, { ackWaitMs: 2000 });
    await publish(f, 40);
    await using spy = await AckSpy.start(nc, f.stream);
    const msgs = await fetchBatch(f, 40);
    expect(msgs).toHaveLength(40);
    const batches: JsMsg[][] = [];
    for (let i = 0; i < msgs.length; i += 4) batches.push(msgs.slice(i, i + 4));
    const start = nowEpochMs();
    const leases = batches.map((b, i) =>
      thread.register(b.map((m) => replySubject(m)!), { intervalMs: 100, maxHeartbeats: 1000, firstDueAt: start + i * 10 }),
    );
    try {
      await check(f, msgs, batches, leases, spy);
    } finally {
      for (const l of leases) l.stop();
    }
  });

  it("a batch never beaten needs no round trip; a closed thread refuses to confirm", async () => {
    const lease = thread.register(["never.beaten"], { intervalMs: 60_000, maxHeartbeats: 1 });
    const started = performance.now();
    await lease.stopAndFlush();
    expect(performance.now() - started).toBeLessThan(50);
    expect(lease.beats).toBe(0);

    const other = HeartbeatThread.acquire({ servers: srv.url, name: "closing" }, { idleCloseMs: 0 });
    await other.ready();
    const beaten = other.register(["closing.beats"], { intervalMs: 20, maxHeartbeats: 2, firstDueAt: nowEpochMs() });
    await sleep(200);
    expect(beaten.beats).toBe(2);
    other.release();
    // The lease still holds the thread: it stays open until the lease stops.
    await sleep(100);
    expect(other.state).toBe("connected");
    beaten.stop();
    await other.exited;
    expect(other.state).toBe("closed");
    await expect(beaten.stopAndFlush()).rejects.toMatchObject({ name: "HeartbeatThreadError", reason: "closed" });
    expect(() => other.register(["x"], { intervalMs: 100, maxHeartbeats: 1 })).toThrow(/released/);
  });
});

/** Beats, then NAKs batch by batch after stopAndFlush; then the frames and the redeliveries. */
async function check(f: Fixture, msgs: JsMsg[], batches: JsMsg[][], leases: ThreadLease[], spy: AckSpy): Promise<void> {
  await sleep(500);
  expect(leases.every((l) => l.beats >= 3)).toBe(true);

  const nakAt = new Map<number, number>();
  for (const [i, lease] of leases.entries()) {
    await sleep(7 + Math.random() * 40);
    await lease.stopAndFlush();
    for (const m of batches[i]!) {
      m.nak(DELAY_MS);
      nakAt.set(m.seq, Date.now());
    }
  }
  await nc.flush();
  await spy.waitFor((fr) => fr.filter((x) => x.kind === "-NAK").length === 40, 5000, "every NAK");

  for (const m of msgs) {
    const frames = spy.forSequence(m.seq);
    const nak = frames.findIndex((x) => x.kind === "-NAK");
    expect(frames.slice(0, nak).filter((x) => x.kind === "+WPI").length, `seq ${m.seq} was beaten`).toBeGreaterThanOrEqual(3);
    expect(frames.slice(nak + 1), `seq ${m.seq}: ${spy.summary()}`).toEqual([]);
  }

  // A second connection pulls the durable: each message comes back, and only after its delay.
  const puller = await srv.connect();
  try {
    const consumer = await jetstream(puller).consumers.get(f.stream, f.consumer);
    const back = new Map<number, number>();
    const deadline = Date.now() + DELAY_MS + 8000;
    while (back.size < msgs.length && Date.now() < deadline) {
      const iter = await consumer.fetch({ max_messages: 40, expires: 1000 });
      for await (const m of iter) {
        back.set(m.seq, Date.now());
        m.ack();
      }
    }
    expect(back.size).toBe(40);
    for (const [seq, at] of back) {
      // The server's redelivery timer has its own granularity: a little early is still the delay.
      expect(at - nakAt.get(seq)!, `seq ${seq}`).toBeGreaterThanOrEqual(DELAY_MS - 250);
    }
    await puller.flush();
  } finally {
    await puller.close();
  }
  expect(leases.every((l) => l.state === "stopped")).toBe(true);
}
