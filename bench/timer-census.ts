/**
 * Counting timers. `process.getActiveResourcesInfo()` lists only the timers that keep the
 * event loop alive, and the library's one timer is unref'd on purpose, so it never shows
 * there. While a census is open, the global timer functions are wrapped to count every live
 * timer, ref'd or not: a timeout until it fires or is cleared, an interval until it is cleared.
 * Open it only around a measurement: the wrapping costs a little per timer, and recording where
 * each timer was created (`stacks`) costs capturing a stack per timer (formatted only when
 * `liveFrom` reads it).
 */

export interface TimerCount {
  /** Live timers of any kind (the census). */
  readonly live: number;
  /** `Timeout` entries of `process.getActiveResourcesInfo()`: the ref'd ones only. */
  readonly reffed: number;
}

export class TimerCensus {
  readonly #live = new Set<unknown>();
  /**
   * Where each live timer was created (with `stacks`): the `Error` itself, formatted only when
   * `liveFrom` reads it. Formatting a stack maps every frame through the source maps (tens to
   * hundreds of microseconds under `tsx`), which would be charged to the arm that made the timer.
   */
  readonly #origin = new Map<unknown, Error>();
  readonly #restore: () => void;
  /** Timers created while the census was open (live or not). */
  created = 0;

  constructor(options: { readonly stacks?: boolean } = {}) {
    const origin = this.#origin;
    const stacks = options.stacks === true;
    const note = (handle: unknown): void => {
      this.created += 1;
      if (stacks) origin.set(handle, new Error());
    };
    const g = globalThis as unknown as Record<"setTimeout" | "setInterval" | "clearTimeout" | "clearInterval", (...args: unknown[]) => unknown>;
    const original = { setTimeout: g.setTimeout, setInterval: g.setInterval, clearTimeout: g.clearTimeout, clearInterval: g.clearInterval };
    const live = this.#live;
    g.setTimeout = (fn: unknown, ...rest: unknown[]) => {
      let handle: unknown;
      const wrapped = (...args: unknown[]): unknown => {
        live.delete(handle);
        origin.delete(handle);
        return (fn as (...a: unknown[]) => unknown)(...args);
      };
      handle = original.setTimeout(wrapped, ...rest);
      live.add(handle);
      note(handle);
      return handle;
    };
    g.setInterval = (...args: unknown[]) => {
      const handle = original.setInterval(...args);
      live.add(handle);
      note(handle);
      return handle;
    };
    g.clearTimeout = (handle: unknown) => {
      live.delete(handle);
      origin.delete(handle);
      return original.clearTimeout(handle);
    };
    g.clearInterval = (handle: unknown) => {
      live.delete(handle);
      origin.delete(handle);
      return original.clearInterval(handle);
    };
    this.#restore = () => Object.assign(g, original);
  }

  count(): TimerCount {
    let reffed = 0;
    for (const r of process.getActiveResourcesInfo()) if (r === "Timeout") reffed += 1;
    return { live: this.#live.size, reffed };
  }

  /** Live timers whose creation stack passes `test` (needs `stacks`). */
  liveFrom(test: (stack: string) => boolean): number {
    let n = 0;
    for (const h of this.#live) if (test(this.#origin.get(h)?.stack ?? "")) n += 1;
    return n;
  }

  /** Puts the original timer functions back. */
  close(): void {
    this.#restore();
  }
}
