/**
 * Settling a batch after its write: which messages committed and which failed, one frame for
 * each, the metrics and the settled event.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { ConnectionClosedError, errorName, PermanentSinkError } from "../errors.js";
import { batchConnectionClosed } from "../nats/connection-state.js";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { BatchResult, MessageResult } from "./batch-result.js";
import { publishBatchSettled } from "./settle-events.js";
import type { Settler } from "./settler.js";
import { firstError, summarize } from "./summarize.js";
import { readReport } from "./write-report.js";

/** How a batch's write ended. */
export interface WriteOutcome {
  /** The write resolved (with `report`), or rejected (with `error`). */
  readonly ok: boolean;
  /** What the write resolved with. */
  readonly report: unknown;
  /** Why the write failed. */
  readonly error: unknown;
  /** The batch was cancelled (host shutdown) before the write resolved. */
  readonly cancelled: boolean;
  /** The batch's lease was lost while the write ran. */
  readonly leaseLost: boolean;
  /** Heartbeat rounds sent while the write ran. */
  readonly heartbeats: number;
  /** Duration of the write in milliseconds. */
  readonly writeMs: number;
}

/** What settling a batch needs besides the frames. */
export interface BatchSettleContext {
  readonly settler: Settler;
  readonly metrics: MetricsRecorder;
  /** The host's connection, trusted for whether the batch's connection is closed. */
  readonly connection: { isClosed?: () => unknown } | undefined;
  /** The batch number its heartbeat events used. */
  readonly batchId: number;
}

/** Settles every message of `list` by what the write reported; never rejects. */
export async function settleBatch(list: readonly JsMsg[], outcome: WriteOutcome, context: BatchSettleContext): Promise<BatchResult> {
  const { settler, metrics } = context;
  const failures = outcome.ok ? readReport(outcome.report, list) : new Map(list.map((m) => [m, outcome.error]));
  if (failures.size > 0) metrics.count(MetricNames.MESSAGES_FAILED_TOTAL, failures.size);

  const closed = batchConnectionClosed(list, context.connection);
  const confirmAck = settler.confirmsAcks;
  const { cancelled, leaseLost } = outcome;
  let pending = false;
  const settling = list.map((m): Promise<MessageResult> | MessageResult => {
    if (!failures.has(m)) {
      if (!confirmAck) return settler.successNow(m, closed);
      pending = true;
      return settler.success(m, closed);
    }
    const error = failures.get(m);
    // Shutdown: send nothing, the message comes back after AckWait.
    if (cancelled) return { msg: m, action: "left", error };
    if (closed) return { msg: m, action: "left", error, settleError: new ConnectionClosedError() };
    if (error instanceof PermanentSinkError) {
      pending = true;
      return settler.permanent(m, error);
    }
    // After a lost lease another worker may hold the message: a NAK would disturb it.
    return settler.temporary(m, error, leaseLost);
  });
  // Every frame above went out in batch order; only confirmed ACKs and dead letters are awaited.
  const results = pending ? await Promise.all(settling) : (settling as MessageResult[]);

  const result = summarize(results, cancelled, outcome.ok ? firstError(results) : outcome.error, outcome.heartbeats, outcome.writeMs);
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
    heartbeats: outcome.heartbeats,
    writeMs: outcome.writeMs,
    ...(result.error !== undefined ? { errorName: errorName(result.error) } : {}),
  }));
  return result;
}

function record(m: MetricsRecorder, r: BatchResult): void {
  m.count(MetricNames.MESSAGES_ACKED_TOTAL, r.acked);
  m.count(MetricNames.MESSAGES_NACKED_TOTAL, r.nacked);
  m.count(MetricNames.MESSAGES_TERMED_TOTAL, r.termed);
  m.count(MetricNames.MESSAGES_DEAD_LETTERED_TOTAL, r.deadLettered);
  m.count(MetricNames.MESSAGES_LEFT_TOTAL, r.left);
  let settleFailures = 0;
  for (const x of r.messages) {
    if (x.settleError !== undefined) settleFailures += 1;
    if (x.effectiveDelayMs !== undefined) m.observe(MetricNames.NAK_DELAY_SECONDS, x.effectiveDelayMs / 1000);
  }
  m.count(MetricNames.SETTLE_FAILURES_TOTAL, settleFailures);
}
