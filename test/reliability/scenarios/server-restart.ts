/**
 * Scenario: the server restarts (same port, same store) while long writes are under heartbeat.
 *
 * Batches are fetched, then written under `CommitThenAck.process` with beats every
 * `intervalMs`; once every message has had beats, the server is stopped, kept down for
 * `outageMs` (longer than the interval, so at least one beat falls in the outage) and started
 * again, `restarts` times. A probe worker pulls all along, so any redelivery would be seen.
 *
 * Proves: beats that fall in the outage are counted as failures (the client drops frames
 * published while it is disconnected); beats resume after the reconnect; the final ACKs land
 * after the commits; nothing is lost or redelivered while the outage stays inside AckWait.
 */
import { jetstream } from "@nats-io/jetstream";
import { expect } from "vitest";
import {
  CommitThenAck,
  DiagnosticsChannels,
  InMemoryMetrics,
  MetricNames,
  verifyInProgressPolicy,
  type BatchResult,
} from "../../../src/index.js";
import { AckSpy } from "../../helpers/ack-spy.js";
import { EventLog } from "../../helpers/diagnostics.js";
import { createFixture, eventually, fetchBatch, publish } from "../../helpers/jetstream.js";
import { startServer } from "../../helpers/nats-server.js";
import { assertInvariants, checkInvariants, printSummary, type InvariantReport } from "../invariants.js";
import { IdempotentSink, keyOf } from "../sink.js";
import { RECONNECT, consumerInfoWhen, deferred, fetchOnly, sleep, watchStatus, watchUnhandledRejections } from "../support.js";

export interface ServerRestartOptions {
  /** Batches written concurrently by the worker. */
  readonly batches: number;
  readonly batchSize: number;
  readonly restarts: number;
  readonly ackWaitMs: number;
  readonly intervalMs: number;
  /** How long the server stays down each time (longer than the interval). */
  readonly outageMs: number;
}

export interface ServerRestartResult {
  readonly report: InvariantReport;
  readonly failedBeats: number;
  readonly reconnects: number;
}

/**
 * The restarted server handed a message out again as its first delivery: it forgot that it had
 * delivered it (its consumer state did not survive the restart). A redelivery counts up; no
 * client can cause this, and nothing the library does can keep a lease the server forgot.
 */
export class ServerForgotDeliveries extends Error {
  override readonly name = "ServerForgotDeliveries";
  constructor(readonly seqs: readonly number[]) {
    super(`the restarted server delivered stream sequences ${seqs.join(", ")} again as delivery 1 (its consumer state was lost)`);
  }
}

/**
 * Runs the scenario; once more, on a fresh server, when the restarted server forgot its
 * deliveries (seen once in a loaded run on 2.9.10). Any other failure, or a second time, fails.
 */
export async function serverRestartScenario(o: ServerRestartOptions): Promise<ServerRestartResult> {
  try {
    return await serverRestartOnce(o);
  } catch (err) {
    if (!(err instanceof ServerForgotDeliveries)) throw err;
    console.warn(`server restart: ${err.message}; running the scenario again on a fresh server`);
    return await serverRestartOnce(o);
  }
}

