/**
 * CommitThenAck.process over random scenarios, on virtual time: random verified policies
 * (BackOff-aware ones included), batches of 0 to 50 messages at random delivery counts, random
 * MaxDeliver, writes that resolve (with nothing, a driver's result, a number, an array or a
 * report naming failures, valid and invalid), throw (TemporarySinkError, PermanentSinkError, an
 * Error, a string) or hang until aborted; host aborts at random times, lost leases, working()
 * that throws, frames that throw, confirmed ACKs, closed connections, misbehaving metrics sinks,
 * and dead-letter targets that confirm, fail, return nothing, return the source stream or fail
 * a few times first. Every run must keep the contract (DESIGN.md, "Invariants" and "Settling"):
 *
 * - `process` resolves, whatever the write and the settling did;
 * - heartbeats only while the write runs, at most maxHeartbeats per message;
 * - an ACK only for a message the write committed (resolved without naming it as failed), and
 *   only after the write resolved; a dead-lettered message is ACKed only after a PubAck from a
 *   stream other than its own confirmed the copy;
 * - every message ends with exactly one of: ACK, NAK (only with deliveries left), TERM, a
 *   confirmed copy then ACK, or no frame — and no frame for a failed message on its last allowed
 *   delivery is reported as `exhausted`;
 * - with the default options every NAK waits at least 1 s × 2^(n−1), capped at 60 s (jitter
 *   only lengthens it; BackOff-aware mode corrects what is sent so the server waits that long);
 *   a bare NAK only for `delayMs: 0`;
 * - the result is the decision table applied to what happened, counted and summed correctly;
 * - a misbehaving metrics sink never reaches the caller; no unhandled rejection; no timer left.
 */
import fc from "fast-check";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import {
  AckNotConfirmedError,
  CommitThenAck,
  ConnectionClosedError,
  ConsumerPolicyError,
  DeadLetterError,
  HeartbeatLimitError,
  InMemoryMetrics,
  LeaseExpiredError,
  MetricNames,
  PermanentSinkError,
  TemporarySinkError,
  type BatchResult,
  type CommitThenAckOptions,
  type DeadLetterTarget,
  type MessageResult,
  type WorkContext,
} from "../../../src/index.js";
import { fakeMsg, type FakeMsg } from "../../helpers/fakes.js";
import {
  abortAsPlanned,
  boundOf,
  buildPolicy,
  buildSink,
  check,
  emptyWorkTrace,
  errorOf,
  errorKindArb,
  EventLog,
  loggedMsg,
  msgPlanArb,
  policySpecArb,
  rarely,
  runTimers,
  runWorkScript,
  sinkKindArb,
  sleep,
  STREAM,
  useVirtualTime,
  watchUnhandled,
  type AbortPlan,
  type ErrorKind,
  type MsgPlan,
  type PolicySpec,
  type SinkKind,
  type WorkScript,
} from "./harness.js";

type Entry = { readonly target: number; readonly error: ErrorKind } | { readonly target: "outside" | "nomsg" | "null" | "throwing-msg" | "msg-null"; readonly error: ErrorKind };
type ReportShape = "entries" | "revoked" | "throwing-failed" | "failed-not-array" | "revoked-failed";
type ValueKind = "undefined" | "driver" | "number" | "array" | "entry-array" | "string" | "report";

interface WritePlan extends WorkScript {
  readonly value: ValueKind;
  readonly shape: ReportShape;
  readonly entries: readonly Entry[];
}

type DeadLetterKind = "ok" | "throws" | "nothing" | "source" | "flaky";

interface Scenario {
  readonly policy: PolicySpec;
  readonly onLimit: "continue" | "abort" | undefined;
  readonly temporary: { readonly action: "nak"; readonly delayMs?: number } | { readonly action: "leave" } | undefined;
  readonly deadLetter: { readonly kind: DeadLetterKind; readonly failFirst: number; readonly latencyMs: number } | undefined;
  readonly maxDeliver: number | undefined;
  readonly confirmAck: boolean;
  readonly connection: { readonly closed: boolean; readonly version: string | undefined } | undefined;
  readonly sink: SinkKind;
  readonly signalOn: "instance" | "process";
  readonly abort: AbortPlan;
  readonly receivedAgoMs: number | undefined;
  readonly msgs: readonly MsgPlan[];
  readonly write: WritePlan;
}

