/**
 * A link to the server slow enough to lose deliveries or leases is refused before the first
 * pull (`link_too_slow`), and the fix it names works on the same link.
 *
 * Why: on a link whose round trip nears half of a fetch's expiry, the client ends the fetch
 * after two late idle heartbeats while the server still delivers into it; measured when `run`
 * fetched (one-way delays of 550–900 ms, expiry 1000 ms, max_deliver 1), 3 to 6 of 20 sparse
 * messages were never written. The loops now read through a subscription the client does not
 * end, and fetch only from a consumer without `consume()`, where this check still applies. A
 * beat on such a link reaches the server after the lease it was meant to keep.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { Consumer, JsMsg } from "@nats-io/jetstream";
import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { CommitThenAck, ConsumerPolicyError } from "../../src/index.js";
import { consumerInfo, createFixture, eventually } from "../helpers/jetstream.js";
import { useServer } from "../helpers/server-fixture.js";
import { fetchOnly } from "../reliability/support.js";
import { TcpProxy } from "../reliability/tcp-proxy.js";

interface SparseCase {
  readonly latencyMs: number;
  readonly returnLatencyMs?: number;
  readonly ackWaitMs: number;
  readonly intervalMs: number;
  readonly messages: number;
  /** The consumer the loop reads (the client's own, or one it can only fetch from). */
  readonly consumer: (c: Consumer) => Pick<Consumer, "fetch" | "info"> | Consumer;
  readonly expiresMs?: number;
}

/**
 * `run` over a slow link, messages published 1.3 s apart on `max_deliver: 1` (each meets a pull
 * that sat idle past its heartbeats): how often each was written, the loop's failures (its
 * subscription's notices left out: they are reported, not failures), and the consumer after.
 */
async function sparseOverSlowLink(fx: ReturnType<typeof useServer>, c: SparseCase) {
  const f = await createFixture(fx.nc, { ackWaitMs: c.ackWaitMs, maxDeliver: 1 });
  await using proxy = await TcpProxy.start(fx.srv.port, { latencyMs: c.latencyMs, returnLatencyMs: c.returnLatencyMs ?? 0 });
  const slow = await connect({ servers: proxy.url });
  try {
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: c.intervalMs }, connection: slow });
    const writes = new Map<number, number>();
    const failures: string[] = [];
    const stop = new AbortController();
    const running = ack.run(
      c.consumer(await jetstream(slow).consumers.get(f.stream, f.consumer)),
      async (msgs: readonly JsMsg[]) => {
        for (const m of msgs) writes.set(m.seq, (writes.get(m.seq) ?? 0) + 1);
      },
      {
        batchSize: 10,
        ...(c.expiresMs !== undefined ? { expiresMs: c.expiresMs } : {}),
        signal: stop.signal,
        onError: (e, ctx) => void (ctx.during !== "fetch" || ctx.consecutiveFailures !== undefined ? failures.push(`${ctx.during}: ${(e as Error).message}`) : undefined),
      },
    );
    for (let i = 0; i < c.messages; i++) {
      fx.nc.publish(f.subject, `m-${i}`);
      await sleep(1300);
    }
    await fx.nc.flush();
    await eventually(async () => {
      const info = await consumerInfo(f);
      return info.num_pending === 0 && info.num_ack_pending === 0 && writes.size === c.messages;
    }, "every message written and acked", 20_000);
    stop.abort();
    await running;
    return { writes: [...writes.values()], failures, info: await consumerInfo(f) };
  } finally {
    await slow.close();
  }
}

/** Client-to-server frames held this long: the round trip a PING measures. */
const LATENCY_MS = 400;

