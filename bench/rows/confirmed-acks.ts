/**
 * Item 13 — confirmed ACKs in the loops on a real nats-server. `CommitThenAck.run` confirms its
 * ACKs by default: every `+ACK` of a batch goes out with a reply addressed to one inbox of the
 * connection, one timer waits for the server's answers, and a batch counts as acknowledged once
 * they came. `confirmAck: false` sends plain ACKs. Shape as item 3 (and its helpers): one stream
 * of N messages, every arm of every round reads all of it through a fresh durable consumer
 * (AckWait 30 s), batch size 100, fetch expiry 1,000 ms, a no-op write, timed until the loop
 * reported every message acknowledged (`onBatch`) and the connection flushed. The default
 * against `confirmAck: false`, with heartbeats off and on (interval 10 s: no beat falls due);
 * the four arms alternate round by round, with two more: the hand-written loop of item 3 with
 * plain ACKs and with each ACK confirmed (`ackAck()`), to show what confirming costs any loop.
 * Each arm also reports its CPU per message, the client's socket writes per batch and the CPU the suite's nats-server spent per message (it
 * answers every confirmed ACK, on the same cores); each is checked with consumer info (all
 * acknowledged, nothing redelivered).
 */
import { verifyInProgressPolicy } from "../../src/index.js";
import type { Bench } from "../context.js";
import { figure, goals, type Figure } from "../figure.js";
import { createStream, type BenchStream } from "../jetstream.js";
import { interleave, medians, pluck } from "../measure.js";
import { childProcessCpuMs } from "../threads.js";
import { ACK_WAIT_MS, arm, handWritten, library, type Sample, type Shape } from "./end-to-end.js";

type ArmName = "plain" | "confirmed" | "plainBeats" | "confirmedBeats" | "hand" | "handConfirmed";

interface ArmSample extends Sample {
  /** CPU of the suite's nats-server per message over the arm (its consumer's set-up and check included), µs. */
  readonly serverUs: number;
}

/** Item 3's arm, with the CPU the server spent meanwhile (it shares the machine's cores with the client). */
async function withServerCpu(shape: Shape, body: () => Promise<Sample>): Promise<ArmSample> {
  const s0 = childProcessCpuMs("nats-server");
  const sample = await body();
  return { ...sample, serverUs: ((childProcessCpuMs("nats-server") - s0) * 1000) / shape.n };
}

