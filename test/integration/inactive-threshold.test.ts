/**
 * A durable consumer's `inactive_threshold` during a long write, on the server this run uses.
 * Before nats-server 2.11.7 a consumer is active only when it pulls or acks: a write pulls
 * nothing, so its `+WPI` frames alone keep the consumer, and a gap between two beats longer
 * than the threshold deletes it in the middle of the write (its ACK then settles nothing). From
 * 2.11.7 a pending ack counts as activity. `forConsumer` and both loops refuse an interval that
 * does not fit the threshold (80% margin) on the older servers, before anything is pulled.
 * Consumer info requests are not activity on any version (measured), so polling it is a fair
 * watch; nothing else pulls from these consumers while they are watched.
 */
import { describe, expect, it } from "vitest";
import type { JsMsg } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { CommitThenAck, ConsumerPolicyError, verifyInProgressPolicy } from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, eventually, fetchBatch, publish } from "../helpers/jetstream.js";
import { natsServerVersion } from "../helpers/nats-server.js";
import { useServer } from "../helpers/server-fixture.js";
import { versionAtLeast } from "../helpers/server-version.js";

const VERSION = process.env["JSIP_NATS_SERVER_VERSION"] ?? natsServerVersion();
/** Servers where a pending ack keeps a consumer active. */
const PENDING_COUNTS = versionAtLeast(VERSION, "2.11.7");
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const THRESHOLD_MS = 2000;
const ACK_WAIT_MS = 10_000;
/** Twice the threshold: allowed by AckWait (below 8 s), too long for the threshold. */
const LONG_INTERVAL_MS = 4000;

const reasonOf = (p: Promise<unknown>): Promise<string> =>
  p.then(
    () => "accepted",
    (e: unknown) => (e instanceof ConsumerPolicyError ? e.reason : String(e)),
  );