const entryArb: fc.Arbitrary<Entry> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ target: fc.nat(49), error: errorKindArb }) },
  { weight: 1, arbitrary: fc.record({ target: fc.constantFrom("outside" as const, "nomsg" as const, "null" as const, "throwing-msg" as const, "msg-null" as const), error: errorKindArb }) },
);

const scenarioArb: fc.Arbitrary<Scenario> = policySpecArb.chain((policy) => {
  const maxWindow = Math.max(policy.ackWaitMs, ...(policy.backOffMs ?? []));
  const scale = policy.maxHeartbeats * policy.intervalMs + maxWindow;
  const time = fc.oneof(
    { weight: 3, arbitrary: fc.integer({ min: 0, max: 30 }) },
    { weight: 2, arbitrary: fc.integer({ min: 0, max: scale }) },
    { weight: 1, arbitrary: fc.integer({ min: 0, max: 2 * scale + policy.shutdownTimeoutMs }) },
  );
  return fc
    .record({
      onLimit: fc.constantFrom("continue" as const, "abort" as const, undefined),
      temporary: fc.oneof(
        fc.constant(undefined),
        fc.constant({ action: "nak" as const }),
        fc.constant({ action: "leave" as const }),
        fc.record({ action: fc.constant("nak" as const), delayMs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 86_400_000 })) }),
      ),
      deadLetter: fc.option(
        fc.record({ kind: fc.constantFrom<DeadLetterKind>("ok", "ok", "throws", "nothing", "source", "flaky"), failFirst: fc.integer({ min: 0, max: 4 }), latencyMs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 400 })) }),
        { freq: 2 },
      ),
      maxDeliver: fc.option(fc.integer({ min: -1, max: 6 }), { freq: 3 }),
      confirmAck: rarely(5),
      connection: fc.option(fc.record({ closed: rarely(6), version: fc.constantFrom("2.9.10", "2.10.3", "2.10.4", "2.12.1", undefined) }), { freq: 2 }),
      sink: sinkKindArb,
      signalOn: fc.constantFrom("instance" as const, "process" as const),
      abort: fc.option(fc.record({ at: fc.oneof({ weight: 1, arbitrary: fc.constant(-1) }, { weight: 8, arbitrary: time }), reason: fc.constantFrom("error" as const, "string" as const, "default" as const) }), { freq: 3 }),
      receivedAgoMs: fc.option(fc.integer({ min: 0, max: policy.ackWaitMs }), { freq: 3 }),
      size: fc.oneof({ weight: 1, arbitrary: fc.constant(0) }, { weight: 10, arbitrary: fc.integer({ min: 1, max: 5 }) }, { weight: 3, arbitrary: fc.integer({ min: 1, max: 50 }) }),
      dcs: fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 50, maxLength: 50 }),
      plans: fc.array(msgPlanArb(fc.constant(1), { throwingFrames: true, ackAck: true }), { minLength: 1, maxLength: 4 }),
      write: fc.record({
        kind: fc.constantFrom("resolve" as const, "resolve" as const, "reject" as const, "reject" as const, "hang" as const, "sync-return" as const, "sync-throw" as const),
        durationMs: time,
        value: fc.constantFrom<ValueKind>("undefined", "driver", "number", "array", "entry-array", "string", "report", "report", "report"),
        shape: fc.constantFrom<ReportShape>("entries", "entries", "entries", "entries", "revoked", "throwing-failed", "failed-not-array", "revoked-failed"),
        entries: fc.array(entryArb, { maxLength: 8 }),
        error: errorKindArb,
        reactMs: fc.option(fc.oneof(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 0, max: policy.shutdownTimeoutMs + 500 })), { freq: 6 }),
        reactResolves: fc.boolean(),
      }),
    })
    .map((r): Scenario => {
      const n = r.size;
      const msgs = Array.from({ length: n }, (_, i) => ({ ...r.plans[i % r.plans.length]!, dc: r.dcs[i]!, ...(r.confirmAck ? { ackThrows: false } : {}) }));
      let abort = r.abort ?? undefined;
      let write = r.write;
      if (write.kind === "hang" && !(policy.enabled && n > 0) && abort === undefined) abort = { at: write.durationMs, reason: "error" };
      if (write.kind === "hang" && write.reactMs === null && abort === undefined) write = { ...write, reactMs: 0 };
      write = { ...write, entries: write.entries.filter((e) => typeof e.target !== "number" || e.target < n) };
      return {
        policy,
        onLimit: r.onLimit,
        temporary: r.temporary,
        deadLetter: r.deadLetter ?? undefined,
        maxDeliver: r.maxDeliver ?? undefined,
        confirmAck: r.confirmAck,
        connection: r.connection ?? undefined,
        sink: r.sink,
        signalOn: r.signalOn,
        abort,
        receivedAgoMs: r.receivedAgoMs ?? undefined,
        msgs,
        write,
      };
    });
});

