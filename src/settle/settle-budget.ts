/**
 * The time settling may still take. Unbounded while the host runs; once its signal aborts,
 * settling has `shutdownTimeoutMs` more, so a confirmed ACK or a dead-letter publish can never
 * hold a shutdown for minutes. A plain frame is always sent; only waiting is cut short.
 */

/** How long settling may still wait, in milliseconds. */
export interface SettleBudget {
  /** Milliseconds left; `Infinity` while no shutdown is under way. */
  remainingMs(): number;
}

/** A budget that never runs out. */
export const UNBOUNDED: SettleBudget = Object.freeze({ remainingMs: () => Number.POSITIVE_INFINITY });

/**
 * A budget that starts counting `boundMs` when `signal` aborts (at once when it already has).
 * Call `dispose()` when settling is done, to remove the listener.
 */
export class ShutdownBudget implements SettleBudget {
  readonly #signal: AbortSignal | undefined;
  readonly #boundMs: number;
  #deadline = Number.POSITIVE_INFINITY;
  readonly #onAbort = (): void => {
    this.#deadline = Math.min(this.#deadline, performance.now() + this.#boundMs);
  };

  constructor(signal: AbortSignal | undefined, boundMs: number) {
    this.#signal = signal;
    this.#boundMs = boundMs;
    if (signal?.aborted) this.#onAbort();
    else signal?.addEventListener("abort", this.#onAbort, { once: true });
  }

  remainingMs(): number {
    return this.#deadline === Number.POSITIVE_INFINITY ? this.#deadline : Math.max(0, this.#deadline - performance.now());
  }

  dispose(): void {
    this.#signal?.removeEventListener("abort", this.#onAbort);
  }
}
