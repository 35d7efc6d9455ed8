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
import type { AckingDeliveries, StoredIds } from "../settle/acking-deliveries.js";
import type { LoopConfirmation } from "../settle/settler.js";
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
  /** A batch is being retried in place (the sink is down): pull nothing new meanwhile. */
  readonly sinkDown: () => boolean;
  /** Calls the listener once no batch is retried any more; returns its remover. */
  readonly onRecovered: (listener: () => void) => () => void;
  /** The loop's confirmed ACKs (its default when the host set no `confirmAck`). */
  readonly confirm: LoopConfirmation | undefined;
  /** Committed messages whose ACK is on its way: another delivery of one is acked, not written. */
  readonly acking: AckingDeliveries;
}

/** What the batch loop needs besides its options. */
export interface LoopContext extends LoopBase {
  readonly intake: Intake;
  /**
   * Writes and settles one batch; `signal` cancels its write; `onSent` says its write slot is
   * free (the write committed the whole batch, or every frame went out while confirmations are
   * still awaited; called at most twice); `ids` are the messages' stream sequences and
   * timestamps, when the intake read them all. Resolves at the latest when the write is abandoned at its bound.
   */
  readonly process: (msgs: JsMsg[], receivedAt: ReceivedAt, signal: AbortSignal | undefined, onSent: () => void, ids: StoredIds | undefined) => Promise<BatchResult>;
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

/**
 * Runs batches until `settings.signal` aborts; rejects when the connection is closed for good
 * (or draining), or with the first batch refused before its write started.
 */
export async function runBatches(settings: LoopSettings, loop: LoopContext): Promise<void> {
  const signal = settings.signal;
  const { intake } = loop;
  const wake = new Waker(signal);
  // An arrival only matters to the loop once a batch's worth waits (a pull that ends wakes it
  // anyway): waking it for every message would cost a turn of the loop per message.
  const arrive: Arrival = (m, at) => {
    intake.arrive(m, at);
    if (intake.waiting >= settings.batchSize) wake.wake();
  };
  // Batches not yet settled (the loop waits for all of them), and those still holding a write
  // slot: a batch's slot and its messages are released once its write committed them all (its
  // ACKs follow at once) or its frames went out, before confirmed ACKs are answered.
  const inFlight = new Set<Promise<void>>();
  let writing = 0;
  /** The first batch that was refused before its write started: the loop ends with it. */
  let refused: { readonly err: unknown } | undefined;
  // What can start now: free writes' worth of batches, less what already waits for one; nothing
  // while the sink is down (a batch is retried in place).
  const room = (): number =>
    loop.sinkDown() ? 0 : Math.min(settings.capacity - intake.held, (settings.concurrency - writing) * settings.batchSize - intake.waiting);
  let source: PullSource;
  try {
    source = await loop.openSource(arrive, room);
  } catch (err) {
    intake.dispose();
    wake.dispose();
    throw err;
  }
  // A subscription that ended with no pull open: the loop pulls again (and opens a new one).
  source.onEnded = () => wake.wake();
  // Each batch listens on a child of the loop's signal: one listener on it, whatever the concurrency.
  const batches = new SignalFanout(signal);
  // Batches that start after the shutdown began (what the open pulls brought) are written, not
  // handed back: handing back spends a delivery (the last one, for some). Their signal aborts
  // at this bound.
  const bound = new ShutdownBound(loop.shutdownTimeoutMs);
  const start = (batch: TakenBatch): void => {
    const { msgs, refreshedAt, sequences, stamps } = batch;
    if (msgs.length === 0) return;
    const receivedAt: ReceivedAt = (m, i) => (msgs[i] === m ? refreshedAt[i] : undefined);
    const child = signal?.aborted ? bound.child() : batches.child();
    writing += 1;
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      writing -= 1;
      intake.settled(msgs.length);
      // Asked now, not a turn later: the refill leaves before (or with) the batch's ACKs.
      source.roomChanged(true);
      // The next pull (or window) opens now: a committed batch's ACKs are not waited for, and
      // the server delivers the next batch while they are built.
      openPull();
      wake.wake();
    };
    const p = loop
      .process(msgs, receivedAt, child.signal, release, sequences !== undefined && stamps !== undefined ? { sequences, stamps } : undefined)
      .then(
        (result) => reportSettled(settings, result),
        (err: unknown) => {
          // Rejected before the write started (a malformed argument: nothing was sent, the
          // messages stay redeliverable). The loop stops and rejects with it; left to reject
          // here, it would go unhandled until the loop ends (Node.js ends the process on one).
          refused ??= { err };
          wake.wake();
        },
      )
      .finally(() => {
        child.release();
        release();
        inFlight.delete(p);
      });
    inFlight.add(p);
  };
  // A subscription's batch starts when its window ended (what is waiting then), or when a full one waits.
  const startWaiting = (pullEnded: boolean): void => {
    while (intake.waiting > 0 && (pullEnded || intake.waiting >= settings.batchSize)) start(intake.take(settings.batchSize));
  };
  // Fetched pulls: each ended pull starts one batch of as many messages as it brought, first
  // come first: the server interleaves its deliveries to pulls open at once, so messages of a
  // pull still open may be waiting too, and starting those as well would start more batches
  // than there are pulls (and writes than `concurrency`). The last pull open starts all.
  const startPulled = (brought: number): void => {
    if (pulls.size === 0) {
      startWaiting(true);
      return;
    }
    for (let n = Math.min(brought, intake.waiting); n > 0; n -= settings.batchSize) start(intake.take(Math.min(n, settings.batchSize)));
  };
  // A window that filled starts full batches only (the rest is what the gated refills brought
  // early, the start of the next batch); one that ended at its expiry starts what is waiting.
  const pulls = new PullTasks(source, settings, loop, wake, (brought) => (source.refills ? startWaiting(!pulls.lastFull) : startPulled(brought)));
  /** Opens the next pull (or window) when the loop can take more; `false`: nothing to open now. */
  const openPull = (): boolean => {
    // Nothing new after a shutdown began, once the loop must stop, or while the sink is down.
    if (signal?.aborted || pulls.stopped !== undefined || refused !== undefined || loop.sinkDown() || !pulls.canOpen) return false;
    if (source.refills) {
      // A subscription refills by itself (within what the loop can start); a window over it
      // sets the batch boundary: it ends when a batch's worth arrived, or at the expiry.
      if (pulls.size > 0 || writing >= settings.concurrency) return false;
      pulls.open(Math.max(1, settings.batchSize - intake.waiting));
      return true;
    }
    const max = pullSize(
      {
        capacity: settings.capacity,
        held: intake.held,
        requested: source.outstanding,
        openPulls: pulls.size,
        batchSize: settings.batchSize,
        writing,
        concurrency: settings.concurrency,
        backlog: pulls.lastFull,
      },
      "batch",
    );
    if (max <= 0) return false;
    pulls.open(max);
    return true;
  };
  const stopWatching = loop.onRecovered(() => {
    source.roomChanged();
    wake.wake();
  });

