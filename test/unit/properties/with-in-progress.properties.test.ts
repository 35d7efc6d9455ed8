/**
 * withInProgress over random scenarios, on virtual time: random verified policies (BackOff-aware
 * ones included), batches of 0 to 50 messages, works that resolve, throw or hang until aborted,
 * host aborts at random times, lost leases, working() that throws, messages the work settles
 * itself, misbehaving metrics sinks. Every run must keep the contract:
 *
 * - no working() before the work started, after the call settled, after a message's own final
 *   frame or after the lease was lost; never with heartbeats disabled or a closed connection; a
 *   host abort keeps the lease (beats go on while the work drains, up to the bound);
 * - at most maxHeartbeats rounds per batch;
 * - the call settles when the work settles, with its value or error unchanged; only a host abort
 *   or onLimit "abort" lets it reject earlier, with that reason, once shutdownTimeoutMs passed;
 * - a lost lease aborts ctx.signal with LeaseExpiredError (unless another abort came first) and
 *   the call still waits for the work; `ctx.lease.expired` reports it whatever aborted first (and,
 *   where the schedule is fully known, the lease is lost exactly when it must be); a closed
 *   connection ends the lease at the first round (cause `ConnectionClosedError`);
 * - a misbehaving metrics sink never reaches the caller; no unhandled rejection; no timer left.
 */
import fc from "fast-check";
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  ConnectionClosedError,
  HeartbeatLimitError,
  InMemoryMetrics,
  LeaseExpiredError,
  MetricNames,
  withInProgress,
  type WorkContext,
} from "../../../src/index.js";
import {
  abortAsPlanned,
  boundOf,
  buildPolicy,
  buildSink,
  check,
  emptyWorkTrace,
  errorKindArb,
  EventLog,
  loggedMsg,
  msgPlanArb,
  policySpecArb,
  rarely,
  runTimers,
  runWorkScript,
  sinkKindArb,
  useVirtualTime,
  watchUnhandled,
  windowOf,
  type AbortPlan,
  type LogEvent,
  type MsgPlan,
  type PolicySpec,
  type SinkKind,
  type WorkScript,
} from "./harness.js";

type ValueKind = "undefined" | "driver" | "number" | "array" | "report";

interface WorkPlan extends WorkScript {
  readonly value: ValueKind;
}

interface Scenario {
  readonly policy: PolicySpec;
  readonly single: boolean;
  readonly msgs: readonly MsgPlan[];
  readonly onLimit: "continue" | "abort" | undefined;
  /** The batch was received this long before the call. */
  readonly receivedAgoMs: number | undefined;
  readonly closed: boolean | undefined;
  readonly sink: SinkKind;
  /** Pass the host signal even when it never aborts. */
  readonly passSignal: boolean;
  readonly abort: AbortPlan;
  readonly work: WorkPlan;
  /** The work settles some messages itself, at these times. */
  readonly selfSettles: ReadonlyArray<{ readonly msg: number; readonly at: number; readonly frame: "ack" | "nak" | "term" }>;
}

const valueOf = (kind: ValueKind): unknown =>
  kind === "undefined" ? undefined : kind === "driver" ? { rowCount: 3, command: "INSERT" } : kind === "number" ? 42 : kind === "array" ? [1, 2] : { failed: [] };
