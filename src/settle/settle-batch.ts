/**
 * Settling a batch after its write: what the write did for each message, the decision for
 * each, the frames sent, the metrics and the settled event.
 */
import type { AckingDeliveries, StoredIds } from "./acking-deliveries.js";
import type { JsMsg } from "@nats-io/jetstream";
import { errorName, PermanentSinkError } from "../errors.js";
import { batchConnectionClosed } from "../nats/connection-state.js";
import { deliveryCount } from "../nats/message-access.js";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { BatchResult, MessageResult } from "./batch-result.js";
import { ACK, decide, type Decision, type Verdict } from "./decide.js";
import type { DeliveryLimit, DeliveryLimits } from "./delivery-limits.js";
import type { SettleBudget } from "./settle-budget.js";
import { publishBatchSettled } from "./settle-events.js";
import type { LoopConfirmation, Settler } from "./settler.js";
import { firstError, summarize } from "./summarize.js";
import type { ReadReport } from "./write-report.js";

/**
 * How a batch's write ended: resolved with its report, or rejected with its error. A union, so
 * a resolved write always carries the report its settling reads.
 */
export type WriteEnd =
  | {
      /** The write resolved. */
      readonly ok: true;
      /** What the write's result says about its batch (`readReport`), read once where it resolved. */
      readonly report: ReadReport;
    }
  | {
      /** The write rejected. */
      readonly ok: false;
      /** Why the write failed. */
      readonly error: unknown;
    };

/** How a batch's write ended, and what happened around it. */
export type WriteOutcome = WriteEnd & {
  /** The batch was cancelled (host shutdown) before the write resolved. */
  readonly cancelled: boolean;
  /** The batch's lease was lost while the write ran. */
  readonly leaseLost: boolean;
  /** Heartbeat rounds sent while the write ran. */
  readonly heartbeats: number;
  /** Duration of the write in milliseconds. */
  readonly writeMs: number;
};

/** What settling a batch needs besides the frames. */
export interface BatchSettleContext {
  readonly settler: Settler;
  readonly metrics: MetricsRecorder;
  /** The host's connection, trusted for whether the batch's connection is closed. */
  readonly connection: { isClosed?: () => unknown } | undefined;
  /** How long settling may wait. */
  readonly budget: SettleBudget;
  /** The batch number its heartbeat events used. */
  readonly batchId: number;
  /** Called once every message's frame went out, before confirmations are awaited (the loop's write slot is free then). */
  readonly onSent?: (() => void) | undefined;
  /** Confirmed ACKs a loop asks for when the host set none. */
  readonly confirm?: LoopConfirmation | undefined;
  /** A loop's messages whose ACK is on its way. */
  readonly acking?: AckingDeliveries | undefined;
  /** The stream sequences and timestamps of `list`, in order, as the loop read them at arrival (each message's ack subject is parsed once). */
  readonly ids?: StoredIds | undefined;
}

