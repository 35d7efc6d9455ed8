/**
 * Item 3 — end to end on a real nats-server: `CommitThenAck.run` with a no-op write against a
 * hand-written fetch → write → ack loop. One stream of N messages; every arm of every round
 * reads all of it through a fresh durable consumer, with the same batch size and fetch expiry.
 * The library runs twice: heartbeats disabled (the default) and enabled. Each arm also reports
 * the CPU it used per message and the socket writes the client made per batch, to tell the
 * library's own cost from a change in how the frames reach the socket; and the settling of one
 * batch is timed alone on fake messages (no server), against the hand loop's write and acks.
 */
import type { Consumer, JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { CommitThenAck, verifyInProgressPolicy, type CommitThenAckOptions, type VerifiedInProgressPolicy } from "../../src/index.js";
import type { Bench } from "../context.js";
import { figure, goals, type Figure } from "../figure.js";
import { addConsumer, createStream, waitAllAcked, type BenchStream } from "../jetstream.js";
import { fakeMsgs } from "../fake-msg.js";
import { cpuMs, interleave, median, medians, nowNs, pluck, untilAcked, withGcPauses } from "../measure.js";
import { countSocketWrites } from "../socket-writes.js";

export const ACK_WAIT_MS = 30_000;

export interface Shape {
  readonly n: number;
  readonly batchSize: number;
  readonly expiresMs: number;
}

/**
 * The loop a service writes by hand: fetch a batch, write it, ack every message. `confirmed`:
 * each ACK as `ackAck()` (a request the server answers), all of a batch awaited before the next.
 */
export async function handWritten(consumer: Consumer, nc: NatsConnection, shape: Shape, confirmed = false): Promise<number> {
  const write = async (_msgs: readonly JsMsg[]): Promise<void> => {};
  const t0 = nowNs();
  let done = 0;
  while (done < shape.n) {
    const batch: JsMsg[] = [];
    for await (const m of await consumer.fetch({ max_messages: shape.batchSize, expires: shape.expiresMs })) batch.push(m);
    await write(batch);
    if (confirmed) await Promise.all(batch.map((m) => m.ackAck()));
    else for (const m of batch) m.ack();
    done += batch.length;
  }
  await nc.flush();
  return (nowNs() - t0) / 1e9;
}

/**
 * The library's loop, timed like the hand loop: until the last message's ACK was flushed (with
 * confirmed ACKs, the default, until the server confirmed it). The loop is stopped after that,
 * untimed (a shutdown lets its open pull end by itself). `options` are added to the instance's.
 */
export async function library(
  consumer: Consumer,
  nc: NatsConnection,
  shape: Shape,
  policy: VerifiedInProgressPolicy | undefined,
  options: Pick<CommitThenAckOptions, "confirmAck"> = {},
): Promise<number> {
  const ack = new CommitThenAck(policy ? { ...options, inProgress: policy } : options);
  const stop = new AbortController();
  const write = async (_msgs: readonly JsMsg[]): Promise<void> => {};
  const t0 = nowNs();
  const done = untilAcked(shape.n);
  const running = ack.run(consumer, write, { batchSize: shape.batchSize, expiresMs: shape.expiresMs, signal: stop.signal, onBatch: done.onResult });
  await done.all;
  await nc.flush();
  const seconds = (nowNs() - t0) / 1e9;
  stop.abort();
  await running;
  return seconds;
}

export interface Sample {
  readonly rate: number;
  /** Process CPU per message, µs. */
  readonly cpuUs: number;
  /** Socket writes per fetched batch (NaN when the client's internals are not reachable). */
  readonly writes: number;
  /** The garbage collector's pauses of the main thread per message, µs. */
  readonly gcUs: number;
}

/** Counts the client's socket writes while `body` runs (NaN when the client's internals are not reachable). */
async function countingWrites<T>(nc: NatsConnection, body: () => Promise<T>): Promise<{ result: T; writes: number }> {
  const counter = countSocketWrites(nc);
  try {
    const result = await body();
    return { result, writes: counter.writes };
  } finally {
    counter.restore();
  }
}

/**
 * µs per batch of `settle` on the same fake batch: the median of 20 blocks of calls, so a
 * preempted block falls out (as in item 1).
 */
async function perBatch(settle: () => Promise<unknown>, calls: number): Promise<number> {
  const blocks = new Float64Array(20);
  const per = Math.max(1, Math.round(calls / blocks.length));
  for (let b = 0; b < blocks.length; b++) {
    const t0 = nowNs();
    for (let i = 0; i < per; i++) await settle();
    blocks[b] = (nowNs() - t0) / per;
  }
  return median(blocks) / 1000;
}

/** What one batch costs the library once fetched: `process` against `await write(); ack each`. */
async function settleAlone(batchSize: number, rounds: number, enabled: VerifiedInProgressPolicy): Promise<Record<"hand" | "disabled" | "enabled", number[]>> {
  const msgs = fakeMsgs(batchSize);
  const write = async (_msgs: readonly JsMsg[]): Promise<void> => {};
  const signal = new AbortController().signal;
  const now = Date.now();
  const options = { signal, receivedAt: () => now };
  const disabled = new CommitThenAck();
  const withBeats = new CommitThenAck({ inProgress: enabled });
  const calls = 4000;
  return await interleave(
    {
      hand: () =>
        perBatch(async () => {
          await write(msgs);
          for (const m of msgs) m.ack();
        }, calls),
      disabled: () => perBatch(() => disabled.process(msgs, write, options), calls),
      enabled: () => perBatch(() => withBeats.process(msgs, write, options), calls),
    },
    Math.max(rounds, 3),
    2,
  );
}

/** Runs one arm on a fresh consumer, then checks every message was acknowledged once. */
export async function arm(s: BenchStream, shape: Shape, body: (consumer: Consumer) => Promise<number>): Promise<Sample> {
  const { name, consumer } = await addConsumer(s, { ackWaitMs: ACK_WAIT_MS, maxAckPending: Math.max(1000, shape.batchSize * 2) });
  const cpu0 = cpuMs();
  const {
    result: { result: seconds, writes },
    gcMs,
  } = await withGcPauses(() => countingWrites(s.nc, () => body(consumer)));
  const cpuUs = ((cpuMs() - cpu0) * 1000) / shape.n;
  const counts = await waitAllAcked(s, name, shape.n);
  if (counts.delivered !== shape.n || counts.redelivered !== 0) throw new Error(`end-to-end arm: ${JSON.stringify(counts)}`);
  await s.jsm.consumers.delete(s.stream, name);
  return { rate: shape.n / seconds, cpuUs, writes: writes / (shape.n / shape.batchSize), gcUs: (gcMs * 1000) / shape.n };
}

export async function endToEnd(bench: Bench): Promise<Figure[]> {
  const c = bench.config.endToEnd;
  const shape: Shape = { n: c.messages, batchSize: c.batchSize, expiresMs: c.expiresMs };
  if (shape.n % shape.batchSize !== 0) throw new Error("end-to-end: messages must be a multiple of the batch size (a short last fetch waits for its expiry)");
  const enabled = verifyInProgressPolicy({ enabled: true, intervalMs: 10_000 }, { ackWaitMs: ACK_WAIT_MS, source: "configured" });
  const nc = await bench.server.connect();
  try {
    const arms = (s: BenchStream, shape: Shape) => ({
      hand: () => arm(s, shape, (consumer) => handWritten(consumer, nc, shape)),
      disabled: () => arm(s, shape, (consumer) => library(consumer, nc, shape, undefined)),
      enabled: () => arm(s, shape, (consumer) => library(consumer, nc, shape, enabled)),
    });
    // Warm every arm up on a smaller stream, so no round pays for compiling the code.
    const warmShape: Shape = { ...shape, n: Math.min(shape.n, 10 * shape.batchSize) };
    const warm = await createStream(nc, "E2EWARM", warmShape.n);
    await interleave<"hand" | "disabled" | "enabled", Sample>(arms(warm, warmShape), 1, 0);
    await warm.jsm.streams.delete(warm.stream);

    const alone = await settleAlone(shape.batchSize, c.rounds, enabled);
    const aloneM = medians(alone);

    const s = await createStream(nc, "E2E", shape.n);
    const samples = await interleave<"hand" | "disabled" | "enabled", Sample>(arms(s, shape), c.rounds, 0);
    await s.jsm.streams.delete(s.stream);
    const of = (field: keyof Sample) =>
      medians({ hand: pluck(samples.hand, field), disabled: pluck(samples.disabled, field), enabled: pluck(samples.enabled, field) });
    const rate = of("rate");
    const cpu = of("cpuUs");
    const writes = of("writes");
    const gc = of("gcUs");
    const what = `${shape.n.toLocaleString("en-US")} msgs, batch ${shape.batchSize}, expires ${shape.expiresMs} ms, no-op write`;
    const hand = "hand-written fetch → write → ack loop";
    const out: Figure[] = [];
    (["disabled", "enabled"] as const).forEach((k, i) => {
      out.push(
        figure({
          id: `3${"ab"[i]}`,
          item: 3,
          name: `CommitThenAck.run, heartbeats ${k}, ${what}`,
          unit: "msgs/s",
          value: rate[k],
          baselineName: hand,
          baseline: rate.hand,
          goal: goals.ratioAtLeast(0.95),
          samples: { value: pluck(samples[k], "rate"), baseline: pluck(samples.hand, "rate") },
        }),
        figure({
          id: `3${"cd"[i]}`,
          item: 3,
          name: `  CPU of the process per message, heartbeats ${k} (same arms)`,
          unit: "µs CPU/msg",
          value: cpu[k],
          baselineName: "hand-written loop",
          baseline: cpu.hand,
          samples: { value: pluck(samples[k], "cpuUs"), baseline: pluck(samples.hand, "cpuUs") },
        }),
      );
      out.push(
        figure({
          id: `3${"gh"[i]}`,
          item: 3,
          name: `  settling one batch of ${shape.batchSize} alone (process, fake messages, no server), heartbeats ${k}`,
          unit: "µs/batch",
          value: aloneM[k],
          baselineName: "await write(); ack each",
          baseline: aloneM.hand,
          samples: { value: alone[k], baseline: alone.hand },
        }),
      );
      out.push(
        figure({
          id: `3${"ij"[i]}`,
          item: 3,
          name: `  garbage collector's pauses per message, heartbeats ${k} (same arms)`,
          unit: "µs GC/msg",
          value: gc[k],
          baselineName: "hand-written loop",
          baseline: gc.hand,
          samples: { value: pluck(samples[k], "gcUs"), baseline: pluck(samples.hand, "gcUs") },
        }),
      );
      if (Number.isFinite(writes[k])) {
        out.push(
          figure({
            id: `3${"ef"[i]}`,
            item: 3,
            name: `  client socket writes per batch, heartbeats ${k} (same arms)`,
            unit: "writes/batch",
            value: writes[k],
            baselineName: "hand-written loop",
            baseline: writes.hand,
          }),
        );
      }
    });
    return out;
  } finally {
    await nc.close();
  }
}
