/**
 * Every diagnostics channel against a real nats-server: real beats (client-accepted and
 * server-confirmed), a failed beat on a closed connection, the heartbeat limit, lease expiry
 * (after the limit, after a closed connection, under a blocked event loop), and CommitThenAck
 * batches settled as acked, nacked, left, dead_lettered, termed, cancelled and partial. Each
 * payload is checked for its exact fields and types and for its values, against the ack-frame
 * spy, the metrics and the BatchResult. Tests wait for events, not for time.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  CommitThenAck,
  DiagnosticsChannels,
  HeartbeatLimitError,
  InMemoryMetrics,
  LeaseExpiredError,
  MetricNames,
  PermanentSinkError,
  TemporarySinkError,
  verifyInProgressPolicy,
  withInProgress,
  type BatchResult,
  type BatchSettledEvent,
  type WorkContext,
} from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { EventLog, expectShape } from "../helpers/diagnostics.js";
import { createFixture, fetchBatch, publish, uniqueName, type Fixture } from "../helpers/jetstream.js";
import { startServer, type NatsServer } from "../helpers/nats-server.js";

const ACK_WAIT_MS = 2000;
const INTERVAL_MS = 700;
const C = DiagnosticsChannels;

const policyFor = (over: Record<string, unknown> = {}) =>
  verifyInProgressPolicy({ enabled: true, intervalMs: INTERVAL_MS, maxHeartbeats: 20, shutdownTimeoutMs: 60_000, ...over }, {
    ackWaitMs: ACK_WAIT_MS,
    source: "configured",
  });

/** Resolves with the abort reason once `ctx.signal` aborts. */
function aborted(ctx: WorkContext): Promise<unknown> {
  return new Promise((resolve) => {
    if (ctx.signal.aborted) resolve(ctx.signal.reason);
    else ctx.signal.addEventListener("abort", () => resolve(ctx.signal.reason), { once: true });
  });
}

/** A process-local batch number as documented: a positive safe integer. */
function expectBatchId(id: number): void {
  expect(Number.isSafeInteger(id) && id > 0).toBe(true);
}

