/**
 * Shared pieces of the property suites: a virtual clock driven one timer at a time, messages
 * and dead-letter targets that log what the library does to them, metrics sinks that misbehave,
 * and generators for verified policies. Claims about the server are proven in test/integration;
 * here only the library's own promises are checked, over many random scenarios.
 */
import fc from "fast-check";
import { vi } from "vitest";
import {
  PermanentSinkError,
  TemporarySinkError,
  verifyInProgressPolicy,
  type DisabledInProgressPolicy,
  type MetricsSink,
  type VerifiedInProgressPolicy,
  type WorkContext,
} from "../../../src/index.js";
import { fakeMsg, type FakeMsg } from "../../helpers/fakes.js";

// ---------------------------------------------------------------------------------------------
// Virtual time
// ---------------------------------------------------------------------------------------------

/** `setImmediate` stays real: it is how the driver lets every promise chain run between timers. */
const realImmediate = setImmediate;
const FAKED = ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date", "performance"] as const;

export function useVirtualTime(): void {
  vi.useFakeTimers({ toFake: [...FAKED] });
}

/** Lets every queued promise reaction (and what they queue) run. */
export function drain(): Promise<void> {
  return new Promise<void>((resolve) => realImmediate(resolve));
}

/**
 * Runs timers one at a time, letting promises settle after each, until nothing is scheduled, or
 * `quiet()` says the scenario is over and `settleMs` more have passed, or `limitMs` of virtual
 * time have passed.
 */
export async function runTimers(options: { readonly done: () => boolean; readonly settleMs: number; readonly limitMs: number }): Promise<void> {
  const start = performance.now();
  let doneAt: number | undefined;
  for (let step = 0; step < 100_000; step++) {
    // A few rounds: a dynamic import or a chain of awaits may need more than one turn.
    for (let i = 0; i < 2; i++) await drain();
    const now = performance.now();
    if (doneAt === undefined && options.done()) doneAt = now;
    if (vi.getTimerCount() === 0) {
      // Nothing scheduled: give slow promise chains a few more turns before concluding.
      let idle = 0;
      while (idle < 8 && vi.getTimerCount() === 0) {
        await drain();
        idle += 1;
      }
      if (vi.getTimerCount() === 0) return;
    }
    if (doneAt !== undefined && now - doneAt >= options.settleMs) return;
    if (now - start >= options.limitMs) return;
    vi.advanceTimersToNextTimer();
  }
  throw new Error("runTimers: too many timer steps (a timer that re-arms itself forever?)");
}

/** A virtual-time sleep for the work and the fakes. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// ---------------------------------------------------------------------------------------------
// The event log
// ---------------------------------------------------------------------------------------------

export type EventKind =
  | "work-start"
  | "work-settled"
  | "abort"
  | "working"
  | "ack"
  | "nak"
  | "term"
  | "dlq-publish"
  | "dlq-confirmed"
  | "call-settled";

export interface LogEvent {
  /** Order of the event in the scenario. */
  readonly n: number;
  /** Virtual time. */
  readonly t: number;
  readonly kind: EventKind;
  /** The message's index in the batch. */
  readonly msg: number | undefined;
  readonly arg: unknown;
  /** The call threw (no frame left). */
  readonly threw: boolean;
  /** The call was a no-op: the message was already settled (the client drops it). */
  readonly noop: boolean;
}

export class EventLog {
  readonly events: LogEvent[] = [];

  add(kind: EventKind, msg?: number, arg?: unknown, flags: { threw?: boolean; noop?: boolean } = {}): LogEvent {
    const e: LogEvent = { n: this.events.length, t: performance.now(), kind, msg, arg, threw: flags.threw ?? false, noop: flags.noop ?? false };
    this.events.push(e);
    return e;
  }

  of(kind: EventKind, msg?: number): LogEvent[] {
    return this.events.filter((e) => e.kind === kind && (msg === undefined || e.msg === msg));
  }

  first(kind: EventKind, msg?: number): LogEvent | undefined {
    return this.events.find((e) => e.kind === kind && (msg === undefined || e.msg === msg));
  }

  /** Frames that really left: final calls that neither threw nor were no-ops. */
  finals(msg: number): LogEvent[] {
    return this.events.filter((e) => e.msg === msg && (e.kind === "ack" || e.kind === "nak" || e.kind === "term") && !e.threw && !e.noop);
  }
}

// ---------------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------------

