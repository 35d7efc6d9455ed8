/**
 * The batch loop behind `CommitThenAck.run`: up to `concurrency` batches written at once, the
 * next pull going out while fewer are in flight; a partial batch starts once its first message
 * waited long enough; pull errors retried with a bounded backoff; and a shutdown that stops
 * pulling at once, writes what already arrived within the bound, and waits for every write.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { BatchResult } from "../settle/batch-result.js";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { PullSource } from "./pull-source.js";
import { callGuarded, reportSettled, type LoopSettings, type ReceivedAt } from "./run-options.js";
import { ShutdownBound } from "./shutdown-bound.js";
import { SignalFanout } from "./signal-fanout.js";

/** What a loop needs besides its options: the stages it feeds, given as arguments. */
export interface LoopContext {
  readonly source: PullSource;
  readonly metrics: MetricsRecorder;
  readonly connection: Pick<NatsConnection, "isClosed"> | undefined;
  /** How long writes of already-received messages may take once a shutdown began. */
  readonly shutdownTimeoutMs: number;
  /** How long a partial batch waits after its first message (the lease-safe bound). */
  readonly waitAfterFirstMs: number | undefined;
  /** The consumer's `max_ack_pending`, when known: the loop never holds more. */
  readonly maxAckPending: number | undefined;
  /** Writes and settles one batch; `signal` cancels its write. */
  readonly process: (msgs: JsMsg[], receivedAt: ReceivedAt, signal: AbortSignal | undefined) => Promise<BatchResult>;
}

/** The longest pause between failed pulls. */
const MAX_RETRY_DELAY_MS = 5000;
const FIRST_RETRY_DELAY_MS = 100;

/** The pause after `failures` failed pulls in a row: doubling from 100 ms, capped at 5 s. */
export function retryDelayMs(failures: number): number {
  return Math.min(MAX_RETRY_DELAY_MS, FIRST_RETRY_DELAY_MS * 2 ** Math.min(Math.max(failures, 1) - 1, 16));
}

/** Runs batches until `settings.signal` aborts; rejects only when the connection is closed for good. */
export async function runBatches(settings: LoopSettings, loop: LoopContext): Promise<void> {
  const signal = settings.signal;
  // Each batch listens on a child of the loop's signal: one listener on it, whatever the concurrency.
  const batches = new SignalFanout(signal);
  // Received after the shutdown began: written within the bound, not handed back (a NAK
  // would spend a delivery — the last one, for some).
  const bound = new ShutdownBound(loop.shutdownTimeoutMs);
  const inFlight = new Set<Promise<void>>();
  let held = 0;
  let failures = 0;
  let freed: (() => void) | undefined;
  const start = (batch: JsMsg[], received: number[], leftover = false): void => {
    held += batch.length;
    const receivedAt: ReceivedAt = (m, i) => (batch[i] === m ? received[i] : undefined);
    const child = leftover || signal?.aborted ? bound.child() : batches.child();
    const p = loop
      .process(batch, receivedAt, child.signal)
      .then((result) => reportSettled(settings, result))
      .finally(() => {
        child.release();
        held -= batch.length;
        inFlight.delete(p);
        const f = freed;
        freed = undefined;
        f?.();
      });
    inFlight.add(p);
  };

  try {
    while (!signal?.aborted) {
      if (inFlight.size >= settings.concurrency) {
        await untilFreed(signal, (f) => (freed = f));
        continue;
      }
      const room = loop.maxAckPending === undefined ? settings.batchSize : Math.min(settings.batchSize, loop.maxAckPending - held);
      if (room <= 0) {
        await untilFreed(signal, (f) => (freed = f));
        continue;
      }
      const batch: JsMsg[] = [];
      const received: number[] = [];
      let pullError: unknown;
      const pulledAt = performance.now();
      try {
        await loop.source.pull({ max: room, waitAfterFirstMs: loop.waitAfterFirstMs, signal }, (m, at) => {
          batch.push(m);
          received.push(at);
        });
      } catch (err) {
        pullError = err;
      }
      if (pullError !== undefined && isRefusedByClient(pullError)) throw refusedPull(pullError);
      if (pullError !== undefined) {
        failures += 1;
        loop.metrics.count(MetricNames.FETCH_FAILURES_TOTAL);
        const retryInMs = retryDelayMs(failures);
        callGuarded(settings.onError, pullError, Object.freeze({ during: "fetch" as const, consecutiveFailures: failures, retryInMs }));
        // Nothing can be sent on a closed connection: the messages come back after AckWait.
        if (isClosed(pullError, loop.connection)) throw pullError;
      } else {
        failures = 0;
      }
      if (batch.length > 0) {
        start(batch, received);
      } else if (pullError !== undefined) {
        await pause(retryDelayMs(failures), signal);
      } else if (performance.now() - pulledAt < EMPTY_PULL_FLOOR_MS) {
        // An empty pull that ended at once (not by its expiry) must not become a hot loop.
        await pause(EMPTY_PULL_PAUSE_MS, signal);
      }
    }
  } finally {
    const leftovers = await loop.source.close();
    if (leftovers.length > 0) {
      start(
        leftovers.map((l) => l.m),
        leftovers.map((l) => l.at),
        true,
      );
    }
    // Every write started by the loop ends before the loop does.
    while (inFlight.size > 0) await Promise.all(inFlight);
    bound.dispose();
    batches.dispose();
  }
}

/** Resolves when `register`'s callback is called or `signal` aborts. */
export function untilFreed(signal: AbortSignal | undefined, register: (f: () => void) => void): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const done = (): void => {
      signal?.removeEventListener("abort", done);
      resolve();
    };
    signal?.addEventListener("abort", done, { once: true });
    register(done);
  });
}

/** A pull that returned nothing faster than this did not wait for its expiry. */
export const EMPTY_PULL_FLOOR_MS = 20;
export const EMPTY_PULL_PAUSE_MS = 100;

/**
 * Whether the client refused the pull request's options (retrying cannot help): an invalid
 * argument, or a feature the connected server is too old for ("priority_groups require server
 * 2.11.0", a plain `Error` in nats.js).
 */
export function isRefusedByClient(err: unknown): boolean {
  return err instanceof Error && (err.name === "InvalidArgumentError" || / require server \d/.test(err.message));
}

/** The loop's error for pull options the client refuses, naming the client's reason. */
export function refusedPull(err: unknown): TypeError {
  const reason = err instanceof Error ? err.message.slice(0, 200) : String(err);
  return new TypeError(
    `the NATS client refused the pull options (${reason}): check options.pull against what this version of @nats-io/jetstream and the connected server support (priority groups need nats-server 2.11+, pinned ones a recent 3.x client)`,
    { cause: err },
  );
}

/** Whether a pull failed because the connection is closed for good. */
export function isClosed(err: unknown, connection: Pick<NatsConnection, "isClosed"> | undefined): boolean {
  try {
    if (connection && connection.isClosed()) return true;
  } catch {
    // fall through
  }
  return err instanceof Error && (err.name === "ClosedConnectionError" || err.name === "ConnectionClosedError");
}

/** Waits `ms`, or less when `signal` aborts. */
export async function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  if (signal?.aborted) return;
  await new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    timer.unref?.();
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
