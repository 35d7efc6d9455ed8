/**
 * Batches beaten by the heartbeat thread, looked after by one watch on the main thread (no
 * metrics, no trace, plain beats): the lease is kept with one look per interval for all of
 * them, what the work reads of its lease stays current, and every path that needs the main
 * thread still reaches it — the limit, a delivery the work settled itself, and a lease lost
 * because the thread's link went down for longer than AckWait.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { jetstream, type JsMsg } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { afterEach, describe, expect, it, vi } from "vitest";
import { DiagnosticsChannels, HeartbeatLimitError, InMemoryMetrics, LeaseExpiredError, MetricNames, verifyInProgressPolicy, withInProgress, type WorkContext } from "../../src/index.js";
import { HeartbeatThread } from "../../src/lease/heartbeat-thread.js";
import { Supervision } from "../../src/lease/supervision.js";
import { ThreadWatch } from "../../src/lease/thread-watch.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { createFixture, eventually, fetchBatch, publish } from "../helpers/jetstream.js";
import { EventLog } from "../helpers/diagnostics.js";
import { freePort } from "../helpers/nats-server.js";
import { startRival } from "../helpers/rival.js";
import { useServer, useWarmThread } from "../helpers/server-fixture.js";
import { TcpProxy } from "../reliability/tcp-proxy.js";

const fx = useServer();
// The watch and the leases are under test here, not the thread's start (thread-watch-edges tests a late one).
useWarmThread(fx);

afterEach(() => {
  vi.restoreAllMocks();
});

/** Resolves when `signal` aborts (with its reason), or after `ms` with `undefined`. */
function abortedWithin(signal: AbortSignal, ms: number): Promise<unknown> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve(signal.reason);
    }, { once: true });
  });
}

