/**
 * The bound of a loop's shutdown. Writes started after the loop's signal aborted (messages that
 * arrived in an open pull, leftovers, messages still waiting for a handler) are written rather
 * than handed back, but only until this bound: one timer for all of them, counted from the
 * first, and cleared when the loop ends, so it never keeps the process alive after the loop
 * has returned.
 */
import { SignalFanout, type ChildSignal } from "./signal-fanout.js";

/** A lazily started shutdown bound shared by every write a loop starts during its shutdown. */
export class ShutdownBound {
  readonly #ms: number;
  #fanout: SignalFanout | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(ms: number) {
    this.#ms = ms;
  }

  /** A signal that aborts once the bound has passed (the bound starts at the first call); `release()` when the write is done. */
  child(): ChildSignal {
    if (this.#fanout === undefined) {
      const bound = new AbortController();
      // Not unref'd: the loop is awaiting the writes it bounds; dispose() clears it.
      this.#timer = setTimeout(() => bound.abort(new Error("shutdown bound reached")), this.#ms);
      this.#fanout = new SignalFanout(bound.signal);
    }
    return this.#fanout.child();
  }

  /** Clears the timer (the loop is over). */
  dispose(): void {
    clearTimeout(this.#timer);
    this.#fanout?.dispose();
  }
}