/** How one fake message behaves. */
export interface MsgPlan {
  readonly dc: number;
  /** `working()` throws on these rounds (1-based); `"always"` on every one. */
  readonly workingFails: "never" | "always" | readonly number[];
  readonly ackThrows: boolean;
  readonly nakThrows: boolean;
  readonly termThrows: boolean;
  /** With confirmed ACKs: the reply never comes (the frame left). */
  readonly ackAckRejects: boolean;
}

export const STREAM = "S";
export const CONSUMER = "C";

/** A fake message (from test/helpers/fakes.ts) whose every call is logged under `index`. */
export function loggedMsg(log: EventLog, index: number, plan: MsgPlan, seq: number): FakeMsg {
  const m = fakeMsg({ deliveryCount: plan.dc, stream: STREAM, consumer: CONSUMER, seq });
  const ack0 = m.ack.bind(m);
  const nak0 = m.nak.bind(m);
  const term0 = m.term.bind(m);
  let rounds = 0;
  m.working = () => {
    rounds += 1;
    const fails = plan.workingFails === "always" || (plan.workingFails !== "never" && plan.workingFails.includes(rounds));
    log.add("working", index, rounds, { threw: fails, noop: m.didAck });
    if (fails) throw new Error("working() failed");
    // The client drops +WPI after a final frame.
  };
  m.ack = () => {
    log.add("ack", index, undefined, { threw: plan.ackThrows, noop: m.didAck });
    if (plan.ackThrows) throw new Error("ack() failed");
    ack0();
  };
  m.nak = (ms?: number) => {
    log.add("nak", index, ms, { threw: plan.nakThrows, noop: m.didAck });
    if (plan.nakThrows) throw new Error("nak() failed");
    nak0(ms);
  };
  m.term = (reason?: string) => {
    log.add("term", index, reason, { threw: plan.termThrows, noop: m.didAck });
    if (plan.termThrows) throw new Error("term() failed");
    term0(reason);
  };
  (m as { ackAck: FakeMsg["ackAck"] }).ackAck = async () => {
    m.ack();
    await Promise.resolve();
    if (plan.ackAckRejects) throw Object.assign(new Error("timeout"), { name: "TimeoutError" });
    return true;
  };
  return m;
}

/** True with probability 1/n. */
export const rarely = (n: number): fc.Arbitrary<boolean> => fc.integer({ min: 1, max: n }).map((v) => v === 1);

export const msgPlanArb = (dc: fc.Arbitrary<number>, opts: { throwingFrames: boolean; ackAck: boolean }): fc.Arbitrary<MsgPlan> =>
  fc.record({
    dc,
    workingFails: fc.oneof(
      { weight: 8, arbitrary: fc.constant("never" as const) },
      { weight: 1, arbitrary: fc.constant("always" as const) },
      { weight: 2, arbitrary: fc.uniqueArray(fc.integer({ min: 1, max: 12 }), { maxLength: 4 }) },
    ),
    ackThrows: opts.throwingFrames ? rarely(12) : fc.constant(false),
    nakThrows: opts.throwingFrames ? rarely(12) : fc.constant(false),
    termThrows: opts.throwingFrames ? rarely(12) : fc.constant(false),
    ackAckRejects: opts.ackAck ? fc.boolean() : fc.constant(false),
  });


// ---------------------------------------------------------------------------------------------
// Policies
// ---------------------------------------------------------------------------------------------

export interface PolicySpec {
  readonly enabled: boolean;
  /** `{ enabled: false }` rather than a verified disabled policy. */
  readonly plainDisabled: boolean;
  readonly intervalMs: number;
  readonly maxHeartbeats: number;
  readonly shutdownTimeoutMs: number;
  readonly ackWaitMs: number;
  /** BackOff-aware mode with these steps (BackOff[0] is then the AckWait). */
  readonly backOffMs: readonly number[] | undefined;
  /** MaxDeliver carried in the timing. */
  readonly timingMaxDeliver: number | undefined;
}

/** The smallest window an interval is safe under: `intervalMs < 0.8 × window`. */
export const safeWindow = (intervalMs: number): number => Math.floor(intervalMs * 1.25) + 1;

