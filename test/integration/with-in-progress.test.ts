/**
 * withInProgress against a real nats-server: the ack-frame spy and consumer info are the
 * oracles. AckWait is 2 s and the interval 1 s throughout, so a 6 s write is 3× AckWait.
 */
import { describe, expect, it, vi } from "vitest";
import type { JsMsg } from "@nats-io/jetstream";
import {
  ConnectionClosedError,
  InMemoryMetrics,
  LeaseExpiredError,
  MetricNames,
  verifyInProgressPolicy,
  withInProgress,
  type WorkContext,
} from "../../src/index.js";
import { supervisionCohort } from "../../src/lease/supervision-cohort.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, fetchBatch, publish, type Fixture } from "../helpers/jetstream.js";
import type { NatsServer } from "../helpers/nats-server.js";
import { useServer } from "../helpers/server-fixture.js";

const ACK_WAIT_MS = 2000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const policyFor = (over: Record<string, unknown> = {}) =>
  verifyInProgressPolicy({ enabled: true, intervalMs: 1000, maxHeartbeats: 20, shutdownTimeoutMs: 1000, ...over }, {
    ackWaitMs: ACK_WAIT_MS,
    source: "configured",
  });

/** A second worker on the same durable consumer, pulling for `ms`. */
async function otherWorker(srv: NatsServer, f: Fixture, ms: number): Promise<{ msgs: JsMsg[]; at: number[]; close(): Promise<void> }> {
  const conn = await srv.connect();
  const other: Fixture = { ...f, nc: conn, js: (await import("@nats-io/jetstream")).jetstream(conn) };
  const at: number[] = [];
  const start = performance.now();
  const msgs = await fetchBatch(other, 1, ms);
  for (const _ of msgs) at.push(performance.now() - start);
  return { msgs, at, close: () => conn.close() };
}

