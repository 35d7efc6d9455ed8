/**
 * The per-message loop behind `CommitThenAck.runEach`: pulls only for free handlers, so every
 * message starts its handler the moment it arrives (nothing waits in a queue of the loop's own,
 * spending its lease and its heartbeat budget there), and settles each message as soon as its
 * own handler settles. While one pull is open another goes out once half a pull's worth of
 * handlers is free. A shutdown sends no new pull, lets the open ones end by themselves (what
 * they bring is handled within the bound), keeps the leases of running handlers while they
 * drain, and returns once every handler settled or was abandoned at its bound.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { BatchResult } from "../settle/batch-result.js";
import { MetricNames } from "../telemetry/metric-names.js";
import { pullSize } from "./intake-plan.js";
import type { PullSource } from "./pull-source.js";
import { EMPTY_PULL_FLOOR_MS, EMPTY_PULL_PAUSE_MS, isClosed, isRefusedByClient, pause, refusedPull, retryDelayMs, Waker, type LoopBase } from "./run-loop.js";
import { callGuarded, reportSettled, type LoopSettings } from "./run-options.js";
import { ShutdownBound } from "./shutdown-bound.js";
import { SignalFanout } from "./signal-fanout.js";

/** What the per-message loop needs besides its options. */
export interface EachContext extends LoopBase {
  /** Supervises, runs and settles one message received at `receivedAt` (epoch ms); `signal` cancels its handler. */
  readonly processOne: (m: JsMsg, receivedAt: number, signal: AbortSignal | undefined) => Promise<BatchResult>;
}

/** Runs one handler per message until `settings.signal` aborts. */
export async function runEachMessage(settings: LoopSettings, loop: EachContext): Promise<void> {
  const signal = settings.signal;
  let source: PullSource | undefined;
  const handlers = new SignalFanout(signal);
  const bound = new ShutdownBound(loop.shutdownTimeoutMs);
  const running = new Set<Promise<void>>();
  const pulls = new Set<Promise<void>>();
  const wake = new Waker();
  let failures = 0;
  let closedError: unknown;

  const start = (m: JsMsg, at: number): void => {
    const child = signal?.aborted ? bound.child() : handlers.child();
    const receivedAt = Date.now() - (performance.now() - at);
    const p = loop
      .processOne(m, receivedAt, child.signal)
      .then((result) => reportSettled(settings, result))
      .finally(() => {
        child.release();
        running.delete(p);
        source?.roomChanged();
        wake.wake();
      });
    running.add(p);
  };
  try {
    source = await loop.openSource(start, () => settings.capacity - running.size);
  } catch (err) {
    handlers.dispose();
    throw err;
  }
  const opened = source;

  const openPull = (max: number): void => {
    const pulledAt = performance.now();
    const before = running.size;
    const p = opened
      .pull(max)
      .then(
        async () => {
          failures = 0;
          if (running.size === before) {
            loop.onIdle();
            // An empty pull that ended at once (not by its expiry) must not become a hot loop.
            if (performance.now() - pulledAt < EMPTY_PULL_FLOOR_MS) await pause(EMPTY_PULL_PAUSE_MS, signal);
          }
        },
        async (err: unknown) => {
          if (isRefusedByClient(err)) {
            closedError ??= refusedPull(err);
            return;
          }
          failures += 1;
          loop.metrics.count(MetricNames.FETCH_FAILURES_TOTAL);
          const retryInMs = retryDelayMs(failures);
          callGuarded(settings.onError, err, Object.freeze({ during: "fetch" as const, consecutiveFailures: failures, retryInMs }));
          if (isClosed(err, loop.connection)) {
            closedError ??= err;
            return;
          }
          await pause(retryInMs, signal);
        },
      )
      .finally(() => {
        pulls.delete(p);
        wake.wake();
      });
    pulls.add(p);
  };

  try {
    while (!signal?.aborted && closedError === undefined) {
      const max = pullSize(
        {
          capacity: settings.capacity,
          held: running.size,
          requested: opened.outstanding,
          openPulls: pulls.size,
          batchSize: settings.batchSize,
          writing: running.size,
          concurrency: settings.concurrency,
        },
        "each",
      );
      // After a failure, one pull at a time: its retry pause spaces the attempts.
      if (max > 0 && (failures === 0 || pulls.size === 0)) openPull(max);
      await wake.wait(signal);
    }
  } finally {
    // No new pull; the open ones end by themselves and what they bring is handled.
    while (pulls.size > 0) await Promise.all(pulls);
    await opened.close();
    // Every handler ends before the loop does: settled, or abandoned at its bound.
    while (running.size > 0) await Promise.all(running);
    bound.dispose();
    handlers.dispose();
    await loop.flush();
  }
  if (closedError !== undefined) throw closedError;
}
