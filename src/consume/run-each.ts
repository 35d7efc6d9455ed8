/**
 * The per-message loop behind `CommitThenAck.runEach`: every message is supervised from the
 * moment it arrives (its lease kept while it waits for a handler), at most `concurrency`
 * handlers run at once, and each message is settled as soon as its own handler settles.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { BatchResult } from "../settle/batch-result.js";
import { MetricNames } from "../telemetry/metric-names.js";
import { EMPTY_PULL_FLOOR_MS, EMPTY_PULL_PAUSE_MS, isClosed, isRefusedByClient, pause, refusedPull, retryDelayMs, untilFreed, type LoopContext } from "./run-loop.js";
import { ShutdownBound } from "./shutdown-bound.js";
import { callGuarded, reportSettled, type LoopSettings } from "./run-options.js";

/** Waits for a handler slot; resolves with the function that gives it back. */
export type Gate = (signal: AbortSignal) => Promise<() => void>;

/** What the per-message loop needs besides its options. */
export interface EachContext extends Omit<LoopContext, "process" | "waitAfterFirstMs"> {
  /** Supervises, runs (through `gate`) and settles one message; `signal` cancels its handler. */
  readonly processOne: (m: JsMsg, receivedAt: number, signal: AbortSignal, gate: Gate) => Promise<BatchResult>;
}

interface Entry {
  readonly control: AbortController;
  started: boolean;
}

/** Runs one handler per message until `settings.signal` aborts. */
export async function runEachMessage(settings: LoopSettings, loop: EachContext): Promise<void> {
  const signal = settings.signal;
  const slots = new Slots(settings.concurrency);
  const entries = new Set<Entry>();
  const settling = new Set<Promise<void>>();
  let freed: (() => void) | undefined;
  const capacity = settings.capacity;
  const bound = new ShutdownBound(loop.shutdownTimeoutMs);

  const onShutdown = (): void => {
    // Handlers already running are told at once; messages still waiting get the bound.
    for (const e of entries) {
      if (e.started) e.control.abort(signal?.reason);
      else forwardAbort(bound.child().signal!, e.control);
    }
  };
  signal?.addEventListener("abort", onShutdown, { once: true });

  const start = (m: JsMsg, at: number): void => {
    const entry: Entry = { control: new AbortController(), started: false };
    if (signal?.aborted) forwardAbort(bound.child().signal!, entry.control);
    entries.add(entry);
    const gate: Gate = async (s) => {
      const release = await slots.acquire(s);
      entry.started = true;
      return release;
    };
    const p = loop
      .processOne(m, at, entry.control.signal, gate)
      .then((result) => reportSettled(settings, result))
      .finally(() => {
        entries.delete(entry);
        settling.delete(p);
        const f = freed;
        freed = undefined;
        f?.();
      });
    settling.add(p);
  };

  let failures = 0;
  try {
    while (!signal?.aborted) {
      const limit = loop.maxAckPending === undefined ? capacity : Math.min(capacity, loop.maxAckPending);
      const room = Math.min(settings.batchSize, limit - entries.size);
      if (room <= 0) {
        await untilFreed(signal, (f) => (freed = f));
        continue;
      }
      let pullError: unknown;
      let got = 0;
      const pulledAt = performance.now();
      try {
        // Each message starts at once: its supervision begins as it arrives.
        await loop.source.pull({ max: room, waitAfterFirstMs: undefined, signal }, (m, at) => {
          got += 1;
          start(m, at);
        });
      } catch (err) {
        pullError = err;
      }
      if (pullError === undefined) {
        failures = 0;
        // An empty pull that ended at once (not by its expiry) must not become a hot loop.
        if (got === 0 && performance.now() - pulledAt < EMPTY_PULL_FLOOR_MS) await pause(EMPTY_PULL_PAUSE_MS, signal);
        continue;
      }
      if (isRefusedByClient(pullError)) throw refusedPull(pullError);
      failures += 1;
      loop.metrics.count(MetricNames.FETCH_FAILURES_TOTAL);
      const retryInMs = retryDelayMs(failures);
      callGuarded(settings.onError, pullError, Object.freeze({ during: "fetch" as const, consecutiveFailures: failures, retryInMs }));
      if (isClosed(pullError, loop.connection)) throw pullError;
      if (got === 0) await pause(retryInMs, signal);
    }
  } finally {
    signal?.removeEventListener("abort", onShutdown);
    for (const l of await loop.source.close()) start(l.m, l.at);
    while (settling.size > 0) await Promise.all(settling);
    bound.dispose();
  }
}

function forwardAbort(from: AbortSignal, to: AbortController): void {
  if (from.aborted) to.abort(from.reason);
  else from.addEventListener("abort", () => to.abort(from.reason), { once: true });
}

/** A counting semaphore whose waiters give up when their signal aborts. */
class Slots {
  #free: number;
  readonly #waiters: Array<() => void> = [];

  constructor(n: number) {
    this.#free = n;
  }

  acquire(signal: AbortSignal): Promise<() => void> {
    if (signal.aborted) return Promise.reject(signal.reason);
    if (this.#free > 0) {
      this.#free -= 1;
      return Promise.resolve(this.#releaser());
    }
    return new Promise((resolve, reject) => {
      const grant = (): void => {
        signal.removeEventListener("abort", onAbort);
        resolve(this.#releaser());
      };
      const onAbort = (): void => {
        const i = this.#waiters.indexOf(grant);
        if (i >= 0) this.#waiters.splice(i, 1);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      this.#waiters.push(grant);
    });
  }

  #releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.#waiters.shift();
      if (next) next();
      else this.#free += 1;
    };
  }
}
