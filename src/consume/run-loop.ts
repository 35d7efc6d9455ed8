/**
 * The fetch loop behind `CommitThenAck.run`: bounded batches, processed as soon as each fetch
 * returns, fetch errors retried with a bounded backoff, and a graceful stop.
 */
import type { Consumer, JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import { readOptionKeys } from "../policy/option-keys.js";

/**
 * Options of `CommitThenAck.run`.
 *
 * @example
 * ```ts
 * const options: RunOptions = { batchSize: 50, expiresMs: 1_000, signal: shutdown.signal, onError: (e) => log.warn(e) };
 * ```
 */
export interface RunOptions {
  /** Messages per fetch, integer 1 ..= 10,000; default 100. */
  readonly batchSize?: number;
  /**
   * How long one fetch waits for a full batch (ms, at least 1000 as the client requires);
   * default 1000. A partial batch is processed when its fetch returns, so this bounds how long
   * a message waits before its write starts.
   */
  readonly expiresMs?: number;
  /** Stops the loop gracefully. */
  readonly signal?: AbortSignal;
  /** Called with each fetch error (the loop retries with backoff). Must not throw; if it does, it is ignored. */
  readonly onError?: (error: unknown) => void;
}

/** The longest pause between failed fetches. */
const MAX_RETRY_DELAY_MS = 5000;
const FIRST_RETRY_DELAY_MS = 100;

/** @internal */
export interface LoopConfig extends RunOptions {
  readonly metrics: MetricsRecorder;
  readonly connection: Pick<NatsConnection, "isClosed"> | undefined;
  /** How long a batch fetched before a shutdown may still take to write. */
  readonly shutdownTimeoutMs: number;
  /**
   * Writes and settles one batch. `receivedAt(m, i)`: the receive time of message `i`;
   * `signal`: what cancels this batch's write.
   */
  readonly process: (msgs: JsMsg[], receivedAt: (m: JsMsg, index: number) => number | undefined, signal: AbortSignal | undefined) => Promise<unknown>;
}

const RUN_KEYS = ["batchSize", "expiresMs", "signal", "onError"] as const;

/** Checks the options of `run`; unknown keys refused. */
export function validateRunOptions(options: unknown): RunOptions {
  const o = readOptionKeys("run options", options, RUN_KEYS) as RunOptions;
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) throw new TypeError("run options.signal must be an AbortSignal");
  if (o.onError !== undefined && typeof o.onError !== "function") throw new TypeError("run options.onError must be a function (error) => void");
  return o;
}

/** @internal */
export async function runLoop(consumer: Pick<Consumer, "fetch">, config: LoopConfig): Promise<void> {
  const batchSize = config.batchSize ?? 100;
  const expiresMs = config.expiresMs ?? 1000;
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000) {
    throw new TypeError(`batchSize must be an integer in 1 ..= 10000, got ${String(batchSize)}`);
  }
  if (!Number.isInteger(expiresMs) || expiresMs < 1000 || expiresMs > 3_600_000) {
    throw new TypeError(`expiresMs must be an integer in 1000 ..= 3600000 (the client's minimum fetch expiry is 1000 ms), got ${String(expiresMs)}`);
  }
  const signal = config.signal;
  let failures = 0;

  while (!signal?.aborted) {
    const batch: JsMsg[] = [];
    // Receive times side by side with the batch: no per-message map.
    const received: number[] = [];
    let fetchError: unknown;
    try {
      const iter = await consumer.fetch({ max_messages: batchSize, expires: expiresMs });
      // On shutdown stop waiting for the rest of the batch; what already arrived is still yielded.
      const stop = (): void => void (iter as { stop?: () => unknown }).stop?.();
      signal?.addEventListener("abort", stop, { once: true });
      // Aborted while the pull request went out: do not wait for its expiry.
      if (signal?.aborted) stop();
      try {
        for await (const m of iter) {
          batch.push(m);
          received.push(Date.now());
        }
      } finally {
        signal?.removeEventListener("abort", stop);
      }
    } catch (err) {
      fetchError = err;
    }

    if (fetchError !== undefined) {
      failures += 1;
      config.metrics.count(MetricNames.FETCH_FAILURES_TOTAL);
      report(config.onError, fetchError);
      // Nothing can be sent on a closed connection: the messages come back after AckWait.
      if (isClosed(fetchError, config.connection)) throw fetchError;
    } else {
      failures = 0;
    }

    const receivedAt = (m: JsMsg, i: number): number | undefined => (batch[i] === m ? received[i] : undefined);
    if (signal?.aborted) {
      // Fetched but never started. A NAK would spend a delivery (the last one, for some), so
      // they are written within the shutdown bound instead.
      if (batch.length > 0) await drain(config, batch, receivedAt);
      break;
    }
    if (batch.length > 0) {
      await config.process(batch, receivedAt, signal);
    } else if (fetchError !== undefined) {
      await pause(Math.min(MAX_RETRY_DELAY_MS, FIRST_RETRY_DELAY_MS * 2 ** Math.min(failures - 1, 16)), signal);
    }
  }
}

/** Writes a batch fetched before the shutdown; its write is cancelled at the shutdown bound. */
async function drain(config: LoopConfig, batch: JsMsg[], receivedAt: (m: JsMsg, i: number) => number | undefined): Promise<void> {
  const bound = new AbortController();
  // Not unref'd: the loop is awaiting this write, and the wait is bounded.
  const timer = setTimeout(() => bound.abort(new Error("shutdown bound reached")), config.shutdownTimeoutMs);
  try {
    await config.process(batch, receivedAt, bound.signal);
  } finally {
    clearTimeout(timer);
  }
}

function isClosed(err: unknown, connection: Pick<NatsConnection, "isClosed"> | undefined): boolean {
  try {
    if (connection && connection.isClosed()) return true;
  } catch {
    // fall through
  }
  return err instanceof Error && (err.name === "ClosedConnectionError" || err.name === "ConnectionClosedError");
}

function report(onError: RunOptions["onError"], err: unknown): void {
  if (typeof onError !== "function") return;
  try {
    onError(err);
  } catch {
    // A host callback must not end the loop.
  }
}

async function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
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