/** Settles every message of `list` by what the write reported; never rejects. */
export async function settleBatch(list: readonly JsMsg[], outcome: WriteOutcome, context: BatchSettleContext): Promise<BatchResult> {
  const { settler, metrics } = context;
  const report = outcome.ok ? outcome.report : undefined;
  const failures = report?.failures;
  const failedCount = failures !== undefined ? failures.size : list.length;
  if (failedCount > 0) metrics.count(MetricNames.MESSAGES_FAILED_TOTAL, failedCount);

  const rules = settler.rules;
  const connectionClosed = batchConnectionClosed(list, context.connection);
  const { cancelled, leaseLost } = outcome;
  // The consumers' MaxDeliver matters only for failures: read (once per consumer) only then.
  const limits = failedCount > 0 ? await resolveLimits(list, settler.limits) : undefined;
  const maxDeliverOf = (m: JsMsg): number | undefined => {
    const limit = limits?.get(m);
    return typeof limit === "number" ? limit : undefined;
  };
  const scope = { budget: context.budget, batchId: context.batchId, batchSize: list.length, leaseLost, maxDeliver: maxDeliverOf, confirm: context.confirm, acking: context.acking };
  const allCommitted = failures !== undefined && failures.size === 0 && !connectionClosed;
  // The frame of each message; ACKs are gathered so confirmed ones go out together.
  const decisions = list.map((m): { readonly decision: Decision; readonly error: unknown } => {
    // The common case, every message committed on an open connection: the table says ACK.
    if (allCommitted) return COMMITTED;
    const failed = !outcome.ok || outcome.report.failures.has(m);
    const error = outcome.ok ? outcome.report.failures.get(m) : outcome.error;
    const verdict: Verdict = !failed ? "committed" : error instanceof PermanentSinkError ? "permanent" : "temporary";
    const decision = decide(
      // A committed message is ACKed whatever else happened; the rest reads the batch's state.
      {
        verdict,
        deliveryCount: verdict === "committed" ? undefined : deliveryCount(m),
        maxDeliver: maxDeliverOf(m),
        limitKnown: verdict === "committed" || limits?.get(m) !== "unknown",
        cancelled: cancelled && failed,
        leaseLost,
        connectionClosed,
      },
      rules,
    );
    return { decision, error };
  });
  const acks = allCommitted ? list : list.filter((_, i) => decisions[i]!.decision === ACK);
  const confirming = acks.length > 0 ? settler.ackMany(acks, scope, acks === list ? context.ids : undefined) : undefined;
  const confirmed = confirming?.results;
  if (confirming?.sent === true && acks.length === list.length) context.onSent?.();
  let pending = confirmed !== undefined;
  const settling = list.map((m, i): Promise<MessageResult> | MessageResult | undefined => {
    const { decision, error } = decisions[i]!;
    if (confirmed !== undefined && decision === ACK) return undefined;
    const r = settler.apply(m, decision, error, scope);
    if (r instanceof Promise) pending = true;
    return r;
  });
  // Every frame went out at once (nothing held, copied or confirmed): the loop's slot is free.
  if (!pending) context.onSent?.();
  // Every frame above went out in batch order; only waits (confirmations, copies, held ACKs) are awaited.
  let results: MessageResult[];
  if (!pending) results = settling as MessageResult[];
  else {
    // Only what is a promise is awaited: with confirmed ACKs most entries are empty, and a
    // promise made for each would cost more than the batch's frames.
    const waits: Promise<void>[] = [];
    for (let i = 0; i < settling.length; i++) {
      const r = settling[i];
      if (r instanceof Promise) waits.push(r.then((v) => void (settling[i] = v)));
    }
    if (waits.length > 0) await Promise.all(waits);
    const acked = confirmed !== undefined ? await confirmed : [];
    let k = 0;
    results = settling.map((r) => (r as MessageResult | undefined) ?? acked[k++]!);
  }

  const result = summarize(results, {
    cancelled,
    error: outcome.ok ? firstError(results) : outcome.error,
    heartbeats: outcome.heartbeats,
    writeMs: outcome.writeMs,
    leaseLost,
    reportError: report?.error,
  });
  record(metrics, result);
  publishBatchSettled(() => ({
    batchId: context.batchId,
    batchSize: list.length,
    outcome: result.outcome,
    acked: result.acked,
    nacked: result.nacked,
    termed: result.termed,
    deadLettered: result.deadLettered,
    left: result.left,
    exhausted: result.exhausted,
    abandoned: result.abandoned,
    heartbeats: outcome.heartbeats,
    writeMs: outcome.writeMs,
    ...(result.error !== undefined ? { errorName: errorName(result.error) } : {}),
  }));
  return result;
}

/** Each message's MaxDeliver (one read per consumer at most, shared by the batch). */
async function resolveLimits(list: readonly JsMsg[], limits: DeliveryLimits): Promise<Map<JsMsg, DeliveryLimit>> {
  const out = new Map<JsMsg, DeliveryLimit>();
  const waits: Promise<void>[] = [];
  for (const m of list) {
    const limit = limits.limitFor(m);
    if (limit instanceof Promise) waits.push(limit.then((l) => void out.set(m, l)));
    else out.set(m, limit);
  }
  if (waits.length > 0) await Promise.all(waits);
  return out;
}

const COMMITTED = Object.freeze({ decision: ACK, error: undefined });

function record(m: MetricsRecorder, r: BatchResult): void {
  m.count(MetricNames.MESSAGES_ACKED_TOTAL, r.acked);
  m.count(MetricNames.MESSAGES_NACKED_TOTAL, r.nacked);
  m.count(MetricNames.MESSAGES_TERMED_TOTAL, r.termed);
  m.count(MetricNames.MESSAGES_DEAD_LETTERED_TOTAL, r.deadLettered);
  m.count(MetricNames.MESSAGES_LEFT_TOTAL, r.left);
  let settleFailures = 0;
  const messages = r.messages;
  for (let i = 0; i < messages.length; i++) {
    const x = messages[i]!;
    if (x.settleError !== undefined) settleFailures += 1;
    if (x.effectiveDelayMs !== undefined) m.observe(MetricNames.NAK_DELAY_SECONDS, x.effectiveDelayMs / 1000);
  }
  m.count(MetricNames.SETTLE_FAILURES_TOTAL, settleFailures);
}
