/**
 * The pattern seen in services today, the comparison of item 6: one `setInterval` per message
 * calling `m.working()` while the write runs, cleared when it ends.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { KeepAlive } from "./keep-alive.js";

export class NaiveKeepAlive implements KeepAlive {
  readonly #intervalMs: number;
  #timers: Array<ReturnType<typeof setInterval>> = [];
  frames = 0;

  constructor(intervalMs: number) {
    this.#intervalMs = intervalMs;
  }

  add(batch: readonly JsMsg[], deliveredAt: number | "now"): void {
    for (const m of batch) {
      if (deliveredAt === "now") {
        m.working();
        this.frames += 1;
      }
      this.#timers.push(
        setInterval(() => {
          m.working();
          this.frames += 1;
        }, this.#intervalMs),
      );
    }
  }

  async stop(): Promise<void> {
    for (const t of this.#timers) clearInterval(t);
    this.#timers = [];
  }
}
