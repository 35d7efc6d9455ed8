/**
 * The bound of a loop's shutdown. Writes started after the loop's signal aborted (messages that
 * arrived in an open pull, leftovers, messages still waiting for a handler) are written rather
 * than handed back. Their signal aborts `ms` after the open pulls ended, not after the first of
 * them started: a message the server delivers late into a pull that is still open gets its
 * write like the others, instead of a signal that aborted before it began (which spent its
 * delivery unwritten). One timer for all of them, cleared when the loop ends, so it never keeps
 * the process alive after the loop has returned.
 */
import { SignalFanout, type ChildSignal } from "./signal-fanout.js";

/** A shutdown bound shared by every write a loop starts during its shutdown. */
export class ShutdownBound {
  readonly #ms: number;
  readonly #bound = new AbortController();
  #fanout: SignalFanout | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(ms: number) {
    this.#ms = ms;
  }

  /** A signal that aborts once the bound has passed; `release()` when the write is done. */
  child(): ChildSignal {
    this.#fanout ??= new SignalFanout(this.#bound.signal);
    return this.#fanout.child();
  }

  /** The open pulls have ended: the bound runs from now (once). */
  start(): void {
    if (this.#timer !== undefined || this.#bound.signal.aborted) return;
    // Not unref'd: the loop is awaiting the writes it bounds; dispose() clears it.
    this.#timer = setTimeout(() => this.#bound.abort(new Error("shutdown bound reached")), this.#ms);
  }

  /** Clears the timer (the loop is over). */
  dispose(): void {
    clearTimeout(this.#timer);
    this.#fanout?.dispose();
  }
}