// ---------------------------------------------------------------------------------------------

function revoked(target: object): object {
  const r = Proxy.revocable(target, {});
  r.revoke();
  return r.proxy;
}

/** What the write resolves with; hostile values are built here, never by the generator. */
function buildValue(w: WritePlan, msgs: readonly FakeMsg[]): unknown {
  switch (w.value) {
    case "undefined":
      return undefined;
    case "driver":
      return { rowCount: msgs.length, command: "INSERT" };
    case "number":
      return msgs.length;
    case "array":
      return msgs.map((m) => m.seq);
    case "entry-array":
      return msgs.map((msg) => ({ msg, error: new TemporarySinkError() }));
    case "string":
      return "done";
    case "report":
      break;
  }
  switch (w.shape) {
    case "revoked":
      return revoked({ failed: [] });
    case "throwing-failed":
      return {
        get failed(): never {
          throw new Error("getter");
        },
      };
    case "failed-not-array":
      return { failed: "none" };
    case "revoked-failed":
      return { failed: revoked([]) };
    case "entries":
      return {
        failed: w.entries.map((e) => {
          const error = errorOf(e.error);
          if (typeof e.target === "number") return { msg: msgs[e.target], error };
          switch (e.target) {
            case "outside":
              return { msg: fakeMsg(), error };
            case "nomsg":
              return { error };
            case "null":
              return null;
            case "msg-null":
              return { msg: null, error };
            case "throwing-msg":
              return {
                get msg(): never {
                  throw new Error("getter");
                },
              };
          }
        }),
      };
  }
}

/** What readReport must make of a resolved value: failed messages (index → error) and whether a reportError is due. */
function readModel(w: WritePlan, n: number, value: unknown): { failures: Map<number, unknown>; reportError: boolean; allFailed: boolean } {
  // (A revoked proxy never arrives here: resolving with one rejects.)
  const none = { failures: new Map<number, unknown>(), reportError: false, allFailed: false };
  if (w.value !== "report") return none;
  // A report the library cannot read in full fails closed: every message failed, with the TypeError.
  const closed = { failures: new Map(Array.from({ length: n }, (_, i) => [i, TYPE_ERROR] as const)), reportError: true, allFailed: true };
  if (w.shape === "throwing-failed" || w.shape === "revoked-failed" || w.shape === "failed-not-array") return closed;
  if (w.entries.length === 0) return none;
  if (w.entries.some((e) => typeof e.target !== "number")) return closed;
  const failures = new Map<number, unknown>();
  const failed = (value as { failed: Array<{ error?: unknown } | null> }).failed;
  w.entries.forEach((e, k) => {
    if (typeof e.target === "number" && !failures.has(e.target)) failures.set(e.target, failed[k]!.error);
  });
  return { failures, reportError: false, allFailed: false };
}

interface Observed {
  readonly log: EventLog;
  readonly msgs: readonly FakeMsg[];
  readonly ctx: WorkContext | undefined;
  readonly batchSeen: readonly unknown[] | undefined;
  readonly signalAbortedAt: number | undefined;
  readonly signalReason: unknown;
  readonly hostAbortedAt: number | undefined;
  readonly hostReason: unknown;
  readonly workSettledAt: number | undefined;
  readonly workOk: boolean | undefined;
  readonly workValue: unknown;
  readonly result: BatchResult | undefined;
  readonly rejected: { readonly error: unknown } | undefined;
  readonly resolvedAt: number | undefined;
  readonly metrics: InMemoryMetrics;
  readonly confirmedStreams: Map<number, string>;
}

