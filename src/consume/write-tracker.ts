/**
 * The host writes a loop started, so the loop ends only once none of them is still running:
 * a write that outlives its shutdown bound is abandoned by `withInProgress`, but the loop
 * still waits for it.
 */

/** Tracks the promises of the host's writes. */
export class WriteTracker {
  readonly #running = new Set<Promise<unknown>>();

  /** Wraps a write so each call is tracked until it settles. */
  wrap<A extends unknown[]>(write: (...args: A) => unknown): (...args: A) => Promise<unknown> {
    return (...args: A) => {
      const p = Promise.resolve().then(() => write(...args));
      this.#running.add(p);
      const forget = (): void => void this.#running.delete(p);
      p.then(forget, forget);
      return p;
    };
  }

  /** Resolves once no tracked write is running. */
  async idle(): Promise<void> {
    while (this.#running.size > 0) await Promise.allSettled([...this.#running]);
  }
}
