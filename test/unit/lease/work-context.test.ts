import { describe, expect, it } from "vitest";
import { LeaseExpiredError, verifyInProgressPolicy, withInProgress, type WorkContext } from "../../../src/index.js";
import { Scheduler } from "../../../src/lease/scheduler.js";
import { superviseWork } from "../../../src/lease/with-in-progress.js";
import { abortReasonOf } from "../../../src/lease/work-run.js";
import { ManualClock, fakeMsg } from "../../helpers/fakes.js";

const policy = verifyInProgressPolicy(
  { enabled: true, intervalMs: 5000, maxHeartbeats: 5, shutdownTimeoutMs: 1000 },
  { ackWaitMs: 10_000, source: "configured" },
);

describe("the work context", () => {
  it("keeps one signal per call, created when first read, never aborted without a cause", async () => {
    let first: AbortSignal | undefined;
    let again: AbortSignal | undefined;
    await withInProgress(fakeMsg(), (ctx) => {
      first = ctx.signal;
      again = ctx.signal;
    }, { enabled: false });
    expect(first).toBeInstanceOf(AbortSignal);
    expect(again).toBe(first);
    expect(first?.aborted).toBe(false);
  });

  it("destructured members keep working", async () => {
    const m = fakeMsg();
    const seen = await withInProgress(m, ({ signal, progress, heartbeats, lease }) => {
      progress();
      return { aborted: signal.aborted, heartbeats, remaining: lease?.remainingMs() };
    }, policy);
    expect(seen.aborted).toBe(false);
    expect(seen.heartbeats).toBe(0);
    expect(seen.remaining).toBeGreaterThan(9000);
  });

  it("the lease's members work detached from it, and it is the same object on every read", async () => {
    const seen = await withInProgress(fakeMsg(), (ctx) => {
      const lease = ctx.lease!;
      const { remainingMs, deadline, expired } = lease;
      const logged = JSON.parse(JSON.stringify(lease)) as Record<string, unknown>;
      return { same: ctx.lease === lease, remaining: remainingMs(), again: lease.remainingMs === remainingMs, deadline, expired, logged };
    }, policy);
    expect(seen.same).toBe(true);
    expect(seen.again).toBe(true);
    expect(seen.remaining).toBeGreaterThan(9000);
    expect(seen.remaining).toBeLessThanOrEqual(10_000);
    expect(seen.deadline).toBeGreaterThan(Date.now() + 8000);
    expect(seen.expired).toBe(false);
    expect(Object.keys(seen.logged).sort()).toEqual(["deadline", "expired", "remainingMs"]);
    expect(seen.logged["expired"]).toBe(false);
    expect(seen.logged["remainingMs"]).toBeGreaterThan(9000);
  });

  it("an abort before the work read the signal still shows on it, with the reason", async () => {
    const clock = new ManualClock();
    const scheduler = new Scheduler(clock);
    let ctx: WorkContext | undefined;
    let release!: () => void;
    const p = superviseWork(fakeMsg(), (c) => ((ctx = c), new Promise<void>((r) => (release = r))), policy, {}, scheduler);
    expect(abortReasonOf(ctx!)).toBeUndefined();
    // No beat ever lands (the loop is blocked past the deadline): the lease expires.
    clock.block(12_000);
    expect(abortReasonOf(ctx!)).toBeInstanceOf(LeaseExpiredError);
    expect(ctx?.signal.aborted).toBe(true);
    expect(ctx?.signal.reason).toBe(abortReasonOf(ctx!));
    release();
    await p;
  });

  it("the host's signal aborts the context with its reason", async () => {
    const host = new AbortController();
    let ctx: WorkContext | undefined;
    const p = withInProgress(fakeMsg(), async (c) => {
      ctx = c;
      host.abort(new Error("shutdown"));
      await new Promise((r) => setTimeout(r, 1));
      return c.signal.reason as Error;
    }, { enabled: false }, { signal: host.signal });
    await expect(p).resolves.toHaveProperty("message", "shutdown");
    expect(abortReasonOf(ctx!)).toBe(host.signal.reason);
  });
});
