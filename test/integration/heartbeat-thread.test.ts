/**
 * The heartbeat thread against a real server: beats go on while the main thread is blocked
 * (another process pulling the same durable gets nothing), stay within maxHeartbeats, wait for
 * progress when asked, and stop before the final frame.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HeartbeatThread } from "../../src/lease/heartbeat-thread.js";
import { nowEpochMs } from "../../src/lease/heartbeat-thread-protocol.js";
import { replySubject } from "../../src/nats/message-access.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, eventually, fetchBatch, publish } from "../helpers/jetstream.js";
import { startServer, type NatsServer } from "../helpers/nats-server.js";
import { startObserver } from "../helpers/observer.js";

let srv: NatsServer;
let nc: NatsConnection;
let thread: HeartbeatThread;

beforeAll(async () => {
  srv = await startServer();
  nc = await srv.connect();
  thread = HeartbeatThread.acquire({ servers: srv.url }, { idleCloseMs: 200 });
  await thread.ready();
});

afterAll(async () => {
  thread.release();
  await thread.exited;
  await nc.close();
  await srv.dispose();
});

const replies = (msgs: readonly JsMsg[]): string[] => msgs.map((m) => replySubject(m)!);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function blockFor(ms: number, each?: () => void): void {
  const end = performance.now() + ms;
  let next = performance.now();
  while (performance.now() < end) {
    if (each !== undefined && performance.now() >= next) {
      each();
      next += 50;
    }
  }
}

describe("the heartbeat thread", () => {
  it("keeps a lease while the main thread is blocked past AckWait; nothing follows the ACK", async () => {
    const f = await createFixture(nc, { ackWaitMs: 2000 });
    const [seq] = await publish(f, 1);
    const msgs = await fetchBatch(f, 1);
    expect(msgs.map((m) => m.seq)).toEqual([seq]);
    const lease = thread.register(replies(msgs), { intervalMs: 500, maxHeartbeats: 100, firstDueAt: nowEpochMs() + 500 });
    // Started once this process holds the message: it would only get a redelivery.
    const observer = await startObserver({ url: srv.url, stream: f.stream, consumer: f.consumer, pull: true });
    try {

      // A synchronous sink: nothing runs on this thread for 3.5 s, 1.75 times AckWait.
      const blockStart = Date.now();
      blockFor(3500);
      const blockEnd = Date.now();

      // The observer kept pulling through the block and a while after it: no redelivery.
      await sleep(2500);
      expect(observer.deliveries).toEqual([]);
      const info = await consumerInfo(f);
      expect(info.num_redelivered).toBe(0);
      expect(info.num_ack_pending).toBe(1);
      expect(info.delivered.consumer_seq).toBe(1);

      // The beats reached the server during the block (the observer's own clock).
      const during = observer.frames.filter((fr) => fr.kind === "+WPI" && fr.streamSequence === seq && fr.at > blockStart && fr.at < blockEnd);
      expect(during.length).toBeGreaterThanOrEqual(5);
      expect(lease.beats).toBeGreaterThanOrEqual(9);
      expect(lease.failures).toBe(0);
      expect(lease.lastBeatAt).toBeGreaterThan(blockEnd);

      // Right after a round, so none is being written while the ACK goes out.
      const beats = lease.beats;
      await eventually(() => lease.beats > beats, "the next round", 5000, 10);
      // As the library does before a final frame: stop, and the beats sent reached the server.
      await lease.stopAndFlush();
      msgs[0]!.ack();
      await nc.flush();
      await eventually(() => observer.frames.some((fr) => fr.kind === "+ACK" && fr.streamSequence === seq), "the ACK");
      await sleep(1500);
      const ackIndex = observer.frames.findIndex((fr) => fr.kind === "+ACK" && fr.streamSequence === seq);
      expect(observer.frames.slice(ackIndex + 1).filter((fr) => fr.streamSequence === seq)).toEqual([]);
      expect(lease.state).toBe("stopped");
      expect((await consumerInfo(f)).num_ack_pending).toBe(0);
    } finally {
      lease.stop();
      await observer.stop();
    }
  });

  it("sends exactly maxHeartbeats rounds, one +WPI per delivery each, then none", async () => {
    const f = await createFixture(nc, { ackWaitMs: 5000 });
    await publish(f, 3);
    await using spy = await AckSpy.start(nc, f.stream);
    const msgs = await fetchBatch(f, 3);
    const lease = thread.register(replies(msgs), { intervalMs: 100, maxHeartbeats: 4, firstDueAt: nowEpochMs() });
    await eventually(() => lease.state === "limit", "the limit");
    await sleep(600);
    expect(lease.beats).toBe(4);
    for (const m of msgs) expect(spy.of("+WPI", m.seq)).toHaveLength(4);
    expect(spy.of("+WPI")).toHaveLength(12);
    lease.stop();
    for (const m of msgs) m.ack();
    await nc.flush();
  });

  it("a lease due 80 ms after another beats in its round; a second worker on the durable receives nothing", async () => {
    const f = await createFixture(nc, { ackWaitMs: 2000 });
    await publish(f, 2);
    await using spy = await AckSpy.start(nc, f.stream);
    const msgs = await fetchBatch(f, 2);
    const now = nowEpochMs();
    const a = thread.register(replies([msgs[0]!]), { intervalMs: 1000, maxHeartbeats: 5, firstDueAt: now + 1000 });
    const b = thread.register(replies([msgs[1]!]), { intervalMs: 1000, maxHeartbeats: 5, firstDueAt: now + 1080 });
    const other = await srv.connect();
    try {
      const got = await fetchBatch({ ...f, nc: other, js: (await import("@nats-io/jetstream")).jetstream(other) }, 1, 4500);
      expect(got).toHaveLength(0);
      await eventually(() => a.beats >= 4 && b.beats >= 4, "four rounds each");
      await Promise.all([a.stopAndFlush(), b.stopAndFlush()]);
      for (const m of msgs) m.ack();
      await nc.flush();
      const beats = msgs.map((m) => spy.forSequence(m.seq).filter((x) => x.kind === "+WPI").map((x) => x.at));
      expect(beats[1]!.length).toBeGreaterThanOrEqual(4);
      // Without the join, each of the second's frames would leave 80 ms after the first's.
      for (const [k, at] of beats[1]!.slice(0, 4).entries()) expect(Math.abs(at - beats[0]![k]!), spy.summary()).toBeLessThan(40);
    } finally {
      await other.close();
    }
  });

  it("released deliveries get no more beats; the others go on", async () => {
    const f = await createFixture(nc, { ackWaitMs: 5000 });
    await publish(f, 2);
    await using spy = await AckSpy.start(nc, f.stream);
    const msgs = await fetchBatch(f, 2);
    const lease = thread.register(replies(msgs), { intervalMs: 100, maxHeartbeats: 100, firstDueAt: nowEpochMs() });
    await eventually(() => lease.beats >= 2, "two rounds");
    lease.release(0);
    msgs[0]!.ack();
    const beatsAtRelease = lease.beats;
    await eventually(() => lease.beats >= beatsAtRelease + 3, "three more rounds");
    // Before the last final frame, as the library does: stop, and wait until the beats the
    // thread sent reached the server.
    await lease.stopAndFlush();
    msgs[1]!.ack();
    await nc.flush();
    await spy.waitFor((fr) => fr.filter((x) => x.kind === "+ACK").length === 2, 5000, "both ACKs");
    const framesAfterAck = (seq: number) => {
      const frames = spy.forSequence(seq);
      return frames.slice(frames.findIndex((x) => x.kind === "+ACK") + 1);
    };
    // Flushed: nothing after the ACK.
    expect(framesAfterAck(msgs[1]!.seq), spy.summary()).toEqual([]);
    // Released without a flush: a +WPI published just before the release travels on the
    // thread's own connection and may reach the server after the ACK (which then ignores it),
    // but no later round includes it.
    expect(framesAfterAck(msgs[0]!.seq).length, spy.summary()).toBeLessThanOrEqual(1);
    expect(spy.of("+WPI", msgs[1]!.seq).length).toBeGreaterThan(spy.of("+WPI", msgs[0]!.seq).length);
    expect(() => lease.release(2)).toThrow(RangeError);
  });

  it("requireProgress: a round goes only after progress, also from a blocked main thread", async () => {
    const f = await createFixture(nc, { ackWaitMs: 5000 });
    await publish(f, 1);
    await using spy = await AckSpy.start(nc, f.stream);
    const msgs = await fetchBatch(f, 1);
    const lease = thread.register(replies(msgs), { intervalMs: 100, maxHeartbeats: 100, firstDueAt: nowEpochMs(), requireProgress: true });
    await sleep(500);
    expect(lease.beats).toBe(0);
    // One sign of progress: one beat, at once (the due beat was waiting for it).
    const at = nowEpochMs();
    lease.progress();
    await eventually(() => lease.beats === 1, "the beat after progress");
    expect(lease.lastBeatAt! - at).toBeLessThan(100);
    await sleep(400);
    expect(lease.beats).toBe(1);
    // A blocked loop that still reports progress keeps beating: about one round per interval.
    blockFor(1000, () => lease.progress());
    expect(lease.beats).toBeGreaterThanOrEqual(6);
    expect(lease.beats).toBeLessThanOrEqual(13);
    await lease.stopAndFlush();
    msgs[0]!.ack();
    await nc.flush();
    await spy.waitFor((fr) => fr.some((x) => x.kind === "+ACK"), 5000, "the ACK");
    expect(spy.of("+WPI")).toHaveLength(lease.beats);
  });

  it("confirmed beats: each +WPI is a request the server answers", async () => {
    const f = await createFixture(nc, { ackWaitMs: 5000 });
    await publish(f, 2);
    await using spy = await AckSpy.start(nc, f.stream);
    const msgs = await fetchBatch(f, 2);
    const lease = thread.register(replies(msgs), { intervalMs: 100, maxHeartbeats: 3, firstDueAt: nowEpochMs(), confirm: { timeoutMs: 1000 } });
    try {
      await eventually(() => lease.confirmed === 3, "three confirmed rounds");
      expect(lease.failures).toBe(0);
      expect(lease.lastBeatAt).toBeGreaterThan(0);
      // The spy reads on another connection: its copies may come after the thread's answers.
      await spy.waitFor((fr) => fr.filter((x) => x.kind === "+WPI").length >= 6, 5000, "six +WPI frames");
      await sleep(300);
      expect(spy.of("+WPI").every((x) => x.withReply)).toBe(true);
      expect(spy.of("+WPI")).toHaveLength(6);
    } finally {
      lease.stop();
    }
    for (const m of msgs) m.ack();
    await nc.flush();
  });
});
