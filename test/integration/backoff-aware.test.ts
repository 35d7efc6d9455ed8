/**
 * BackOff-aware mode on a real nats-server: a consumer with BackOff [1 s, 4 s] and MaxDeliver 5.
 */
import { describe, expect, it } from "vitest";
import { AckPolicy, jetstream, type JsMsg } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { CommitThenAck, ConsumerPolicyError, InMemoryMetrics, MetricNames, TemporarySinkError, consumerTimingFromConfig, verifyInProgressPolicy } from "../../src/index.js";
import { MAX_DELIVER_EQUAL_SINCE, atLeast } from "../../src/policy/server-version.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, fetchBatch, publish, uniqueName, type Fixture } from "../helpers/jetstream.js";
import { useServer } from "../helpers/server-fixture.js";

const BACKOFF_MS = [1000, 4000];
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

describe("BackOff-aware mode on a real nats-server", () => {
  const fx = useServer();

  const backoffFixture = () => createFixture(fx.nc, { ackWaitMs: 30_000, backOffMs: BACKOFF_MS, maxDeliver: 5 });

  /** A second worker pulling for `ms`: it must get nothing while the first keeps the lease. */
  async function otherWorkerGetsNothing(f: Fixture, ms: number): Promise<JsMsg[]> {
    const conn = await fx.srv.connect();
    try {
      return await fetchBatch({ ...f, nc: conn, js: jetstream(conn) }, 1, ms);
    } finally {
      await conn.close();
    }
  }

  it("the server overrides AckWait with BackOff[0], and reject mode refuses the consumer before fetching", async () => {
    const f = await backoffFixture();
    await publish(f, 1);
    const info = await consumerInfo(f);
    expect(info.config.ack_wait).toBe(nanos(1000));
    const err = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 700 } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConsumerPolicyError);
    expect((err as ConsumerPolicyError).violations.map((v) => v.code)).toEqual(["backoff_not_supported"]);
    expect((await consumerInfo(f)).delivered.consumer_seq).toBe(0);
  });

  it("aware mode refuses 800 ms (80% of the 1 s step) and accepts 700 ms", async () => {
    const f = await backoffFixture();
    const err = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
      backOff: "aware",
      inProgress: { enabled: true, intervalMs: 800 },
    }).catch((e: unknown) => e);
    expect((err as ConsumerPolicyError).violations.map((v) => v.code)).toEqual(["interval_too_close_to_backoff"]);
    expect((err as Error).message).toContain("80% of the smallest BackOff step 1000 ms");
    const ok = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { backOff: "aware", inProgress: { enabled: true, intervalMs: 700 } });
    expect(ok.policy).toMatchObject({ enabled: true, intervalMs: 700, backOff: "aware", timing: { backOffMs: BACKOFF_MS, maxDeliver: 5 } });
  });

  it("a policy verified in aware mode is accepted by forConsumer without repeating the mode; the JetStream client is refused as the manager", async () => {
    const f = await backoffFixture();
    const info = await consumerInfo(f);
    const verified = verifyInProgressPolicy({ enabled: true, intervalMs: 700 }, consumerTimingFromConfig(info.config), { backOff: "aware" });
    const ok = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: verified });
    expect(ok.policy).toMatchObject({ enabled: true, intervalMs: 700, backOff: "aware" });
    // A JetStream client where the manager belongs: a TypeError naming the fix, not a permissions hint.
    await expect(CommitThenAck.forConsumer(f.js as never, f.stream, f.consumer)).rejects.toThrow(/jsm must be a JetStream manager \(await jetstreamManager\(nc\)\)/);
    await expect(CommitThenAck.forConsumer(fx.nc as never, f.stream, f.consumer)).rejects.toThrow(TypeError);
    expect((await consumerInfo(f)).delivered.consumer_seq).toBe(0);
  });

  it("a 700 ms interval keeps a 3 s write alive at delivery 1 and at delivery 2", async () => {
    const f = await backoffFixture();
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const metrics = new InMemoryMetrics();
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
      backOff: "aware",
      inProgress: { enabled: true, intervalMs: 700, maxHeartbeats: 20 },
      onTemporaryFailure: { action: "nak" }, // a bare NAK: delivery 2 comes at once
      metrics,
    });

    // Delivery 1 (window 1 s): a 3 s write, then a temporary failure to get delivery 2.
    const d1 = await fetchBatch(f, 1);
    const t1 = Date.now();
    // The observer's pull must end inside the 3 s write: the NAK at its end makes the message
    // available again at once.
    const other1 = otherWorkerGetsNothing(f, 2500);
    const p1 = performance.now();
    const r1 = await ack.process(d1, async () => {
      await sleep(3000);
      throw new TemporarySinkError("retry me");
    }, { receivedAt: t1 });
    const timeline = () =>
      `frames ${spy.frames.map((x) => `${x.kind}@${x.deliveryCount}+${Math.round(x.at - p1)}ms`).join(" ")}; ` +
      `tick lateness ${JSON.stringify(metrics.snapshot().observations[MetricNames.IN_PROGRESS_TICK_LATENESS_SECONDS]?.map((v) => Math.round(v * 1000)))}`;
    // On a failure, the frames and each tick's lateness say whether a beat came too late.
    expect(r1.outcome, timeline()).toBe("nacked");
    expect(await other1, timeline()).toHaveLength(0);
    expect(r1.heartbeats).toBeGreaterThanOrEqual(4);

    // Delivery 2 (window 4 s): another 3 s write, committed.
    const d2 = await fetchBatch(f, 1);
    expect(d2[0]?.info.deliveryCount).toBe(2);
    const t2 = Date.now();
    const other2 = otherWorkerGetsNothing(f, 2500);
    const r2 = await ack.process(d2, () => sleep(3000), { receivedAt: t2 });
    expect(r2.outcome).toBe("acked");
    expect(await other2).toHaveLength(0);

    await fx.nc.flush();
    await fx.spyConn.flush();
    const info = await consumerInfo(f);
    // Two deliveries: the first by the NAK we asked for, none by a lost lease.
    expect(info.delivered.consumer_seq).toBe(2);
    expect(info.num_ack_pending).toBe(0);
    expect(spy.forSequence(seq!).filter((x) => x.kind !== "+WPI").map((x) => `${x.kind}@${x.deliveryCount}`)).toEqual(["-NAK@1", "+ACK@2"]);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL]).toBeUndefined();
  });

  it("a NAK asking for 5 s at delivery 2 is redelivered after about 5 s, where a raw NAK of 5 s waits 8 s", async () => {
    const f = await backoffFixture();
    const [a, b] = await publish(f, 2);
    // Delivery 1 of both, handed back at once.
    for (const m of await fetchBatch(f, 2)) m.nak();
    const d2 = await fetchBatch(f, 2);
    expect(d2.map((m) => m.info.deliveryCount)).toEqual([2, 2]);
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
      backOff: "aware",
      onTemporaryFailure: { action: "nak", delayMs: 5000 },
    });
    const t0 = performance.now();
    const result = await ack.process(d2.filter((m) => m.seq === a), () => {
      throw new TemporarySinkError("busy");
    });
    d2.find((m) => m.seq === b)!.nak(5000); // what a host without the adjustment would send
    expect(result.messages[0]).toMatchObject({ requestedDelayMs: 5000, effectiveDelayMs: 5000 });

    const arrivals = new Map<number, number>();
    const js = jetstream(fx.nc);
    const consumer = await js.consumers.get(f.stream, f.consumer);
    while (arrivals.size < 2 && performance.now() - t0 < 15_000) {
      // A pull that misses its idle heartbeats on a busy machine is simply pulled again.
      const m = await consumer.next({ expires: 1000 }).catch(() => null);
      if (m) {
        arrivals.set(m.seq, performance.now() - t0);
        expect(m.info.deliveryCount).toBe(3);
        m.ack();
      }
    }
    const waitedA = arrivals.get(a!)!;
    const waitedB = arrivals.get(b!)!;
    expect(waitedA).toBeGreaterThan(4500);
    expect(waitedA).toBeLessThan(7000);
    expect(waitedB).toBeGreaterThan(7500);
  });

  const version = process.env["JSIP_NATS_SERVER_VERSION"];
  it(`MaxDeliver equal to len(BackOff) is accepted from 2.10.23, refused before (on ${version}: ${atLeast(version, MAX_DELIVER_EQUAL_SINCE) ? "accepted" : "refused"}); greater is accepted everywhere`, async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1000 });
    expect(fx.nc.info?.version).toBe(version);
    const add = (max_deliver: number) =>
      f.jsm.consumers.add(f.stream, {
        durable_name: uniqueName("MD"),
        ack_policy: AckPolicy.Explicit,
        backoff: BACKOFF_MS.map((ms) => nanos(ms)),
        max_deliver,
      });
    const equal = await add(2).then(() => "created", () => "refused");
    expect(equal).toBe(atLeast(version, MAX_DELIVER_EQUAL_SINCE) ? "created" : "refused");
    await expect(add(3)).resolves.toBeDefined();
  });
});
