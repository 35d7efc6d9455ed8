/**
 * Scenario: a worker's connection drops while its write runs, and the client reconnects. The
 * server stays up; a TCP proxy between the worker and the server takes the connection away.
 *
 * Two workers write side by side, each through the proxy on its own connection: `plain` uses
 * fire-and-forget beats and ACKs, `confirmed` uses server-confirmed beats (`heartbeat.confirm`)
 * and confirmed ACKs (`confirmAck`). A probe worker on a direct connection pulls all along, so
 * every redelivery is seen and committed at once.
 *
 * Modes:
 * - `brief`: the connection is cut for longer than the interval but well inside AckWait. The
 *   beats that fall in the cut are counted as failures; beats resume after the reconnect; no
 *   message is redelivered.
 * - `outlast`: the cut outlasts AckWait. Both workers get the lease-expired signal
 *   (`ctx.signal.reason instanceof LeaseExpiredError`, `in_progress_lease_expired_total`), stop,
 *   and leave their messages (no NAK: another worker may hold them); the probe commits the
 *   redeliveries. Nothing is committed twice.
 * - `ack-while-cut`: the writes finish during the cut. The client drops the plain worker's
 *   `+ACK` without an error: the library reports it (`settleError` DisconnectedError) and the
 *   message comes back after AckWait — a duplicate, not a loss. The confirmed worker's ACK is
 *   retried after the reconnect and lands: no redelivery.
 * - `blackhole`: a silent partition (the connection stays open, nothing gets through) that
 *   outlasts AckWait. Only confirmed beats notice: the confirmed worker counts failures and
 *   loses its lease; the plain worker counts none and writes on, and its late ACK after the
 *   partition settles a message the probe already committed (a duplicate).
 */
import diagnostics from "node:diagnostics_channel";
import { jetstream, type JsMsg } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { expect } from "vitest";
import {
  CommitThenAck,
  DiagnosticsChannels,
  InMemoryMetrics,
  LeaseExpiredError,
  MetricNames,
  verifyInProgressPolicy,
  type BatchResult,
  type HeartbeatFailedEvent,
  type WorkContext,
} from "../../../src/index.js";
import { AckSpy } from "../../helpers/ack-spy.js";
import { createFixture, eventually, fetchBatch, publish, type Fixture } from "../../helpers/jetstream.js";
import { startServer } from "../../helpers/nats-server.js";
import { assertInvariants, checkInvariants, printSummary, type InvariantReport } from "../invariants.js";
import { IdempotentSink, keyOf } from "../sink.js";
import { RECONNECT, consumerInfoWhen, deferred, fetchOnly, sleep, watchStatus, watchUnhandledRejections } from "../support.js";
import { TcpProxy } from "../tcp-proxy.js";

export type DropMode = "brief" | "outlast" | "ack-while-cut" | "blackhole";

export interface ConnectionDropOptions {
  readonly mode: DropMode;
  /** Messages per worker batch. */
  readonly batchSize: number;
  readonly ackWaitMs: number;
  readonly intervalMs: number;
  /** How long a `brief` or `ack-while-cut` cut lasts. */
  readonly cutMs: number;
}

type WorkerName = "plain" | "confirmed";

interface WorkerState {
  readonly name: WorkerName;
  readonly conn: NatsConnection;
  readonly metrics: InMemoryMetrics;
  readonly status: ReturnType<typeof watchStatus>;
  seqs: number[];
  ctx?: WorkContext;
  leaseExpiredAt?: number;
  result?: BatchResult;
  failedEvents: HeartbeatFailedEvent[];
}

export interface ConnectionDropResult {
  readonly report: InvariantReport;
  readonly workers: Record<WorkerName, { failures: number; leaseExpired: number; attempts: number; result: BatchResult; expiredAt?: number }>;
}