describe("withInProgress on a real nats-server", () => {
  const fx = useServer();

  async function setup(n = 1): Promise<{ f: Fixture; spy: AckSpy; msgs: JsMsg[]; seqs: number[] }> {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    const spy = await AckSpy.start(fx.spyConn, f.stream);
    const seqs = await publish(f, n);
    const msgs = await fetchBatch(f, n);
    expect(msgs.map((m) => m.seq)).toEqual(seqs);
    return { f, spy, msgs, seqs };
  }


  it("a write of 3× AckWait with beats is delivered once and never redelivered", async () => {
    const { f, spy, msgs, seqs } = await setup(2);
    const metrics = new InMemoryMetrics();
    const other = otherWorker(fx.srv, f, 7000);
    await withInProgress(msgs, () => sleep(3 * ACK_WAIT_MS), policyFor(), { metrics });
    for (const m of msgs) m.ack();
    await fx.drain();
    const o = await other;
    await o.close();
    expect(o.msgs).toHaveLength(0);
    const info = await consumerInfo(f);
    expect(info.delivered.consumer_seq).toBe(2);
    expect(info.num_redelivered).toBe(0);
    for (const seq of seqs) {
      const frames = spy.forSequence(seq);
      const kinds = frames.map((x) => x.kind);
      // Every +WPI before the final +ACK, all at delivery 1, about one per second.
      expect(kinds.at(-1)).toBe("+ACK");
      expect(kinds.slice(0, -1).every((k) => k === "+WPI")).toBe(true);
      expect(kinds.length - 1).toBeGreaterThanOrEqual(4);
      expect(kinds.length - 1).toBeLessThanOrEqual(6);
      expect(frames.every((x) => x.deliveryCount === 1)).toBe(true);
    }
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL]).toBe(spy.of("+WPI", seqs[0]).length);
    await spy.dispose();
  });

  it("twelve batches beating in the same ticks (one ends early): each keeps its own lease; a second worker on the durable receives nothing", async () => {
    const { f, spy, msgs, seqs } = await setup(12);
    const runAll = vi.spyOn(supervisionCohort, "runAll");
    try {
      const other = otherWorker(fx.srv, f, 7000);
      // One batch per message, all started together with one interval: their beats fall due in the same ticks.
      await Promise.all(msgs.map(async (m, i) => {
        await withInProgress(m, () => sleep(i === 0 ? 1200 : 3 * ACK_WAIT_MS), policyFor());
        m.ack();
      }));
      await fx.drain();
      const o = await other;
      await o.close();
      expect(o.msgs).toHaveLength(0);
      // The beats went out together: at least one tick ran every batch still writing in one call.
      expect(Math.max(...runAll.mock.calls.map(([, from, to]) => to - from))).toBeGreaterThanOrEqual(11);
      const info = await consumerInfo(f);
      expect(info.delivered.consumer_seq).toBe(12);
      expect(info.num_ack_pending).toBe(0);
      for (const [i, seq] of seqs.entries()) {
        const kinds = spy.forSequence(seq).map((x) => x.kind);
        expect(kinds.at(-1)).toBe("+ACK");
        expect(kinds.filter((k) => k === "+ACK")).toHaveLength(1);
        expect(kinds.slice(0, -1).every((k) => k === "+WPI")).toBe(true);
        if (i === 0) expect(kinds.length - 1).toBeLessThanOrEqual(1);
        else expect(kinds.length - 1).toBeGreaterThanOrEqual(4);
      }
    } finally {
      runAll.mockRestore();
      await spy.dispose();
    }
  });

  it("a batch started 80 ms after another beats in its tick from the first round on; both keep their leases against a second worker", async () => {
    const { f, spy, msgs, seqs } = await setup(2);
    try {
      const other = otherWorker(fx.srv, f, 7000);
      // Both writes end together, half an interval after a round (not on one, where the two
      // could end on either side of the last tick and count different beats).
      const writeMs = 3 * ACK_WAIT_MS - 500;
      const first = withInProgress(msgs[0]!, () => sleep(writeMs), policyFor());
      const startedAt = performance.now();
      await sleep(80);
      const second = withInProgress(msgs[1]!, () => sleep(writeMs - (performance.now() - startedAt)), policyFor());
      await Promise.all([first, second]);
      for (const m of msgs) m.ack();
      await fx.drain();
      const o = await other;
      await o.close();
      expect(o.msgs).toHaveLength(0);
      const beats = seqs.map((seq) => spy.forSequence(seq).filter((x) => x.kind === "+WPI").map((x) => x.at));
      expect(beats[0]!.length).toBeGreaterThanOrEqual(4);
      expect(beats[1]).toHaveLength(beats[0]!.length);
      // Without the join, each of the second's frames would leave 80 ms after the first's.
      for (const [k, at] of beats[1]!.entries()) expect(Math.abs(at - beats[0]![k]!), spy.summary()).toBeLessThan(40);
      // Still refreshed at least once an interval (a join only brings a beat forward).
      for (const b of beats) for (let k = 1; k < b.length; k++) expect(b[k]! - b[k - 1]!).toBeLessThan(1000 + 250);
      for (const seq of seqs) expect(spy.forSequence(seq).filter((x) => x.kind === "+ACK")).toHaveLength(1);
    } finally {
      await spy.dispose();
    }
  });

  it("the same write without beats is redelivered to another worker", async () => {
    const { f, spy, msgs, seqs } = await setup(1);
    const other = otherWorker(fx.srv, f, 7000);
    await withInProgress(msgs, () => sleep(3 * ACK_WAIT_MS), { enabled: false });
    const o = await other;
    expect(o.msgs).toHaveLength(1);
    expect(o.msgs[0]?.seq).toBe(seqs[0]);
    expect(o.msgs[0]?.info.deliveryCount).toBe(2);
    expect(spy.of("+WPI")).toHaveLength(0);
    o.msgs[0]?.ack();
    await o.close();
    await spy.dispose();
  });

  it("reaching maxHeartbeats leads to redelivery, and the work learns its lease expired", async () => {
    const { f, spy, msgs, seqs } = await setup(1);
    const other = otherWorker(fx.srv, f, 8000);
    let ctx: WorkContext | undefined;
    const metrics = new InMemoryMetrics();
    const outcome = await withInProgress(
      msgs,
      async (c) => {
        ctx = c;
        await sleep(3 * ACK_WAIT_MS);
        return c.signal.reason;
      },
      policyFor({ maxHeartbeats: 2, shutdownTimeoutMs: 60_000 }),
      { metrics },
    );
    const o = await other;
    expect(o.msgs[0]?.seq).toBe(seqs[0]);
    expect(o.msgs[0]?.info.deliveryCount).toBe(2);
    // Two beats (at ~1 s and ~2 s) kept it to ~4 s, well before the 6 s write ended.
    expect(o.at[0]).toBeGreaterThan(3000);
    expect(spy.of("+WPI", seqs[0])).toHaveLength(2);
    expect(outcome).toBeInstanceOf(LeaseExpiredError);
    expect(ctx?.lease?.expired).toBe(true);
    const c = metrics.snapshot().counters;
    expect(c[MetricNames.IN_PROGRESS_MAX_HEARTBEATS_REACHED_TOTAL]).toBe(1);
    expect(c[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL]).toBe(1);
    o.msgs[0]?.ack();
    await o.close();
    await spy.dispose();
  });

  it("a throwing write stops the beats at once", async () => {
    const { spy, msgs, seqs } = await setup(1);
    const boom = new Error("sink refused");
    const err = await withInProgress(msgs, async () => {
      await sleep(2500);
      throw boom;
    }, policyFor()).catch((e: unknown) => e);
    expect(err).toBe(boom);
    await fx.drain();
    const beatsAtSettle = spy.of("+WPI", seqs[0]).length;
    expect(beatsAtSettle).toBeGreaterThanOrEqual(1);
    await sleep(3000);
    await fx.drain();
    expect(spy.of("+WPI", seqs[0])).toHaveLength(beatsAtSettle);
    expect(spy.of("+ACK")).toHaveLength(0);
    await spy.dispose();
  });

  it("abort stops the beats, and the promise settles within shutdownTimeoutMs even if the work ignores it", async () => {
    const { spy, msgs, seqs } = await setup(1);
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error("shutting down")), 2500);
    const t0 = performance.now();
    const err = await withInProgress(msgs, () => sleep(20_000), policyFor({ shutdownTimeoutMs: 1000 }), { signal: ac.signal }).catch(
      (e: unknown) => e,
    );
    const elapsed = performance.now() - t0;
    expect((err as Error).message).toBe("shutting down");
    // Abort at 2.5 s plus the 1 s bound; generous upper margin for a loaded machine.
    expect(elapsed).toBeGreaterThanOrEqual(3400);
    expect(elapsed).toBeLessThan(6000);
    await fx.drain();
    const beats = spy.of("+WPI", seqs[0]).length;
    await sleep(2500);
    await fx.drain();
    expect(spy.of("+WPI", seqs[0])).toHaveLength(beats);
    expect(spy.frames.filter((x) => x.kind !== "+WPI")).toHaveLength(0);
    await spy.dispose();
  });

  it("closing the connection mid-work neither crashes nor acks; the work is told at the next beat and still returns; the message comes back", async () => {
    const own = await fx.srv.connect();
    const f = await createFixture(own, { ackWaitMs: ACK_WAIT_MS });
    const spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const msgs = await fetchBatch(f, 1);
    const metrics = new InMemoryMetrics();
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => unhandled.push(e);
    process.on("unhandledRejection", onUnhandled);
    try {
      // The next beat (about 0.5 s after the close) finds it closed and ends the lease there;
      // the deadline would pass 1.5 s after the close. A long shutdown bound lets the work
      // finish on its own time instead of racing it.
      let closedAt = 0;
      let abortedAt = 0;
      let reason: unknown;
      const result = await withInProgress(msgs, async (ctx) => {
        ctx.signal.addEventListener("abort", () => ((abortedAt = performance.now()), (reason = ctx.signal.reason)), { once: true });
        await sleep(1500);
        await own.close();
        closedAt = performance.now();
        await sleep(2500);
        return "written";
      }, policyFor({ shutdownTimeoutMs: 60_000 }), { metrics });
      // The call still waits for the work and returns what it returns.
      expect(result).toBe("written");
      expect(reason).toBeInstanceOf(LeaseExpiredError);
      expect((reason as LeaseExpiredError).cause).toBeInstanceOf(ConnectionClosedError);
      expect((reason as LeaseExpiredError).overdueMs).toBe(0);
      expect(abortedAt - closedAt).toBeGreaterThan(0);
      expect(abortedAt - closedAt).toBeLessThan(1000 + 1000);
      const c = metrics.snapshot().counters;
      // The closed connection ended supervision: one failed attempt, no more, and the lease.
      expect(c[MetricNames.IN_PROGRESS_FAILURES_TOTAL]).toBe(1);
      expect(c[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL]).toBe(1);
      msgs[0]?.ack(); // a no-op on a closed connection
      const fresh: Fixture = { ...f, nc: fx.nc, js: (await import("@nats-io/jetstream")).jetstream(fx.nc) };
      const again = await fetchBatch(fresh, 1, 5000);
      expect(again[0]?.seq).toBe(seq);
      expect(again[0]?.info.deliveryCount).toBe(2);
      again[0]?.ack();
      await fx.drain();
      expect(spy.of("+ACK", seq).every((x) => x.deliveryCount === 2)).toBe(true);
      expect(unhandled).toEqual([]);
    } finally {
      process.off("unhandledRejection", onUnhandled);
      await spy.dispose();
    }
  });

  it("a blocked event loop raises the lease-expired signal, and the message was redelivered", async () => {
    const { f, spy, msgs, seqs } = await setup(1);
    const metrics = new InMemoryMetrics();
    const reason = await withInProgress(msgs, async (ctx) => {
      // Block the whole process for 3 s (longer than the 2 s AckWait) without yielding.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 3000);
      // Let the overdue timer tick run.
      await sleep(50);
      return ctx.signal.reason;
    }, policyFor({ shutdownTimeoutMs: 60_000 }), { metrics });
    expect(reason).toBeInstanceOf(LeaseExpiredError);
    expect((reason as LeaseExpiredError).overdueMs).toBeGreaterThan(500);
    expect(spy.of("+WPI", seqs[0])).toHaveLength(0);
    const again = await fetchBatch(f, 1, 5000);
    expect(again[0]?.seq).toBe(seqs[0]);
    expect(again[0]?.info.deliveryCount).toBe(2);
    again[0]?.ack();
    const lateness = metrics.snapshot().observations[MetricNames.IN_PROGRESS_TICK_LATENESS_SECONDS] ?? [];
    expect(Math.max(...lateness)).toBeGreaterThan(1);
    await spy.dispose();
  });

  it("confirmed heartbeats: the server answers each +WPI sent with a reply subject", async () => {
    const { spy, msgs, seqs } = await setup(3);
    const metrics = new InMemoryMetrics();
    let ctx: WorkContext | undefined;
    await withInProgress(msgs, async (c) => {
      ctx = c;
      await sleep(2500);
    }, policyFor(), { metrics, confirm: { connection: fx.nc, timeoutMs: 1000 } });
    for (const m of msgs) m.ack();
    await fx.drain();
    for (const seq of seqs) {
      const wpi = spy.of("+WPI", seq);
      expect(wpi.length).toBeGreaterThanOrEqual(2);
      expect(wpi.every((x) => x.withReply)).toBe(true);
    }
    const c = metrics.snapshot().counters;
    expect(c[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL]).toBe(c[MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL]);
    expect(c[MetricNames.IN_PROGRESS_FAILURES_TOTAL]).toBeUndefined();
    expect(ctx?.lease?.remainingMs()).toBeGreaterThan(0);
    expect(metrics.snapshot().observations[MetricNames.IN_PROGRESS_HEARTBEAT_SECONDS]?.length).toBeGreaterThanOrEqual(2);
    await spy.dispose();
  });
});