describe("the thread watch", () => {
  it("keeps three leases past 3× AckWait with one look per interval for all; a second worker receives nothing; ctx.heartbeats and the lease's remaining time stay current", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
    await publish(f, 3);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    const msgs = await fetchBatch(f, 3);
    expect(msgs).toHaveLength(3);
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 500, maxHeartbeats: 100 }, { ackWaitMs: 2000, source: "configured" });
    const looks = vi.spyOn(Supervision.prototype, "beginTick");
    const watchLooks = vi.spyOn(ThreadWatch.prototype, "run");
    const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
    const seen: Array<{ heartbeats: number; remainingMs: number[] }> = [];
    const write = async (ctx: WorkContext): Promise<void> => {
      const mine = { heartbeats: 0, remainingMs: [] as number[] };
      seen.push(mine);
      const end = performance.now() + 6500;
      while (performance.now() < end) {
        await sleep(250);
        mine.heartbeats = ctx.heartbeats;
        mine.remainingMs.push(ctx.lease!.remainingMs());
      }
    };
    await Promise.all(msgs.map((m) => withInProgress([m], write, policy, { thread: true, connection: fx.nc })));
    for (const m of msgs) m.ack();
    await fx.nc.flush();
    await rival.stop();
    expect(rival.received).toEqual([]);
    await spy.waitFor((fr) => fr.filter((x) => x.kind === "+ACK").length === 3, 5000, "three ACKs");
    // 13 rounds each on time; a starved machine (two cores, three test files) delays a few.
    for (const m of msgs) expect(spy.of("+WPI", m.seq).length, spy.summary()).toBeGreaterThanOrEqual(9);
    for (const s of seen) {
      // Read through the thread's counters, not the books of the last look.
      expect(s.heartbeats).toBeGreaterThanOrEqual(9);
      // Never near the end: each reading is refreshed by the thread's last beat (500 ms ago at most
      // on time, so 1.5 s left; seen 0.72 s with the thread starved). Unrefreshed, it runs out in 2 s.
      expect(Math.min(...s.remainingMs)).toBeGreaterThan(300);
    }
    // 13 intervals each, all looked after by the watch from their start: 39 own looks without it;
    // on time, at most one look at everyone (3), and a few more when the thread's rounds are late.
    expect(looks.mock.calls.length).toBeLessThanOrEqual(9);
    expect(watchLooks.mock.calls.length).toBeGreaterThanOrEqual(8);
  });

  it("with a metrics sink: still one look per interval for all, the rounds counted at each look (not only at the end), the totals equal to the +WPI the server got, and a second worker receives nothing", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
    await publish(f, 3);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    const msgs = await fetchBatch(f, 3);
    expect(msgs).toHaveLength(3);
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 500, maxHeartbeats: 100 }, { ackWaitMs: 2000, source: "configured" });
    const metrics = new InMemoryMetrics();
    const looks = vi.spyOn(Supervision.prototype, "beginTick");
    const watchLooks = vi.spyOn(ThreadWatch.prototype, "run");
    const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
    const successes = (): number => metrics.snapshot().counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL] ?? 0;
    let midWrite = 0;
    let framesMidWrite = 0;
    await Promise.all(msgs.map((m, i) => withInProgress([m], async () => {
      await sleep(3500);
      if (i === 0) {
        midWrite = successes();
        framesMidWrite = spy.frames.filter((x) => x.kind === "+WPI").length;
      }
      await sleep(3000);
    }, policy, { thread: true, connection: fx.nc, metrics })));
    for (const m of msgs) m.ack();
    await fx.nc.flush();
    await rival.stop();
    expect(rival.received).toEqual([]);
    await spy.waitFor((fr) => fr.filter((x) => x.kind === "+ACK").length === 3, 5000, "three ACKs");
    // Counted as the watch looks: at most a look (one round each) behind the frames mid-write.
    expect(framesMidWrite).toBeGreaterThanOrEqual(15);
    expect(midWrite).toBeGreaterThanOrEqual(framesMidWrite - 2 * 3);
    // Every round counted once, whether by the watch or by the batch at its end.
    const rounds = msgs.reduce((n, m) => n + spy.of("+WPI", m.seq).length, 0);
    expect(successes(), spy.summary()).toBe(rounds);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL]).toBe(rounds);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_FAILURES_TOTAL] ?? 0).toBe(0);
    // 39 own looks without the watch; a few at everyone when the thread's rounds are late.
    expect(looks.mock.calls.length).toBeLessThanOrEqual(9);
    expect(watchLooks.mock.calls.length).toBeGreaterThanOrEqual(8);
  });

  it.each([
    ["on the thread (not watched)", true],
    ["on the main thread", false],
  ] as const)("confirmed beats %s: a metrics sink counts every round the server answered, the last one too (answered after the batch ended), and a second worker receives nothing", async (_where, thread) => {
    const f = await createFixture(fx.nc, { ackWaitMs: 3000 });
    const [seq] = await publish(f, 1);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 800, maxHeartbeats: 100 }, { ackWaitMs: 3000, source: "configured" });
    const metrics = new InMemoryMetrics();
    const joins = vi.spyOn(ThreadWatch.prototype, "join");
    // The beats go through a link that holds each frame 300 ms: the work ends right after its
    // fourth round left, before the server could answer it.
    await using proxy = await TcpProxy.start(fx.srv.port, { latencyMs: 300 });
    const slow = await connect({ servers: proxy.url });
    // The thread connected first (through the slow link, on a busy machine, that can outlast the
    // first round's due time, which counts as a failed round).
    const slowThread = thread ? HeartbeatThread.acquire({ servers: proxy.url }) : undefined;
    try {
      await slowThread?.ready();
      // Fetched once both slow connections are up: their set-up (over 2 s on a loaded machine)
      // would otherwise spend the message's AckWait before its first beat could leave.
      const msgs = await fetchBatch(f, 1);
      const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
      const confirm = { connection: slow, timeoutMs: 1500 };
      const work = async (ctx: WorkContext): Promise<void> => {
        await eventually(() => ctx.heartbeats >= 4, "four rounds counted", 20_000, 10);
      };
      await withInProgress(msgs, work, policy, thread ? { thread: { servers: proxy.url }, connection: fx.nc, confirm, metrics } : { confirm, metrics });
      // The fourth round through the slow link, then the ACK.
      await spy.waitFor((fr) => fr.filter((x) => x.kind === "+WPI").length >= 4, 3000, "four rounds");
      msgs[0]!.ack();
      await fx.nc.flush();
      await rival.stop();
      expect(rival.received).toEqual([]);
      expect(joins).not.toHaveBeenCalled();
      await spy.waitFor((fr) => fr.some((x) => x.kind === "+ACK" && x.streamSequence === seq), 5000, "the ACK");
      const frames = spy.of("+WPI", seq);
      expect(frames.every((x) => x.withReply), spy.summary()).toBe(true);
      expect(frames).toHaveLength(4);
      const counter = (name: string): number => metrics.snapshot().counters[name] ?? 0;
      // Every round answered: counted once each, the last one within its reply timeout and a margin.
      await eventually(() => counter(MetricNames.IN_PROGRESS_SUCCESSES_TOTAL) >= 4, "four successes", 4000);
      expect(metrics.snapshot().counters, spy.summary()).toEqual({
        [MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL]: 4,
        [MetricNames.IN_PROGRESS_SUCCESSES_TOTAL]: 4,
      });
    } finally {
      slowThread?.release();
      await slow.close();
    }
  });

  it("a synchronous write that blocks the event loop for 1.75× AckWait: the thread keeps the lease, the watch finds it kept, and a second worker receives nothing", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
    const [seq] = await publish(f, 1);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    const msgs = await fetchBatch(f, 1);
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 500, maxHeartbeats: 100 }, { ackWaitMs: 2000, source: "configured" });
    const watchLooks = vi.spyOn(ThreadWatch.prototype, "run");
    const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
    // Only lease:expired: a heartbeat:sent subscriber would make the watch look at the batch every interval.
    using events = new EventLog([DiagnosticsChannels.LEASE_EXPIRED]);
    const out = await withInProgress(msgs, async (ctx) => {
      await eventually(() => spy.of("+WPI", seq).length >= 1, "the thread's first round");
      // Nothing on this thread runs meanwhile: not the watch, not a timer.
      const end = performance.now() + 3500;
      while (performance.now() < end) {
        // busy
      }
      await sleep(600);
      return { aborted: ctx.signal.aborted, heartbeats: ctx.heartbeats };
    }, policy, { thread: true, connection: fx.nc });
    msgs[0]!.ack();
    await fx.nc.flush();
    await rival.stop();
    expect(rival.received).toEqual([]);
    expect(out.aborted).toBe(false);
    expect(out.heartbeats).toBeGreaterThanOrEqual(7);
    expect(events.of(DiagnosticsChannels.LEASE_EXPIRED)).toEqual([]);
    expect(watchLooks).toHaveBeenCalled();
    // The thread beat through the block (the spy, on this thread, timestamps them after it).
    expect(spy.of("+WPI", seq).length, spy.summary()).toBeGreaterThanOrEqual(7);
  });

  it("a limit the thread reaches aborts the work within an interval (onLimit: abort), after exactly maxHeartbeats rounds", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 3000 });
    const [seq] = await publish(f, 1);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    const msgs = await fetchBatch(f, 1);
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 400, maxHeartbeats: 4 }, { ackWaitMs: 3000, source: "configured" });
    const watchLooks = vi.spyOn(ThreadWatch.prototype, "run");
    const t0 = performance.now();
    const reason = await withInProgress(msgs, (ctx) => abortedWithin(ctx.signal, 6000), policy, { thread: true, connection: fx.nc, onLimit: "abort" });
    const took = performance.now() - t0;
    expect(reason).toBeInstanceOf(HeartbeatLimitError);
    // The fourth round leaves at 1.6 s; the watch sees the limit at its next look.
    expect(took).toBeGreaterThanOrEqual(1550);
    expect(took).toBeLessThan(1600 + 400 + 600);
    expect(watchLooks).toHaveBeenCalled();
    msgs[0]!.ack();
    await fx.nc.flush();
    await spy.waitFor((fr) => fr.some((x) => x.kind === "+ACK"), 5000, "the ACK");
    expect(spy.of("+WPI", seq), spy.summary()).toHaveLength(4);
  });

  it("a delivery the work settles itself gets no more rounds after the next look; the other is beaten on", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
    await publish(f, 2);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    const msgs: JsMsg[] = await fetchBatch(f, 2);
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 400, maxHeartbeats: 100 }, { ackWaitMs: 2000, source: "configured" });
    let ackedAt = 0;
    await withInProgress(msgs, async () => {
      await eventually(() => spy.of("+WPI", msgs[0]!.seq).length >= 3, "three rounds");
      msgs[0]!.ack();
      ackedAt = performance.now();
      await sleep(3000);
    }, policy, { thread: true, connection: fx.nc });
    msgs[1]!.ack();
    await fx.nc.flush();
    await spy.waitFor((fr) => fr.filter((x) => x.kind === "+ACK").length === 2, 5000, "both ACKs");
    const after = (seq: number): number => spy.of("+WPI", seq).filter((x) => x.at > ackedAt + 50).length;
    // The rounds before the watch's next look (an interval), one on its way, one for a late timer.
    expect(after(msgs[0]!.seq), spy.summary()).toBeLessThanOrEqual(3);
    expect(after(msgs[1]!.seq), spy.summary()).toBeGreaterThanOrEqual(6);
  });

  it("the host's connection closed mid-write: the thread stops beating the batch within an interval", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 3000 });
    const [seq] = await publish(f, 1);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    const host = await fx.srv.connect();
    const msgs = await fetchBatch({ ...f, nc: host, js: jetstream(host) }, 1);
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 300, maxHeartbeats: 100 }, { ackWaitMs: 3000, source: "configured" });
    let closedAt = 0;
    await withInProgress(msgs, async () => {
      await eventually(() => spy.of("+WPI", seq).length >= 3, "three rounds from the thread");
      await host.close();
      closedAt = performance.now();
      await sleep(2000);
    }, policy, { thread: true, connection: host });
    const after = spy.of("+WPI", seq).filter((x) => x.at > closedAt + 50);
    // The rounds before the watch's next look (an interval), one on its way, one for a late timer;
    // about seven in these 2 s had it gone on.
    expect(after.length, spy.summary()).toBeLessThanOrEqual(3);
  });

  it("the thread's link down longer than AckWait: the lease is lost at its deadline, the work is told, and a second worker gets the message", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
    const [seq] = await publish(f, 1);
    await using spy = await AckSpy.start(fx.nc, f.stream);
    await using proxy = await TcpProxy.start(fx.srv.port);
    const msgs = await fetchBatch(f, 1);
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 500, maxHeartbeats: 100 }, { ackWaitMs: 2000, source: "configured" });
    const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
    const deadPort = await freePort();
    let lostAt = 0;
    try {
      // Only lease:expired: a heartbeat:sent subscriber would make the watch look at the batch every interval.
      using events = new EventLog([DiagnosticsChannels.LEASE_EXPIRED]);
      const reason = await withInProgress(msgs, async (ctx) => {
        // Beaten by the thread and watched ...
        await eventually(() => spy.of("+WPI", seq).length >= 3, "three rounds from the thread");
        // ... until its link goes down and stays down.
        proxy.retarget(deadPort);
        proxy.cut();
        const r = await abortedWithin(ctx.signal, 8000);
        lostAt = performance.now();
        return r;
      }, policy, { thread: { servers: proxy.url }, connection: fx.nc });
      expect(reason).toBeInstanceOf(LeaseExpiredError);
      const lastBeat = spy.of("+WPI", seq).at(-1)!.at;
      // Lost at the deadline (AckWait after the last beat the server saw), not before, not much later.
      expect(lostAt - lastBeat).toBeGreaterThanOrEqual(2000 - 100);
      expect(lostAt - lastBeat).toBeLessThan(2000 + 1000);
      expect(events.of(DiagnosticsChannels.LEASE_EXPIRED)).toHaveLength(1);
      await eventually(() => rival.received.length >= 1, "the redelivery to the second worker", 10_000);
      expect(rival.received[0]).toMatchObject({ seq, deliveryCount: 2 });
    } finally {
      await rival.stop();
    }
  });
});