describe(`inactive_threshold during a long write on nats-server ${VERSION}`, { concurrent: true }, () => {
  const fx = useServer();

  it(`one message beaten every 4 s on a durable with a 2 s threshold: the consumer is ${PENDING_COUNTS ? "kept" : "deleted in the middle of the write"}; forConsumer ${PENDING_COUNTS ? "accepts" : "refuses"} that interval and accepts 1 s`, async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS, consumer: { inactive_threshold: nanos(THRESHOLD_MS) } });
    // Checked at once: an idle consumer with this threshold goes within seconds on every version.
    const long = await reasonOf(CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: LONG_INTERVAL_MS }, connection: fx.nc }));
    expect(long).toBe(PENDING_COUNTS ? "accepted" : "inactive_threshold_too_short");
    const short = await reasonOf(CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 1000 }, connection: fx.nc }));
    expect(short).toBe("accepted");

    await publish(f, 1);
    const [m] = await fetchBatch(f, 1, 1000);
    expect(m).toBeDefined();
    // The write: raw beats every 4 s (what the refused interval would send), the consumer watched.
    const reply = (m as unknown as { reply: string }).reply;
    const started = performance.now();
    let lastBeat = started;
    let goneAfterMs: number | undefined;
    while (performance.now() - started < 9000) {
      if (performance.now() - lastBeat >= LONG_INTERVAL_MS) {
        fx.nc.publish(reply, "+WPI");
        lastBeat = performance.now();
      }
      try {
        await consumerInfo(f);
      } catch {
        goneAfterMs = performance.now() - started;
        break;
      }
      await sleep(250);
    }
    console.log(`inactive_threshold 2 s, beats every 4 s on ${VERSION}: ${goneAfterMs === undefined ? "kept through 9 s" : `deleted ${Math.round(goneAfterMs)} ms into the write`}`);
    if (PENDING_COUNTS) {
      expect(goneAfterMs, "the consumer was deleted during the write").toBeUndefined();
    } else {
      expect(goneAfterMs, "the consumer outlived a 9 s write beaten every 4 s").toBeDefined();
      // Before the first beat could help: the threshold, plus the server's check period.
      expect(goneAfterMs!).toBeLessThan(LONG_INTERVAL_MS + 2000);
    }
  });

  it("reading consumer info is not activity: an idle consumer with a 2 s threshold is deleted while it is read every 250 ms", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS, consumer: { inactive_threshold: nanos(THRESHOLD_MS) } });
    const started = performance.now();
    let goneAfterMs: number | undefined;
    while (goneAfterMs === undefined && performance.now() - started < 6000) {
      try {
        await consumerInfo(f);
        await sleep(250);
      } catch {
        goneAfterMs = performance.now() - started;
      }
    }
    expect(goneAfterMs, "the consumer read every 250 ms outlived 6 s").toBeDefined();
  });

  it("one message beaten every 1 s (below 80% of the 2 s threshold): the consumer is kept through a 7 s write on every version", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS, consumer: { inactive_threshold: nanos(THRESHOLD_MS) } });
    await publish(f, 1);
    const [m] = await fetchBatch(f, 1, 1000);
    const reply = (m as unknown as { reply: string }).reply;
    const started = performance.now();
    let lastBeat = started;
    while (performance.now() - started < 7000) {
      if (performance.now() - lastBeat >= 1000) {
        fx.nc.publish(reply, "+WPI");
        lastBeat = performance.now();
      }
      await consumerInfo(f);
      await sleep(250);
    }
    m!.ack();
    await fx.nc.flush();
    const info = await eventually(async () => {
      const i = await consumerInfo(f);
      return i.ack_floor.stream_seq === 1 ? i : undefined;
    }, "the message acked on the kept consumer");
    expect(info.num_redelivered).toBe(0);
  });

  it(`run and runEach with a 4 s interval on such a consumer: ${PENDING_COUNTS ? "a 5 s write keeps the consumer and its message is acked once" : "refused before the first pull"}`, async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS, consumer: { inactive_threshold: nanos(THRESHOLD_MS) } });
    await publish(f, 1);
    const consumer = await f.js.consumers.get(f.stream, f.consumer);
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: LONG_INTERVAL_MS }, { ackWaitMs: ACK_WAIT_MS, source: "configured" });
    if (!PENDING_COUNTS) {
      const ack = new CommitThenAck({ inProgress: policy });
      const written: JsMsg[] = [];
      // A loop that started anyway returns "accepted" at this bound instead of running on.
      const signal = AbortSignal.timeout(3000);
      expect(await reasonOf(ack.run(consumer, async (msgs) => void written.push(...msgs), { signal }))).toBe("inactive_threshold_too_short");
      expect(await reasonOf(ack.runEach(consumer, async (msg) => void written.push(msg), { signal }))).toBe("inactive_threshold_too_short");
      expect(written).toHaveLength(0);
      // Nothing was pulled: the message's first delivery is this one.
      const [m] = await fetchBatch(f, 1, 1000);
      expect(m?.info.deliveryCount).toBe(1);
      m!.ack();
      return;
    }
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const ack = new CommitThenAck({ inProgress: policy, connection: fx.nc });
    const stop = new AbortController();
    let writes = 0;
    const running = ack.run(
      consumer,
      async (msgs) => {
        writes += msgs.length;
        // Nothing is pulled while the one write slot is busy: the pending ack and the beat at 4 s are all.
        await sleep(5000);
      },
      { batchSize: 1, concurrency: 1, expiresMs: 1000, signal: stop.signal },
    );
    await eventually(() => spy.frames.some((fr) => fr.kind === "+ACK"), "the write's ACK", 20_000);
    stop.abort();
    await running;
    expect(writes).toBe(1);
    expect(spy.frames.filter((fr) => fr.kind === "+WPI").length).toBeGreaterThanOrEqual(1);
    const info = await consumerInfo(f);
    expect(info.ack_floor.stream_seq).toBe(1);
    expect(info.num_redelivered).toBe(0);
  });
});
