/**
 * The batch loop behind `CommitThenAck.run`: one pull at a time for what the loop can start,
 * a batch when the pull ends by itself (full, or at its lease-bounded expiry), up to
 * `concurrency` batches written at once, pull errors retried with a bounded backoff. A shutdown
 * sends no new pull, lets the open one end by itself and writes what it brought within the
 * bound, keeps the leases of the writes in flight while they drain, and returns once every
 * write settled or was abandoned at its bound and every frame owed was flushed.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type { BatchResult } from "../settle/batch-result.js";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { Intake, TakenBatch } from "./intake.js";
import { pullSize } from "./intake-plan.js";
import type { Arrival, PullSource } from "./pull-source.js";
import { callGuarded, reportSettled, type LoopSettings, type ReceivedAt } from "./run-options.js";
import { ShutdownBound } from "./shutdown-bound.js";
import { SignalFanout } from "./signal-fanout.js";

/** What both loops need besides their options: the stages they feed, given as arguments. */
export interface LoopBase {
  /** Opens the loop's source; every message it brings goes to `arrive`; `room()` is what the loop could still take. */
  readonly openSource: (arrive: Arrival, room: () => number) => Promise<PullSource>;
  readonly metrics: MetricsRecorder;
  readonly connection: Pick<NatsConnection, "isClosed"> | undefined;
  /** How long writes of messages received after a shutdown began may take before their signal aborts. */
  readonly shutdownTimeoutMs: number;
  /** Sends what the loop owes the server (the frames of its last batches) before it returns. */
  readonly flush: () => Promise<void>;
  /** A pull ended empty: the loop may look at the consumer (paused?) now and then. */
  readonly onIdle: () => void;
}

/** What the batch loop needs besides its options. */
export interface LoopContext extends LoopBase {
  readonly intake: Intake;
  /** Writes and settles one batch; `signal` cancels its write. Resolves at the latest when the write is abandoned at its bound. */
  readonly process: (msgs: JsMsg[], receivedAt: ReceivedAt, signal: AbortSignal | undefined) => Promise<BatchResult>;
}

/** A pull that returned nothing faster than this did not wait for its expiry. */
export const EMPTY_PULL_FLOOR_MS = 20;
export const EMPTY_PULL_PAUSE_MS = 100;

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
  const { intake } = loop;
  const wake = new Waker();
  // A pinned subscription brings messages between pulls too: the loop may be waiting for them.
  const arrive: Arrival = (m, at) => {
    intake.arrive(m, at);
    wake.wake();
  };
  let source: PullSource;
  try {
    source = await loop.openSource(arrive, () => settings.capacity - intake.held);
  } catch (err) {
    intake.dispose();
    throw err;
  }
  // Each batch listens on a child of the loop's signal: one listener on it, whatever the concurrency.
  const batches = new SignalFanout(signal);
  // Batches that start after the shutdown began (what the open pull brought) are written, not
  // handed back: handing back spends a delivery (the last one, for some). Their signal aborts
  // at this bound.
  const bound = new ShutdownBound(loop.shutdownTimeoutMs);
  const inFlight = new Set<Promise<void>>();
  let failures = 0;
  const start = (batch: TakenBatch): void => {
    const { msgs, refreshedAt } = batch;
    if (msgs.length === 0) return;
    const receivedAt: ReceivedAt = (m, i) => (msgs[i] === m ? refreshedAt[i] : undefined);
    const child = signal?.aborted ? bound.child() : batches.child();
    const p = loop
      .process(msgs, receivedAt, child.signal)
      .then((result) => reportSettled(settings, result))
      .finally(() => {
        child.release();
        intake.settled(msgs.length);
        inFlight.delete(p);
        source.roomChanged();
        wake.wake();
      });
    inFlight.add(p);
  };

  try {
    while (!signal?.aborted) {
      // Messages a pinned subscription brought between pulls start as soon as a write is free.
      if (intake.waiting >= settings.batchSize && inFlight.size < settings.concurrency) {
        start(intake.take(settings.batchSize));
        continue;
      }
      const max = pullSize(
        {
          capacity: settings.capacity,
          held: intake.held,
          requested: source.outstanding,
          openPulls: 0,
          batchSize: settings.batchSize,
          writing: inFlight.size,
          concurrency: settings.concurrency,
        },
        "batch",
      );
      if (max <= 0) {
        if (intake.waiting > 0 && inFlight.size < settings.concurrency) start(intake.take(settings.batchSize));
        else await wake.wait(signal);
        continue;
      }
      const before = intake.held;
      const pulledAt = performance.now();
      let pullError: unknown;
      try {
        // Never cut short, not even by the shutdown: it ends by itself, full or expired.
        await source.pull(max);
      } catch (err) {
        pullError = err;
      }
      const got = intake.held - before;
      if (intake.waiting > 0) start(intake.take(settings.batchSize));
      if (pullError !== undefined) {
        if (isRefusedByClient(pullError)) throw refusedPull(pullError);
        failures += 1;
        loop.metrics.count(MetricNames.FETCH_FAILURES_TOTAL);
        const retryInMs = retryDelayMs(failures);
        callGuarded(settings.onError, pullError, Object.freeze({ during: "fetch" as const, consecutiveFailures: failures, retryInMs }));
        // Nothing can be sent on a closed connection: the messages come back after AckWait.
        if (isClosed(pullError, loop.connection)) throw pullError;
        if (got === 0) await pause(retryInMs, signal);
        continue;
      }
      failures = 0;
      if (got > 0) continue;
      loop.onIdle();
      // An empty pull that ended at once (not by its expiry) must not become a hot loop.
      if (performance.now() - pulledAt < EMPTY_PULL_FLOOR_MS) await pause(EMPTY_PULL_PAUSE_MS, signal);
    }
  } finally {
    // No new pull; what is still on its way (a pinned subscription's refills) arrives first.
    await source.close();
    while (intake.waiting > 0) start(intake.take(settings.batchSize));
    // Every write ends before the loop does: settled, or abandoned at its bound.
    while (inFlight.size > 0) await Promise.all(inFlight);
    intake.dispose();
    bound.dispose();
    batches.dispose();
    await loop.flush();
  }
}

/** Wakes a loop waiting for room (a write settled, a pull ended), or resolves when `signal` aborts. */
export class Waker {
  #waiter: (() => void) | undefined;

  wait(signal: AbortSignal | undefined): Promise<void> {
    return new Promise<void>((resolve) => {
      if (signal?.aborted) {
        resolve();
        return;
      }
      const done = (): void => {
        signal?.removeEventListener("abort", done);
        if (this.#waiter === done) this.#waiter = undefined;
        resolve();
      };
      signal?.addEventListener("abort", done, { once: true });
      this.#waiter = done;
    });
  }

  wake(): void {
    this.#waiter?.();
  }
}

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
