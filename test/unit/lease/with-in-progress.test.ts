import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import diagnostics from "node:diagnostics_channel";
import {
  ConnectionClosedError,
  DiagnosticsChannels,
  HeartbeatLimitError,
  InMemoryMetrics,
  InProgressPolicyError,
  LeaseExpiredError,
  MetricNames,
  verifyInProgressPolicy,
  withInProgress,
  type MetricsSink,
  type WorkContext,
} from "../../../src/index.js";
import { Scheduler } from "../../../src/lease/scheduler.js";
import { superviseWork } from "../../../src/lease/with-in-progress.js";
import { ManualClock, deferred, fakeMsg } from "../../helpers/fakes.js";

const policy = (over: Record<string, unknown> = {}, ackWaitMs = 30_000) =>
  verifyInProgressPolicy({ enabled: true, intervalMs: 5000, maxHeartbeats: 5, shutdownTimeoutMs: 1000, ...over }, { ackWaitMs, source: "configured" });

describe("withInProgress with fake timers", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("a disabled policy runs the work with no heartbeat at all", async () => {
    const m = fakeMsg();
    const done = deferred<string>();
    const p = withInProgress(m, () => done.promise, { enabled: false });
    await vi.advanceTimersByTimeAsync(120_000);
    done.resolve("ok");
    await expect(p).resolves.toBe("ok");
    expect(m.calls.working).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("refuses an enabled policy that was not verified, before the work starts", async () => {
    const work = vi.fn();
    const verified = policy();
    for (const p of [{ enabled: true, intervalMs: 1000 }, { ...verified }, { enabled: "false" }, null]) {
      const err = await withInProgress(fakeMsg(), work, p as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InProgressPolicyError);
      expect((err as InProgressPolicyError).violations[0]?.code).toBe("policy_not_verified");
    }
    expect(work).not.toHaveBeenCalled();
  });

  it("once the work settled every message itself, the rounds stop: no beats counted, no limit reached", async () => {
    const msgs = [fakeMsg(), fakeMsg()];
    const done = deferred();
    const metrics = new InMemoryMetrics();
    let ctx: WorkContext | undefined;
    const p = withInProgress(msgs, (c) => ((ctx = c), void c.signal, done.promise), policy({ maxHeartbeats: 3 }), { onLimit: "abort", metrics });
    await vi.advanceTimersByTimeAsync(5000);
    expect(msgs.map((m) => m.calls.working)).toEqual([1, 1]);
    for (const m of msgs) m.ack();
    // Far past three more intervals: without the stop these rounds would reach the limit and abort.
    await vi.advanceTimersByTimeAsync(60_000);
    expect(ctx!.signal.aborted).toBe(false);
    expect(ctx!.heartbeats).toBeLessThanOrEqual(2);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_MAX_HEARTBEATS_REACHED_TOTAL] ?? 0).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
    done.resolve();
    await p;
  });

  it("first beat comes intervalMs after the start, then every intervalMs, one +WPI per message", async () => {
    const msgs = [fakeMsg(), fakeMsg(), fakeMsg()];
    const done = deferred();
    let ctx: WorkContext | undefined;
    const p = withInProgress(msgs, (c) => ((ctx = c), done.promise), policy());
    await vi.advanceTimersByTimeAsync(4999);
    expect(msgs.map((m) => m.calls.working)).toEqual([0, 0, 0]);
    await vi.advanceTimersByTimeAsync(1);
    expect(msgs.map((m) => m.calls.working)).toEqual([1, 1, 1]);
    expect(ctx?.heartbeats).toBe(1);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(msgs.map((m) => m.calls.working)).toEqual([3, 3, 3]);
    done.resolve();
    await p;
  });

  describe("a beat due soon after a tick joins it", () => {
    /** Batch a starts now and b 60 ms later, both on `intervalMs`; `beats()` reads their +WPI counts, `end()` settles both. */
    async function twoBatches(intervalMs: number) {
      const [a, b] = [fakeMsg(), fakeMsg()];
      const done = deferred();
      const pa = withInProgress(a, () => done.promise, policy({ intervalMs }));
      await vi.advanceTimersByTimeAsync(60);
      const pb = withInProgress(b, () => done.promise, policy({ intervalMs }));
      const beats = (): number[] => [a.calls.working, b.calls.working];
      const end = async (): Promise<void> => {
        done.resolve();
        await Promise.all([pa, pb]);
      };
      return { beats, end };
    }

    it("within a tenth of the interval (1 s: 100 ms), b leaves in a's tick and then stays in step with it", async () => {
      const { beats, end } = await twoBatches(1000);
      await vi.advanceTimersByTimeAsync(939);
      expect(beats()).toEqual([0, 0]);
      // a is due: b, due 60 ms later, leaves in the same tick (60 ms early), and then with a.
      await vi.advanceTimersByTimeAsync(1);
      expect(beats()).toEqual([1, 1]);
      await vi.advanceTimersByTimeAsync(999);
      expect(beats()).toEqual([1, 1]);
      await vi.advanceTimersByTimeAsync(1);
      expect(beats()).toEqual([2, 2]);
      await end();
    });

    it("with a 100 ms interval (window 20 ms, the least), b due 60 ms after a keeps its own tick", async () => {
      const { beats, end } = await twoBatches(100);
      await vi.advanceTimersByTimeAsync(40);
      expect(beats()).toEqual([1, 0]);
      await vi.advanceTimersByTimeAsync(59);
      expect(beats()).toEqual([1, 0]);
      await vi.advanceTimersByTimeAsync(1);
      expect(beats()).toEqual([1, 1]);
      await end();
    });
  });

  it("never sends more than maxHeartbeats rounds", async () => {
    const m = fakeMsg();
    const metrics = new InMemoryMetrics();
    const done = deferred();
    const p = withInProgress(m, () => done.promise, policy({ maxHeartbeats: 3, intervalMs: 1000 }, 60_000), { metrics });
    await vi.advanceTimersByTimeAsync(10_000);
    expect(m.calls.working).toBe(3);
    done.resolve();
    await p;
    const c = metrics.snapshot().counters;
    expect(c[MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL]).toBe(3);
    expect(c[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL]).toBe(3);
    expect(c[MetricNames.IN_PROGRESS_MAX_HEARTBEATS_REACHED_TOTAL]).toBe(1);
    expect(metrics.snapshot().observations[MetricNames.IN_PROGRESS_HEARTBEATS_PER_BATCH]).toEqual([3]);
  });

  it("brings the first beat forward for messages that waited before the work started", async () => {
    const fresh = fakeMsg();
    const old = fakeMsg();
    const start = Date.now();
    const done = deferred();
    const p = withInProgress([fresh, old], () => done.promise, policy(), {
      receivedAt: (m) => (m === old ? start - 3000 : start),
    });
    await vi.advanceTimersByTimeAsync(1999);
    expect(old.calls.working).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    // One round covers the whole batch.
    expect([fresh.calls.working, old.calls.working]).toEqual([1, 1]);
    done.resolve();
    await p;
  });

  it("beats at once when a message is already older than the interval", async () => {
    const m = fakeMsg();
    const done = deferred();
    const p = withInProgress(m, () => done.promise, policy(), { receivedAt: new Date(Date.now() - 7000) });
    await vi.advanceTimersByTimeAsync(0);
    expect(m.calls.working).toBe(1);
    done.resolve();
    await p;
  });

  it("stops beating before the promise settles on success, and returns the result unchanged", async () => {
    const m = fakeMsg();
    const result = { rows: 3 };
    const p = withInProgress(m, async () => {
      await new Promise((r) => setTimeout(r, 12_000));
      return result;
    }, policy());
    await vi.advanceTimersByTimeAsync(12_000);
    await expect(p).resolves.toBe(result);
    const beats = m.calls.working;
    expect(beats).toBe(2);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(m.calls.working).toBe(beats);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("passes the work's error through unchanged and stops at once", async () => {
    const m = fakeMsg();
    const boom = new Error("sink down");
    const p = withInProgress(m, async () => {
      await new Promise((r) => setTimeout(r, 6000));
      throw boom;
    }, policy());
    const settled = p.catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(6000);
    expect(await settled).toBe(boom);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(m.calls.working).toBe(1);
  });

  it("a synchronous throw from work is passed through", async () => {
    const boom = new TypeError("bad row");
    await expect(withInProgress(fakeMsg(), () => {
      throw boom;
    }, policy())).rejects.toBe(boom);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("abort: ctx.signal aborts with the reason, beats stop, and a work that ignores it is abandoned after shutdownTimeoutMs", async () => {
    const m = fakeMsg();
    const ac = new AbortController();
    let ctx: WorkContext | undefined;
    const late = vi.fn();
    const p = withInProgress(m, async (c) => {
      ctx = c;
      await new Promise((r) => setTimeout(r, 60_000));
      late();
      return "late";
    }, policy({ shutdownTimeoutMs: 2000 }), { signal: ac.signal });
    const settled = p.catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(6000);
    expect(m.calls.working).toBe(1);
    const reason = new Error("shutdown");
    ac.abort(reason);
    expect(ctx?.signal.aborted).toBe(true);
    expect(ctx?.signal.reason).toBe(reason);
    await vi.advanceTimersByTimeAsync(1999);
    let state = "pending";
    void p.then(() => (state = "resolved"), () => (state = "rejected"));
    await vi.advanceTimersByTimeAsync(0);
    expect(state).toBe("pending");
    await vi.advanceTimersByTimeAsync(1);
    expect(await settled).toBe(reason);
    expect(m.calls.working).toBe(1);
    await vi.advanceTimersByTimeAsync(120_000);
    expect(late).toHaveBeenCalled();
    expect(m.calls.working).toBe(1);
  });

  it("abort: a work that stops within the bound settles with its own outcome", async () => {
    const ac = new AbortController();
    const p = withInProgress(fakeMsg(), (ctx) => new Promise((_, reject) => {
      ctx.signal.addEventListener("abort", () => setTimeout(() => reject(new Error("rolled back")), 100));
    }), policy(), { signal: ac.signal });
    const settled = p.catch((e: unknown) => e);
    ac.abort(new Error("stop"));
    await vi.advanceTimersByTimeAsync(100);
    expect(((await settled) as Error).message).toBe("rolled back");
  });

  it("an already aborted signal rejects at once without starting the work", async () => {
    const work = vi.fn();
    const reason = new Error("already");
    await expect(withInProgress(fakeMsg(), work, policy(), { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
    expect(work).not.toHaveBeenCalled();
  });

  it("shutdownTimeoutMs 0 abandons a work that ignores the abort immediately", async () => {
    const ac = new AbortController();
    const p = withInProgress(fakeMsg(), () => new Promise(() => undefined), policy({ shutdownTimeoutMs: 0 }), { signal: ac.signal });
    const settled = p.catch((e: unknown) => e);
    ac.abort("bye");
    await vi.advanceTimersByTimeAsync(0);
    expect(await settled).toBe("bye");
  });

  it("limit reached with onLimit continue: the work goes on; the lease then expires with LeaseExpiredError", async () => {
    const m = fakeMsg();
    let ctx: WorkContext | undefined;
    const done = deferred<string>();
    const p = withInProgress(m, (c) => ((ctx = c), done.promise), policy({ maxHeartbeats: 2, intervalMs: 5000 }, 10_000));
    await vi.advanceTimersByTimeAsync(10_000);
    expect(m.calls.working).toBe(2);
    expect(ctx?.signal.aborted).toBe(false);
    // Last beat at 10 s, window 10 s: the lease ends at 20 s.
    await vi.advanceTimersByTimeAsync(9999);
    expect(ctx?.signal.aborted).toBe(false);
    expect(ctx?.lease?.remainingMs()).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(ctx?.signal.reason).toBeInstanceOf(LeaseExpiredError);
    expect(ctx?.lease?.expired).toBe(true);
    done.resolve("finished anyway");
    await expect(p).resolves.toBe("finished anyway");
    expect(m.calls.working).toBe(2);
  });

  it("limit reached with onLimit abort: ctx.signal aborts with HeartbeatLimitError", async () => {
    let ctx: WorkContext | undefined;
    const p = withInProgress(fakeMsg(), (c) => {
      ctx = c;
      return new Promise((_, reject) => c.signal.addEventListener("abort", () => reject(c.signal.reason)));
    }, policy({ maxHeartbeats: 1 }), { onLimit: "abort" });
    const settled = p.catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(5000);
    const err = await settled;
    expect(err).toBeInstanceOf(HeartbeatLimitError);
    expect(ctx?.signal.reason).toBe(err);
  });

  it("a throwing working() is counted as a failure, never success, and supervision goes on", async () => {
    const m = fakeMsg();
    m.failWorking = new Error("transient");
    const metrics = new InMemoryMetrics();
    let ctx: WorkContext | undefined;
    const done = deferred();
    const p = withInProgress(m, (c) => ((ctx = c), done.promise), policy({ intervalMs: 5000 }), { metrics });
    await vi.advanceTimersByTimeAsync(5000);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_FAILURES_TOTAL]).toBe(1);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL]).toBeUndefined();
    // The lease was not extended by the failed beat.
    expect(ctx?.lease?.remainingMs()).toBe(25_000);
    m.failWorking = undefined;
    // A retry comes before the lease runs out (halfway to the deadline, but at most one interval).
    await vi.advanceTimersByTimeAsync(5000);
    expect(m.calls.working).toBe(1);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL]).toBe(1);
    expect(ctx?.lease?.remainingMs()).toBe(30_000);
    done.resolve();
    await p;
    expect(m.calls.ack).toBe(0);
  });

  it("a closed connection ends supervision: counted as a failure, no further beats, the lease lost at that beat", async () => {
    const m = fakeMsg();
    const metrics = new InMemoryMetrics();
    let closed = false;
    const done = deferred();
    let ctx: WorkContext | undefined;
    let abortedAt: number | undefined;
    const p = withInProgress(m, (c) => {
      ctx = c;
      c.signal.addEventListener("abort", () => (abortedAt = Date.now()));
      return done.promise;
    }, policy(), { metrics, connection: { isClosed: () => closed } });
    const start = Date.now();
    await vi.advanceTimersByTimeAsync(5000);
    expect(m.calls.working).toBe(1);
    closed = true;
    await vi.advanceTimersByTimeAsync(4999);
    expect(ctx!.signal.aborted).toBe(false);
    // The next beat finds it closed: the lease is given up there, not at its deadline (35 s).
    await vi.advanceTimersByTimeAsync(1);
    expect(abortedAt! - start).toBe(10_000);
    const reason = ctx!.signal.reason as LeaseExpiredError;
    expect(reason).toBeInstanceOf(LeaseExpiredError);
    expect(reason.cause).toBeInstanceOf(ConnectionClosedError);
    expect(reason.overdueMs).toBe(0);
    expect(reason.message).toMatch(/connection is closed/);
    expect(ctx!.lease!.expired).toBe(true);
    await vi.advanceTimersByTimeAsync(30_000);
    expect(m.calls.working).toBe(1);
    const c = metrics.snapshot().counters;
    expect(c[MetricNames.IN_PROGRESS_FAILURES_TOTAL]).toBe(1);
    expect(c[MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL]).toBe(2);
    expect(c[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL]).toBe(1);
    done.resolve();
    await p;
    expect([m.calls.ack, m.calls.nak.length, m.calls.term.length]).toEqual([0, 0, 0]);
  });

  it("the lease-lost message names the closed connection only when the cause is the library's ConnectionClosedError", () => {
    expect(new LeaseExpiredError(0, { cause: new ConnectionClosedError() }).message).toMatch(/connection is closed/);
    // A host error that merely shares the name is not the library's: the deadline message stays.
    const lookalike = Object.assign(new Error("host"), { name: "ConnectionClosedError" });
    expect(new LeaseExpiredError(12, { cause: lookalike }).message).toMatch(/expired 12 ms ago/);
    expect(new LeaseExpiredError(12).message).toMatch(/expired 12 ms ago/);
  });

  it("a closed connection found after the work settled every message itself loses no lease", async () => {
    const m = fakeMsg();
    const metrics = new InMemoryMetrics();
    let closed = false;
    const done = deferred();
    let ctx: WorkContext | undefined;
    const p = withInProgress(m, (c) => ((ctx = c), done.promise), policy(), { metrics, connection: { isClosed: () => closed } });
    await vi.advanceTimersByTimeAsync(5000);
    m.ack();
    closed = true;
    await vi.advanceTimersByTimeAsync(60_000);
    expect(ctx!.signal.aborted).toBe(false);
    expect(ctx!.lease!.expired).toBe(false);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL] ?? 0).toBe(0);
    done.resolve();
    await p;
  });

  it("a throwing (or async-rejecting) metrics sink never breaks the heartbeat or the work", async () => {
    const sink: MetricsSink = {
      addCounter: () => {
        throw new Error("metrics down");
      },
      setGauge: () => Promise.reject(new Error("async metrics down")) as never,
      recordObservation: () => {
        throw new Error("metrics down");
      },
    };
    const m = fakeMsg();
    const p = withInProgress(m, async () => {
      await new Promise((r) => setTimeout(r, 11_000));
      return 42;
    }, policy(), { metrics: sink });
    await vi.advanceTimersByTimeAsync(11_000);
    await expect(p).resolves.toBe(42);
    expect(m.calls.working).toBe(2);
  });

  it("tracks active batches in one gauge across concurrent calls", async () => {
    const metrics = new InMemoryMetrics();
    const a = deferred();
    const b = deferred();
    const pa = withInProgress(fakeMsg(), () => a.promise, policy(), { metrics });
    const pb = withInProgress(fakeMsg(), () => b.promise, policy(), { metrics });
    const gauge = () => metrics.snapshot().gauges[MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE];
    expect(gauge()).toBe(2);
    a.resolve();
    await pa;
    expect(gauge()).toBe(1);
    b.resolve();
    await pb;
    expect(gauge()).toBe(0);
  });

  it("batches due in the same tick: every batch's +WPI leaves before any batch's round is booked, and each batch keeps its own books", async () => {
    const order: string[] = [];
    const observed: number[] = [];
    const metrics: MetricsSink = {
      addCounter: () => undefined,
      setGauge: () => undefined,
      recordObservation: (name, value) => {
        if (name !== MetricNames.IN_PROGRESS_HEARTBEAT_SECONDS) return;
        order.push("book");
        observed.push(value);
      },
    };
    const msgs = Array.from({ length: 4 }, () => fakeMsg());
    for (const m of msgs) {
      const working = m.working.bind(m);
      m.working = () => (order.push("wpi"), working());
    }
    // The third batch's write fails every beat: its failure is its own.
    msgs[2]!.failWorking = new Error("connection closed");
    const dones = msgs.map(() => deferred());
    const ps = msgs.map((m, i) => withInProgress(m, () => dones[i]!.promise, policy(), { metrics }).catch((e: unknown) => e));
    await vi.advanceTimersByTimeAsync(5000);
    expect(order).toEqual(["wpi", "wpi", "wpi", "wpi", "book", "book", "book", "book"]);
    expect(observed.every((v) => v >= 0)).toBe(true);
    expect(msgs.map((m) => m.calls.working)).toEqual([1, 1, 0, 1]);
    for (const d of dones) d.resolve();
    const results = await Promise.all(ps);
    expect(results.filter((r) => r instanceof Error)).toEqual([]);
    expect(msgs.map((m) => m.calls.working)).toEqual([1, 1, 0, 1]);
  });

  it("thousands of concurrent batches share one timer", async () => {
    const dones = Array.from({ length: 2000 }, () => deferred());
    const msgs = dones.map(() => fakeMsg());
    const ps = dones.map((d, i) => withInProgress(msgs[i]!, () => d.promise, policy({ intervalMs: 1000 + (i % 7) })));
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(2500);
    expect(vi.getTimerCount()).toBe(1);
    expect(msgs.every((m) => m.calls.working === 2)).toBe(true);
    for (const d of dones) d.resolve();
    await Promise.all(ps);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("requireProgress: a hung work stops extending its lease and loses it", async () => {
    const m = fakeMsg();
    const metrics = new InMemoryMetrics();
    let ctx: WorkContext | undefined;
    const done = deferred();
    const p = withInProgress(m, (c) => ((ctx = c), done.promise), policy({ intervalMs: 4000 }, 10_000), { requireProgress: true, metrics });
    ctx?.progress();
    await vi.advanceTimersByTimeAsync(4000);
    expect(m.calls.working).toBe(1);
    // No progress since: the next beat is withheld and the lease (beat at 4 s + 10 s) runs out.
    await vi.advanceTimersByTimeAsync(4000);
    expect(m.calls.working).toBe(1);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_BEATS_SKIPPED_TOTAL]).toBe(1);
    await vi.advanceTimersByTimeAsync(6000);
    expect(ctx?.signal.reason).toBeInstanceOf(LeaseExpiredError);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL]).toBe(1);
    done.resolve();
    await p;
  });

  it("requireProgress: progress after a withheld beat sends it at once", async () => {
    const m = fakeMsg();
    let ctx: WorkContext | undefined;
    const done = deferred();
    const p = withInProgress(m, (c) => ((ctx = c), done.promise), policy({ intervalMs: 4000 }, 10_000), { requireProgress: true });
    await vi.advanceTimersByTimeAsync(4000);
    expect(m.calls.working).toBe(0);
    ctx?.progress();
    await vi.advanceTimersByTimeAsync(0);
    expect(m.calls.working).toBe(1);
    expect(ctx?.lease?.remainingMs()).toBe(10_000);
    done.resolve();
    await p;
  });

  it("confirmed heartbeats: a reply refreshes the lease; a timeout is a failure that does not", async () => {
    const m = fakeMsg();
    const metrics = new InMemoryMetrics();
    let answer = true;
    const requests: string[] = [];
    const connection = {
      request: (subject: string, payload: unknown) => {
        requests.push(`${subject} ${String(payload)}`);
        return answer ? Promise.resolve({}) : Promise.reject(Object.assign(new Error("timeout"), { name: "TimeoutError" }));
      },
      isClosed: () => false,
    };
    let ctx: WorkContext | undefined;
    const done = deferred();
    const p = withInProgress(m, (c) => ((ctx = c), done.promise), policy(), { metrics, confirm: { connection: connection as never, timeoutMs: 100 } });
    await vi.advanceTimersByTimeAsync(5000);
    expect(requests).toEqual([`${m.reply} +WPI`]);
    expect(m.calls.working).toBe(0);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL]).toBe(1);
    expect(ctx?.lease?.remainingMs()).toBe(30_000);
    answer = false;
    await vi.advanceTimersByTimeAsync(5000);
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_FAILURES_TOTAL]).toBe(1);
    expect(ctx?.lease?.remainingMs()).toBe(25_000);
    done.resolve();
    await p;
  });

  it("publishes diagnostics events with counts and class names only", async () => {
    const events: Array<[string, unknown]> = [];
    const listen = (name: string) => {
      const fn = (e: unknown) => events.push([name, e]);
      diagnostics.subscribe(name, fn);
      return () => diagnostics.unsubscribe(name, fn);
    };
    const offs = [DiagnosticsChannels.HEARTBEAT_SENT, DiagnosticsChannels.HEARTBEAT_FAILED, DiagnosticsChannels.HEARTBEAT_LIMIT, DiagnosticsChannels.LEASE_EXPIRED].map(listen);
    try {
      const m = fakeMsg();
      const done = deferred();
      let reason: unknown;
      const p = withInProgress(m, (ctx) => {
        ctx.signal.addEventListener("abort", () => (reason = ctx.signal.reason));
        return done.promise.then(() => "finished");
      }, policy({ maxHeartbeats: 2 }, 10_000));
      let settled = false;
      void p.then(() => (settled = true));
      await vi.advanceTimersByTimeAsync(5000);
      m.failWorking = Object.assign(new Error("secret.subject.name"), { name: "ClosedConnectionError" });
      await vi.advanceTimersByTimeAsync(20_000);
      // The lease ended at 15 s: the work is told, and the call waits for it (no shutdown bound).
      expect(reason).toBeInstanceOf(LeaseExpiredError);
      expect(settled).toBe(false);
      done.resolve();
      expect(await p).toBe("finished");
      expect(events.map(([n]) => n)).toEqual([
        DiagnosticsChannels.HEARTBEAT_SENT,
        DiagnosticsChannels.HEARTBEAT_FAILED,
        DiagnosticsChannels.HEARTBEAT_LIMIT,
        DiagnosticsChannels.LEASE_EXPIRED,
      ]);
      expect(events[1]?.[1]).toMatchObject({ beat: 2, failedMessages: 1, errorName: "ClosedConnectionError" });
      expect(JSON.stringify(events)).not.toContain("secret");
    } finally {
      for (const off of offs) off();
    }
  });

  it("rejects malformed options with a TypeError naming the field", async () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ onLimit: "stop" }, /options\.onLimit/],
      [{ signal: {} }, /options\.signal/],
      [{ receivedAt: "yesterday" }, /options\.receivedAt/],
      [{ confirm: {} }, /options\.confirm\.connection/],
      [{ confirm: { connection: { request: () => undefined }, timeoutMs: 0 } }, /options\.confirm\.timeoutMs/],
      [{ requireProgress: "yes" }, /options\.requireProgress/],
    ];
    for (const [options, pattern] of cases) {
      const work = vi.fn();
      await expect(withInProgress(fakeMsg(), work, policy(), options as never)).rejects.toThrow(pattern);
      expect(work).not.toHaveBeenCalled();
    }
    await expect(withInProgress([{}] as never, vi.fn(), policy())).rejects.toThrow(/msgs\[0\]/);
    await expect(withInProgress(fakeMsg(), "nope" as never, policy())).rejects.toThrow(TypeError);
  });
});

describe("withInProgress under a blocked event loop (manual clock)", () => {
  it("a tick that finds the deadline passed aborts with LeaseExpiredError instead of beating", async () => {
    const clock = new ManualClock();
    const scheduler = new Scheduler(clock);
    const m = fakeMsg();
    let ctx: WorkContext | undefined;
    const done = deferred();
    const metrics = new InMemoryMetrics();
    const p = superviseWork(m, (c) => ((ctx = c), done.promise), policy({ intervalMs: 5000 }, 10_000), { metrics }, scheduler);
    clock.advance(5000);
    expect(m.calls.working).toBe(1);
    // The loop is blocked for 12 s: the beat due at 10 s could not run; the lease ended at 15 s.
    clock.block(12_000);
    expect(m.calls.working).toBe(1);
    expect(ctx?.signal.reason).toBeInstanceOf(LeaseExpiredError);
    expect((ctx?.signal.reason as LeaseExpiredError).overdueMs).toBe(2000);
    expect(metrics.snapshot().observations[MetricNames.IN_PROGRESS_TICK_LATENESS_SECONDS]).toContain(7);
    done.resolve();
    await p;
    expect(scheduler.size).toBe(0);
    expect(clock.pendingTimers).toBe(0);
  });
});