async function serverRestartOnce(o: ServerRestartOptions): Promise<ServerRestartResult> {
  expect(o.outageMs).toBeGreaterThan(o.intervalMs);
  const name = `server restart x${o.restarts}`;
  await using srv = await startServer();
  const nc = await srv.connect(RECONNECT);
  const spyConn = await srv.connect(RECONNECT);
  const probeConn = await srv.connect(RECONNECT);
  const status = watchStatus(nc);
  const unhandled = watchUnhandledRejections();
  using log = new EventLog([DiagnosticsChannels.HEARTBEAT_FAILED]);
  const probeStop = new AbortController();
  let probeRun: Promise<void> | undefined;
  try {
    const f = await createFixture(nc, { ackWaitMs: o.ackWaitMs });
    await using spy = await AckSpy.start(spyConn, f.stream);
    const total = o.batches * o.batchSize;
    const published = await publish(f, total);
    const batches = [];
    for (let b = 0; b < o.batches; b++) batches.push(await fetchBatch(f, o.batchSize));
    expect(batches.flat().map((m) => m.seq)).toEqual(published);

    const sink = new IdempotentSink();
    const metrics = new InMemoryMetrics();
    const policy = verifyInProgressPolicy(
      { enabled: true, intervalMs: o.intervalMs, maxHeartbeats: 10_000, shutdownTimeoutMs: 2000 },
      { ackWaitMs: o.ackWaitMs, source: "configured" },
    );
    const ack = new CommitThenAck({ inProgress: policy, metrics, connection: nc });
    const release = deferred();
    const results: Promise<BatchResult>[] = batches.map((batch) =>
      ack.process(batch, async (msgs) => {
        for (const m of msgs) sink.deliver(keyOf(m), "worker");
        await release.promise;
        for (const m of msgs) sink.commit(keyOf(m), "worker");
      }, { receivedAt: Date.now() }),
    );

    // A second worker pulls all along: a redelivery would reach it. Every message was already
    // delivered to the worker, so one reaching the probe as delivery 1 was forgotten by the server.
    const forgotten: number[] = [];
    const probe = new CommitThenAck({ connection: probeConn });
    probeRun = probe.run(fetchOnly(await jetstream(probeConn).consumers.get(f.stream, f.consumer)), (msgs) => {
      for (const m of msgs) {
        if (m.info.deliveryCount === 1) forgotten.push(m.seq);
        sink.deliver(keyOf(m), "probe");
        sink.commit(keyOf(m), "probe");
      }
    }, { signal: probeStop.signal, batchSize: 10 });

    const beatsAfter = (since: number, n: number) => (frames: readonly { kind: string; streamSequence: number; at: number }[]) =>
      published.every((seq) => frames.filter((x) => x.kind === "+WPI" && x.streamSequence === seq && x.at > since).length >= n);
    await spy.waitFor(beatsAfter(0, 2), 6 * o.intervalMs + 10_000, "two beats per message before the first restart");

    const outages: Array<{ down: number; up: number }> = [];
    for (let r = 0; r < o.restarts; r++) {
      const down = performance.now();
      await srv.stop();
      await sleep(o.outageMs);
      await srv.restart();
      await eventually(() => status.count("reconnect") >= r + 1, `the worker's reconnect #${r + 1}`, 30_000, 20);
      const up = performance.now();
      outages.push({ down, up });
      await spy.waitFor(beatsAfter(up, 2), 6 * o.intervalMs + 10_000, `two beats per message after restart #${r + 1}`);
    }
    const failedBeats = metrics.snapshot().counters[MetricNames.IN_PROGRESS_FAILURES_TOTAL] ?? 0;

    release.resolve();
    const settled = await Promise.all(results);
    await nc.flush();
    await spy.waitFor((fr) => published.every((seq) => fr.some((x) => x.kind === "+ACK" && x.streamSequence === seq)), 15_000, "an +ACK per message");
    const info = await consumerInfoWhen(spyConn, f.stream, f.consumer, (i) => i.num_ack_pending === 0, "nothing awaiting an ack");
    probeStop.abort();
    await probeRun;

    if (forgotten.length > 0) throw new ServerForgotDeliveries(forgotten);
    const c = metrics.snapshot().counters;
    const report = checkInvariants({
      stream: f.stream,
      published,
      sink,
      frames: spy.frames,
      consumer: info,
      unhandled: unhandled.seen,
      // The outage is shorter than AckWait: a redelivery is explained only if the beats the
      // server received really left a gap of AckWait or more.
      explainRedelivery: (seq) => {
        const beats = spy.of("+WPI", seq).map((x) => x.at);
        for (let i = 1; i < beats.length; i++) if (beats[i]! - beats[i - 1]! >= o.ackWaitMs) return "beats the server saw left a gap of AckWait";
        return undefined;
      },
    });
    assertInvariants(report, name);
    for (const r of settled) expect(r).toMatchObject({ outcome: "acked", acked: o.batchSize });
    // Every outage held at least one beat, and each of those was counted, never a success.
    expect(failedBeats).toBeGreaterThanOrEqual(o.restarts);
    const failedEvents = log.of(DiagnosticsChannels.HEARTBEAT_FAILED);
    expect(failedEvents.length).toBe(c[MetricNames.IN_PROGRESS_FAILURES_TOTAL]);
    expect(new Set(failedEvents.map((e) => e.errorName))).toEqual(new Set(["DisconnectedError"]));
    expect(c[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL] ?? 0).toBe(0);
    expect(c[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL]! + c[MetricNames.IN_PROGRESS_FAILURES_TOTAL]!).toBe(c[MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL]);
    const reconnects = status.count("reconnect");
    printSummary(name, report, {
      failedBeats,
      reconnects,
      outageMs: Math.round(outages.reduce((n, x) => n + x.up - x.down, 0) / Math.max(1, outages.length)),
    });
    return { report, failedBeats, reconnects };
  } finally {
    probeStop.abort();
    await probeRun?.catch(() => undefined);
    unhandled.stop();
    await Promise.allSettled([nc.close(), spyConn.close(), probeConn.close()]);
  }
}
