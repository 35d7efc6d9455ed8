/**
 * A sink outage spends no delivery: a write that threw a temporary error for the whole batch is
 * tried again in place, with a growing delay, while the lease bound allows, beats going on and
 * the loops pulling nothing new; only past the bound does the settle table apply. The pure rule,
 * then CommitThenAck on fake messages.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CommitThenAck, InMemoryMetrics, MetricNames, PermanentSinkError, TemporarySinkError, verifyInProgressPolicy } from "../../../src/index.js";
import { RETRY_IN_PLACE_BASE_MS, RETRY_IN_PLACE_MAX_MS, retryBudgetMs, retryInPlaceDelayMs } from "../../../src/settle/retry-in-place.js";
import { fakeMsg } from "../../helpers/fakes.js";

describe("the retry rule", () => {
  it("grows from 250 ms to 2 s, only lengthened by jitter, and never past the budget", () => {
    const base = { temporary: true, aborted: false, elapsedMs: 0, budgetMs: 60_000 };
    expect([0, 1, 2, 3, 4, 10].map((retries) => retryInPlaceDelayMs({ ...base, retries }, 0))).toEqual([250, 500, 1000, 2000, 2000, 2000]);
    expect(retryInPlaceDelayMs({ ...base, retries: 0 }, 0.999)).toBe(300);
    expect(retryInPlaceDelayMs({ ...base, retries: 0, elapsedMs: 59_800 }, 0)).toBeUndefined();
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 100 }), fc.double({ min: 0, max: 60_000, noNaN: true }), fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), (retries, elapsedMs, r) => {
        const wait = retryInPlaceDelayMs({ ...base, retries, elapsedMs }, r);
        if (wait === undefined) return;
        expect(wait).toBeGreaterThanOrEqual(Math.min(RETRY_IN_PLACE_MAX_MS, RETRY_IN_PLACE_BASE_MS * 2 ** retries));
        expect(wait).toBeLessThanOrEqual(RETRY_IN_PLACE_MAX_MS * 1.2);
        expect(elapsedMs + wait).toBeLessThan(60_000);
      }),
    );
  });

  it("never retries a permanent failure, an aborted write, or without a budget", () => {
    const base = { temporary: true, aborted: false, retries: 0, elapsedMs: 0, budgetMs: 60_000 };
    expect(retryInPlaceDelayMs({ ...base, temporary: false }, 0)).toBeUndefined();
    expect(retryInPlaceDelayMs({ ...base, aborted: true }, 0)).toBeUndefined();
    expect(retryInPlaceDelayMs({ ...base, budgetMs: undefined }, 0)).toBeUndefined();
  });

  it("the budget: the heartbeats' less one interval; a quarter of the window without; none when neither is known", () => {
    expect(retryBudgetMs({ intervalMs: 1000, maxHeartbeats: 20 }, 3000)).toBe(19_000);
    expect(retryBudgetMs({ intervalMs: 1000, maxHeartbeats: 1 }, 3000)).toBe(0);
    expect(retryBudgetMs(undefined, 30_000)).toBe(7500);
    expect(retryBudgetMs(undefined, undefined)).toBeUndefined();
  });
});

/** A write whose sink is down for its first `failures` attempts. */
function flakySink(failures: number, error: () => unknown = () => new TemporarySinkError("connection refused")) {
  const attempts: number[] = [];
  return {
    attempts,
    write: async () => {
      attempts.push(performance.now());
      if (attempts.length <= failures) throw error();
    },
  };
}

