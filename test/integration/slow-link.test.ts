/**
 * A link to the server slow enough to lose deliveries or leases is refused before the first
 * pull (`link_too_slow`), and the fix it names works on the same link.
 *
 * Why: on a link whose round trip nears half of `run`'s fetch expiry, the client ends pulls
 * after two late idle heartbeats while the server still delivers into them; measured before
 * this check (one-way delays of 550–900 ms, expiry 1000 ms, max_deliver 1), 3 to 6 of 20
 * sparse messages were never written. A beat on such a link reaches the server after the
 * lease it was meant to keep.
 */
import { setTimeout as sleep } from "node:timers/promises";
import type { JsMsg } from "@nats-io/jetstream";
import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { CommitThenAck, ConsumerPolicyError } from "../../src/index.js";
import { consumerInfo, createFixture, eventually } from "../helpers/jetstream.js";
import { useServer } from "../helpers/server-fixture.js";
import { TcpProxy } from "../reliability/tcp-proxy.js";

/** Client-to-server frames held this long: the round trip a PING measures. */
const LATENCY_MS = 400;

describe("a slow link to the server", () => {
  const fx = useServer();

  it("run with the default 1 s expiry over a 400 ms round trip is refused before its first pull: nothing is delivered", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000, maxDeliver: 1 });
    fx.nc.publish(f.subject, "m");
    await fx.nc.flush();
    await using proxy = await TcpProxy.start(fx.srv.port, { latencyMs: LATENCY_MS });
    const slow = await connect({ servers: proxy.url });
    try {
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 5000 }, connection: slow });
      let writes = 0;
      const err = await ack.run(await jetstream(slow).consumers.get(f.stream, f.consumer), async () => void (writes += 1)).catch((e: unknown) => e);
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

  it("with the expiry it names (3 s) the same link loses nothing: sparse messages on max_deliver 1 are each written once and acked", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 10_000, maxDeliver: 1 });
    await using proxy = await TcpProxy.start(fx.srv.port, { latencyMs: LATENCY_MS });
    const slow = await connect({ servers: proxy.url });
    try {
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 4000 }, connection: slow });
      const writes = new Map<number, number>();
      const errors: string[] = [];
      const stop = new AbortController();
      const running = ack.run(
        await jetstream(slow).consumers.get(f.stream, f.consumer),
        async (msgs: readonly JsMsg[]) => {
          for (const m of msgs) writes.set(m.seq, (writes.get(m.seq) ?? 0) + 1);
        },
        { batchSize: 10, expiresMs: 3000, signal: stop.signal, onError: (e, c) => void errors.push(`${c.during}: ${(e as Error).message}`) },
      );
      // Sparse: pulls sit idle long enough for the client's heartbeat watch to matter.
      for (let i = 0; i < 5; i++) {
        fx.nc.publish(f.subject, `m-${i}`);
        await sleep(1300);
      }
      await fx.nc.flush();
      await eventually(async () => {
        const info = await consumerInfo(f);
        return info.num_pending === 0 && info.num_ack_pending === 0 && writes.size === 5;
      }, "every message written and acked", 20_000);
      stop.abort();
      await running;
      expect([...writes.values()]).toEqual([1, 1, 1, 1, 1]);
      expect(errors).toEqual([]);
      const info = await consumerInfo(f);
      expect(info.ack_floor.stream_seq).toBe(5);
      expect(info.delivered.consumer_seq).toBe(5);
    } finally {
      await slow.close();
    }
  }, 60_000);
});
