/**
 * The abort state of one supervised call, and the context its work receives.
 */
import type { Lease, WorkContext } from "./work-context.js";

/** What a call needs of its heartbeat supervision (implemented by `Supervision`). */
export interface SupervisionHandle {
  /** Heartbeat rounds sent so far, read now. */
  readonly heartbeatsNow: number;
  /** The batch lease. */
  readonly lease: Lease;
  /** No more beats; the lease is still watched. */
  stopBeating(): void;
  /** The work reported progress. */
  progress(): void;
}

/**
 * The abort state of one call. `ctx.signal` costs microseconds to create in Node.js, so its
 * controller exists only once the work reads the signal or the call is aborted; until then
 * nothing can tell the difference.
 */
export class WorkRun {
  supervision: SupervisionHandle | undefined;
  readonly #shutdownTimeoutMs: number;
  #controller: AbortController | undefined;
  #aborted = false;
  #shutdownTimer: ReturnType<typeof setTimeout> | undefined;
  /**
   * The race's state, kept in fields rather than in a closure: a closure over the race's
   * promise, stored on this object, kept every message of the loop's recent batches alive
   * through the young-generation collections in V8 (Node.js 20), which then moved them all to
   * the old generation (measured: 127 MB promoted per 200,000 messages of `run`, against 9.5 MB).
   */
  #running: Promise<unknown> | undefined;
  #reject: ((reason: unknown) => void) | undefined;
  #onAbandon: ((late: Promise<unknown>) => void) | undefined;
  #raceSettled = false;

  constructor(shutdownTimeoutMs: number) {
    this.#shutdownTimeoutMs = shutdownTimeoutMs;
  }

  get signal(): AbortSignal {
    this.#controller ??= new AbortController();
    return this.#controller.signal;
  }

  /** The abort reason, or `undefined` while not aborted (without creating the signal). */
  get reason(): unknown {
    return this.#aborted ? this.signal.reason : undefined;
  }

  /**
   * Aborts `ctx.signal` once (the signal's own listeners run after the library's). `bounded`:
   * the host's shutdown or `onLimit: "abort"` — the work then has `shutdownTimeoutMs` to finish
   * before the call rejects with `reason`; a shutdown keeps the lease meanwhile (beats go on, a
   * draining write is not handed to another worker). A lost lease aborts unbounded: the call
   * still waits for the work. A bounded abort after an unbounded one still starts the bound.
   */
  abort(reason: unknown, bounded: boolean): void {
    if (bounded && this.#shutdownTimer === undefined) {
      // Not unref'd: the caller is awaiting this call, and the wait is bounded.
      this.#shutdownTimer = setTimeout(() => this.#abandon(reason), this.#shutdownTimeoutMs);
    }
    if (this.#aborted) return;
    this.#aborted = true;
    const controller = (this.#controller ??= new AbortController());
    controller.abort(reason);
  }

  /**
   * Runs the work; settles with its outcome, or with the abort reason once the shutdown bound
   * passed. Then the work is abandoned: `onAbandon` receives its promise, whose outcome is
   * still unknown.
   */
  race<T>(work: (ctx: WorkContext) => Promise<T> | T, ctx: WorkContext, onAbandon?: (late: Promise<T>) => void): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let result: Promise<T> | T;
      try {
        result = work(ctx);
      } catch (err) {
        reject(err);
        return;
      }
      const running = Promise.resolve(result);
      this.#running = running;
      this.#reject = reject;
      this.#onAbandon = onAbandon as ((late: Promise<unknown>) => void) | undefined;
      // Once abandoned, the work's late outcome lands on a settled promise: never unhandled.
      running.then(
        (v) => {
          this.#raceSettled = true;
          resolve(v);
        },
        (err: unknown) => {
          this.#raceSettled = true;
          reject(err);
        },
      );
    });
  }

  /** The shutdown bound passed: the race rejects with `reason`, and the work is handed to `onAbandon`. */
  #abandon(reason: unknown): void {
    const running = this.#running;
    if (this.#raceSettled || running === undefined) return;
    this.#raceSettled = true;
    this.#onAbandon?.(running);
    this.#reject!(reason);
  }

  close(): void {
    if (this.#shutdownTimer !== undefined) clearTimeout(this.#shutdownTimer);
  }
}

const noProgress = (): void => undefined;

/** The {@link WorkContext} a call hands to its work. */
export class SupervisedContext implements WorkContext {
  readonly #run: WorkRun;
  readonly #supervision: SupervisionHandle | undefined;
  #progress: (() => void) | undefined;

  constructor(run: WorkRun, supervision: SupervisionHandle | undefined) {
    this.#run = run;
    this.#supervision = supervision;
  }

  /** A function of its own, made on first use, so `const { progress } = ctx` keeps working. */
  get progress(): () => void {
    const supervision = this.#supervision;
    if (supervision === undefined) return noProgress;
    return (this.#progress ??= () => supervision.progress());
  }

  get signal(): AbortSignal {
    return this.#run.signal;
  }

  get heartbeats(): number {
    return this.#supervision?.heartbeatsNow ?? 0;
  }

  get lease(): Lease | undefined {
    return this.#supervision?.lease;
  }

  static abortReason(ctx: WorkContext): unknown {
    return #run in ctx ? ctx.#run.reason : ctx.signal.reason;
  }
}

/**
 * The abort reason of `ctx.signal` (`undefined` when not aborted), read without creating the
 * signal of a context made by {@link withInProgress}.
 *
 * @internal
 */
export function abortReasonOf(ctx: WorkContext): unknown {
  return SupervisedContext.abortReason(ctx);
}

