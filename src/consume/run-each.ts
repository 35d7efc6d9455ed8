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
import { pullSize } from "./intake-plan.js";
import type { PullSource } from "./pull-source.js";
import { PullTasks, Waker, type LoopBase } from "./run-loop.js";
import { reportSettled, type LoopSettings } from "./run-options.js";
import { ShutdownBound } from "./shutdown-bound.js";
import { SignalFanout } from "./signal-fanout.js";

/** What the per-message loop needs besides its options. */
export interface EachContext extends LoopBase {
  /**
   * Supervises, runs and settles one message received at `receivedAt` (epoch ms); `signal`
   * cancels its handler, and `handled` is called once the handler itself returned (its slot is
   * free while the message is still being settled).
   */
  readonly processOne: (m: JsMsg, receivedAt: number, signal: AbortSignal | undefined, handled: () => void) => Promise<BatchResult>;
}

/** Runs one handler per message until `settings.signal` aborts. */
export async function runEachMessage(settings: LoopSettings, loop: EachContext): Promise<void> {
  const signal = settings.signal;
  const handlers = new SignalFanout(signal);
  const bound = new ShutdownBound(loop.shutdownTimeoutMs);
  const running = new Set<Promise<void>>();
  // Handlers running now: a slot is free as soon as its handler returned, while its message is
  // still being settled (an ACK needs no handler).
  let handling = 0;
  /** The first message refused before its handler ran: the loop ends with it. */
  let refused: { readonly err: unknown } | undefined;
  const wake = new Waker(signal);
  let source: PullSource | undefined;

  const start = (m: JsMsg, at: number): void => {
    const child = signal?.aborted ? bound.child() : handlers.child();
    const receivedAt = Date.now() - (performance.now() - at);
    handling += 1;
    let freed = false;
    const handled = (): void => {
      if (freed) return;
      freed = true;
      handling -= 1;
      source?.roomChanged();
      wake.wake();
    };
    const p = loop
      .processOne(m, receivedAt, child.signal, handled)
      .then(
        (result) => reportSettled(settings, result),
        (err: unknown) => {
          // Rejected before its handler ran (a malformed argument: nothing was sent, the message
          // stays redeliverable). The loop stops and rejects with it; left to reject here, it
          // would go unhandled until the loop ends (Node.js ends the process on one).
          refused ??= { err };
          wake.wake();
        },
      )
      .finally(() => {
        child.release();
        running.delete(p);
        // Rejected before its handler ran (a malformed argument): its slot is free too.
        handled();
      });
    running.add(p);
  };
  try {
    // Nothing new while the sink is down (a message is retried in place).
    source = await loop.openSource(start, () => (loop.sinkDown() ? 0 : settings.capacity - handling));
  } catch (err) {
    handlers.dispose();
    wake.dispose();
    throw err;
  }
  const opened = source;
  // A subscription that ended with no pull open: the loop pulls again (and opens a new one).
  opened.onEnded = () => wake.wake();
  const pulls = new PullTasks(opened, settings, loop, wake, () => undefined);
  const stopWatching = loop.onRecovered(() => {
    opened.roomChanged();
    wake.wake();
  });

  try {
    while (!signal?.aborted && pulls.stopped === undefined && refused === undefined) {
      if (loop.sinkDown()) {
        await wake.wait();
        continue;
      }
      const max = pullSize(
        {
          capacity: settings.capacity,
          held: handling,
          requested: opened.outstanding,
          openPulls: pulls.size,
          batchSize: settings.batchSize,
          writing: handling,
          concurrency: settings.concurrency,
        },
        "each",
      );
      // A subscription refills by itself: one window over it is enough.
      const windowed = opened.refills && pulls.size > 0;
      if (max > 0 && pulls.canOpen && !windowed) pulls.open(max);
      else await wake.wait();
    }
  } finally {
    // No new pull; the open ones end by themselves and what they bring is handled.
    stopWatching();
    const closing = opened.close();
    await pulls.settled();
    await closing;
    // What the open pulls brought has the shutdown bound from here.
    bound.start();
    // Every handler ends before the loop does: settled, or abandoned at its bound.
    while (running.size > 0) await Promise.all(running);
    bound.dispose();
    handlers.dispose();
    wake.dispose();
    await loop.flush();
  }
  if (refused !== undefined) throw refused.err;
  if (pulls.stopped !== undefined) throw pulls.stopped;
}