export async function confirmedAcks(bench: Bench): Promise<Figure[]> {
  const c = bench.config.confirmAck;
  const shape: Shape = { n: c.messages, batchSize: c.batchSize, expiresMs: c.expiresMs };
  if (shape.n % shape.batchSize !== 0) throw new Error("confirmed ACKs: messages must be a multiple of the batch size (a short last fetch waits for its expiry)");
  const beats = verifyInProgressPolicy({ enabled: true, intervalMs: 10_000 }, { ackWaitMs: ACK_WAIT_MS, source: "configured" });
  const nc = await bench.server.connect();
  try {
    const arms = (s: BenchStream, shape: Shape): Record<ArmName, () => Promise<ArmSample>> => ({
      plain: () => withServerCpu(shape, () => arm(s, shape, (consumer) => library(consumer, nc, shape, undefined, { confirmAck: false }))),
      confirmed: () => withServerCpu(shape, () => arm(s, shape, (consumer) => library(consumer, nc, shape, undefined))),
      plainBeats: () => withServerCpu(shape, () => arm(s, shape, (consumer) => library(consumer, nc, shape, beats, { confirmAck: false }))),
      confirmedBeats: () => withServerCpu(shape, () => arm(s, shape, (consumer) => library(consumer, nc, shape, beats))),
      hand: () => withServerCpu(shape, () => arm(s, shape, (consumer) => handWritten(consumer, nc, shape))),
      handConfirmed: () => withServerCpu(shape, () => arm(s, shape, (consumer) => handWritten(consumer, nc, shape, true))),
    });
    // Warm every arm up on a smaller stream, so no round pays for compiling the code.
    const warmShape: Shape = { ...shape, n: Math.min(shape.n, 10 * shape.batchSize) };
    const warm = await createStream(nc, "ACKWARM", warmShape.n);
    await interleave<ArmName, ArmSample>(arms(warm, warmShape), 1, 0);
    await warm.jsm.streams.delete(warm.stream);

    const s = await createStream(nc, "ACKCONF", shape.n);
    const samples = await interleave<ArmName, ArmSample>(arms(s, shape), c.rounds, 0);
    await s.jsm.streams.delete(s.stream);
    const of = (field: keyof ArmSample): Record<ArmName, number> =>
      medians({
        plain: pluck(samples.plain, field),
        confirmed: pluck(samples.confirmed, field),
        plainBeats: pluck(samples.plainBeats, field),
        confirmedBeats: pluck(samples.confirmedBeats, field),
        hand: pluck(samples.hand, field),
        handConfirmed: pluck(samples.handConfirmed, field),
      });
    const rate = of("rate");
    const cpu = of("cpuUs");
    const writes = of("writes");
    const server = of("serverUs");
    const what = `${shape.n.toLocaleString("en-US")} msgs, batch ${shape.batchSize}, expires ${shape.expiresMs} ms, no-op write`;
    const out: Figure[] = [];
    const pairs = [
      { on: "confirmed", off: "plain", beats: "off" },
      { on: "confirmedBeats", off: "plainBeats", beats: "on" },
    ] as const;
    pairs.forEach(({ on, off, beats: hb }, i) => {
      out.push(
        figure({
          id: `13${"ab"[i]}`,
          item: 13,
          name: `CommitThenAck.run, confirmed ACKs (the default), heartbeats ${hb}, ${what}`,
          unit: "msgs/s",
          value: rate[on],
          baselineName: "the same with confirmAck: false",
          baseline: rate[off],
          goal: goals.ratioAtLeast(0.95),
          samples: { value: pluck(samples[on], "rate"), baseline: pluck(samples[off], "rate") },
        }),
        figure({
          id: `13${"cd"[i]}`,
          item: 13,
          name: `  CPU of the process per message, confirmed ACKs, heartbeats ${hb} (same arms)`,
          unit: "µs CPU/msg",
          value: cpu[on],
          baselineName: "confirmAck: false",
          baseline: cpu[off],
          samples: { value: pluck(samples[on], "cpuUs"), baseline: pluck(samples[off], "cpuUs") },
        }),
      );
      if (Number.isFinite(server[on])) {
        out.push(
          figure({
            id: `13${"gh"[i]}`,
            item: 13,
            name: `  CPU of nats-server per message, confirmed ACKs, heartbeats ${hb} (same arms)`,
            unit: "µs CPU/msg",
            value: server[on],
            baselineName: "confirmAck: false",
            baseline: server[off],
            samples: { value: pluck(samples[on], "serverUs"), baseline: pluck(samples[off], "serverUs") },
          }),
        );
      }
      if (Number.isFinite(writes[on])) {
        out.push(
          figure({
            id: `13${"ef"[i]}`,
            item: 13,
            name: `  client socket writes per batch, confirmed ACKs, heartbeats ${hb} (same arms)`,
            unit: "writes/batch",
            value: writes[on],
            baselineName: "confirmAck: false",
            baseline: writes[off],
          }),
        );
      }
    });
    // What confirming costs a loop written by hand (ackAck per message), in the same rounds: the
    // part of 13a's gap any confirmed loop pays, and the library's confirmed loop against it.
    out.push(
      figure({
        id: "13i",
        item: 13,
        name: `  hand-written loop, each ACK confirmed (ackAck), ${what}`,
        unit: "msgs/s",
        value: rate.handConfirmed,
        baselineName: "the same with plain ACKs",
        baseline: rate.hand,
        samples: { value: pluck(samples.handConfirmed, "rate"), baseline: pluck(samples.hand, "rate") },
      }),
      figure({
        id: "13j",
        item: 13,
        name: `  CommitThenAck.run, confirmed ACKs, heartbeats off, against the hand-written confirmed loop`,
        unit: "msgs/s",
        value: rate.confirmed,
        baselineName: "hand-written loop, ackAck",
        baseline: rate.handConfirmed,
        samples: { value: pluck(samples.confirmed, "rate"), baseline: pluck(samples.handConfirmed, "rate") },
      }),
    );
    return out;
  } finally {
    await nc.close();
  }
}