function deadLetterTarget(s: NonNullable<Scenario["deadLetter"]>, log: EventLog, confirmed: Map<number, string>): DeadLetterTarget {
  const attempts = new Map<number, number>();
  let seq = 0;
  return {
    subject: "dlq.x",
    js: {
      publish: async (_subject, _payload, options) => {
        const i = Number(String(options?.msgID).split(":")[2]) - 1000;
        log.add("dlq-publish", i);
        if (s.latencyMs > 0) await sleep(s.latencyMs);
        const a = (attempts.get(i) ?? 0) + 1;
        attempts.set(i, a);
        const receipt = (stream: string): { stream: string; seq: number } => {
          const r = { stream, seq: ++seq };
          log.add("dlq-confirmed", i, r);
          if (!confirmed.has(i)) confirmed.set(i, stream);
          return r;
        };
        switch (s.kind) {
          case "ok":
            return receipt("DLQ");
          case "flaky":
            if (a <= s.failFirst) throw Object.assign(new Error("no responders"), { name: "NoRespondersError" });
            return receipt("DLQ");
          case "throws":
            throw new Error("publish failed");
          case "nothing":
            return undefined;
          case "source":
            return receipt(STREAM);
        }
      },
    },
  };
}

async function play(s: Scenario): Promise<Observed> {
  const log = new EventLog();
  const msgs = s.msgs.map((p, i) => loggedMsg(log, i, p, 1000 + i));
  const metrics = new InMemoryMetrics();
  const sink = buildSink(s.sink, metrics);
  const confirmedStreams = new Map<number, string>();
  const host = new AbortController();
  const o = {
    ...emptyWorkTrace(),
    batchSeen: undefined as readonly unknown[] | undefined,
    result: undefined as BatchResult | undefined,
    rejected: undefined as { error: unknown } | undefined,
    resolvedAt: undefined as number | undefined,
  };
  abortAsPlanned(host, s.abort, log, o);
  const write = (batch: readonly unknown[], ctx: WorkContext): Promise<never> => {
    o.batchSeen = batch;
    return runWorkScript(s.write, ctx, () => buildValue(s.write, msgs), log, o) as Promise<never>;
  };
  const options: CommitThenAckOptions = {
    inProgress: buildPolicy(s.policy),
    ...(sink !== undefined ? { metrics: sink } : {}),
    // Retries in place have their own suite (retry-in-place.test.ts): here a failed write settles at once.
    onTemporaryFailure: { ...(s.temporary ?? { action: "nak" as const }), retryInPlace: false },
    ...(s.deadLetter !== undefined ? { deadLetter: deadLetterTarget(s.deadLetter, log, confirmedStreams) } : {}),
    ...(s.maxDeliver !== undefined ? { maxDeliver: s.maxDeliver } : {}),
    ...(s.confirmAck ? { confirmAck: { timeoutMs: 100, retries: 1 } } : {}),
    ...(s.connection !== undefined ? { connection: { isClosed: () => s.connection!.closed, info: { version: s.connection.version }, request: () => Promise.reject(new Error("no responders")) } as never } : {}),
    ...(s.onLimit !== undefined ? { heartbeat: { onLimit: s.onLimit } } : {}),
    ...(s.signalOn === "instance" ? { signal: host.signal } : {}),
  };
  const ack = new CommitThenAck(options);
  const processOptions = {
    ...(s.signalOn === "process" ? { signal: host.signal } : {}),
    ...(s.receivedAgoMs !== undefined ? { receivedAt: Date.now() - s.receivedAgoMs } : {}),
  };
  ack.process(msgs, write, processOptions).then(
    (r) => {
      log.add("call-settled");
      o.result = r;
      o.resolvedAt = performance.now();
    },
    (error: unknown) => {
      log.add("call-settled");
      o.rejected = { error };
    },
  );
  await runTimers({ done: () => o.result !== undefined || o.rejected !== undefined, settleMs: Number.POSITIVE_INFINITY, limitMs: 1e9 });
  return { ...o, log, msgs, hostReason: host.signal.reason, metrics, confirmedStreams };
}

// ---------------------------------------------------------------------------------------------
// The model: what the decision table says, for each way the write may have ended
// ---------------------------------------------------------------------------------------------

interface World {
  readonly writeOk: boolean;
  readonly value: unknown;
  readonly error: unknown;
  readonly cancelled: boolean;
  /** The write was still running at the shutdown bound: its outcome was unknown when the call returned. */
  readonly abandoned?: true;
}