export const policySpecArb: fc.Arbitrary<PolicySpec> = fc
  .record({
    enabled: fc.integer({ min: 0, max: 9 }).map((v) => v > 1),
    plainDisabled: fc.boolean(),
    intervalMs: fc.oneof(fc.integer({ min: 1, max: 50 }), fc.integer({ min: 50, max: 2000 })),
    maxHeartbeats: fc.oneof(fc.integer({ min: 1, max: 4 }), fc.integer({ min: 1, max: 14 })),
    shutdownTimeoutMs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 400 }), fc.integer({ min: 0, max: 3000 })),
    extra: fc.integer({ min: 0, max: 3000 }),
    backOff: fc.option(fc.array(fc.integer({ min: 0, max: 4000 }), { minLength: 1, maxLength: 4 }), { freq: 3 }),
    timingMaxDeliver: fc.option(fc.integer({ min: -1, max: 6 }), { freq: 3 }),
  })
  .map((r) => {
    const min = safeWindow(r.intervalMs);
    const backOffMs = r.backOff === null ? undefined : r.backOff.map((x) => min + x);
    return {
      enabled: r.enabled,
      plainDisabled: r.plainDisabled,
      intervalMs: r.intervalMs,
      maxHeartbeats: r.maxHeartbeats,
      shutdownTimeoutMs: r.shutdownTimeoutMs,
      ackWaitMs: backOffMs?.[0] ?? min + r.extra,
      backOffMs,
      timingMaxDeliver: r.timingMaxDeliver ?? undefined,
    };
  });

/** The policy a spec stands for (verified by the guardrails; a generator bug fails loudly). */
export function buildPolicy(spec: PolicySpec): VerifiedInProgressPolicy | DisabledInProgressPolicy {
  if (!spec.enabled && spec.plainDisabled) return { enabled: false };
  return verifyInProgressPolicy(
    { enabled: spec.enabled, intervalMs: spec.intervalMs, maxHeartbeats: spec.maxHeartbeats, shutdownTimeoutMs: spec.shutdownTimeoutMs },
    {
      ackWaitMs: spec.ackWaitMs,
      ...(spec.backOffMs !== undefined ? { backOffMs: spec.backOffMs } : {}),
      ...(spec.timingMaxDeliver !== undefined ? { maxDeliver: spec.timingMaxDeliver } : {}),
      source: "configured",
    },
    { backOff: spec.backOffMs !== undefined ? "aware" : "reject" },
  );
}

/** The shutdown bound a call under `spec` gets (5 s, the default, for `{ enabled: false }`). */
export const boundOf = (spec: PolicySpec): number => (!spec.enabled && spec.plainDisabled ? 5000 : spec.shutdownTimeoutMs);

/** The redelivery window of a message at delivery `dc` under `spec` (AckWait, or the BackOff step). */
export function windowOf(spec: PolicySpec, dc: number): number {
  const b = spec.backOffMs;
  if (b === undefined) return spec.ackWaitMs;
  return b[Math.min(dc - 1, b.length - 1)]!;
}

// ---------------------------------------------------------------------------------------------
// Metrics sinks
// ---------------------------------------------------------------------------------------------

export type SinkKind = "none" | "memory" | "throwing" | "rejecting" | "partial" | "revoked";
export const sinkKindArb: fc.Arbitrary<SinkKind> = fc.constantFrom("none", "memory", "throwing", "rejecting", "partial", "revoked");