  try {
    while (!signal?.aborted && pulls.stopped === undefined && refused === undefined) {
      // A subscription's messages come between windows too: a full batch of them starts at once.
      if (source.refills) startWaiting(false);
      if (!openPull()) await wake.wait();
    }
  } finally {
    // No new pull; the open ones (and a pinned subscription's refills) end by themselves, and
    // what they bring is written.
    stopWatching();
    const closing = source.close();
    await pulls.settled();
    await closing;
    // What the open pulls brought has the shutdown bound from here.
    bound.start();
    startWaiting(true);
    // Every write ends before the loop does: settled, or abandoned at its bound.
    while (inFlight.size > 0) await Promise.all(inFlight);
    intake.dispose();
    bound.dispose();
    batches.dispose();
    wake.dispose();
    await loop.flush();
  }
  if (refused !== undefined) throw refused.err;
  if (pulls.stopped !== undefined) throw pulls.stopped;
}

/**
 * The pulls a loop has open, each ending by itself: their errors are counted, reported with
 * the pause before the next attempt, and stop the loop only when retrying cannot help (the
 * client refused the options, the connection is closed for good or draining).
 */
export class PullTasks {
  readonly #source: PullSource;
  readonly #settings: LoopSettings;
  readonly #loop: LoopBase;
  readonly #wake: Waker;
  readonly #ended: (brought: number) => void;
  readonly #open = new Set<Promise<void>>();
  #failures = 0;
  /** The last pull came back full: there is a backlog, so pulls may overlap. */
  lastFull = false;
  /** Why the loop must stop (set once). */
  stopped: unknown;

  /** `ended` is told of each pull once it is over, with the messages it brought (0 for a failed one). */
  constructor(source: PullSource, settings: LoopSettings, loop: LoopBase, wake: Waker, ended: (brought: number) => void) {
    this.#source = source;
    this.#settings = settings;
    this.#loop = loop;
    this.#wake = wake;
    this.#ended = ended;
  }

