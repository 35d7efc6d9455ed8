/**
 * A batch the library keeps in flight for a whole row, beside its arms, as a service with
 * traffic always has one. Why: V8 keeps an object shape only while something uses it. When an
 * arm ends, every object of the library's per-batch classes (the supervision, its lease books,
 * the loop's handler state) dies, and the full collection each window starts with frees their
 * shapes; the optimized code of the beat path was built for those shapes, so V8 discards it
 * ("weak objects" under `--trace-deopt`) and compiles it again inside the next window. A row
 * that alternates arms would then measure the library's first beats after an idle spell each
 * time, not the beats of a running service. One message held by `runEach` on its own
 * connection keeps those shapes alive; it beats once per interval (a handful of frames per
 * window, on a connection no figure counts), and it runs beside every arm, the baselines too.
 */
import type { NatsConnection } from "@nats-io/transport-node";
import { CommitThenAck, type VerifiedInProgressPolicy } from "../src/index.js";
import type { Bench } from "./context.js";
import { addConsumer, createStream, type BenchStream } from "./jetstream.js";
import { untilHeld } from "./rows/in-flight.js";

export class ResidentBatch {
  readonly #nc: NatsConnection;
  readonly #stream: BenchStream;
  readonly #release: () => void;
  readonly #stop: AbortController;
  readonly #run: Promise<void>;

  private constructor(nc: NatsConnection, stream: BenchStream, release: () => void, stop: AbortController, run: Promise<void>) {
    this.#nc = nc;
    this.#stream = stream;
    this.#release = release;
    this.#stop = stop;
    this.#run = run;
  }

  /** Starts it on a consumer with `ackWaitMs` (the policy's) and waits until its message is held; failures of its loop go to `problems`. */
  static async start(bench: Bench, policy: VerifiedInProgressPolicy, ackWaitMs: number, problems: string[]): Promise<ResidentBatch> {
    const nc = await bench.server.connect();
    const stream = await createStream(nc, "RESIDENT", 1);
    const { name, consumer } = await addConsumer(stream, { ackWaitMs, maxAckPending: 1 });
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const stop = new AbortController();
    const ack = new CommitThenAck({ inProgress: policy, connection: nc });
    const run = ack.runEach(consumer, () => held, {
      concurrency: 1,
      expiresMs: 1000,
      signal: stop.signal,
      onError: (err, ctx) => problems.push(`resident batch ${ctx.during}: ${String(err)}`),
    });
    const resident = new ResidentBatch(nc, stream, release, stop, run);
    await untilHeld(stream, name, 1);
    return resident;
  }

  /** The server's id of its connection, to leave its frames out of a count by connection. */
  get clientId(): number | undefined {
    return this.#nc.info?.client_id;
  }

  /** Lets its message go (acknowledged), stops its loop, deletes its stream. */
  async dispose(): Promise<void> {
    this.#release();
    this.#stop.abort();
    await this.#run;
    await this.#stream.jsm.streams.delete(this.#stream.stream);
    await this.#nc.close();
  }
}