describe("CommitThenAck: a write that threw is tried again in place", () => {
  const beating = () => verifyInProgressPolicy({ enabled: true, intervalMs: 200, maxHeartbeats: 20 }, { ackWaitMs: 1000, source: "configured" });

  it("an outage the lease bridges: tried again with a growing delay, beats meanwhile, then acked — no NAK, no delivery spent", async () => {
    const metrics = new InMemoryMetrics();
    const msgs = [fakeMsg(), fakeMsg()];
    const sink = flakySink(3);
    const r = await new CommitThenAck({ inProgress: beating(), metrics }).process(msgs, sink.write);
    expect(r).toMatchObject({ outcome: "acked", acked: 2 });
    expect(sink.attempts).toHaveLength(4);
    const gaps = sink.attempts.slice(1).map((t, i) => t - sink.attempts[i]!);
    expect(gaps[0]).toBeGreaterThanOrEqual(240);
    expect(gaps[1]).toBeGreaterThanOrEqual(490);
    expect(gaps[2]).toBeGreaterThanOrEqual(990);
    expect(msgs.every((m) => m.calls.nak.length === 0 && m.calls.ack === 1)).toBe(true);
    // ~1.75 s of retries with beats every 200 ms.
    expect(msgs.every((m) => m.calls.working >= 5)).toBe(true);
    expect(metrics.snapshot().counters[MetricNames.WRITE_RETRIES_TOTAL]).toBe(3);
  });

  it("past the lease bound the settle table applies (a NAK with a delay): attempts bounded by the budget", async () => {
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 200, maxHeartbeats: 6 }, { ackWaitMs: 1000, source: "configured" });
    const m = fakeMsg();
    const sink = flakySink(Number.POSITIVE_INFINITY);
    const t0 = performance.now();
    const r = await new CommitThenAck({ inProgress: policy }).process([m], sink.write);
    expect(r.outcome).toBe("nacked");
    // Budget (6 − 1) × 200 ms = 1 s: tries at 0, 250, 750 ms; the next would end past it.
    expect(sink.attempts).toHaveLength(3);
    expect(performance.now() - t0).toBeLessThan(2000);
    expect(m.calls.nak).toHaveLength(1);
  });

  it("a permanent failure, a report's per-message failures and retryInPlace: false settle at once", async () => {
    const poison = flakySink(1, () => new PermanentSinkError("bad row"));
    expect((await new CommitThenAck({ inProgress: beating() }).process([fakeMsg()], poison.write)).outcome).toBe("termed");
    expect(poison.attempts).toHaveLength(1);

    let reports = 0;
    const partial = await new CommitThenAck({ inProgress: beating() }).process([fakeMsg(), fakeMsg()], async (batch) => {
      reports += 1;
      return { failed: [{ msg: batch[0]!, error: new TemporarySinkError("row locked") }] };
    });
    expect(reports).toBe(1);
    expect(partial).toMatchObject({ outcome: "partial", acked: 1, nacked: 1 });

    const off = flakySink(1);
    expect((await new CommitThenAck({ inProgress: beating(), onTemporaryFailure: { action: "nak", retryInPlace: false } }).process([fakeMsg()], off.write)).outcome).toBe("nacked");
    expect(off.attempts).toHaveLength(1);
  });

  it("heartbeats off: a quarter of the known AckWait; unknown: settled at once", async () => {
    const known = flakySink(Number.POSITIVE_INFINITY);
    const t0 = performance.now();
    await new CommitThenAck({ timing: { ackWaitMs: 2000, source: "configured" } }).process([fakeMsg()], known.write);
    // 500 ms: tries at 0 and 250 ms.
    expect(known.attempts).toHaveLength(2);
    expect(performance.now() - t0).toBeLessThan(1500);
    const unknown = flakySink(Number.POSITIVE_INFINITY);
    await new CommitThenAck().process([fakeMsg()], unknown.write);
    expect(unknown.attempts).toHaveLength(1);
  });

  it("a shutdown during a retry's wait stops the retries: cancelled, no frame", async () => {
    const ac = new AbortController();
    const m = fakeMsg();
    const sink = flakySink(Number.POSITIVE_INFINITY);
    const p = new CommitThenAck({ inProgress: beating(), signal: ac.signal }).process([m], sink.write);
    await new Promise((r) => setTimeout(r, 400));
    ac.abort(new Error("SIGTERM"));
    const r = await p;
    expect(r.outcome).toBe("cancelled");
    expect(sink.attempts).toHaveLength(2);
    expect(m.calls).toMatchObject({ ack: 0, nak: [], term: [] });
  });
});