describe("a slow link to the server", () => {
  const fx = useServer();

  it("run with the default 1 s expiry over a link of 600 ms each way loses nothing: sparse messages on max_deliver 1 are each written once and acked", async () => {
    // The case a fetch lost: the client ended it while the server delivered into it.
    const r = await sparseOverSlowLink(fx, { latencyMs: 600, returnLatencyMs: 600, ackWaitMs: 30_000, intervalMs: 5000, messages: 8, consumer: (c) => c });
    expect(r.writes).toEqual([1, 1, 1, 1, 1, 1, 1, 1]);
    expect(r.failures).toEqual([]);
    expect(r.info.ack_floor.stream_seq).toBe(8);
    expect(r.info.delivered.consumer_seq).toBe(8);
    expect(r.info.num_redelivered).toBe(0);
  }, 60_000);

  it("run on a consumer that can only fetch, with the default 1 s expiry over a 400 ms round trip, is refused before its first pull: nothing is delivered", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000, maxDeliver: 1 });
    fx.nc.publish(f.subject, "m");
    await fx.nc.flush();
    await using proxy = await TcpProxy.start(fx.srv.port, { latencyMs: LATENCY_MS });
    const slow = await connect({ servers: proxy.url });
    try {
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 5000 }, connection: slow });
      let writes = 0;
      const err = await ack.run(fetchOnly(await jetstream(slow).consumers.get(f.stream, f.consumer)), async () => void (writes += 1)).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConsumerPolicyError);
      expect((err as ConsumerPolicyError).reason).toBe("link_too_slow");
      expect((err as Error).message).toMatch(/the round trip to the server took \d+ ms, a third or more of the pull expiry \(1000 ms\).*Raise expiresMs to at least \d+/);
      expect(writes).toBe(0);
      const info = await consumerInfo(f);
      expect(info.delivered.stream_seq).toBe(0);
      expect(info.num_waiting).toBe(0);
    } finally {
      await slow.close();
    }
  });

  it("runEach whose interval plus twice the round trip reaches AckWait is refused before its first pull", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
    await using proxy = await TcpProxy.start(fx.srv.port, { latencyMs: LATENCY_MS });
    const slow = await connect({ servers: proxy.url });
    try {
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 1500 }, connection: slow });
      const err = await ack.runEach(await jetstream(slow).consumers.get(f.stream, f.consumer), async () => undefined).catch((e: unknown) => e);
      expect((err as ConsumerPolicyError).reason).toBe("link_too_slow");
      expect((err as Error).message).toMatch(/heartbeat interval \(1500 ms\) plus twice the round trip must stay below the consumer's redelivery window \(2000 ms\)\. Lower intervalMs below \d+/);
      expect((await consumerInfo(f)).num_waiting).toBe(0);
    } finally {
      await slow.close();
    }
  });

  it("fetching with the expiry it names (3 s), the same link loses nothing: sparse messages on max_deliver 1 are each written once and acked", async () => {
    const r = await sparseOverSlowLink(fx, { latencyMs: LATENCY_MS, ackWaitMs: 10_000, intervalMs: 4000, messages: 5, consumer: fetchOnly, expiresMs: 3000 });
    expect(r.writes).toEqual([1, 1, 1, 1, 1]);
    expect(r.failures).toEqual([]);
    expect(r.info.ack_floor.stream_seq).toBe(5);
    expect(r.info.delivered.consumer_seq).toBe(5);
  }, 60_000);

  it.each(["run", "runEach"] as const)(
    "%s whose heartbeat thread's own link is too slow for the beats is refused before its first pull, the host's link being fast; the thread on a fast link starts and acks",
    async (loop) => {
      const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
      fx.nc.publish(f.subject, "m");
      await fx.nc.flush();
      // 400 ms each way on the thread's link only: beats every 1 s plus twice that reach AckWait.
      await using proxy = await TcpProxy.start(fx.srv.port, { latencyMs: LATENCY_MS, returnLatencyMs: LATENCY_MS });
      const worker = await connect({ servers: fx.srv.url });
      try {
        const consumer = await jetstream(worker).consumers.get(f.stream, f.consumer);
        const options = (servers: string) => ({ inProgress: { enabled: true, intervalMs: 1000 }, heartbeat: { thread: { servers } }, connection: worker });
        let writes = 0;
        const write = async (): Promise<void> => void (writes += 1);
        const slowThread = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, options(proxy.url));
        const err = await (loop === "run" ? slowThread.run(consumer, write) : slowThread.runEach(consumer, write)).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(ConsumerPolicyError);
        expect((err as ConsumerPolicyError).reason).toBe("link_too_slow");
        expect((err as Error).message).toMatch(
          /the heartbeat thread's own connection \(heartbeat\.thread\) is too slow for its beats: the round trip to the server took \d+ ms.*heartbeat interval \(1000 ms\).*redelivery window \(2000 ms\)\. Lower intervalMs below \d+, raise AckWait, point heartbeat\.thread at a nearer server, or leave the thread off/,
        );
        expect(writes).toBe(0);
        const info = await consumerInfo(f);
        expect(info.delivered.stream_seq).toBe(0);
        expect(info.num_waiting).toBe(0);

        // The same loop with the thread on the server's own address: it starts, writes and acks.
        const fastThread = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, options(fx.srv.url));
        const stop = new AbortController();
        const running = loop === "run" ? fastThread.run(consumer, write, { signal: stop.signal }) : fastThread.runEach(consumer, write, { signal: stop.signal });
        await eventually(async () => (await consumerInfo(f)).ack_floor.stream_seq === 1, "the message acked", 10_000);
        stop.abort();
        await running;
        expect(writes).toBe(1);
      } finally {
        await worker.close();
      }
    },
    30_000,
  );
});