const scenarioArb: fc.Arbitrary<Scenario> = policySpecArb.chain((policy) => {
  const maxWindow = Math.max(policy.ackWaitMs, ...(policy.backOffMs ?? []));
  const scale = policy.maxHeartbeats * policy.intervalMs + maxWindow;
  const time = fc.oneof(
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 30 }) },
    { weight: 3, arbitrary: fc.integer({ min: 0, max: scale }) },
    { weight: 2, arbitrary: fc.integer({ min: 0, max: 2 * scale + policy.shutdownTimeoutMs }) },
  );
  const size = fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 0, max: 4 }) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 50 }) });
  return fc
    .record({
      single: fc.boolean(),
      size,
      dcs: fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 50, maxLength: 50 }),
      plans: fc.array(msgPlanArb(fc.constant(1), { throwingFrames: false, ackAck: false }), { minLength: 1, maxLength: 4 }),
      onLimit: fc.constantFrom("continue" as const, "abort" as const, undefined),
      receivedAgoMs: fc.option(fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 0, max: policy.ackWaitMs }) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 2 * maxWindow }) }), { freq: 3 }),
      closed: fc.option(rarely(4), { freq: 2 }),
      sink: sinkKindArb,
      passSignal: fc.boolean(),
      abort: fc.option(fc.record({ at: fc.oneof({ weight: 1, arbitrary: fc.constant(-1) }, { weight: 6, arbitrary: time }), reason: fc.constantFrom("error" as const, "string" as const, "default" as const) }), { freq: 2 }),
      work: fc.record({
        kind: fc.constantFrom("resolve" as const, "reject" as const, "hang" as const, "hang" as const, "sync-return" as const, "sync-throw" as const),
        durationMs: time,
        value: fc.constantFrom<ValueKind>("undefined", "driver", "number", "array", "report"),
        error: errorKindArb,
        reactMs: fc.option(fc.oneof(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 0, max: policy.shutdownTimeoutMs + 500 })), { freq: 6 }),
        reactResolves: fc.boolean(),
      }),
      selfSettles: fc.array(fc.record({ msg: fc.nat(49), at: time, frame: fc.constantFrom("ack" as const, "nak" as const, "term" as const) }), { maxLength: 3 }),
    })
    .map((r): Scenario => {
      const n = r.single ? 1 : r.size;
      const msgs = Array.from({ length: n }, (_, i) => ({ ...r.plans[i % r.plans.length]!, dc: r.dcs[i]! }));
      let abort = r.abort ?? undefined;
      let work = r.work;
      const supervised = policy.enabled && n > 0;
      const selfSettles = r.selfSettles.filter((x) => x.msg < n);
      // A work that waits for an abort needs something that aborts it: a lease (which a batch
      // the work settles itself no longer has) or the host.
      if (work.kind === "hang" && (!supervised || selfSettles.length > 0) && abort === undefined) abort = { at: work.durationMs, reason: "error" };
      // A work that never reacts needs a host abort, whose bound ends the call.
      if (work.kind === "hang" && work.reactMs === null && abort === undefined) work = { ...work, reactMs: 0 };
      return {
        policy,
        single: r.single,
        msgs,
        onLimit: r.onLimit,
        receivedAgoMs: r.receivedAgoMs ?? undefined,
        closed: r.closed ?? undefined,
        sink: r.sink,
        passSignal: r.passSignal,
        abort,
        work,
        selfSettles,
      };
    });
});

interface Observed {
  readonly log: EventLog;
  readonly ctx: WorkContext | undefined;
  readonly signalAbortedAt: number | undefined;
  readonly signalReason: unknown;
  readonly hostAbortedAt: number | undefined;
  readonly hostReason: unknown;
  readonly workSettledAt: number | undefined;
  readonly workOk: boolean | undefined;
  readonly workValue: unknown;
  readonly call: { readonly ok: boolean; readonly value: unknown; readonly at: number } | undefined;
  readonly startedAt: number;
  readonly metrics: InMemoryMetrics;
}

async function play(s: Scenario): Promise<Observed> {
  const log = new EventLog();
  const msgs = s.msgs.map((p, i) => loggedMsg(log, i, p, 1000 + i));
  const policy = buildPolicy(s.policy);
  const metrics = new InMemoryMetrics();
  const sink = buildSink(s.sink, metrics);
  const host = new AbortController();
  const o = { ...emptyWorkTrace(), call: undefined as Observed["call"] };
  abortAsPlanned(host, s.abort, log, o);
  const work = (ctx: WorkContext): unknown => {
    for (const x of s.selfSettles) setTimeout(() => msgs[x.msg]![x.frame](), x.at);
    return runWorkScript(s.work, ctx, () => valueOf(s.work.value), log, o);
  };
  const startedAt = performance.now();
  const receivedAt = s.receivedAgoMs === undefined ? undefined : Date.now() - s.receivedAgoMs;
  const connection = s.closed === undefined ? undefined : { isClosed: () => s.closed === true };
  const options = {
    ...(s.abort !== undefined || s.passSignal ? { signal: host.signal } : {}),
    ...(sink !== undefined ? { metrics: sink } : {}),
    ...(s.onLimit !== undefined ? { onLimit: s.onLimit } : {}),
    ...(receivedAt !== undefined ? { receivedAt } : {}),
    ...(connection !== undefined ? { connection } : {}),
  };
  withInProgress(s.single ? msgs[0]! : msgs, work, policy, options).then(
    (value) => {
      log.add("call-settled", undefined, true);
      o.call = { ok: true, value, at: performance.now() };
    },
    (value: unknown) => {
      log.add("call-settled", undefined, false);
      o.call = { ok: false, value, at: performance.now() };
    },
  );
  // Until nothing is scheduled: every timer left after the call is the work's own.
  await runTimers({ done: () => o.call !== undefined, settleMs: Number.POSITIVE_INFINITY, limitMs: 1e9 });
  return { ...o, log, hostReason: host.signal.reason, startedAt, metrics };
}

