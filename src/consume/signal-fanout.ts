/**
 * One listener on a shared signal, however many calls derive from it. Every call of an
 * instance (and every batch of a loop) listens on a child signal of its own, so a busy host does
 * not pile listeners on its shutdown signal (Node warns past ten).
 */

/** A derived signal and the way to drop it once the call is done. */
export interface ChildSignal {
  readonly signal: AbortSignal | undefined;
  release(): void;
}

const NO_SIGNAL: ChildSignal = Object.freeze({ signal: undefined, release: () => undefined });

/** Hands out child signals that abort with `source`, through one listener on it. */
export class SignalFanout {
  readonly #source: AbortSignal | undefined;
  readonly #children = new Set<AbortController>();
  readonly #onAbort = (): void => {
    for (const c of this.#children) c.abort(this.#source!.reason);
  };

  constructor(source: AbortSignal | undefined) {
    this.#source = source;
    source?.addEventListener("abort", this.#onAbort, { once: true });
  }

  /** A signal that aborts when the source does; `release()` when the call is done. */
  child(): ChildSignal {
    const source = this.#source;
    if (source === undefined) return NO_SIGNAL;
    // Already aborted: nothing left to listen for.
    if (source.aborted) return { signal: source, release: NO_SIGNAL.release };
    const controller = new AbortController();
    this.#children.add(controller);
    return { signal: controller.signal, release: () => void this.#children.delete(controller) };
  }

  /** Drops every child and the listener on the source (the loop is over). */
  dispose(): void {
    this.#children.clear();
    this.#source?.removeEventListener("abort", this.#onAbort);
  }
}
