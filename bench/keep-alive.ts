/**
 * Three ways to keep fetched messages from being redelivered while they are held: the library
 * (`withInProgress` per batch), raw `+WPI` publishes on one interval per batch (the least a
 * process can send), and the naive interval per message (bench/naive.ts). Each counts the
 * `+WPI` frames it sent, so CPU can be compared per frame.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { withInProgress, type VerifiedInProgressPolicy, type WorkContext } from "../src/index.js";
import { replySubject } from "../src/nats/message-access.js";

export interface KeepAlive {
  /**
   * Starts keeping `batch` alive. `deliveredAt` (epoch ms) is when it arrived; `"now"` means
   * the messages may be an interval old already (a hand-over), so the first round goes out now.
   */
  add(batch: readonly JsMsg[], deliveredAt: number | "now"): void;
  /** `+WPI` frames sent so far. */
  readonly frames: number;
  /** Stops every beat. */
  stop(): Promise<void>;
}

/** The library: each batch is a `withInProgress` whose work is held open until `stop`. */
export class LibraryKeepAlive implements KeepAlive {
  readonly #policy: VerifiedInProgressPolicy;
  #releases: Array<() => void> = [];
  #runs: Array<Promise<void>> = [];
  #contexts: Array<{ ctx: WorkContext; size: number }> = [];

  constructor(policy: VerifiedInProgressPolicy) {
    this.#policy = policy;
  }

  add(batch: readonly JsMsg[], deliveredAt: number | "now"): void {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const receivedAt = deliveredAt === "now" ? Date.now() - this.#policy.intervalMs : deliveredAt;
    const run = withInProgress(
      batch,
      (ctx) => {
        this.#contexts.push({ ctx, size: batch.length });
        return held;
      },
      this.#policy,
      { receivedAt },
    );
    this.#releases.push(release);
    this.#runs.push(
      run.catch((err: unknown) => {
        this.lostMessages += batch.length;
        this.firstFailure ??= err;
      }),
    );
  }

  get frames(): number {
    let n = 0;
    for (const { ctx, size } of this.#contexts) n += ctx.heartbeats * size;
    return n;
  }

  /** Messages of batches whose `withInProgress` rejected (a lease lost to a stalled loop), so far. */
  lostMessages = 0;
  /** The first such rejection, for the report. */
  firstFailure: unknown;

  async stop(): Promise<void> {
    for (const release of this.#releases) release();
    await Promise.all(this.#runs);
    this.#releases = [];
    this.#runs = [];
    this.#contexts = [];
  }
}

/** Raw publishes: one interval per batch publishing `+WPI` to every reply subject of the batch. */
export class RawKeepAlive implements KeepAlive {
  readonly #nc: NatsConnection;
  readonly #intervalMs: number;
  readonly #replies = new WeakMap<readonly JsMsg[], string[]>();
  #timers: Array<ReturnType<typeof setInterval>> = [];
  frames = 0;

  constructor(nc: NatsConnection, intervalMs: number) {
    this.#nc = nc;
    this.#intervalMs = intervalMs;
  }

  /** Reads the reply subjects ahead, so a measured window holds only the publishes. */
  prepare(batches: ReadonlyArray<readonly JsMsg[]>): void {
    for (const b of batches) this.#replies.set(b, b.map((m) => replySubject(m) ?? ""));
  }

  add(batch: readonly JsMsg[], deliveredAt: number | "now"): void {
    let replies = this.#replies.get(batch);
    if (!replies) {
      replies = batch.map((m) => replySubject(m) ?? "");
      this.#replies.set(batch, replies);
    }
    const list = replies;
    const round = (): void => {
      for (const r of list) this.#nc.publish(r, "+WPI");
      this.frames += list.length;
    };
    if (deliveredAt === "now") round();
    this.#timers.push(setInterval(round, this.#intervalMs));
  }

  async stop(): Promise<void> {
    for (const t of this.#timers) clearInterval(t);
    this.#timers = [];
  }
}
