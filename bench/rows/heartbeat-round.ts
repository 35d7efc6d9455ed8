/**
 * Item 2 — one heartbeat round over many in-flight messages against the client's own limit:
 * the library's round (`sendRound`, what every beat of `withInProgress` runs) against the
 * same `+WPI` frames published raw with `nc.publish(reply, "+WPI")` on the same connection,
 * to the same reply subjects; both flushed. Item 6: the naive pattern's round (one
 * `setInterval` per message, all due together), timed from its first callback to the flush
 * after its last.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { sendRound } from "../../src/lease/heartbeat-round.js";
import { replySubject } from "../../src/nats/message-access.js";
import type { Bench } from "../context.js";
import { figure, goals, type Figure } from "../figure.js";
import { addConsumer, consumerCounts, createStream, fetchExactly } from "../jetstream.js";
import { interleave, medians, nowNs } from "../measure.js";

/** Seconds for one library round plus the flush. */
async function libraryRound(msgs: readonly JsMsg[], nc: NatsConnection): Promise<number> {
  const t0 = nowNs();
  const result = sendRound(msgs, undefined);
  await nc.flush();
  const s = (nowNs() - t0) / 1e9;
  if (result.failed !== 0) throw new Error(`library round: ${result.failed} beats failed`);
  return s;
}

/** Seconds for the same frames published raw plus the flush. */
async function rawRound(replies: readonly string[], nc: NatsConnection): Promise<number> {
  const t0 = nowNs();
  for (const r of replies) nc.publish(r, "+WPI");
  await nc.flush();
  return (nowNs() - t0) / 1e9;
}

/**
 * Seconds for one round of the naive pattern: an interval per message, created together so
 * they fall due together; from the first callback to the flush after the last.
 */
function naiveRound(msgs: readonly JsMsg[], nc: NatsConnection): Promise<number> {
  return new Promise((resolve, reject) => {
    const timers: ReturnType<typeof setInterval>[] = [];
    let fired = 0;
    let first = 0;
    for (const m of msgs) {
      timers.push(
        setInterval(() => {
          if (fired === 0) first = nowNs();
          m.working();
          if (++fired === msgs.length) {
            for (const t of timers) clearInterval(t);
            nc.flush().then(() => resolve((nowNs() - first) / 1e9), reject);
          }
        }, 100),
      );
    }
  });
}

export async function heartbeatRound(bench: Bench): Promise<Figure[]> {
  const { messages: n, rounds } = bench.config.round;
  const nc = await bench.server.connect();
  try {
    const s = await createStream(nc, "ROUND", n);
    // AckWait far above the run: the rounds refresh, nothing may expire meanwhile.
    const { name, consumer } = await addConsumer(s, { ackWaitMs: 300_000, maxAckPending: n });
    const msgs = await fetchExactly(consumer, n, 1000);
    const replies = msgs.map((m) => {
      const r = replySubject(m);
      if (r === undefined) throw new Error("a fetched message has no reply subject");
      return r;
    });

    const samples = await interleave(
      {
        library: () => libraryRound(msgs, nc),
        raw: () => rawRound(replies, nc),
        naive: () => naiveRound(msgs, nc),
      },
      rounds,
      2,
    );
    const seconds = medians(samples);
    const counts = await consumerCounts(s, name);
    if (counts.redelivered !== 0 || counts.delivered !== n) throw new Error(`round row: unexpected redelivery ${JSON.stringify(counts)}`);
    await s.jsm.streams.delete(s.stream);

    const rate = (x: number): number => n / x;
    const rates = (xs: readonly number[]): number[] => xs.map(rate);
    return [
      figure({
        id: "2a",
        item: 2,
        name: `one heartbeat round, ${n.toLocaleString("en-US")} in-flight messages (sendRound + flush)`,
        unit: "+WPI/s",
        value: rate(seconds.library),
        baselineName: "raw nc.publish(reply, \"+WPI\") + flush",
        baseline: rate(seconds.raw),
        goal: goals.ratioAtLeast(0.9),
        samples: { value: rates(samples.library), baseline: rates(samples.raw) },
      }),
      figure({
        id: "6a",
        item: 6,
        name: `naive: one round, setInterval per message, ${n.toLocaleString("en-US")} messages`,
        unit: "+WPI/s",
        value: rate(seconds.naive),
        baselineName: "raw publishes, as 2a",
        baseline: rate(seconds.raw),
        samples: { value: rates(samples.naive), baseline: rates(samples.raw) },
      }),
    ];
  } finally {
    await nc.close();
  }
}