/** A sink of `kind` (`memory` returns the given InMemoryMetrics). */
export function buildSink(kind: SinkKind, memory: MetricsSink): MetricsSink | undefined {
  switch (kind) {
    case "none":
      return undefined;
    case "memory":
      return memory;
    case "throwing":
      return {
        addCounter: () => {
          throw new Error("sink down");
        },
        setGauge: () => {
          throw new Error("sink down");
        },
        recordObservation: () => {
          throw new Error("sink down");
        },
      };
    case "rejecting":
      return {
        addCounter: () => Promise.reject(new Error("async sink down")),
        setGauge: () => Promise.reject(new Error("async sink down")),
        recordObservation: () => Promise.reject(new Error("async sink down")),
      } as unknown as MetricsSink;
    case "partial":
      return { addCounter: () => undefined } as unknown as MetricsSink;
    case "revoked": {
      const r = Proxy.revocable({}, {});
      r.revoke();
      return r.proxy as MetricsSink;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Values a write may return or throw
// ---------------------------------------------------------------------------------------------

export type ErrorKind = "temporary" | "permanent" | "plain" | "string" | "undefined";
export const errorKindArb: fc.Arbitrary<ErrorKind> = fc.constantFrom("temporary", "permanent", "plain", "string", "undefined");

/** The value thrown for an error kind. */
export const errorOf = (kind: ErrorKind): unknown =>
  kind === "temporary" ? new TemporarySinkError("busy") : kind === "permanent" ? new PermanentSinkError("poison") : kind === "plain" ? new Error("boom") : kind === "string" ? "a string" : undefined;

// ---------------------------------------------------------------------------------------------
// A scripted host: its abort and its work
// ---------------------------------------------------------------------------------------------

/** A host abort at this time after the call (`-1`: already aborted), with this reason. */
export type AbortPlan = { readonly at: number; readonly reason: "error" | "string" | "default" } | undefined;

/** The abort reason of a plan (`undefined`: the platform's default). */
export const abortReasonOf = (abort: AbortPlan): unknown =>
  abort?.reason === "error" ? new Error("shutdown") : abort?.reason === "string" ? "stop" : undefined;

/** How a scripted work settles. */
export interface WorkScript {
  readonly kind: "resolve" | "reject" | "hang" | "sync-return" | "sync-throw";
  /** For `resolve` and `reject`: after this long. */
  readonly durationMs: number;
  readonly error: ErrorKind;
  /** For `hang`: how long after ctx.signal aborts the work settles (`null`: never), and how. */
  readonly reactMs: number | null;
  readonly reactResolves: boolean;
}

/** What a scripted host and work saw, filled in as they run. */
export interface WorkTrace {
  ctx: WorkContext | undefined;
  signalAbortedAt: number | undefined;
  signalReason: unknown;
  hostAbortedAt: number | undefined;
  workSettledAt: number | undefined;
  workOk: boolean | undefined;
  workValue: unknown;
}

/** A trace with nothing seen yet. */
export const emptyWorkTrace = (): WorkTrace => ({
  ctx: undefined,
  signalAbortedAt: undefined,
  signalReason: undefined,
  hostAbortedAt: undefined,
  workSettledAt: undefined,
  workOk: undefined,
  workValue: undefined,
});

/** Aborts `host` as planned (at once for `at: -1`, else on a timer), logging and tracing it. */
export function abortAsPlanned(host: AbortController, abort: AbortPlan, log: EventLog, trace: WorkTrace): void {
  const reason = abortReasonOf(abort);
  if (abort?.at === -1) host.abort(reason);
  else if (abort !== undefined) {
    setTimeout(() => {
      log.add("abort");
      trace.hostAbortedAt = performance.now();
      host.abort(reason);
    }, abort.at);
  }
}

/**
 * Runs the scripted work under `ctx`: returns or throws synchronously, or settles after a
 * time, or hangs until its signal aborts (and then settles after `reactMs`, or never).
 * `value` builds what it resolves with; every settlement is logged and traced.
 */
export function runWorkScript(w: WorkScript, ctx: WorkContext, value: () => unknown, log: EventLog, trace: WorkTrace): unknown {
  trace.ctx = ctx;
  log.add("work-start");
  ctx.signal.addEventListener(
    "abort",
    () => {
      trace.signalAbortedAt = performance.now();
      trace.signalReason = ctx.signal.reason;
    },
    { once: true },
  );
  const settleWork = (ok: boolean, v: unknown): void => {
    log.add("work-settled", undefined, ok);
    trace.workSettledAt = performance.now();
    trace.workOk = ok;
    trace.workValue = v;
  };
  if (w.kind === "sync-return") {
    const v = value();
    settleWork(true, v);
    return v;
  }
  if (w.kind === "sync-throw") {
    const e = errorOf(w.error);
    settleWork(false, e);
    throw e;
  }
  return new Promise((resolve, reject) => {
    const finish = (ok: boolean, v: unknown): void => {
      settleWork(ok, v);
      if (ok) resolve(v);
      else reject(v);
    };
    if (w.kind === "hang") {
      const react = (): void => {
        if (w.reactMs === null) return;
        setTimeout(() => (w.reactResolves ? finish(true, value()) : finish(false, ctx.signal.reason)), w.reactMs);
      };
      if (ctx.signal.aborted) react();
      else ctx.signal.addEventListener("abort", react, { once: true });
    } else {
      setTimeout(() => (w.kind === "resolve" ? finish(true, value()) : finish(false, errorOf(w.error))), w.durationMs);
    }
  });
}

/** Unhandled rejections seen while a suite runs. */
export function watchUnhandled(): { readonly seen: unknown[]; stop(): void } {
  const seen: unknown[] = [];
  const listener = (reason: unknown): void => void seen.push(reason);
  process.on("unhandledRejection", listener);
  return { seen, stop: () => void process.off("unhandledRejection", listener) };
}

/** Fails with a compact description when `ok` is false. */
export function check(ok: boolean, what: string, detail?: () => unknown): asserts ok {
  if (!ok) throw new Error(`${what}${detail ? `: ${safeJson(detail())}` : ""}`);
}

export function safeJson(v: unknown): string {
  try {
    return JSON.stringify(v, (_k, x: unknown) => (x instanceof Error ? `${x.name}: ${x.message}` : typeof x === "bigint" ? String(x) : x));
  } catch {
    return String(v);
  }
}