describe("diagnostics events on a real nats-server", () => {
  let srv: NatsServer;
  let nc: NatsConnection;
  let spyConn: NatsConnection;
  let log: EventLog;

  beforeAll(async () => {
    srv = await startServer();
    nc = await srv.connect();
    spyConn = await srv.connect();
    log = new EventLog();
  });
  afterAll(async () => {
    log?.dispose();
    await nc?.close();
    await spyConn?.close();
    await srv?.dispose();
  });
  beforeEach(() => {
    log.clear();
  });

  async function setup(n: number, conn: NatsConnection = nc): Promise<{ f: Fixture; spy: AckSpy; msgs: JsMsg[]; seqs: number[] }> {
    const f = await createFixture(conn, { ackWaitMs: ACK_WAIT_MS });
    const spy = await AckSpy.start(spyConn, f.stream);
    const seqs = await publish(f, n);
    const msgs = await fetchBatch(f, n);
    expect(msgs.map((m) => m.seq)).toEqual(seqs);
    return { f, spy, msgs, seqs };
  }

  async function drain(): Promise<void> {
    await nc.flush();
    await spyConn.flush();
  }

  /** Every logged payload has exactly its documented shape. */
  function expectAllShapes(): void {
    for (const e of log.events) expectShape(e.channel, e.payload);
  }

  describe("heartbeat:sent", () => {
    it("one event per accepted round, numbered from 1, client-accepted, matching the +WPI frames", async () => {
      const { spy, msgs, seqs } = await setup(2);
      const metrics = new InMemoryMetrics();
      await withInProgress(msgs, () => log.waitFor((l) => l.of(C.HEARTBEAT_SENT).length >= 2, "two beats"), policyFor(), { metrics });
      await drain();
      expectAllShapes();
      expect(log.channels()).toEqual([C.HEARTBEAT_SENT, C.HEARTBEAT_SENT]);
      const sent = log.of(C.HEARTBEAT_SENT);
      expectBatchId(sent[0]!.batchId);
      for (const [i, e] of sent.entries()) {
        expect(e).toMatchObject({ batchId: sent[0]!.batchId, batchSize: 2, beat: i + 1, confirmed: false });
        expect(e.durationMs).toBeGreaterThanOrEqual(0);
        expect(e.durationMs).toBeLessThan(INTERVAL_MS);
        expect(e.latenessMs).toBeGreaterThanOrEqual(0);
      }
      for (const seq of seqs) expect(spy.of("+WPI", seq)).toHaveLength(2);
      expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL]).toBe(2);
      for (const m of msgs) m.ack();
      await spy.dispose();
    });

    it("server-confirmed rounds say so and measure the round trip", async () => {
      const { spy, msgs, seqs } = await setup(3);
      await withInProgress(msgs, () => log.waitFor((l) => l.of(C.HEARTBEAT_SENT).length >= 2, "two confirmed beats"), policyFor(), {
        confirm: { connection: nc, timeoutMs: 1000 },
      });
      await drain();
      expectAllShapes();
      const sent = log.of(C.HEARTBEAT_SENT);
      expect(sent.map((e) => [e.beat, e.batchSize, e.confirmed])).toEqual([
        [1, 3, true],
        [2, 3, true],
      ]);
      for (const e of sent) expect(e.durationMs).toBeGreaterThan(0);
      for (const seq of seqs) {
        const wpi = spy.of("+WPI", seq);
        expect(wpi).toHaveLength(2);
        expect(wpi.every((x) => x.withReply)).toBe(true);
      }
      for (const m of msgs) m.ack();
      await spy.dispose();
    });
  });

  describe("heartbeat:failed and lease:expired", () => {
    it("a closed connection: the next round fails for good (final), then the lease expires", async () => {
      const own = await srv.connect();
      const { spy, msgs, seqs } = await setup(1, own);
      const metrics = new InMemoryMetrics();
      const reason = await withInProgress(
        msgs,
        async (ctx) => {
          await log.waitFor((l) => l.of(C.HEARTBEAT_SENT).length >= 1, "the first beat");
          await own.close();
          return await aborted(ctx);
        },
        policyFor(),
        { metrics },
      );
      expectAllShapes();
      expect(log.channels()).toEqual([C.HEARTBEAT_SENT, C.HEARTBEAT_FAILED, C.LEASE_EXPIRED]);
      const [sent] = log.of(C.HEARTBEAT_SENT);
      const [failed] = log.of(C.HEARTBEAT_FAILED);
      const [expired] = log.of(C.LEASE_EXPIRED);
      expect(failed).toEqual({ batchId: sent!.batchId, batchSize: 1, beat: 2, failedMessages: 1, errorName: "ConnectionClosedError", final: true });
      expect(expired).toMatchObject({ batchId: sent!.batchId, batchSize: 1, beats: 2 });
      expect(reason).toBeInstanceOf(LeaseExpiredError);
      expect(expired!.overdueMs).toBe((reason as LeaseExpiredError).overdueMs);
      expect(expired!.overdueMs).toBeGreaterThanOrEqual(0);
      const c = metrics.snapshot().counters;
      expect(c[MetricNames.IN_PROGRESS_FAILURES_TOTAL]).toBe(1);
      expect(c[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL]).toBe(1);
      await drain();
      expect(spy.of("+WPI", seqs[0])).toHaveLength(1);
      await spy.dispose();
    });

    it("a blocked event loop: no round left, the lease expired, and overdueMs shows the block", async () => {
      const { spy, msgs, seqs } = await setup(1);
      const reason = await withInProgress(
        msgs,
        async (ctx) => {
          // Block the whole process for 3 s (longer than the 2 s AckWait) without yielding.
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 3000);
          return await aborted(ctx);
        },
        policyFor(),
      );
      expectAllShapes();
      // The stall first (the watch's tick was due first), then the lease it cost.
      expect(log.channels()).toEqual([C.EVENT_LOOP_STALL, C.LEASE_EXPIRED]);
      const [stall] = log.of(C.EVENT_LOOP_STALL);
      expect(stall).toMatchObject({ batchesInFlight: 1, threadedBatches: 0 });
      expect(stall!.durationMs).toBeGreaterThan(2000);
      const [expired] = log.of(C.LEASE_EXPIRED);
      expectBatchId(expired!.batchId);
      expect(expired).toMatchObject({ batchSize: 1, beats: 0 });
      expect(expired!.overdueMs).toBeGreaterThan(500);
      expect(expired!.overdueMs).toBe((reason as LeaseExpiredError).overdueMs);
      await drain();
      expect(spy.of("+WPI", seqs[0])).toHaveLength(0);
      await spy.dispose();
    });
  });

  describe("heartbeat:limit", () => {
    it("continue: the limit after the last round, then the lease expires one AckWait later", async () => {
      const { spy, msgs, seqs } = await setup(2);
      const reason = await withInProgress(msgs, aborted, policyFor({ maxHeartbeats: 2 }), { onLimit: "continue" });
      expectAllShapes();
      expect(log.channels()).toEqual([C.HEARTBEAT_SENT, C.HEARTBEAT_SENT, C.HEARTBEAT_LIMIT, C.LEASE_EXPIRED]);
      const id = log.of(C.HEARTBEAT_SENT)[0]!.batchId;
      expect(log.of(C.HEARTBEAT_LIMIT)).toEqual([{ batchId: id, batchSize: 2, maxHeartbeats: 2, onLimit: "continue" }]);
      expect(log.of(C.LEASE_EXPIRED)[0]).toMatchObject({ batchId: id, batchSize: 2, beats: 2 });
      expect(reason).toBeInstanceOf(LeaseExpiredError);
      await drain();
      for (const seq of seqs) expect(spy.of("+WPI", seq)).toHaveLength(2);
      await spy.dispose();
    });

    it("abort: the work's signal carries HeartbeatLimitError, and no lease expiry follows", async () => {
      const { spy, msgs } = await setup(1);
      const err = await withInProgress(
        msgs,
        async (ctx) => {
          throw await aborted(ctx);
        },
        policyFor({ maxHeartbeats: 1 }),
        { onLimit: "abort" },
      ).catch((e: unknown) => e);
      expectAllShapes();
      expect(err).toBeInstanceOf(HeartbeatLimitError);
      expect(log.channels()).toEqual([C.HEARTBEAT_SENT, C.HEARTBEAT_LIMIT]);
      const id = log.of(C.HEARTBEAT_SENT)[0]!.batchId;
      expect(log.of(C.HEARTBEAT_LIMIT)).toEqual([{ batchId: id, batchSize: 1, maxHeartbeats: 1, onLimit: "abort" }]);
      msgs[0]!.ack();
      await spy.dispose();
    });
  });

  describe("batch:settled", () => {
    /** The one settled event of the test, checked against the result it mirrors. */
    function settledFor(result: BatchResult, batchSize: number): BatchSettledEvent {
      expectAllShapes();
      const settled = log.of(C.BATCH_SETTLED);
      expect(settled).toHaveLength(1);
      const e = settled[0]!;
      expectBatchId(e.batchId);
      expect(e).toMatchObject({
        batchSize,
        outcome: result.outcome,
        acked: result.acked,
        nacked: result.nacked,
        termed: result.termed,
        deadLettered: result.deadLettered,
        left: result.left,
        heartbeats: result.heartbeats,
        writeMs: result.writeMs,
      });
      expect(e.writeMs).toBeGreaterThanOrEqual(0);
      expect(log.channels().at(-1)).toBe(C.BATCH_SETTLED);
      return e;
    }

    it("acked: the heartbeat events of the batch carry its batchId", async () => {
      const { spy, msgs, seqs } = await setup(2);
      const ack = new CommitThenAck({ inProgress: policyFor() });
      const result = await ack.process(msgs, () => log.waitFor((l) => l.of(C.HEARTBEAT_SENT).length >= 1, "a beat during the write"));
      const e = settledFor(result, 2);
      expect(e).toMatchObject({ outcome: "acked", acked: 2, nacked: 0, termed: 0, deadLettered: 0, left: 0, heartbeats: 1 });
      expect(e).not.toHaveProperty("errorName");
      expect(log.of(C.HEARTBEAT_SENT).map((x) => x.batchId)).toEqual([e.batchId]);
      await drain();
      for (const seq of seqs) expect(spy.forSequence(seq).map((x) => x.kind)).toEqual(["+WPI", "+ACK"]);
      await spy.dispose();
    });

    it("nacked: a temporary failure, with the error's class name", async () => {
      const { spy, msgs } = await setup(1);
      const ack = new CommitThenAck({ onTemporaryFailure: { action: "nak", delayMs: 30_000 } });
      const result = await ack.process(msgs, () => {
        throw new TemporarySinkError("database unavailable");
      });
      const e = settledFor(result, 1);
      expect(e).toEqual({ batchId: e.batchId, batchSize: 1, outcome: "nacked", acked: 0, nacked: 1, termed: 0, deadLettered: 0, left: 0, exhausted: 0, abandoned: 0, heartbeats: 0, writeMs: result.writeMs, errorName: "TemporarySinkError" });
      await drain();
      expect(spy.of("-NAK")).toHaveLength(1);
      await spy.dispose();
    });

    it("left: the leave policy sends nothing", async () => {
      const { spy, msgs } = await setup(2);
      const ack = new CommitThenAck({ onTemporaryFailure: { action: "leave" } });
      const result = await ack.process(msgs, () => {
        throw new Error("unclassified");
      });
      const e = settledFor(result, 2);
      expect(e).toMatchObject({ outcome: "left", left: 2, errorName: "Error" });
      await drain();
      expect(spy.frames).toHaveLength(0);
      await spy.dispose();
    });

    it("dead_lettered: copied to the dead-letter stream, then acknowledged", async () => {
      const { f, spy, msgs } = await setup(1);
      const dlqStream = uniqueName("DLQ");
      const dlqSubject = `${dlqStream.toLowerCase()}.dead`;
      await f.jsm.streams.add({ name: dlqStream, subjects: [dlqSubject] });
      const ack = new CommitThenAck({ deadLetter: { js: f.js, subject: dlqSubject } });
      const result = await ack.process(msgs, () => {
        throw new PermanentSinkError("unparseable");
      });
      const e = settledFor(result, 1);
      expect(e).toMatchObject({ outcome: "dead_lettered", deadLettered: 1, acked: 0, errorName: "PermanentSinkError" });
      expect((await f.jsm.streams.info(dlqStream)).state.messages).toBe(1);
      await drain();
      expect(spy.of("+ACK")).toHaveLength(1);
      await spy.dispose();
    });

    it("termed: a permanent failure without a dead-letter target", async () => {
      const { spy, msgs } = await setup(1);
      const ack = new CommitThenAck({ connection: nc });
      const result = await ack.process(msgs, () => {
        throw new PermanentSinkError("unparseable");
      });
      const e = settledFor(result, 1);
      expect(e).toMatchObject({ outcome: "termed", termed: 1, errorName: "PermanentSinkError" });
      await drain();
      expect(spy.of("+TERM")).toHaveLength(1);
      await spy.dispose();
    });

    it("cancelled: an abort mid-write leaves the batch, with the abort reason's class name", async () => {
      class ShutdownRequested extends Error {
        override readonly name = "ShutdownRequested";
      }
      const { spy, msgs } = await setup(2);
      const shutdown = new AbortController();
      const ack = new CommitThenAck({ inProgress: policyFor(), signal: shutdown.signal });
      const result = await ack.process(msgs, async (_batch, ctx) => {
        await log.waitFor((l) => l.of(C.HEARTBEAT_SENT).length >= 1, "a beat before the abort");
        shutdown.abort(new ShutdownRequested("SIGTERM"));
        throw await aborted(ctx);
      });
      const e = settledFor(result, 2);
      expect(e).toMatchObject({ outcome: "cancelled", left: 2, acked: 0, heartbeats: 1, errorName: "ShutdownRequested" });
      expect(log.of(C.HEARTBEAT_SENT).map((x) => x.batchId)).toEqual([e.batchId]);
      await drain();
      expect(spy.frames.map((x) => x.kind)).toEqual(["+WPI", "+WPI"]);
      await spy.dispose();
    });

    it("partial: each message settled by its own failure; errorName is the first failure's", async () => {
      const { spy, msgs, seqs } = await setup(4);
      const ack = new CommitThenAck({ onTemporaryFailure: { action: "nak", delayMs: 30_000 } });
      const result = await ack.process(msgs, (batch) => ({
        failed: [
          { msg: batch[1]!, error: new TemporarySinkError("row locked") },
          { msg: batch[2]!, error: new PermanentSinkError("bad row") },
        ],
      }));
      const e = settledFor(result, 4);
      expect(e).toMatchObject({ outcome: "partial", acked: 2, nacked: 1, termed: 1, deadLettered: 0, left: 0, errorName: "TemporarySinkError" });
      await drain();
      expect(seqs.map((s) => spy.forSequence(s).map((x) => x.kind))).toEqual([["+ACK"], ["-NAK"], ["+TERM"], ["+ACK"]]);
      await spy.dispose();
    });

    it("an empty batch settles nothing and publishes nothing", async () => {
      const ack = new CommitThenAck();
      const result = await ack.process([], () => undefined);
      expect(result.outcome).toBe("empty");
      expect(log.events).toHaveLength(0);
    });
  });
});
