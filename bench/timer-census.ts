/**
 * Counting timers. `process.getActiveResourcesInfo()` lists only the timers that keep the
 * event loop alive, and the library's one timer is unref'd on purpose, so it never shows
 * there. While a census is open, the global timer functions are wrapped to count every live
 * timer, ref'd or not: a timeout until it fires or is cleared, an interval until it is cleared.
 * Open it only around a measurement: the wrapping costs a little per timer.
 */

export interface TimerCount {
  /** Live timers of any kind (the census). */
  readonly live: number;
  /** `Timeout` entries of `process.getActiveResourcesInfo()`: the ref'd ones only. */
  readonly reffed: number;
}

export class TimerCensus {
  readonly #live = new Set<unknown>();
  readonly #restore: () => void;

  constructor() {
    const g = globalThis as unknown as Record<"setTimeout" | "setInterval" | "clearTimeout" | "clearInterval", (...args: unknown[]) => unknown>;
    const original = { setTimeout: g.setTimeout, setInterval: g.setInterval, clearTimeout: g.clearTimeout, clearInterval: g.clearInterval };
    const live = this.#live;
    g.setTimeout = (fn: unknown, ...rest: unknown[]) => {
      let handle: unknown;
      const wrapped = (...args: unknown[]): unknown => {
        live.delete(handle);
        return (fn as (...a: unknown[]) => unknown)(...args);
      };
      handle = original.setTimeout(wrapped, ...rest);
      live.add(handle);
      return handle;
    };
    g.setInterval = (...args: unknown[]) => {
      const handle = original.setInterval(...args);
      live.add(handle);
      return handle;
    };
    g.clearTimeout = (handle: unknown) => {
      live.delete(handle);
      return original.clearTimeout(handle);
    };
    g.clearInterval = (handle: unknown) => {
      live.delete(handle);
      return original.clearInterval(handle);
    };
    this.#restore = () => Object.assign(g, original);
  }

  count(): TimerCount {
    let reffed = 0;
    for (const r of process.getActiveResourcesInfo()) if (r === "Timeout") reffed += 1;
    return { live: this.#live.size, reffed };
  }

  /** Puts the original timer functions back. */
  close(): void {
    this.#restore();
  }
}
