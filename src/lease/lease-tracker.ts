/**
 * Deadlines. JetStream counts a message's redelivery deadline from its delivery (or from
 * the last `+WPI` the server received), over its redelivery window. This module keeps that
 * per message.
 */

/**
 * Per-message refresh times and windows on the monotonic clock; the batch lease is the
 * earliest deadline. A batch whose messages share one window and one delivery time is kept as
 * two numbers (constant work per beat, whatever the batch size) until a message is refreshed
 * on its own; then it becomes per-message arrays.
 */
export class LeaseTracker {
  readonly #size: number;
  #windows: Float64Array | undefined;
  #refreshed: Float64Array | undefined;
  /** The shared window and refresh time, while there are no arrays. */
  #window = 0;
  #refreshedAll = 0;
  #deadline = Number.POSITIVE_INFINITY;

  /**
   * @param windows - each message's window in ms.
   * @param deliveredAt - each message's delivery time (monotonic ms).
   */
  constructor(windows: Float64Array, deliveredAt: Float64Array);
  /**
   * @param window - the window in ms every message shares.
   * @param deliveredAt - the delivery time (monotonic ms) every message shares.
   * @param size - the number of messages.
   */
  constructor(window: number, deliveredAt: number, size: number);
  constructor(windows: Float64Array | number, deliveredAt: Float64Array | number, size?: number) {
    if (typeof windows === "number") {
      this.#size = size ?? 0;
      this.#window = windows;
      this.#refreshedAll = deliveredAt as number;
    } else {
      this.#size = windows.length;
      this.#windows = windows;
      this.#refreshed = deliveredAt as Float64Array;
    }
    this.#recompute();
  }

  get size(): number {
    return this.#size;
  }

  /** The earliest deadline of the batch (monotonic ms). */
  get deadline(): number {
    return this.#deadline;
  }

  /** The earliest refresh time (monotonic ms): the message that has waited longest. */
  oldestRefresh(): number {
    const refreshed = this.#refreshed;
    if (refreshed === undefined) return this.#size > 0 ? this.#refreshedAll : Number.POSITIVE_INFINITY;
    let oldest = Number.POSITIVE_INFINITY;
    for (const t of refreshed) if (t < oldest) oldest = t;
    return oldest;
  }

  /** Marks message `i` refreshed at `at` (a heartbeat it received was accepted). */
  refresh(i: number, at: number): void {
    const refreshed = this.#perMessage();
    if (at > (refreshed[i] ?? Number.POSITIVE_INFINITY)) refreshed[i] = at;
  }

  /** Message `i` was settled by the work: it has no deadline any more. */
  release(i: number): void {
    this.#perMessage();
    this.#windows![i] = Number.POSITIVE_INFINITY;
  }

  /** Marks every message refreshed at `at`. */
  refreshAll(at: number): void {
    const refreshed = this.#refreshed;
    if (refreshed === undefined) {
      this.#refreshedAll = at;
      this.#deadline = this.#size > 0 ? at + this.#window : Number.POSITIVE_INFINITY;
      return;
    }
    refreshed.fill(at);
    let smallest = Number.POSITIVE_INFINITY;
    for (const w of this.#windows!) if (w < smallest) smallest = w;
    this.#deadline = at + smallest;
  }

  /** Recomputes the batch deadline after individual refreshes. */
  settle(): void {
    this.#recompute();
  }

  /** The per-message refresh times, made from the shared ones on first use. */
  #perMessage(): Float64Array {
    if (this.#refreshed === undefined) {
      this.#windows = new Float64Array(this.#size).fill(this.#window);
      this.#refreshed = new Float64Array(this.#size).fill(this.#refreshedAll);
    }
    return this.#refreshed;
  }

  #recompute(): void {
    const refreshed = this.#refreshed;
    const windows = this.#windows;
    if (refreshed === undefined || windows === undefined) {
      this.#deadline = this.#size > 0 ? this.#refreshedAll + this.#window : Number.POSITIVE_INFINITY;
      return;
    }
    let d = Number.POSITIVE_INFINITY;
    for (let i = 0; i < windows.length; i++) {
      const t = (refreshed[i] ?? 0) + (windows[i] ?? 0);
      if (t < d) d = t;
    }
    this.#deadline = d;
  }
}
