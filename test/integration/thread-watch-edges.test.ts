/**
 * The thread watch at the edges where hosts meet it (no metrics, no trace, plain beats, so
 * these batches are watched, not looked after one by one): a graceful shutdown in the middle
 * of a slow write under `CommitThenAck.run`, and a write that ignores its signal once the
 * thread reached `maxHeartbeats` (with `onLimit: "continue"` and `"abort"`), a thread that
 * ends without a word mid-write — and the same end for batches read per beat
 * (`requireProgress`, confirmed beats), which are not watched; and the thread's link down and
 * back while the main thread is blocked (the missed rounds still named for the outage). A second worker
 * pulling the same durable is the proof of a kept lease (it receives nothing) and of a lease
 * that ended (it receives the message as a redelivery).
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { Worker } from "node:worker_threads";
import { jetstream } from "@nats-io/jetstream";
import { afterEach, describe, expect, it, vi } from "vitest";
import { CommitThenAck, DiagnosticsChannels, HeartbeatLimitError, InMemoryMetrics, LeaseExpiredError, MetricNames, verifyInProgressPolicy, withInProgress } from "../../src/index.js";
import { HeartbeatThread } from "../../src/lease/heartbeat-thread.js";
import { PROTOCOL_VERSION } from "../../src/lease/heartbeat-thread-protocol.js";
import { ThreadWatch } from "../../src/lease/thread-watch.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { createFixture, eventually, fetchBatch, publish } from "../helpers/jetstream.js";
import { EventLog } from "../helpers/diagnostics.js";
import { ProxyThread } from "../helpers/proxy-thread.js";
import { startRival, type Rival } from "../helpers/rival.js";
import { useServer, useWarmThread } from "../helpers/server-fixture.js";
import { TcpProxy } from "../reliability/tcp-proxy.js";

const fx = useServer();
// The watch and the leases are under test here, not the thread's start (a late start has its own test below).
useWarmThread(fx);

afterEach(() => {
  vi.restoreAllMocks();
});

describe("the thread watch at the edges", () => {
  it("a graceful shutdown in the middle of a slow write (CommitThenAck.run): beats go on while it drains for 2× AckWait, it is acknowledged once, and a second worker receives nothing", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1500 });
    const [seq] = await publish(f, 1);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    const ack = new CommitThenAck({
      inProgress: verifyInProgressPolicy({ enabled: true, intervalMs: 400, maxHeartbeats: 100, shutdownTimeoutMs: 8000 }, { ackWaitMs: 1500, source: "configured" }),
      heartbeat: { thread: true },
    });
    const joins = vi.spyOn(ThreadWatch.prototype, "join");
    const shutdown = new AbortController();
    let rival: Rival | undefined;
    let abortedAt = 0;
    let sawAbort = false;
    // Only lease:expired: a heartbeat:sent subscriber would make the watch look at the batch every interval.
    using events = new EventLog([DiagnosticsChannels.LEASE_EXPIRED]);
    await ack.run(await f.js.consumers.get(f.stream, f.consumer), async (_msgs, ctx) => {
      // The rival starts once the loop holds the message: before, it could take it first.
      rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
      await eventually(() => spy.of("+WPI", seq).length >= 2, "two rounds from the thread");
      shutdown.abort();
      abortedAt = performance.now();
      await sleep(100);
      sawAbort = ctx.signal.aborted;
      // The commit goes on after the shutdown: twice AckWait.
      await sleep(3000);
    }, { batchSize: 1, signal: shutdown.signal });
    expect(events.of(DiagnosticsChannels.LEASE_EXPIRED)).toEqual([]);
    await fx.nc.flush();
    await rival!.stop();
    expect(rival!.received).toEqual([]);
    expect(sawAbort).toBe(true);
    expect(joins).toHaveBeenCalled();
    await spy.waitFor((fr) => fr.some((x) => x.kind === "+ACK" && x.streamSequence === seq), 5000, "the ACK");
    expect(spy.of("+ACK", seq), spy.summary()).toHaveLength(1);
    // Beaten through the drain (about 7 rounds in 3 s), and none after the ACK.
    expect(spy.of("+WPI", seq).filter((x) => x.at > abortedAt).length, spy.summary()).toBeGreaterThanOrEqual(4);
    const ackAt = spy.of("+ACK", seq)[0]!.at;
    expect(spy.of("+WPI", seq).filter((x) => x.at > ackAt), spy.summary()).toEqual([]);
  });

  it("a write that ignores its signal after maxHeartbeats (onLimit: continue): no round past the limit, the lease ends at its deadline, the work is told once, and a second worker gets the message", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1500 });
    const [seq] = await publish(f, 1);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    const msgs = await fetchBatch(f, 1);
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 300, maxHeartbeats: 3 }, { ackWaitMs: 1500, source: "configured" });
    const joins = vi.spyOn(ThreadWatch.prototype, "join");
    const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
    try {
      // Only lease:expired: a heartbeat:sent subscriber would make the watch look at the batch every interval.
      using events = new EventLog([DiagnosticsChannels.LEASE_EXPIRED]);
      let abortedAt = 0;
      let reason: unknown;
      const out = await withInProgress(msgs, async (ctx) => {
        ctx.signal.addEventListener("abort", () => {
          abortedAt = performance.now();
          reason = ctx.signal.reason;
        }, { once: true });
        // Ignores the signal: 4.5 s, three AckWaits.
        await sleep(4500);
        return "finished";
      }, policy, { thread: true, connection: fx.nc });
      // A lost lease waits for the work: its own result comes back.
      expect(out).toBe("finished");
      expect(joins).toHaveBeenCalled();
      expect(reason).toBeInstanceOf(LeaseExpiredError);
      expect(events.of(DiagnosticsChannels.LEASE_EXPIRED)).toHaveLength(1);
      const beats = spy.of("+WPI", seq);
      expect(beats, spy.summary()).toHaveLength(3);
      // Told at the deadline: AckWait after the last round, not before, not much later.
      expect(abortedAt - beats[2]!.at).toBeGreaterThanOrEqual(1500 - 100);
      expect(abortedAt - beats[2]!.at).toBeLessThan(1500 + 1000);
      await eventually(() => rival.received.length >= 1, "the redelivery to the second worker", 10_000);
      expect(rival.received[0]).toMatchObject({ seq, deliveryCount: 2 });
    } finally {
      await rival.stop();
    }
  });

  it("a write that ignores its signal after maxHeartbeats (onLimit: abort): the call rejects shutdownTimeoutMs after the abort, and nothing beats the abandoned write", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1500 });
    const [seq] = await publish(f, 1);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    const msgs = await fetchBatch(f, 1);
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 300, maxHeartbeats: 3, shutdownTimeoutMs: 800 }, { ackWaitMs: 1500, source: "configured" });
    const joins = vi.spyOn(ThreadWatch.prototype, "join");
    let abortedAt = 0;
    let ignored: Promise<void> | undefined;
    const t0 = performance.now();
    const err = await withInProgress(msgs, (ctx) => {
      ctx.signal.addEventListener("abort", () => void (abortedAt = performance.now()), { once: true });
      ignored = sleep(4000);
      return ignored;
    }, policy, { thread: true, connection: fx.nc, onLimit: "abort" }).then(() => undefined, (e: unknown) => e);
    const rejectedAt = performance.now();
    expect(err).toBeInstanceOf(HeartbeatLimitError);
    expect(joins).toHaveBeenCalled();
    // The third round leaves at 0.9 s; the watch sees the limit at its next look.
    expect(abortedAt - t0).toBeGreaterThanOrEqual(850);
    expect(abortedAt - t0).toBeLessThan(900 + 300 + 600);
    expect(rejectedAt - abortedAt).toBeGreaterThanOrEqual(800 - 50);
    expect(rejectedAt - abortedAt).toBeLessThan(800 + 600);
    // The abandoned write runs on; nothing is sent for it.
    await ignored;
    await fx.nc.flush();
    expect(spy.of("+WPI", seq), spy.summary()).toHaveLength(3);
    expect(spy.frames.filter((x) => x.streamSequence === seq && x.kind !== "+WPI"), spy.summary()).toEqual([]);
  });

  it("a thread whose connection comes up after the first round fell due: the round goes out once it is up, not an interval later; the lease is kept and a second worker receives nothing", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 3000 });
    const [seq] = await publish(f, 1);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    // The thread's connection waits at the proxy until released: a thread still connecting.
    await using proxy = await TcpProxy.start(fx.srv.port);
    proxy.hold();
    const msgs = await fetchBatch(f, 1);
    const deliveredAt = performance.now();
    // 2 s of a 3 s AckWait: the round an interval after the one that found no connection (4 s) is past the deadline.
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 2000, maxHeartbeats: 100 }, { ackWaitMs: 3000, source: "configured" });
    const metrics = new InMemoryMetrics();
    const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
    let releasedAt = 0;
    try {
      const aborted = await withInProgress(msgs, async (ctx) => {
        // The first round falls due at 2 s, with the connection still held.
        await sleep(Math.max(0, deliveredAt + 2300 - performance.now()));
        releasedAt = performance.now();
        proxy.release();
        // Past the deadline an unrefreshed lease had (3 s) and the round an interval on (4 s).
        await sleep(Math.max(0, deliveredAt + 5000 - performance.now()));
        return ctx.signal.aborted;
      }, policy, { thread: { servers: proxy.url }, connection: fx.nc, metrics });
      msgs[0]!.ack();
      await fx.nc.flush();
      await rival.stop();
      expect(rival.received).toEqual([]);
      expect(aborted).toBe(false);
      const beats = spy.of("+WPI", seq);
      expect(beats.length, spy.summary()).toBeGreaterThanOrEqual(1);
      // Sent once the connection was up, within the lease (3 s after delivery).
      expect(beats[0]!.at).toBeGreaterThan(releasedAt);
      expect(beats[0]!.at - deliveredAt, spy.summary()).toBeLessThan(3000);
      // The round that found no connection is a failed beat.
      expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_FAILURES_TOTAL] ?? 0).toBeGreaterThanOrEqual(1);
    } finally {
      await rival.stop();
    }
  });

  // Without metrics the failed rounds are read at the batch's end; with them, at the watch's looks.
  it.each([
    { books: "no metrics", metrics: undefined },
    { books: "metrics", metrics: new InMemoryMetrics() },
  ])("the thread's link down and back while the main thread is blocked ($books): the rounds it missed are named DisconnectedError though the thread is connected again when the books are read; the lease is kept and a second worker receives nothing", async ({ metrics }) => {
    const f = await createFixture(fx.nc, { ackWaitMs: 4000 });
    const [seq] = await publish(f, 1);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    // On a thread of its own: it cuts and restores while this one is blocked.
    await using proxy = await ProxyThread.start(fx.srv.port);
    const thread = HeartbeatThread.acquire({ servers: proxy.url });
    // The batch's lease on the thread: its own count of failed rounds is the oracle for the books.
    const registered = vi.spyOn(HeartbeatThread.prototype, "register");
    let rival: Rival | undefined;
    try {
      await thread.ready();
      const msgs = await fetchBatch(f, 1);
      expect(msgs).toHaveLength(1);
      rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
      const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 500, maxHeartbeats: 100 }, { ackWaitMs: 4000, source: "configured" });
      using events = new EventLog([DiagnosticsChannels.HEARTBEAT_FAILED, DiagnosticsChannels.LEASE_EXPIRED]);
      let unblockedAt = 0;
      const seen = await withInProgress(msgs, async (ctx) => {
        await eventually(() => spy.of("+WPI", seq).length >= 1, "the thread's first round");
        const disconnects = thread.disconnects;
        // Down for 900 ms (a round or two find no connection), back at the thread's next
        // reconnect (every 500 ms), all within the block: nothing of the library's runs here.
        // The block ends once the thread was seen down and is up again after the proxy took
        // connections again (all read from shared memory), 8 s at most.
        const restores = proxy.restores;
        proxy.cutFor(900);
        const end = performance.now() + 8000;
        let sawDown = false;
        while (performance.now() < end) {
          const up = thread.state === "connected";
          sawDown ||= !up;
          if (sawDown && up && proxy.restores > restores) break;
        }
        unblockedAt = Date.now();
        // Read before this thread yields: the books have not been read since the block began.
        const at = { state: thread.state, disconnects: thread.disconnects - disconnects };
        await sleep(1200);
        return { ...at, aborted: ctx.signal.aborted };
      }, policy, { thread: { servers: proxy.url }, connection: fx.nc, ...(metrics ? { metrics } : {}) });
      msgs[0]!.ack();
      await fx.nc.flush();
      await rival.stop();
      expect(rival.received).toEqual([]);
      // The case under test: the link went down and was back before the main thread read a thing.
      expect(seen).toEqual({ state: "connected", disconnects: 1, aborted: false });
      expect(proxy.restoredAt).toBeLessThan(unblockedAt);
      const failed = events.of(DiagnosticsChannels.HEARTBEAT_FAILED);
      expect(failed.length, spy.summary()).toBeGreaterThanOrEqual(1);
      expect(failed.map((e) => e.errorName)).toEqual(failed.map(() => "DisconnectedError"));
      expect(registered).toHaveBeenCalledTimes(1);
      const lease = registered.mock.results[0]!.value as { readonly failures: number };
      expect(lease.failures).toBeGreaterThanOrEqual(1);
      // Each failed round counted once, however many readings came after the outage.
      if (metrics) expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_FAILURES_TOTAL]).toBe(lease.failures);
      expect(events.of(DiagnosticsChannels.LEASE_EXPIRED)).toEqual([]);
    } finally {
      await rival?.stop();
      thread.release();
    }
  });

  // Last in this file: the first case ends the warm thread (the next batch on this connection
  // starts another). A watched batch (plain beats) moves at once, woken by the thread's exit; a
  // batch whose books are read per beat is not watched: it looks at the thread itself at each of
  // its rounds, so it moves at its next look, within one interval.
  it.each([
    { name: "watched, plain beats", kind: "watched", firstWithinMs: 500 },
    { name: "read per beat, requireProgress", kind: "requireProgress", firstWithinMs: 1600 },
    { name: "read per beat, confirmed beats", kind: "confirmed", firstWithinMs: 1600 },
  ] as const)("a thread that ends without a word (a crash, an outside terminate) mid-write ($name): the batch beats from the main thread within $firstWithinMs ms, not at the lease's end; the lease is kept and a second worker receives nothing", async ({ kind, firstWithinMs }) => {
    const f = await createFixture(fx.nc, { ackWaitMs: 3000 });
    const [seq] = await publish(f, 1);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    const msgs = await fetchBatch(f, 1);
    const deliveredAt = performance.now();
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 1000, maxHeartbeats: 100 }, { ackWaitMs: 3000, source: "configured" });
    const joins = vi.spyOn(ThreadWatch.prototype, "join");
    const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
    // Only these two: a heartbeat:sent subscriber would make the watch look at the batch every interval.
    using events = new EventLog([DiagnosticsChannels.LEASE_EXPIRED, DiagnosticsChannels.HEARTBEAT_FAILED]);
    const perBeat = kind === "confirmed" ? { confirm: { connection: fx.nc } } : kind === "requireProgress" ? { requireProgress: true } : {};
    let endedAt = 0;
    try {
      const aborted = await withInProgress(msgs, async (ctx) => {
        // The write advances all along (requireProgress beats only after progress).
        const advancing = kind === "requireProgress" ? setInterval(() => ctx.progress(), 100) : undefined;
        try {
          await eventually(() => spy.of("+WPI", seq).length >= 2, "two rounds from the thread");
          // Ends the worker the way a crash would: no "failed" message, no flag in shared memory.
          const registry = (globalThis as Record<symbol, unknown>)[Symbol.for(`jetstream-inprogress.heartbeat-threads.v${PROTOCOL_VERSION}`)] as { threads: Map<string, { worker: Worker }> };
          const workers = [...registry.threads.values()].map((c) => c.worker);
          expect(workers).toHaveLength(1);
          await workers[0]!.terminate();
          endedAt = performance.now();
          // Two AckWaits after the delivery.
          await sleep(Math.max(0, deliveredAt + 6000 - performance.now()));
          return ctx.signal.aborted;
        } finally {
          clearInterval(advancing);
        }
      }, policy, { thread: true, connection: fx.nc, ...perBeat });
      msgs[0]!.ack();
      await fx.nc.flush();
      await rival.stop();
      expect(rival.received).toEqual([]);
      expect(aborted).toBe(false);
      // Only the plain batch joins the watch.
      expect(joins.mock.calls.length > 0).toBe(kind === "watched");
      expect(events.of(DiagnosticsChannels.LEASE_EXPIRED)).toEqual([]);
      expect(events.of(DiagnosticsChannels.HEARTBEAT_FAILED).length).toBeGreaterThanOrEqual(1);
      const after = spy.of("+WPI", seq).filter((x) => x.at > endedAt);
      // The first main-thread round soon, not near the lease's end (about 3 s after the last thread round).
      expect(after.length, spy.summary()).toBeGreaterThanOrEqual(3);
      expect(after[0]!.at - endedAt, spy.summary()).toBeLessThan(firstWithinMs);
    } finally {
      await rival.stop();
    }
  });
});
