/**
 * The black-box oracle: a second connection subscribed to `$JS.ACK.<stream>.>` sees every
 * ack frame a worker sends (`+WPI`, `+ACK`, `-NAK`, `+TERM`), with the time it arrived.
 */
import type { NatsConnection, Subscription } from "@nats-io/transport-node";

export type AckKind = "+WPI" | "+ACK" | "-NAK" | "+TERM" | "+NXT" | "other";

export interface AckFrame {
  readonly kind: AckKind;
  /** The full payload as text (`-NAK {"delay":…}`, `+TERM reason`). */
  readonly payload: string;
  readonly stream: string;
  readonly consumer: string;
  readonly deliveryCount: number;
  readonly streamSequence: number;
  /** Whether the frame carried a reply subject (a confirmed ack or heartbeat). */
  readonly withReply: boolean;
  /** `performance.now()` when the spy received it. */
  readonly at: number;
}

export class AckSpy implements AsyncDisposable {
  readonly frames: AckFrame[] = [];
  readonly #sub: Subscription;
  readonly #waiters = new Set<() => void>();

  private constructor(sub: Subscription) {
    this.#sub = sub;
  }

  /** Subscribes to every ack frame of `stream` and flushes, so nothing sent afterwards is missed. */
  static async start(nc: NatsConnection, stream: string): Promise<AckSpy> {
    let spy: AckSpy | undefined;
    const sub = nc.subscribe(`$JS.ACK.${stream}.>`, {
      callback: (err, msg) => {
        if (err || !spy) return;
        spy.#record(msg.subject, new TextDecoder().decode(msg.data), Boolean(msg.reply));
      },
    });
    spy = new AckSpy(sub);
    await nc.flush();
    return spy;
  }

  #record(subject: string, payload: string, withReply: boolean): void {
    const t = subject.split(".");
    // $JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<dseq>.<ts>.<pending> (old form, 9 tokens), or the
    // new form with domain and account hash after ACK.
    const base = t.length >= 12 ? 4 : 2;
    const kind: AckKind = payload === "" ? "+ACK"
      : payload.startsWith("+WPI") ? "+WPI"
      : payload.startsWith("+ACK") ? "+ACK"
      : payload.startsWith("-NAK") ? "-NAK"
      : payload.startsWith("+TERM") ? "+TERM"
      : payload.startsWith("+NXT") ? "+NXT"
      : "other";
    this.frames.push({
      kind,
      payload,
      stream: t[base] ?? "",
      consumer: t[base + 1] ?? "",
      deliveryCount: Number(t[base + 2]),
      streamSequence: Number(t[base + 3]),
      withReply,
      at: performance.now(),
    });
    for (const w of this.#waiters) w();
  }

  /** Frames of one kind (optionally for one stream sequence). */
  of(kind: AckKind, streamSequence?: number): AckFrame[] {
    return this.frames.filter((f) => f.kind === kind && (streamSequence === undefined || f.streamSequence === streamSequence));
  }

  /** Frames for one stream sequence, in arrival order. */
  forSequence(streamSequence: number): AckFrame[] {
    return this.frames.filter((f) => f.streamSequence === streamSequence);
  }

  /** Resolves when `predicate` holds over the frames seen so far; rejects after `timeoutMs`. */
  async waitFor(predicate: (frames: readonly AckFrame[]) => boolean, timeoutMs = 15_000, what = "ack frames"): Promise<void> {
    if (predicate(this.frames)) return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; saw ${this.summary()}`));
      }, timeoutMs);
      const check = (): void => {
        if (predicate(this.frames)) {
          clearTimeout(timer);
          this.#waiters.delete(check);
          resolve();
        }
      };
      this.#waiters.add(check);
    });
  }

  /** A compact description of what was seen, for assertion messages. */
  summary(): string {
    return this.frames.map((f) => `${f.streamSequence}:${f.kind}@dc${f.deliveryCount}`).join(" ") || "nothing";
  }

  async dispose(): Promise<void> {
    this.#sub.unsubscribe();
    this.#waiters.clear();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.dispose();
  }
}