/** Rounds of heartbeats: each round calls working() on the batch's messages in order. */
function rounds(events: readonly LogEvent[]): number[] {
  const times: number[] = [];
  let prev = Number.POSITIVE_INFINITY;
  for (const e of events) {
    if (e.kind !== "working") continue;
    if (e.msg! <= prev) times.push(e.t);
    prev = e.msg!;
  }
  return times;
}

const SLACK_MS = 1;

/** Compares an expected time with an observed one; `tie` accepts either side of a tie. */
const near = (a: number, b: number): boolean => Math.abs(a - b) <= 1;

function verify(s: Scenario, o: Observed): void {
  const { log } = o;
  const d = (): unknown => ({ scenario: s, events: log.events.map((e) => `${e.n}@${e.t - o.startedAt}:${e.kind}${e.msg ?? ""}${e.threw ? "!" : ""}`), call: o.call, signalReason: o.signalReason });
  const K = s.policy.maxHeartbeats;
  const B = boundOf(s.policy);
  const n = s.msgs.length;
  const supervised = s.policy.enabled && n > 0;
  const working = log.of("working");
  const callSettled = log.first("call-settled");
  const start = log.first("work-start");

  // Already aborted: refused before anything runs.
  if (s.abort?.at === -1) {
    check(o.call !== undefined && !o.call.ok && Object.is(o.call.value, o.hostReason), "an aborted signal rejects the call with its reason", d);
    check(start === undefined && working.length === 0, "an aborted signal never starts the work", d);
    return;
  }
  check(start !== undefined && start.t === o.startedAt, "the work starts at the call", d);

  // Heartbeats only while the work runs, only when enabled, bounded.
  if (!supervised || s.closed === true) check(working.length === 0, "no working() when heartbeats are disabled, the batch is empty or the connection is closed", d);
  for (const e of working) {
    check(e.n > start.n, "no working() before the work started", d);
    check(callSettled === undefined || e.n < callSettled.n, "no working() after the call settled", d);
    check(!(o.signalReason instanceof LeaseExpiredError) || e.t <= o.signalAbortedAt!, "no working() after the lease was lost", d);
    const final = log.finals(e.msg!)[0];
    check(final === undefined || e.n < final.n, "no working() after the message's own final frame", d);
  }
  const r = rounds(log.events);
  const beats = o.ctx?.heartbeats ?? 0;
  check(r.length <= beats && beats <= K, "at most maxHeartbeats rounds, each counted", () => ({ rounds: r.length, beats, K, ...(d() as object) }));
  for (let i = 0; i < n; i++) check(log.of("working", i).length <= K, "at most maxHeartbeats working() per message", d);
  if (!supervised) check(beats === 0 && o.ctx?.lease === undefined, "no lease without supervision", d);

  // How the call settles.
  const limitAbort = o.signalReason instanceof HeartbeatLimitError ? o.signalAbortedAt : undefined;
  if (limitAbort !== undefined) check(s.onLimit === "abort" && beats === K, "HeartbeatLimitError only with onLimit abort, at the limit", d);
  const hostAbort = o.hostAbortedAt !== undefined && (callSettled === undefined || log.first("abort")!.n < callSettled.n) ? o.hostAbortedAt : undefined;
  const boundedStart = Math.min(hostAbort ?? Number.POSITIVE_INFINITY, limitAbort ?? Number.POSITIVE_INFINITY);
  const boundedReason = hostAbort !== undefined && hostAbort <= (limitAbort ?? Number.POSITIVE_INFINITY) ? o.hostReason : o.signalReason;
  const bound = boundedStart + B;
  const workAt = o.workSettledAt;
  // A timer of 0 ms fires 1 ms later when armed from a timer (as in Node): the bound's slack.
  const byWork = workAt !== undefined && workAt <= bound + SLACK_MS;
  const byBound = Number.isFinite(bound) && (workAt === undefined || workAt >= bound);
  check(o.call !== undefined, "every scenario's call settles (the work settles, or a bounded abort ends it)", d);
  const asWork = workAt !== undefined && o.call.at === workAt && o.call.ok === o.workOk && Object.is(o.call.value, o.workValue);
  const asBound = byBound && o.call.at >= bound && o.call.at <= bound + SLACK_MS && !o.call.ok && Object.is(o.call.value, boundedReason);
  if (byWork && byBound) check(asWork || asBound, "at the bound itself: the work's outcome or the bound's rejection", d);
  else if (byWork) check(asWork, "the call settles with the work's outcome, unchanged, when the work settles", d);
  else check(asBound, "after a host abort or onLimit abort the call rejects with the reason once shutdownTimeoutMs passed", d);

  // A lost lease aborts ctx.signal, and the call goes on.
  if (o.signalReason instanceof LeaseExpiredError) check(o.ctx?.lease?.expired === true, "a lost lease is visible on ctx.lease", d);
  if (o.signalAbortedAt !== undefined && !(o.signalReason instanceof LeaseExpiredError)) {
    check(o.signalReason === o.hostReason || o.signalReason instanceof HeartbeatLimitError, "ctx.signal aborts with the host's reason or a HeartbeatLimitError", d);
  }

  // Where the schedule is fully known, the lease is lost exactly when it must be.
  const simple = supervised && s.closed !== true && s.selfSettles.length === 0 && s.msgs.every((m) => m.workingFails === "never");
  if (simple && s.work.kind !== "sync-return" && s.work.kind !== "sync-throw") {
    const I = s.policy.intervalMs;
    const W = Math.min(...s.msgs.map((m) => windowOf(s.policy, m.dc)));
    const ago = s.receivedAgoMs ?? 0;
    const t0 = o.startedAt;
    const beatAt = (k: number): number => Math.max(t0, t0 - ago + I) + (k - 1) * I;
    const lostAt = ago >= W ? t0 : beatAt(K) + W;
    // A host abort keeps the lease: beats go on until the call settles (the work, or the bound).
    const stop = o.call.at;
    let expected = 0;
    let ambiguous = false;
    for (let k = 1; k <= K; k++) {
      const t = beatAt(k);
      if (ago >= W) break;
      const end = Math.min(stop, s.onLimit === "abort" ? Number.POSITIVE_INFINITY : lostAt);
      if (t < end) expected += 1;
      else if (near(t, end)) ambiguous = true;
    }
    if (!ambiguous) check(beats === expected && r.length === expected, "rounds every intervalMs from delivery, up to the limit", () => ({ beats, expected, ...(d() as object) }));
    // Whatever aborted first, a lease lost while the work ran is reported.
    const lost = o.ctx?.lease?.expired === true;
    const mustLose = lostAt < stop;
    const mustKeep = lostAt > stop;
    if (mustLose && !near(lostAt, stop)) {
      check(lost, "the lease is lost at the last beat plus the window", d);
      if (o.signalReason instanceof LeaseExpiredError) check(o.signalAbortedAt === lostAt, "ctx.signal aborts when the lease is lost", d);
    }
    if (mustKeep && !near(lostAt, stop)) check(!lost, "the lease holds while beats are accepted", d);
  }

  // A closed connection: the first round finds it and gives the lease up there, before its
  // deadline, telling the work at once (it could not be kept: no beat or ACK can leave).
  if (supervised && s.closed === true && (s.receivedAgoMs ?? 0) < Math.min(...s.msgs.map((m) => windowOf(s.policy, m.dc)))) {
    const firstRound = Math.max(o.startedAt, o.startedAt - (s.receivedAgoMs ?? 0) + s.policy.intervalMs);
    if (o.signalReason instanceof LeaseExpiredError) {
      check(o.signalReason.cause instanceof ConnectionClosedError && o.signalReason.overdueMs === 0, "a closed connection ends the lease with a ConnectionClosedError cause, 0 overdue", d);
      check(near(o.signalAbortedAt!, firstRound), "the lease ends at the first round after the close", d);
    }
    const ranPast = o.call.at > firstRound + SLACK_MS && (o.workSettledAt === undefined || o.workSettledAt > firstRound + SLACK_MS);
    if (ranPast && s.selfSettles.length === 0) check(o.ctx?.lease?.expired === true, "a write still running at the first round after a close has lost its lease", d);
  }

  // Metrics: the sink saw the beats and the gauge went back to zero.
  if (s.sink === "memory") {
    const snap = o.metrics.snapshot();
    check((snap.counters[MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL] ?? 0) === beats, "one attempt counted per round", d);
    check((snap.gauges[MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE] ?? 0) === 0, "no batch left active", d);
  }
  check(vi.getTimerCount() === 0, "no timer left behind", () => ({ timers: vi.getTimerCount(), ...(d() as object) }));
}

describe("withInProgress properties (virtual time)", () => {
  const unhandled = watchUnhandled();
  beforeEach(() => useVirtualTime());
  afterEach(() => {
    vi.useRealTimers();
  });
  afterAll(() => unhandled.stop());

  it("keeps the heartbeat and settlement contract on every path", async () => {
    await fc.assert(
      fc.asyncProperty(scenarioArb, async (s) => {
        verify(s, await play(s));
      }),
      { numRuns: 1500 },
    );
    expect(unhandled.seen).toEqual([]);
  });
});
