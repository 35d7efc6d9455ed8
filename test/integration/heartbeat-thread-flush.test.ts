/**
 * Before a final frame the loop waits until the heartbeat thread's beats reached the server (a
 * PING round trip on the thread's connection, bounded). When the thread's link goes silent
 * (a partition its client has not noticed yet), that wait gives up at its bound: the frame
 * still goes out, and the unconfirmed beats are reported as a final failed beat, since one of
 * them still on its way would cut a NAK's delay to AckWait.
 */
import { jetstream } from "@nats-io/jetstream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CommitThenAck, DiagnosticsChannels, InMemoryMetrics, MetricNames, TemporarySinkError, type HeartbeatFailedEvent } from "../../src/index.js";
import { HeartbeatThread } from "../../src/lease/heartbeat-thread.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { EventLog } from "../helpers/diagnostics.js";
import { createFixture, fetchBatch, publish } from "../helpers/jetstream.js";
import { startServer, type NatsServer } from "../helpers/nats-server.js";
import { TcpProxy } from "../reliability/tcp-proxy.js";

let srv: NatsServer;

beforeAll(async () => {
  srv = await startServer();
});

afterAll(async () => {
  await srv.dispose();
});

const NAK_DELAY_MS = 4000;

/** One failing write whose beats come from a thread behind a proxy; `silence` cuts the link mid-write. */
async function failWithThread(silence: boolean): Promise<{ events: HeartbeatFailedEvent[]; failures: number; waitedMs: number; finals: string[] }> {
  const nc = await srv.connect();
  const worker = await srv.connect();
  await using link = await TcpProxy.start(srv.port);
  // The thread connected first: a batch handed to it before would count the rounds due
  // meanwhile as failed beats.
  const warm = HeartbeatThread.acquire({ servers: link.url });
  await warm.ready();
  using log = new EventLog([DiagnosticsChannels.HEARTBEAT_FAILED]);
  try {
    const f = await createFixture(nc, { ackWaitMs: 2000 });
    const [seq] = await publish(f, 1);
    await using spy = await AckSpy.start(nc, f.stream);
    const metrics = new InMemoryMetrics();
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
      inProgress: { enabled: true, intervalMs: 300, maxHeartbeats: 100 },
      heartbeat: { thread: { servers: link.url } },
      onTemporaryFailure: { action: "nak", delayMs: NAK_DELAY_MS, retryInPlace: false },
      connection: worker,
      metrics,
    });
    const msgs = await fetchBatch({ ...f, nc: worker, js: jetstream(worker) }, 1);
    expect(msgs).toHaveLength(1);
    let failedAt = 0;
    const result = await ack.process(msgs, async () => {
      // The thread is beating this delivery.
      await spy.waitFor((fr) => fr.some((x) => x.kind === "+WPI" && x.streamSequence === seq), 15_000, "a +WPI from the thread");
      if (silence) link.blackhole();
      failedAt = performance.now();
      throw new TemporarySinkError("the sink is busy");
    });
    expect(result.nacked).toBe(1);
    await spy.waitFor((fr) => fr.some((x) => x.kind === "-NAK" && x.streamSequence === seq), 10_000, "the NAK");
    const nak = spy.of("-NAK", seq)[0]!;
    const finals = spy.forSequence(seq!).map((x) => x.kind).filter((k) => k !== "+WPI");
    link.restore();
    await f.jsm.streams.delete(f.stream);
    return { events: log.of(DiagnosticsChannels.HEARTBEAT_FAILED), failures: metrics.snapshot().counters[MetricNames.IN_PROGRESS_FAILURES_TOTAL] ?? 0, waitedMs: nak.at - failedAt, finals };
  } finally {
    warm.release();
    await worker.close();
    await nc.close();
  }
}

describe("the wait for the heartbeat thread's beats before a final frame", () => {
  it("the thread's link gone silent mid-write: the wait gives up at its bound, the NAK still goes out, and the unconfirmed beats are reported as a final failed beat", async () => {
    const r = await failWithThread(true);
    expect(r.finals).toEqual(["-NAK"]);
    // The wait is bounded by max(1 s, the interval), then the frame goes out.
    expect(r.waitedMs).toBeGreaterThanOrEqual(900);
    expect(r.waitedMs).toBeLessThan(5000);
    const notFlushed = r.events.filter((e) => e.errorName === "HeartbeatThreadError");
    expect(notFlushed).toHaveLength(1);
    expect(notFlushed[0]).toMatchObject({ batchSize: 1, failedMessages: 1, final: true });
    expect(notFlushed[0]!.beat).toBeGreaterThanOrEqual(1);
    expect(r.failures).toBe(1);
  });

  it("the link open: the thread's beats are confirmed at once, nothing is reported", async () => {
    const r = await failWithThread(false);
    expect(r.finals).toEqual(["-NAK"]);
    expect(r.waitedMs).toBeLessThan(900);
    expect(r.events).toEqual([]);
    expect(r.failures).toBe(0);
  });
});
