/**
 * Where a loop's messages come from. A pull asks for at most `n` messages and hands each one
 * over as it arrives, with its receive time, until the pull is full, expires, waited long
 * enough after its first message, or is stopped.
 *
 * - `fetchSource`: one fetch per pull, so the loop holds only what it asked for;
 * - `consumeSource`: one long-lived `consume()` shared by every pull, for `pinned_client`
 *   priority groups, whose pin lives in that one pull subscription (a new fetch has no pin and
 *   waits out the priority timeout). The client prefetches up to the loop's capacity.
 */
import type { Consumer, JsMsg } from "@nats-io/jetstream";
import { endPull } from "../nats/pull-subscription.js";
import type { PullOptions } from "./run-options.js";

/** One pull's limits. */
export interface PullRequest {
  /** At most this many messages. */
  readonly max: number;
  /** Stop waiting this long after the first message arrived (a partial batch starts then). */
  readonly waitAfterFirstMs: number | undefined;
  /** Stops the pull at once; what already arrived is still handed over. */
  readonly signal: AbortSignal | undefined;
}

/** A source of messages for a loop. */
export interface PullSource {
  /** Pulls; `take` receives every message with its receive time. Rejects with a fetch error. */
  pull(request: PullRequest, take: (m: JsMsg, receivedAt: number) => void): Promise<void>;
  /**
   * Ends the source and resolves with what arrived but was never handed over (a consume
   * subscription's prefetched messages): a shutdown writes them rather than drop them.
   */
  close(): Promise<Array<{ readonly m: JsMsg; readonly at: number }>>;
}

/** Fetch-based pulls. */
export function fetchSource(consumer: Pick<Consumer, "fetch">, expiresMs: number, pull: PullOptions | undefined): PullSource {
  // One abort listener for the loop's life, not one per pull (an idle loop pulls every second).
  let current: unknown;
  let watched: AbortSignal | undefined;
  const stopCurrent = (): void => {
    if (current !== undefined) endPull(current);
  };
  const watch = (signal: AbortSignal | undefined): void => {
    if (signal === watched) return;
    watched?.removeEventListener("abort", stopCurrent);
    watched = signal;
    signal?.addEventListener("abort", stopCurrent, { once: true });
  };
  return {
    async pull(request, take) {
      const iter = await consumer.fetch({ max_messages: request.max, expires: expiresMs, ...(pull as object) } as Parameters<Consumer["fetch"]>[0]);
      const stop = (): void => endPull(iter);
      const signal = request.signal;
      current = iter;
      watch(signal);
      // Aborted while the pull request went out: do not wait for its expiry.
      if (signal?.aborted) stop();
      let timer: ReturnType<typeof setTimeout> | undefined;
      try {
        for await (const m of iter) {
          take(m, Date.now());
          if (timer === undefined && request.waitAfterFirstMs !== undefined) {
            // Unref'd: the pull itself keeps the loop alive; this only shortens it.
            timer = setTimeout(stop, request.waitAfterFirstMs);
            timer.unref?.();
          }
        }
      } finally {
        clearTimeout(timer);
        current = undefined;
      }
    },
    close: async () => {
      watch(undefined);
      return [];
    },
  };
}

/** Pulls from one long-lived `consume()`, read continuously so every receive time is true. */
export function consumeSource(consumer: Pick<Consumer, "consume">, expiresMs: number, capacity: number, pull: PullOptions | undefined): PullSource {
  const queue: Array<{ m: JsMsg; at: number }> = [];
  let failure: unknown;
  let ended = false;
  let wake: (() => void) | undefined;
  const notify = (): void => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  let iterator: unknown;
  let closing = false;
  const read = (): Promise<void> =>
    (async () => {
      const iter = await consumer.consume({ max_messages: capacity, expires: expiresMs, ...(pull as object) } as Parameters<Consumer["consume"]>[0]);
      iterator = iter;
      if (closing) endPull(iter);
      for await (const m of iter) {
        queue.push({ m, at: Date.now() });
        notify();
      }
    })().then(
      () => {
        ended = true;
        notify();
      },
      (err: unknown) => {
        failure = err;
        ended = true;
        notify();
      },
    );
  let reading = read();
  return {
    async pull(request, take) {
      if (ended && !closing && queue.length === 0) {
        // The subscription ended (an error, a deleted consumer): report it, and start a new
        // one for the next pull; the loop's backoff spaces the attempts.
        const err = failure ?? new Error("the pull subscription ended");
        failure = undefined;
        ended = false;
        reading = read();
        throw err;
      }
      let got = 0;
      let firstAt: number | undefined;
      const deadline = performance.now() + expiresMs;
      while (got < request.max && !request.signal?.aborted) {
        const next = queue.shift();
        if (next !== undefined) {
          take(next.m, next.at);
          got += 1;
          firstAt ??= performance.now();
          continue;
        }
        if (ended) return;
        const limit = firstAt !== undefined && request.waitAfterFirstMs !== undefined ? Math.min(deadline, firstAt + request.waitAfterFirstMs) : deadline;
        const left = limit - performance.now();
        if (left <= 0) return;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, left);
          timer.unref?.();
          const onAbort = (): void => done();
          request.signal?.addEventListener("abort", onAbort, { once: true });
          function done(): void {
            clearTimeout(timer);
            request.signal?.removeEventListener("abort", onAbort);
            if (wake === done) wake = undefined;
            resolve();
          }
          wake = done;
        });
      }
    },
    async close() {
      closing = true;
      if (iterator !== undefined) endPull(iterator);
      // Stopping yields what the client had buffered; the reader moves it into the queue.
      await reading;
      return queue.splice(0);
    },
  };
}