export async function connectionDropScenario(o: ConnectionDropOptions): Promise<ConnectionDropResult> {
  const name = `connection drop (${o.mode})`;
  await using srv = await startServer();
  await using proxy = await TcpProxy.start(srv.port);
  const admin = await srv.connect(RECONNECT);
  const spyConn = await srv.connect(RECONNECT);
  const probeConn = await srv.connect(RECONNECT);
  const workers: WorkerState[] = [];
  for (const wname of ["plain", "confirmed"] as const) {
    const conn = await connect({ servers: proxy.url, ...RECONNECT });
    workers.push({ name: wname, conn, metrics: new InMemoryMetrics(), status: watchStatus(conn), seqs: [], failedEvents: [] });
  }
  const unhandled = watchUnhandledRejections();
  const probeStop = new AbortController();
  let probeRun: Promise<void> | undefined;
  // Diagnostics events are per process; tell the workers apart by their batch ids.
  const batchOwner = new Map<number, WorkerState>();
  const onFailed = (e: unknown): void => {
    const ev = e as HeartbeatFailedEvent;
    const w = batchOwner.get(ev.batchId);
    if (w) w.failedEvents.push(ev);
  };
  const onSent = (e: unknown): void => void claim(e as { batchId: number; batchSize: number });
  const onExpired = (e: unknown): void => void claim(e as { batchId: number; batchSize: number });
  const claimQueue: WorkerState[] = [];
  // A batch id is claimed by the worker whose write is running when its first event arrives.
  function claim(ev: { batchId: number }): void {
    if (batchOwner.has(ev.batchId)) return;
    const w = claimQueue.shift();
    if (w) batchOwner.set(ev.batchId, w);
  }
  diagnostics.subscribe(DiagnosticsChannels.HEARTBEAT_SENT, onSent);
  diagnostics.subscribe(DiagnosticsChannels.LEASE_EXPIRED, onExpired);
  diagnostics.subscribe(DiagnosticsChannels.HEARTBEAT_FAILED, onFailed);
  try {
    const f = await createFixture(admin, { ackWaitMs: o.ackWaitMs });
    await using spy = await AckSpy.start(spyConn, f.stream);
    const published = await publish(f, 2 * o.batchSize);
    const sink = new IdempotentSink();
    const policy = verifyInProgressPolicy(
      { enabled: true, intervalMs: o.intervalMs, maxHeartbeats: 1000, shutdownTimeoutMs: 2000 },
      { ackWaitMs: o.ackWaitMs, source: "configured" },
    );
    const release = deferred();
    const processing: Promise<BatchResult>[] = [];
    for (const w of workers) {
      const fx: Fixture = { ...f, nc: w.conn, js: jetstream(w.conn) };
      const batch = await fetchBatch(fx, o.batchSize);
      expect(batch).toHaveLength(o.batchSize);
      w.seqs = batch.map((m) => m.seq);
      const confirmed = w.name === "confirmed";
      const ack = new CommitThenAck({
        inProgress: policy,
        metrics: w.metrics,
        connection: w.conn,
        ...(confirmed ? { heartbeat: { confirm: { connection: w.conn } }, confirmAck: { timeoutMs: 1000, retries: 4 } } : {}),
      });
      claimQueue.push(w);
      processing.push(
        ack
          .process(batch, async (msgs: readonly JsMsg[], ctx) => {
            w.ctx = ctx;
            for (const m of msgs) sink.deliver(keyOf(m), w.name);
            ctx.signal.addEventListener("abort", () => (w.leaseExpiredAt = performance.now()), { once: true });
            await Promise.race([release.promise, new Promise((r) => ctx.signal.addEventListener("abort", r, { once: true }))]);
            if (ctx.signal.aborted) {
              const reason: unknown = ctx.signal.reason;
              for (const m of msgs) sink.fail(keyOf(m), w.name, reason instanceof LeaseExpiredError ? "lease_expired" : "aborted");
              throw reason;
            }
            for (const m of msgs) sink.commit(keyOf(m), w.name);
          }, { receivedAt: Date.now() })
          .then((r) => (w.result = r)),
      );
      // One batch at a time, so the first beat event of each batch is claimed by its worker.
      await eventually(() => batchOwner.size === workers.indexOf(w) + 1, `the ${w.name} worker's first beat`, 6 * o.intervalMs + 10_000, 20);
    }

    const probe = new CommitThenAck({ connection: probeConn });
    probeRun = probe.run(fetchOnly(await jetstream(probeConn).consumers.get(f.stream, f.consumer)), (msgs) => {
      for (const m of msgs) {
        sink.deliver(keyOf(m), "probe");
        sink.commit(keyOf(m), "probe");
      }
    }, { signal: probeStop.signal });

    const all = workers.flatMap((w) => w.seqs);
    const beatsSince = (since: number, n: number, seqs: readonly number[]) => (fr: readonly { kind: string; streamSequence: number; at: number }[]) =>
      seqs.every((s) => fr.filter((x) => x.kind === "+WPI" && x.streamSequence === s && x.at > since).length >= n);
    await spy.waitFor(beatsSince(0, 2, all), 6 * o.intervalMs + 10_000, "two beats per message before the fault");
    const reconnected = async (before: number[]): Promise<number> => {
      await eventually(() => workers.every((w, i) => w.status.count("reconnect") > before[i]!), "both workers reconnected", 30_000, 20);
      return performance.now();
    };
    const reconnectsBefore = workers.map((w) => w.status.count("reconnect"));
    const faultAt = performance.now();
    const redeliveryCause = new Map<number, string>();

    if (o.mode === "brief") {
      proxy.cut();
      await sleep(o.cutMs);
      proxy.restore();
      const up = await reconnected(reconnectsBefore);
      await spy.waitFor(beatsSince(up, 2, all), 6 * o.intervalMs + 10_000, "two beats per message after the reconnect");
      release.resolve();
    } else if (o.mode === "outlast") {
      proxy.cut();
      await eventually(() => workers.every((w) => w.ctx?.signal.reason instanceof LeaseExpiredError), "both leases to expire", 3 * o.ackWaitMs + 10_000, 20);
      await eventually(() => all.every((s) => sink.committed(f.stream, s)?.worker === "probe"), "the probe to commit every redelivery", 3 * o.ackWaitMs + 10_000, 20);
      proxy.restore();
      await reconnected(reconnectsBefore);
    } else if (o.mode === "ack-while-cut") {
      const disconnectsBefore = workers.map((w) => w.status.count("disconnect"));
      proxy.cut();
      // The writes finish once both clients know they are disconnected.
      await eventually(() => workers.every((w, i) => w.status.count("disconnect") > disconnectsBefore[i]!), "both workers to see the drop", 10_000, 5);
      release.resolve();
      await sleep(o.cutMs);
      proxy.restore();
      await reconnected(reconnectsBefore);
      for (const s of workers[0]!.seqs) redeliveryCause.set(s, "its +ACK was dropped while the client was disconnected");
    } else {
      proxy.blackhole();
      const plain = workers[0]!;
      for (const s of all) redeliveryCause.set(s, "a silent partition outlasted AckWait");
      await eventually(() => workers[1]!.ctx?.signal.reason instanceof LeaseExpiredError, "the confirmed worker's lease to expire", 3 * o.ackWaitMs + 10_000, 20);
      await eventually(() => all.every((s) => sink.committed(f.stream, s)), "the probe to commit every redelivery", 3 * o.ackWaitMs + 10_000, 20);
      // The plain worker beat into the void all along and noticed nothing.
      expect(plain.ctx?.signal.aborted).toBe(false);
      // A long partition usually ends with a reset connection; the client then reconnects.
      proxy.cut();
      proxy.restore();
      await reconnected(reconnectsBefore);
      release.resolve();
    }

    await Promise.all(processing);
    await eventually(() => published.every((s) => sink.committed(f.stream, s)), "every message committed", 3 * o.ackWaitMs + 15_000, 20);
    const info = await consumerInfoWhen(admin, f.stream, f.consumer, (c) => c.num_ack_pending === 0 && c.num_pending === 0, "the consumer drained");
    // Frames sent by the workers after the reconnect have reached the spy.
    await Promise.all(workers.map((w) => w.conn.flush()));
    await spyConn.flush();
    probeStop.abort();
    await probeRun;

    const report = checkInvariants({
      stream: f.stream,
      published,
      sink,
      frames: spy.frames,
      consumer: info,
      unhandled: unhandled.seen,
      explainRedelivery: (seq, dc) => {
        if (dc !== 2) return undefined;
        if (sink.failures.some((x) => x.seq === seq && x.dc === 1 && x.kind === "lease_expired")) return "the lease expired during the cut";
        return redeliveryCause.get(seq);
      },
    });
    assertInvariants(report, name);

    const out = {} as ConnectionDropResult["workers"];
    for (const w of workers) {
      // Every beat is a success or a failure. With confirmed beats, a round whose replies were
      // still awaited when the write settled is decided when they land or time out: counted,
      // without a heartbeat:failed event (its batch is over).
      const counters = () => w.metrics.snapshot().counters;
      const decided = (): number => (counters()[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL] ?? 0) + (counters()[MetricNames.IN_PROGRESS_FAILURES_TOTAL] ?? 0);
      const attempts = counters()[MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL] ?? 0;
      const allDecided = (): boolean => {
        const n = decided();
        // Thrown, not returned: the timeout's message then says how many were decided at the end.
        if (n !== attempts) throw new Error(`${n} of ${attempts} decided`);
        return true;
      };
      await eventually(allDecided, `${w.name}: every round decided`, 5000);
      const c = counters();
      out[w.name] = {
        failures: c[MetricNames.IN_PROGRESS_FAILURES_TOTAL] ?? 0,
        leaseExpired: c[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL] ?? 0,
        attempts: c[MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL] ?? 0,
        result: w.result!,
        ...(w.leaseExpiredAt !== undefined ? { expiredAt: w.leaseExpiredAt - faultAt } : {}),
      };
      expect(c[MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL] ?? 0).toBe(attempts);
      const late = (c[MetricNames.IN_PROGRESS_FAILURES_TOTAL] ?? 0) - w.failedEvents.length;
      expect(late).toBeGreaterThanOrEqual(0);
      expect(late).toBeLessThanOrEqual(w.name === "plain" ? 0 : 1);
    }
    const [plain, confirmed] = workers as [WorkerState, WorkerState];
    const frameKinds = (seqs: readonly number[], dc: number) => spy.frames.filter((x) => seqs.includes(x.streamSequence) && x.deliveryCount === dc).map((x) => x.kind);

    if (o.mode === "brief") {
      for (const w of workers) {
        expect(out[w.name].failures, `${w.name}: beats in the cut counted`).toBeGreaterThanOrEqual(1);
        expect(out[w.name].leaseExpired).toBe(0);
        expect(w.result).toMatchObject({ outcome: "acked", acked: o.batchSize });
      }
      expect(new Set(plain.failedEvents.map((e) => e.errorName))).toEqual(new Set(["DisconnectedError"]));
      expect(report.counts.redeliveries).toBe(0);
    } else if (o.mode === "outlast") {
      for (const w of workers) {
        expect(out[w.name].leaseExpired, `${w.name}: lease expired`).toBe(1);
        expect(out[w.name].failures).toBeGreaterThanOrEqual(1);
        expect(w.result).toMatchObject({ outcome: "left", left: o.batchSize });
        expect(w.result?.error).toBeInstanceOf(LeaseExpiredError);
        // Nothing but beats from the worker that lost its lease: no NAK to disturb the new holder.
        expect(new Set(frameKinds(w.seqs, 1))).toEqual(new Set(["+WPI"]));
      }
      expect(new Set(plain.failedEvents.map((e) => e.errorName))).toEqual(new Set(["DisconnectedError"]));
      expect(report.counts.duplicateCommits).toBe(0);
      expect(report.redeliveries.map((r) => r.seq)).toEqual(all);
    } else if (o.mode === "ack-while-cut") {
      // The plain ACKs were held through the cut and sent after the reconnect: no redelivery.
      expect(plain.result).toMatchObject({ outcome: "acked", acked: o.batchSize });
      for (const m of plain.result!.messages) expect(m.settleError).toBeUndefined();
      for (const s of plain.seqs) expect(spy.of("+ACK", s).map((x) => x.deliveryCount)).toEqual([1]);
      expect(report.redeliveries).toEqual([]);
      expect(report.duplicates).toEqual([]);
      expect(confirmed.result).toMatchObject({ outcome: "acked", acked: o.batchSize });
      for (const m of confirmed.result!.messages) expect(m).toMatchObject({ confirmed: true });
      for (const s of confirmed.seqs) expect(spy.of("+ACK", s).map((x) => x.deliveryCount)).toEqual([1]);
    } else {
      expect(out.confirmed.failures).toBeGreaterThanOrEqual(1);
      expect(out.confirmed.leaseExpired).toBe(1);
      expect(confirmed.result).toMatchObject({ outcome: "left" });
      // The limit of unconfirmed beats: nothing reached the server, and nothing was counted.
      expect(out.plain.failures).toBe(0);
      expect(out.plain.leaseExpired).toBe(0);
      expect(plain.result).toMatchObject({ outcome: "acked" });
      expect(report.duplicates.map((d) => d.seq)).toEqual(plain.seqs);
    }

    printSummary(name, report, {
      plainFailedBeats: out.plain.failures,
      confirmedFailedBeats: out.confirmed.failures,
      leaseExpired: out.plain.leaseExpired + out.confirmed.leaseExpired,
      ...(out.plain.expiredAt !== undefined ? { plainExpiredAfterMs: Math.round(out.plain.expiredAt) } : {}),
    });
    return { report, workers: out };
  } finally {
    probeStop.abort();
    await probeRun?.catch(() => undefined);
    diagnostics.unsubscribe(DiagnosticsChannels.HEARTBEAT_SENT, onSent);
    diagnostics.unsubscribe(DiagnosticsChannels.LEASE_EXPIRED, onExpired);
    diagnostics.unsubscribe(DiagnosticsChannels.HEARTBEAT_FAILED, onFailed);
    unhandled.stop();
    await Promise.allSettled([admin.close(), spyConn.close(), probeConn.close(), ...workers.map((w) => w.conn.close())]);
  }
}
