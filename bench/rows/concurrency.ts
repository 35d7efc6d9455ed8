/**
 * Item 7 — concurrency scaling on a real nats-server. Shape: batches of 100, fetch expiry
 * 1,000 ms, and a write that takes 50 ms (`await sleep(50)`: the time a slow sink holds a batch,
 * not CPU). `CommitThenAck.run` with `concurrency: 4` against the same loop with
 * `concurrency: 1` (does a second lane buy a second write's worth of throughput?) and against
 * four hand-written fetch → write → ack loops sharing the same durable consumer (what a
 * service writes by hand for four writes at once). Heartbeats are off (the default). Every arm
 * of every round reads a stream of exactly its message count through a fresh durable
 * consumer, so no pull waits out its expiry at the end; each ends with a flush and is checked
 * with consumer info (all acknowledged, nothing redelivered).
 */
import type { Consumer, JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { CommitThenAck } from "../../src/index.js";
import type { Bench } from "../context.js";
import { figure, goals, withProblems, type Figure } from "../figure.js";
import { armOnFreshConsumer, createStream, type BenchStream } from "../jetstream.js";
import { interleave, medians, nowNs, sleep, untilAcked } from "../measure.js";

const ACK_WAIT_MS = 30_000;

interface Shape {
  readonly n: number;
  readonly batchSize: number;
  readonly expiresMs: number;
  readonly writeMs: number;
}

/**
 * The library's loop with `concurrency`, timed until the last ACK was flushed (as the hand
 * loops); stopped after that, untimed (its open pull ends by itself).
 */
async function library(consumer: Consumer, nc: NatsConnection, shape: Shape, concurrency: number): Promise<number> {
  const ack = new CommitThenAck();
  const stop = new AbortController();
  const write = async (_msgs: readonly JsMsg[]): Promise<void> => {
    await sleep(shape.writeMs);
  };
  const t0 = nowNs();
  const done = untilAcked(shape.n);
  const running = ack.run(consumer, write, { batchSize: shape.batchSize, expiresMs: shape.expiresMs, concurrency, signal: stop.signal, onBatch: done.onResult });
  await done.all;
  await nc.flush();
  const rate = shape.n / ((nowNs() - t0) / 1e9);
  stop.abort();
  await running;
  return rate;
}

/**
 * Four (`lanes`) independent fetch → write → ack loops on one consumer. They share a count of
 * the messages claimed, so no lane asks for a message the stream does not hold (that fetch
 * would wait out its expiry).
 */
async function handWritten(consumer: Consumer, nc: NatsConnection, shape: Shape, lanes: number): Promise<number> {
  const write = async (_msgs: readonly JsMsg[]): Promise<void> => {
    await sleep(shape.writeMs);
  };
  let claimed = 0;
  const lane = async (): Promise<void> => {
    for (;;) {
      const want = Math.min(shape.batchSize, shape.n - claimed);
      if (want <= 0) return;
      claimed += want;
      const batch: JsMsg[] = [];
      for await (const m of await consumer.fetch({ max_messages: want, expires: shape.expiresMs })) batch.push(m);
      // A short fetch (it should not happen here): give the rest back to the others.
      claimed -= want - batch.length;
      await write(batch);
      for (const m of batch) m.ack();
    }
  };
  const t0 = nowNs();
  await Promise.all(Array.from({ length: lanes }, lane));
  await nc.flush();
  return shape.n / ((nowNs() - t0) / 1e9);
}

/** One arm on a fresh consumer, every message checked acknowledged once. */
function arm(s: BenchStream, n: number, problems: string[], body: (consumer: Consumer) => Promise<number>): Promise<number> {
  return armOnFreshConsumer(s, n, ACK_WAIT_MS, problems, body);
}

export async function concurrencyScaling(bench: Bench): Promise<Figure[]> {
  const c = bench.config.concurrency;
  const base = { batchSize: c.batchSize, expiresMs: c.expiresMs, writeMs: c.writeMs };
  const serial: Shape = { ...base, n: c.serialMessages };
  const parallel: Shape = { ...base, n: c.parallelMessages };
  for (const s of [serial, parallel]) {
    if (s.n % s.batchSize !== 0) throw new Error("concurrency: message counts must be multiples of the batch size (a short last fetch waits for its expiry)");
  }
  const nc = await bench.server.connect();
  const problems: string[] = [];
  try {
    const one = await createStream(nc, "CONC1", serial.n);
    const many = await createStream(nc, "CONCN", parallel.n);
    const arms = {
      one: () => arm(one, serial.n, problems, (consumer) => library(consumer, nc, serial, 1)),
      many: () => arm(many, parallel.n, problems, (consumer) => library(consumer, nc, parallel, c.concurrency)),
      hand: () => arm(many, parallel.n, problems, (consumer) => handWritten(consumer, nc, parallel, c.concurrency)),
    };
    const samples = await interleave<"one" | "many" | "hand">(arms, c.rounds, 1);
    await one.jsm.streams.delete(one.stream);
    await many.jsm.streams.delete(many.stream);
    const rate = medians(samples);
    const what = `batch ${c.batchSize}, ${c.writeMs} ms write (sleep), expires ${c.expiresMs} ms`;
    return withProblems(
      [
        figure({
          id: "7a",
          item: 7,
          name: `CommitThenAck.run, concurrency ${c.concurrency}, ${what}, ${parallel.n.toLocaleString("en-US")} msgs`,
          unit: "msgs/s",
          value: rate.many,
          baselineName: `the same, concurrency 1, ${serial.n.toLocaleString("en-US")} msgs`,
          baseline: rate.one,
          goal: goals.ratioAtLeast(c.concurrency * 0.9),
          samples: { value: samples.many, baseline: samples.one },
        }),
        figure({
          id: "7b",
          item: 7,
          name: `CommitThenAck.run, concurrency ${c.concurrency}, ${what}, ${parallel.n.toLocaleString("en-US")} msgs`,
          unit: "msgs/s",
          value: rate.many,
          baselineName: `${c.concurrency} hand-written fetch → write → ack loops, one consumer`,
          baseline: rate.hand,
          goal: goals.ratioAtLeast(0.95),
          samples: { value: samples.many, baseline: samples.hand },
        }),
      ],
      problems,
    );
  } finally {
    await nc.close();
  }
}
