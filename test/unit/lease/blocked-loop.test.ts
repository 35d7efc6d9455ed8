/**
 * A blocked event loop, on a manual clock: no tick runs while the work blocks, so the lease can
 * pass unseen. The library is honest about it: a deadline that passed while the loop was
 * blocked is a lost lease when the work settles (leaseLost, the metric, the event), and the
 * stall itself is a metric and an event with its duration and the batches in flight.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DiagnosticsChannels, InMemoryMetrics, MetricNames, verifyInProgressPolicy, type EventLoopStallEvent, type LeaseExpiredEvent, type WorkContext } from "../../../src/index.js";
import { Scheduler } from "../../../src/lease/scheduler.js";
import { superviseWork } from "../../../src/lease/with-in-progress.js";
import { EventLog } from "../../helpers/diagnostics.js";
import { ManualClock, fakeMsg } from "../../helpers/fakes.js";

const policy = (ackWaitMs = 2000) => verifyInProgressPolicy({ enabled: true, intervalMs: 500, maxHeartbeats: 100 }, { ackWaitMs, source: "configured" });

let log: EventLog;
const stalls = (): EventLoopStallEvent[] => log.of(DiagnosticsChannels.EVENT_LOOP_STALL);
const expired = (): LeaseExpiredEvent[] => log.of(DiagnosticsChannels.LEASE_EXPIRED);

beforeEach(() => {
  log = new EventLog([DiagnosticsChannels.EVENT_LOOP_STALL, DiagnosticsChannels.LEASE_EXPIRED]);
});
afterEach(() => {
  log.dispose();
});

describe("a work that blocks the event loop", () => {
  it("past the lease: the lease is reported lost when the work returns, and the stall with its duration", async () => {
    const clock = new ManualClock();
    const scheduler = new Scheduler(clock);
    const metrics = new InMemoryMetrics();
    const m = fakeMsg();
    let ctx: WorkContext | undefined;
    // The block ends and the work returns in the same turn: no tick of the scheduler ran in between.
    await superviseWork(m, (c) => ((ctx = c), clock.jump(3500)), policy(), { metrics }, scheduler);
    expect(m.calls.working).toBe(0);
    expect(ctx!.lease!.expired).toBe(true);
    // The work had already returned: its signal is not aborted after the fact.
    expect(ctx!.signal.aborted).toBe(false);
    const c = metrics.snapshot().counters;
    expect(c[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL]).toBe(1);
    expect(expired()).toHaveLength(1);
    expect(expired()[0]!.overdueMs).toBe(1500);
    expect(c[MetricNames.IN_PROGRESS_EVENT_LOOP_STALLS_TOTAL]).toBe(1);
    // Measured from when the batch's first beat was due (500 ms in): the loop was blocked since.
    expect(stalls()).toHaveLength(1);
    expect(stalls()[0]!).toMatchObject({ thresholdMs: 500, batchesInFlight: 1, threadedBatches: 0, durationMs: 3000 });
    expect(metrics.snapshot().observations[MetricNames.IN_PROGRESS_EVENT_LOOP_STALL_SECONDS]?.map((s) => Math.round(s * 1000))).toEqual([stalls()[0]!.durationMs]);
    expect(clock.pendingTimers).toBe(0);
  });

  it("within the lease: a stall above a quarter of AckWait is reported, the lease is not lost", async () => {
    const clock = new ManualClock();
    const scheduler = new Scheduler(clock);
    const metrics = new InMemoryMetrics();
    let ctx: WorkContext | undefined;
    await superviseWork(fakeMsg(), (c) => ((ctx = c), clock.jump(1400)), policy(), { metrics }, scheduler);
    expect(ctx!.lease!.expired).toBe(false);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL] ?? 0).toBe(0);
    // 900 ms past the first beat's due time.
    expect(stalls().map((s) => s.durationMs)).toEqual([900]);
  });

  it("a short block, a block while nothing was due, or time that passes with the loop free, is no stall", async () => {
    const clock = new ManualClock();
    const scheduler = new Scheduler(clock);
    const metrics = new InMemoryMetrics();
    // Blocked 400 ms: the first beat was not even due.
    await superviseWork(fakeMsg(), () => clock.jump(400), policy(), { metrics }, scheduler);
    // Blocked 900 ms: 400 ms past the first beat's due time, below a quarter of AckWait (500 ms).
    await superviseWork(fakeMsg(), () => clock.jump(900), policy(), { metrics }, scheduler);
    // 10 s of a slow but asynchronous write: every tick on time.
    const slow = superviseWork(fakeMsg(), () => new Promise<void>((r) => clock.setTimer(r, 10_000)), policy(), { metrics }, scheduler);
    clock.advance(10_000);
    await slow;
    expect(stalls()).toEqual([]);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_EVENT_LOOP_STALLS_TOTAL] ?? 0).toBe(0);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL] ?? 0).toBe(0);
  });

  it("one stall, counted once per metrics sink, with every batch in flight", async () => {
    const clock = new ManualClock();
    const scheduler = new Scheduler(clock);
    const a = new InMemoryMetrics();
    const b = new InMemoryMetrics();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const waiting = [a, a, b].map((metrics) => superviseWork(fakeMsg(), () => gate, policy(10_000), { metrics }, scheduler));
    // The three are in flight; another batch blocks the loop for 3.5 s, then they all settle.
    await superviseWork(fakeMsg(), () => clock.jump(3500), policy(10_000), { metrics: a }, scheduler);
    release();
    await Promise.all(waiting);
    expect(stalls()).toHaveLength(1);
    expect(stalls()[0]).toMatchObject({ batchesInFlight: 4, thresholdMs: 2500 });
    expect(a.snapshot().counters[MetricNames.IN_PROGRESS_EVENT_LOOP_STALLS_TOTAL]).toBe(1);
    expect(b.snapshot().counters[MetricNames.IN_PROGRESS_EVENT_LOOP_STALLS_TOTAL]).toBe(1);
    expect(clock.pendingTimers).toBe(0);
  });
});
