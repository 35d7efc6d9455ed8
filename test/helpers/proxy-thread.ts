/**
 * A loopback TCP proxy on a worker thread of its own, in front of a nats-server: `cutFor(ms)`
 * drops every connection through it and lets them back `ms` later on the proxy's own timers,
 * so a client's link goes down and comes back while the test's main thread is blocked (an
 * in-process proxy could do neither until the block ended). Times are epoch ms (`Date.now()`),
 * comparable across threads.
 */
import { join } from "node:path";
import type { Worker } from "node:worker_threads";
import { tsWorker } from "./ts-worker.js";

type Report = { type: "ready"; port: number } | { type: "restored"; at: number } | { type: "closed" };

export class ProxyThread implements AsyncDisposable {
  readonly #worker: Worker;
  readonly #restores: Int32Array;
  readonly port: number;
  /** When the proxy took connections again after the last cut. */
  restoredAt: number | undefined;

  private constructor(worker: Worker, restores: Int32Array, port: number) {
    this.#worker = worker;
    this.#restores = restores;
    this.port = port;
    worker.on("message", (m: Report) => {
      if (m.type === "restored") this.restoredAt = m.at;
    });
  }

  /** Starts the proxy, forwarding to `127.0.0.1:targetPort`. */
  static async start(targetPort: number): Promise<ProxyThread> {
    const restores = new SharedArrayBuffer(4);
    const worker = tsWorker(join(import.meta.dirname, "proxy-thread-entry.ts"), { targetPort, restores });
    worker.unref();
    const ready = new Promise<number>((resolve, reject) => {
      worker.on("message", (m: Report) => m.type === "ready" && resolve(m.port));
      worker.once("error", reject);
      worker.once("exit", (code) => reject(new Error(`the proxy thread exited (${code}) before it listened`)));
    });
    return new ProxyThread(worker, new Int32Array(restores), await ready);
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  /** Restores so far, read from shared memory: current while this thread is blocked. */
  get restores(): number {
    return Atomics.load(this.#restores, 0);
  }

  /** Cuts every connection as soon as the worker reads this, and takes new ones `downMs` later. */
  cutFor(downMs: number): void {
    this.#worker.postMessage({ type: "cut", downMs });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    const closed = new Promise<void>((resolve) => {
      this.#worker.on("message", (m: Report) => m.type === "closed" && resolve());
      setTimeout(resolve, 2000).unref();
    });
    this.#worker.postMessage({ type: "close" });
    await closed;
    await this.#worker.terminate();
  }
}