/** The ways the write may have ended, given what was observed (two where times tie). */
function worlds(s: Scenario, o: Observed): World[] {
  if (s.abort?.at === -1) return [{ writeOk: false, value: undefined, error: o.hostReason, cancelled: true }];
  const B = boundOf(s.policy);
  const W = o.workSettledAt ?? Number.POSITIVE_INFINITY;
  const hostT = o.hostAbortedAt ?? Number.POSITIVE_INFINITY;
  const limitT = o.signalReason instanceof HeartbeatLimitError ? o.signalAbortedAt! : Number.POSITIVE_INFINITY;
  const S = Math.min(hostT <= W ? hostT : Number.POSITIVE_INFINITY, limitT);
  const boundReason = hostT <= limitT ? o.hostReason : o.signalReason;
  const out: World[] = [];
  const cancelledAt = (end: number, writeOk: boolean): boolean[] => {
    if (writeOk) return [false];
    if (hostT < end - 1) return [true];
    if (hostT > end + 1) return [false];
    return [true, false];
  };
  // Resolving with a revoked proxy rejects (looking up `then` throws): the write failed.
  const thenThrows = o.workOk === true && s.write.value === "report" && s.write.shape === "revoked";
  const workOk = o.workOk === true && !thenThrows;
  if (W !== Number.POSITIVE_INFINITY && W <= S + B + 1) {
    for (const cancelled of cancelledAt(W, workOk)) {
      out.push({ writeOk: workOk, value: workOk ? o.workValue : undefined, error: workOk ? undefined : thenThrows ? TYPE_ERROR : o.workValue, cancelled });
    }
  }
  if (Number.isFinite(S) && W >= S + B) out.push({ writeOk: false, value: undefined, error: boundReason, cancelled: false, abandoned: true });
  return out;
}

/** Stands for "a TypeError the engine or the library made" in expected errors. */
const TYPE_ERROR = Symbol("a TypeError");

interface Expect {
  readonly actions: ReadonlySet<MessageResult["action"]>;
  /** `true`: a settleError of this class (or any, for `Error`); `false`: none. */
  readonly settleError: false | "any" | (abstract new (...args: never[]) => unknown);
  readonly error: unknown;
  readonly committed: boolean;
}

const one = (a: MessageResult["action"]): ReadonlySet<MessageResult["action"]> => new Set([a]);

function expectations(s: Scenario, o: Observed, world: World): { msgs: Expect[]; reportError: boolean; leaseLost: boolean } {
  const n = s.msgs.length;
  // Any lease lost while the write ran, whatever aborted first.
  const leaseLost = o.ctx !== undefined && (o.ctx.lease?.expired === true || o.signalReason instanceof LeaseExpiredError);
  const model = world.writeOk ? readModel(s.write, n, world.value) : undefined;
  const maxDeliver = s.maxDeliver ?? (s.policy.enabled ? s.policy.timingMaxDeliver : undefined);
  const closed = s.connection?.closed === true;
  const dl = s.deadLetter;
  const shutdown = s.abort !== undefined;
  return {
    reportError: model?.reportError ?? false,
    leaseLost,
    msgs: s.msgs.map((m, i): Expect => {
      if (world.abandoned) return { actions: one("abandoned"), settleError: false, error: undefined, committed: false };
      const failed = !world.writeOk || model!.failures.has(i);
      const error = !world.writeOk ? world.error : failed ? model!.failures.get(i) : undefined;
      const permanent = error instanceof PermanentSinkError;
      const cancelled = world.cancelled && failed;
      const base = { error, committed: !failed };
      const ack = (as: MessageResult["action"]): Expect => {
        if (s.confirmAck) return { ...base, actions: one(as), settleError: m.ackAckRejects ? AckNotConfirmedError : false };
        return m.ackThrows ? { ...base, actions: one("left"), settleError: Error } : { ...base, actions: one(as), settleError: false };
      };
      const deadLetter = (final: boolean): Expect => {
        const noCopy: Expect = { ...base, actions: one(final ? "exhausted" : "left"), settleError: DeadLetterError };
        if (dl === undefined || dl.kind === "throws" || dl.kind === "nothing" || dl.kind === "source") return noCopy;
        const failFirst = dl.kind === "ok" ? 0 : dl.failFirst;
        if (failFirst === 0) return ack("dead_lettered");
        if (!final || failFirst >= 3) return noCopy;
        // Retries on the last delivery are cut by the shutdown budget.
        if (shutdown) return { ...base, actions: new Set([...ack("dead_lettered").actions, "exhausted"]), settleError: "any" };
        return ack("dead_lettered");
      };
      const frame = (action: "nacked" | "termed", throws: boolean): Expect =>
        throws ? { ...base, actions: one("left"), settleError: Error } : { ...base, actions: one(action), settleError: false };
      const lastDelivery = maxDeliver !== undefined && maxDeliver > 0 && m.dc >= maxDeliver;
      if (closed) return { ...base, actions: one(failed && lastDelivery ? "exhausted" : "left"), settleError: ConnectionClosedError };
      if (!failed) return ack("acked");
      if (lastDelivery) {
        if (dl !== undefined) return deadLetter(true);
        if (permanent && !cancelled && !leaseLost) return m.termThrows ? { ...base, actions: one("exhausted"), settleError: Error } : frame("termed", false);
        return { ...base, actions: one("exhausted"), settleError: false };
      }
      if (cancelled || leaseLost) return { ...base, actions: one("left"), settleError: false };
      if (permanent) return dl !== undefined ? deadLetter(false) : frame("termed", m.termThrows);
      if (s.temporary?.action === "leave") return { ...base, actions: one("left"), settleError: false };
      // MaxDeliver not given and unreadable (the scripted connection answers no request): never a NAK.
      if (maxDeliver === undefined && s.connection !== undefined) return { ...base, actions: one("left"), settleError: ConsumerPolicyError };
      return frame("nacked", m.nakThrows);
    }),
  };
}

