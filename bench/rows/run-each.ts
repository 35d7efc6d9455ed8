/**
 * Item 8 — the per-message loop on a real nats-server. Shape: a handler that takes 10 ms
 * (`await sleep(10)`: a slow call, not CPU), 32 at once, fetch expiry 1,000 ms.
 * `CommitThenAck.runEach` with `concurrency: 32` (its default pull size, 32, so it holds at
 * most 64 messages), heartbeats off (the default) and on (interval 10 s, AckWait 30 s, so no
 * beat falls due), against the loop a service writes by hand: `for await` over
 * `consumer.consume()` (buffering the same 64 messages, same expiry), a counter of running
 * handlers that awaits a free slot when 32 are running, and `m.ack()` when a handler resolves.
 * Every arm of every round reads a stream of exactly N messages through a fresh durable
 * consumer and is checked with consumer info (all acknowledged, nothing redelivered).
 */
import type { Consumer, JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { CommitThenAck, verifyInProgressPolicy, type VerifiedInProgressPolicy } from "../../src/index.js";
import type { Bench } from "../context.js";
import { figure, goals, withProblems, type Figure } from "../figure.js";
import { armOnFreshConsumer, createStream, type BenchStream } from "../jetstream.js";
import { interleave, median, medians, nowNs, sleep, untilAcked } from "../measure.js";
import { countSocketWrites } from "../socket-writes.js";

const ACK_WAIT_MS = 30_000;

interface Shape {
  readonly n: number;
  readonly handlerMs: number;
  readonly concurrency: number;
  readonly expiresMs: number;
}

/**
 * The library's per-message loop, timed until the last ACK was flushed (as the hand loop);
 * stopped after that, untimed (its open pulls end by themselves).
 */
async function library(consumer: Consumer, nc: NatsConnection, shape: Shape, policy: VerifiedInProgressPolicy | undefined): Promise<number> {
  const ack = new CommitThenAck(policy ? { inProgress: policy } : {});
  const stop = new AbortController();
  const handle = async (_m: JsMsg): Promise<void> => {
    await sleep(shape.handlerMs);
  };
  const t0 = nowNs();
  const done = untilAcked(shape.n);
  const running = ack.runEach(consumer, handle, { concurrency: shape.concurrency, expiresMs: shape.expiresMs, signal: stop.signal, onResult: done.onResult });
  await done.all;
  await nc.flush();
  const rate = shape.n / ((nowNs() - t0) / 1e9);
  stop.abort();
  await running;
  return rate;
}

/** `consume()` with a counter: at most `concurrency` handlers at once, each message acked when its handler resolves. */
async function handWritten(consumer: Consumer, nc: NatsConnection, shape: Shape): Promise<number> {
  const handle = async (_m: JsMsg): Promise<void> => {
    await sleep(shape.handlerMs);
  };
  let running = 0;
  let done = 0;
  let slot: (() => void) | undefined;
  let finished!: () => void;
  const allDone = new Promise<void>((resolve) => (finished = resolve));
  const t0 = nowNs();
  const messages = await consumer.consume({ max_messages: shape.concurrency * 2, expires: shape.expiresMs });
  for await (const m of messages) {
    if (running >= shape.concurrency) await new Promise<void>((resolve) => (slot = resolve));
    running += 1;
    void handle(m).then(() => {
      m.ack();
      running -= 1;
      done += 1;
      const s = slot;
      slot = undefined;
      s?.();
      if (done >= shape.n) finished();
    });
    if (done + running >= shape.n) {
      await allDone;
      break;
    }
  }
  await messages.close();
  await nc.flush();
  return shape.n / ((nowNs() - t0) / 1e9);
}

/** One arm on a fresh consumer, every message checked acknowledged once. */
function arm(s: BenchStream, n: number, problems: string[], body: (consumer: Consumer) => Promise<number>): Promise<number> {
  return armOnFreshConsumer(s, n, ACK_WAIT_MS, problems, body);
}

export async function runEachLoop(bench: Bench): Promise<Figure[]> {
  const c = bench.config.runEach;
  const shape: Shape = { n: c.messages, handlerMs: c.handlerMs, concurrency: c.concurrency, expiresMs: c.expiresMs };
  const enabled = verifyInProgressPolicy({ enabled: true, intervalMs: 10_000 }, { ackWaitMs: ACK_WAIT_MS, source: "configured" });
  const nc = await bench.server.connect();
  const problems: string[] = [];
  try {
    // The client's socket writes per message of each arm (a diagnosis: frames published in one
    // tick share a write), kept beside the rates.
    const writes: Record<"hand" | "disabled" | "enabled", number[]> = { hand: [], disabled: [], enabled: [] };
    const counted =
      (k: keyof typeof writes, n: number, body: (consumer: Consumer) => Promise<number>) =>
      async (consumer: Consumer): Promise<number> => {
        const counter = countSocketWrites(nc);
        try {
          const rate = await body(consumer);
          writes[k].push(counter.writes / n);
          return rate;
        } finally {
          counter.restore();
        }
      };
    const arms = (s: BenchStream, shape: Shape) => ({
      hand: () => arm(s, shape.n, problems, counted("hand", shape.n, (consumer) => handWritten(consumer, nc, shape))),
      disabled: () => arm(s, shape.n, problems, counted("disabled", shape.n, (consumer) => library(consumer, nc, shape, undefined))),
      enabled: () => arm(s, shape.n, problems, counted("enabled", shape.n, (consumer) => library(consumer, nc, shape, enabled))),
    });
    // Warm every arm up on a smaller stream, so no round pays for compiling the code.
    const warmShape: Shape = { ...shape, n: Math.min(shape.n, 8 * shape.concurrency) };
    const warm = await createStream(nc, "EACHWARM", warmShape.n);
    await interleave(arms(warm, warmShape), 1, 0);
    await warm.jsm.streams.delete(warm.stream);
    for (const k of Object.keys(writes) as Array<keyof typeof writes>) writes[k].length = 0;

    const s = await createStream(nc, "EACH", shape.n);
    const samples = await interleave<"hand" | "disabled" | "enabled">(arms(s, shape), c.rounds, 0);
    await s.jsm.streams.delete(s.stream);
    const rate = medians(samples);
    const what = `${shape.n.toLocaleString("en-US")} msgs, concurrency ${shape.concurrency}, ${shape.handlerMs} ms handler (sleep)`;
    const hand = `consume() + counter of ${shape.concurrency}, ack on resolve`;
    const figures = (["disabled", "enabled"] as const).map((k, i) =>
      figure({
        id: `8${"ab"[i]}`,
        item: 8,
        name: `CommitThenAck.runEach, heartbeats ${k}, ${what}`,
        unit: "msgs/s",
        value: rate[k],
        baselineName: hand,
        baseline: rate.hand,
        goal: goals.ratioAtLeast(0.95),
        samples: { value: samples[k], baseline: samples.hand },
      }),
    );
    // Where the client's internals are not reachable the counts are NaN: no line then.
    if (Number.isFinite(median(writes.hand))) {
      (["disabled", "enabled"] as const).forEach((k, i) =>
        figures.push(
          figure({
            id: `8${"cd"[i]}`,
            item: 8,
            name: `  client socket writes per message, heartbeats ${k} (same arms)`,
            unit: "writes/msg",
            value: median(writes[k]),
            baselineName: "hand-written loop",
            baseline: median(writes.hand),
            samples: { value: writes[k], baseline: writes.hand },
          }),
        ),
      );
    }
    return withProblems(figures, problems);
  } finally {
    await nc.close();
  }
}