  get size(): number {
    return this.#open.size;
  }

  /** Whether another pull may go out now: after a failure only one at a time, so its pause spaces the attempts. */
  get canOpen(): boolean {
    return this.#failures === 0 || this.#open.size === 0;
  }

  /** Opens a pull for `max` messages. */
  open(max: number): void {
    const pulledAt = performance.now();
    const signal = this.#settings.signal;
    let over = false;
    let brought = 0;
    // The pull is over when it brought all it asked for (at once: a turn later, the next pull
    // could not leave with the batch's ACKs), or when it settled (a failed one after its pause).
    const end = (): void => {
      if (over) return;
      over = true;
      this.#open.delete(p);
      this.#ended(brought);
      this.#wake.wake();
    };
    const p: Promise<void> = this.#source
      .pull(max, () => {
        this.#failures = 0;
        this.lastFull = true;
        brought = max;
        end();
      })
      .then(
        async (got) => {
          brought = got;
          this.#failures = 0;
          this.lastFull = got >= max;
          if (got > 0) return;
          this.#loop.onIdle();
          // An empty pull that ended at once (not by its expiry) must not become a hot loop.
          if (performance.now() - pulledAt < EMPTY_PULL_FLOOR_MS) await pause(EMPTY_PULL_PAUSE_MS, signal);
        },
        async (err: unknown) => {
          this.lastFull = false;
          if (isRefusedByClient(err)) {
            this.stopped ??= refusedPull(err);
            return;
          }
          this.#failures += 1;
          this.#loop.metrics.count(MetricNames.FETCH_FAILURES_TOTAL);
          // A closed connection, or a draining one (it only ends in a close), takes no pull again:
          // the loop ends (no retry to announce).
          if (closedOrDraining(err, this.#loop.connection)) {
            callGuarded(this.#settings.onError, err, Object.freeze({ during: "fetch" as const, consecutiveFailures: this.#failures }));
            this.stopped ??= err;
            return;
          }
          const retryInMs = retryDelayMs(this.#failures);
          callGuarded(this.#settings.onError, err, Object.freeze({ during: "fetch" as const, consecutiveFailures: this.#failures, retryInMs }));
          await pause(retryInMs, signal);
        },
      )
      .finally(end);
    this.#open.add(p);
  }

  /** Resolves once every open pull ended. */
  async settled(): Promise<void> {
    while (this.#open.size > 0) await Promise.all(this.#open);
  }
}

/**
 * Wakes a loop waiting for room (a write settled, a pull ended), or when its signal aborts. One
 * listener on the signal for the loop's life and one promise per wait, whatever the number of
 * wake-ups.
 */
export class Waker {
  readonly #signal: AbortSignal | undefined;
  readonly #onAbort = (): void => this.wake();
  #pending: Promise<void> | undefined;
  #resolve: (() => void) | undefined;

  constructor(signal: AbortSignal | undefined) {
    this.#signal = signal;
    signal?.addEventListener("abort", this.#onAbort, { once: true });
  }

  /** Resolves at the next `wake()`, or at once when the signal aborted. */
  wait(): Promise<void> {
    if (this.#signal?.aborted) return Promise.resolve();
    return (this.#pending ??= new Promise<void>((resolve) => (this.#resolve = resolve)));
  }

  wake(): void {
    const resolve = this.#resolve;
    if (resolve === undefined) return;
    this.#resolve = undefined;
    this.#pending = undefined;
    resolve();
  }

  /** Removes the listener from the signal; a loop still waiting is woken. */
  dispose(): void {
    this.#signal?.removeEventListener("abort", this.#onAbort);
    this.wake();
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

/**
 * Whether a pull failed because the connection is closed for good, or draining: a draining
 * connection refuses every new subscription, so every pull, until it closes.
 */
export function closedOrDraining(err: unknown, connection: Pick<NatsConnection, "isClosed"> | undefined): boolean {
  try {
    if (connection && connection.isClosed()) return true;
  } catch {
    // fall through
  }
  if (!(err instanceof Error)) return false;
  // The 3.x client's errors, this library's, and the nats 2.x client's NatsError by its code.
  const code = (err as { code?: unknown }).code;
  return err.name === "ClosedConnectionError" || err.name === "ConnectionClosedError" || err.name === "DrainingConnectionError" || code === "CONNECTION_CLOSED" || code === "CONNECTION_DRAINING";
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