function matches(r: BatchResult, x: ReturnType<typeof expectations>): string | undefined {
  if (r.leaseLost !== x.leaseLost) return `leaseLost ${r.leaseLost}, expected ${x.leaseLost}`;
  if ((r.reportError !== undefined) !== x.reportError) return `reportError ${String(r.reportError)}, expected ${x.reportError ? "one" : "none"}`;
  for (let i = 0; i < x.msgs.length; i++) {
    const got = r.messages[i]!;
    const want = x.msgs[i]!;
    if (!want.actions.has(got.action)) return `msg ${i}: ${got.action}, expected ${[...want.actions].join("|")}`;
    if (want.settleError === false ? got.settleError !== undefined : want.settleError !== "any" && !(got.settleError instanceof want.settleError)) {
      return `msg ${i}: settleError ${String(got.settleError)}, expected ${want.settleError === false ? "none" : want.settleError === "any" ? "any" : want.settleError.name}`;
    }
    const wantError = want.error === TYPE_ERROR ? got.error instanceof TypeError : Object.is(got.error, want.error);
    if (!wantError) return `msg ${i}: error ${String(got.error)}, expected ${String(want.error)}`;
    if ((got.leaseLost === true) !== x.leaseLost) return `msg ${i}: leaseLost ${String(got.leaseLost)}`;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------------

const baseDelay = (n: number): number => Math.min(60_000, 1000 * 2 ** Math.min(n - 1, 16));

/** What the NAK of a message at delivery `n` must carry for a requested wait (BackOff-corrected). */
function sentDelay(requested: number, n: number, backOff: readonly number[] | undefined): number {
  if (backOff === undefined) return requested;
  const excess = backOff[Math.min(n - 1, backOff.length - 1)]! - backOff[0]!;
  const send = Math.ceil(requested - excess);
  return send >= 1 ? send : 1;
}

function verify(s: Scenario, o: Observed): void {
  const { log } = o;
  const n = s.msgs.length;
  const d = (): unknown => ({
    scenario: { ...s, msgs: s.msgs.map(describeMsg) },
    events: log.events.map((e) => `${e.n}@${e.t}:${e.kind}${e.msg ?? ""}${e.threw ? "!" : ""}${e.noop ? "~" : ""}`),
    result: o.result && { ...o.result, messages: o.result.messages.map((m) => ({ ...m, msg: undefined })) },
    signalReason: o.signalReason,
    workSettledAt: o.workSettledAt,
    hostAbortedAt: o.hostAbortedAt,
  });

  // process resolves, whatever happened.
  check(o.rejected === undefined, "process never rejects for a failed write or settle", () => ({ error: String(o.rejected?.error), ...(d() as object) }));
  check(o.result !== undefined, "process resolves", d);
  const r = o.result;
  if (n === 0) {
    check(r.outcome === "empty" && r.messages.length === 0 && log.events.every((e) => e.kind === "abort" || e.kind === "call-settled"), "an empty batch runs nothing", d);
    return;
  }
  const start = log.first("work-start");
  const end = log.first("call-settled")!;
  if (s.abort?.at === -1) check(start === undefined, "an aborted signal never starts the write", d);
  else check(start !== undefined && o.batchSeen !== undefined && o.batchSeen.length === n && o.batchSeen.every((m, i) => m === o.msgs[i]), "the write gets the batch", d);

  // Heartbeats only while the write runs.
  const writeEnd = log.first("work-settled");
  const firstFrame = log.events.find((e) => e.kind === "ack" || e.kind === "nak" || e.kind === "term" || e.kind === "dlq-publish");
  for (const e of log.of("working")) {
    check(start !== undefined && e.n > start.n, "no working() before the write started", d);
    check(e.n < end.n && (firstFrame === undefined || e.n < firstFrame.n), "no working() once settling began", d);
  }
  if (!s.policy.enabled || s.connection?.closed === true) check(log.of("working").length === 0, "no working() disabled or on a closed connection", d);
  for (let i = 0; i < n; i++) check(log.of("working", i).length <= s.policy.maxHeartbeats, "at most maxHeartbeats working() per message", d);
  check(r.heartbeats === (o.ctx?.heartbeats ?? 0) && r.heartbeats <= s.policy.maxHeartbeats, "the result counts the rounds", d);

  // The ways the write may have ended (two where times tie), and what each makes of every message.
  const ws = worlds(s, o);
  check(ws.length > 0, "the write ended by itself or by the shutdown bound", d);
  const models = ws.map((w) => expectations(s, o, w));
  // The decision table, applied to what happened: one of the worlds explains the whole result.
  const mismatches = models.map((x) => matches(r, x));
  const matched = models[mismatches.findIndex((m) => m === undefined)];
  check(matched !== undefined, "the decision table", () => ({ mismatches, ...(d() as object) }));

  // Frames: at most one per message, each one allowed.
  const maxDeliver = s.maxDeliver ?? (s.policy.enabled ? s.policy.timingMaxDeliver : undefined);
  const nakBackOff = s.policy.enabled ? s.policy.backOffMs : undefined;
  for (let i = 0; i < n; i++) {
    const plan = s.msgs[i]!;
    const res = r.messages[i]!;
    check(res.msg === o.msgs[i], "results in batch order", d);
    const finals = log.finals(i);
    check(finals.length <= 1, "at most one final frame per message", d);
    const frame = finals[0];
    const last = maxDeliver !== undefined && maxDeliver > 0 && plan.dc >= maxDeliver;
    const copy = o.confirmedStreams.get(i);
    switch (res.action) {
      case "acked":
        check(frame?.kind === "ack", "acked means an ACK left", d);
        break;
      case "dead_lettered":
        check(frame?.kind === "ack" && copy !== undefined && copy !== STREAM, "dead_lettered means a copy confirmed by another stream, then an ACK", d);
        check(log.of("dlq-confirmed", i).some((c) => c.n < frame.n && (c.arg as { stream: string }).stream !== STREAM), "the ACK of a dead-lettered message follows its PubAck", d);
        break;
      case "nacked":
        check(frame?.kind === "nak", "nacked means a NAK left", d);
        break;
      case "termed":
        check(frame?.kind === "term", "termed means a TERM left", d);
        check(frame.arg === (["2.10.4", "2.12.1"].includes(s.connection?.version ?? "") ? "permanent failure: PermanentSinkError" : undefined), "a Term reason only for servers that read it", d);
        break;
      case "left":
      case "exhausted":
        check(frame === undefined, `${res.action} means no frame left`, d);
        break;
      case "abandoned": {
        // Its outcome was unknown at the bound: no frame while it ran; its late outcome settled after.
        const lateFrame = finals[0] ?? log.of("dlq-publish", i)[0];
        check(lateFrame === undefined || (writeEnd !== undefined && lateFrame.n > writeEnd.n), "no frame of an abandoned write before it ended", d);
        if (frame?.kind === "ack") check(o.workOk === true || copy !== undefined, "a late ACK only for a late commit (or a confirmed copy)", d);
        break;
      }
    }
    if (frame?.kind === "ack" && res.action !== "abandoned") {
      const committedAck = res.action === "acked";
      if (committedAck) {
        check(writeEnd !== undefined && o.workOk === true && frame.n > writeEnd.n, "an ACK only after the write resolved", d);
        check(matched.msgs[i]!.committed, "an ACK only for a message the write committed", d);
      }
    }
    if (frame?.kind === "nak" && res.action !== "abandoned") {
      check(!last, "no NAK on the last allowed delivery", d);
      const t = s.temporary;
      if (t === undefined || (t.action === "nak" && t.delayMs === undefined)) {
        const base = baseDelay(plan.dc);
        const requested = res.requestedDelayMs!;
        check(requested >= base && requested <= Math.round(base * 1.2), "the default NAK delay grows with the delivery count (jitter only lengthens)", d);
        check(frame.arg === sentDelay(requested, plan.dc, nakBackOff), "the NAK carries the (BackOff-corrected) delay", d);
        check(typeof frame.arg === "number" && frame.arg >= 1 && res.effectiveDelayMs! >= base, "the server waits at least the default delay; never a bare NAK by default", d);
      } else if (t.action === "nak") {
        check(frame.arg === (t.delayMs === 0 ? undefined : sentDelay(t.delayMs!, plan.dc, nakBackOff)), "a fixed NAK delay is sent as asked (0: a bare NAK)", d);
      }
    }
    // Nothing lost on the last delivery: a failed message that got no frame and no copy is exhausted.
    if (last && res.action !== "abandoned" && !matched.msgs[i]!.committed && frame === undefined && (copy === undefined || copy === STREAM)) {
      check(res.action === "exhausted", "no frame on the last allowed delivery is reported as exhausted", d);
    }
  }


  // Counts and the batch outcome.
  const count = (a: MessageResult["action"]): number => r.messages.filter((m) => m.action === a).length;
  check(
    r.acked === count("acked") && r.nacked === count("nacked") && r.termed === count("termed") && r.deadLettered === count("dead_lettered") && r.left === count("left") && r.exhausted === count("exhausted") && r.abandoned === count("abandoned") && r.messages.length === n,
    "the counts sum the messages",
    d,
  );
  const actions = new Set(r.messages.map((m) => m.action));
  const cancelledOk = ws.some((w) => w.cancelled);
  const expectedOutcomes = new Set<string>([actions.size === 1 ? [...actions][0]! : "partial", ...(cancelledOk ? ["cancelled"] : [])]);
  if (ws.every((w) => w.cancelled)) expectedOutcomes.delete(actions.size === 1 ? [...actions][0]! : "partial");
  check(expectedOutcomes.has(r.outcome), "the batch outcome", d);
  if (s.sink === "memory" && r.outcome === "abandoned") {
    check((o.metrics.snapshot().counters[MetricNames.MESSAGES_ABANDONED_TOTAL] ?? 0) === n, "abandoned messages are counted", d);
  } else if (s.sink === "memory") {
    const c = o.metrics.snapshot().counters;
    const v = (k: string): number => c[k] ?? 0;
    check(
      v(MetricNames.MESSAGES_ACKED_TOTAL) === r.acked && v(MetricNames.MESSAGES_NACKED_TOTAL) === r.nacked && v(MetricNames.MESSAGES_TERMED_TOTAL) === r.termed && v(MetricNames.MESSAGES_DEAD_LETTERED_TOTAL) === r.deadLettered && v(MetricNames.MESSAGES_EXHAUSTED_TOTAL) === r.exhausted,
      "the metrics count what the result says",
      () => ({ counters: c, ...(d() as object) }),
    );
  }
  check(vi.getTimerCount() === 0, "no timer left behind", d);
}

/** One message's plan in a few characters, for failure reports. */
export function describeMsg(m: MsgPlan): string {
  const w = m.workingFails === "never" ? "" : m.workingFails === "always" ? " wpi!" : ` wpi!${m.workingFails.join(",")}`;
  return `dc${m.dc}${w}${m.ackThrows ? " ack!" : ""}${m.nakThrows ? " nak!" : ""}${m.termThrows ? " term!" : ""}${m.ackAckRejects ? " noreply" : ""}`;
}

describe("CommitThenAck.process properties (virtual time)", () => {
  const unhandled = watchUnhandled();
  // The dead-letter publish loads the client's headers on first use: load it before time is virtual.
  beforeAll(async () => {
    await import("@nats-io/transport-node");
  });
  beforeEach(() => useVirtualTime());
  afterEach(() => {
    vi.useRealTimers();
  });
  afterAll(() => unhandled.stop());

  it("settles every message by the decision table, losing nothing, on every path", async () => {
    await fc.assert(
      fc.asyncProperty(scenarioArb, async (s) => {
        verify(s, await play(s));
      }),
      { numRuns: 2000 },
    );
    expect(unhandled.seen).toEqual([]);
  });
});
