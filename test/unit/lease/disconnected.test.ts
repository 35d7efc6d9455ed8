/**
 * A disconnected (not closed) connection: the client drops every frame published until it
 * reconnects, without an error. The library must not count such a beat as sent, nor report
 * such an ACK as clean. The real-server proof is test/reliability/connection-drop.test.ts.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  CommitThenAck,
  DisconnectedError,
  InMemoryMetrics,
  LeaseExpiredError,
  MetricNames,
  verifyInProgressPolicy,
  withInProgress,
  type WorkContext,
} from "../../../src/index.js";
import { sendRound } from "../../../src/lease/heartbeat-round.js";
import { connectionDown } from "../../../src/nats/connection-state.js";
import { deferred, fakeMsg, type FakeMsg } from "../../helpers/fakes.js";

const policy = (ackWaitMs = 10_000) =>
  verifyInProgressPolicy({ enabled: true, intervalMs: 2000, maxHeartbeats: 50, shutdownTimeoutMs: 1000 }, { ackWaitMs, source: "configured" });

/** A fake message whose connection can be taken down and brought back, as the client's protocol handler reports it. */
function onLink(m: FakeMsg): { down(): void; up(): void; close(): void } {
  const publisher = { connected: true, closed: false, isClosed: () => publisher.closed };
  (m as unknown as { msg: unknown }).msg = { publisher };
  return {
    down: () => void (publisher.connected = false),
    up: () => void (publisher.connected = true),
    close: () => {
      publisher.connected = false;
      publisher.closed = true;
    },
  };
}

describe("connectionDown", () => {
  it("reads the delivering connection: down while disconnected, not down when connected or closed, unknown without one", () => {
    const m = fakeMsg();
    expect(connectionDown(m)).toBeUndefined();
    const link = onLink(m);
    expect(connectionDown(m)).toBe(false);
    link.down();
    expect(connectionDown(m)).toBe(true);
    link.close();
    expect(connectionDown(m)).toBe(false);
  });

  it("a throwing accessor reads as unknown", () => {
    const m = fakeMsg();
    Object.defineProperty(m, "msg", {
      get() {
        throw new Error("boom");
      },
    });
    expect(connectionDown(m)).toBeUndefined();
  });
});

describe("sendRound on a disconnected connection", () => {
  it("sends nothing for the disconnected messages and reports them failed, not closed", () => {
    const a = fakeMsg();
    const b = fakeMsg();
    const link = onLink(a);
    link.down();
    const result = sendRound([a, b], undefined);
    expect(a.calls.working).toBe(0);
    expect(b.calls.working).toBe(1);
    expect(result).toMatchObject({ refreshed: [1], failed: 1, closed: false });
    expect((result.firstError as Error).name).toBe("DisconnectedError");
  });
});

describe("withInProgress while the connection is down", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("a beat during an outage is a failure that does not extend the lease; beats resume after the reconnect", async () => {
    const m = fakeMsg();
    const link = onLink(m);
    const metrics = new InMemoryMetrics();
    let ctx: WorkContext | undefined;
    const done = deferred();
    const p = withInProgress(m, (c) => ((ctx = c), done.promise), policy(), { metrics });
    await vi.advanceTimersByTimeAsync(2000);
    expect(m.calls.working).toBe(1);
    link.down();
    await vi.advanceTimersByTimeAsync(2000);
    expect(m.calls.working).toBe(1);
    const c = metrics.snapshot().counters;
    expect(c[MetricNames.IN_PROGRESS_FAILURES_TOTAL]).toBe(1);
    // The lease still counts from the last beat that left (at 2 s): 10 s window, 2 s later.
    expect(ctx?.lease?.remainingMs()).toBe(8000);
    link.up();
    // The next beat is due one interval later (sooner than halfway to the deadline) and goes out.
    await vi.advanceTimersByTimeAsync(2000);
    expect(m.calls.working).toBe(2);
    expect(ctx?.lease?.remainingMs()).toBe(10_000);
    expect(ctx?.signal.aborted).toBe(false);
    done.resolve();
    await p;
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL]).toBe(2);
  });

  it("an outage longer than the window expires the lease: ctx.signal aborts with LeaseExpiredError", async () => {
    const m = fakeMsg();
    const link = onLink(m);
    const metrics = new InMemoryMetrics();
    let ctx: WorkContext | undefined;
    const done = deferred();
    const p = withInProgress(m, (c) => ((ctx = c), done.promise), policy(), { metrics });
    await vi.advanceTimersByTimeAsync(2000);
    link.down();
    await vi.advanceTimersByTimeAsync(10_001);
    expect(m.calls.working).toBe(1);
    expect(ctx?.signal.reason).toBeInstanceOf(LeaseExpiredError);
    expect(ctx?.lease?.expired).toBe(true);
    const c = metrics.snapshot().counters;
    expect(c[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL]).toBe(1);
    expect(c[MetricNames.IN_PROGRESS_FAILURES_TOTAL]).toBeGreaterThanOrEqual(1);
    expect(c[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL]).toBe(1);
    done.resolve();
    await p;
  });
});

describe("CommitThenAck settling while the connection is down", () => {
  it("an ACK of a committed message is held while the client is between connections and sent after the reconnect", async () => {
    const m = fakeMsg();
    const link = onLink(m);
    const metrics = new InMemoryMetrics();
    const ack = new CommitThenAck({ metrics, timing: { ackWaitMs: 30_000, source: "configured" } });
    const p = ack.process([m], () => {
      link.down();
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(m.calls.ack).toBe(0);
    link.up();
    const result = await p;
    expect(result.outcome).toBe("acked");
    expect(m.calls.ack).toBe(1);
    expect(result.messages[0]?.settleError).toBeUndefined();
    expect(metrics.snapshot().counters[MetricNames.ACKS_HELD_TOTAL]).toBe(1);
  });

  it("an ACK is held past the lease deadline while the connection lives, and sent when it is back", async () => {
    const m = fakeMsg();
    const link = onLink(m);
    const metrics = new InMemoryMetrics();
    const ack = new CommitThenAck({ metrics, timing: { ackWaitMs: 100, source: "configured" } });
    const p = ack.process([m], () => {
      link.down();
    });
    // Three AckWaits later it is still held: nobody else can have been handed the message while
    // the only server is unreachable, and a late ACK still settles it.
    await new Promise((r) => setTimeout(r, 300));
    expect(m.calls.ack).toBe(0);
    link.up();
    const result = await p;
    expect(result).toMatchObject({ outcome: "acked", acked: 1 });
    expect(m.calls.ack).toBe(1);
    expect(metrics.snapshot().counters[MetricNames.ACKS_UNSENT_TOTAL] ?? 0).toBe(0);
  });

  it("a held ACK whose connection closes meanwhile is reported left (ConnectionClosedError), not acked", async () => {
    const m = fakeMsg();
    const link = onLink(m);
    const metrics = new InMemoryMetrics();
    const p = new CommitThenAck({ metrics, timing: { ackWaitMs: 30_000, source: "configured" } }).process([m], () => {
      link.down();
    });
    await new Promise((r) => setTimeout(r, 100));
    link.close();
    const result = await p;
    expect(result).toMatchObject({ outcome: "left", acked: 0, left: 1 });
    expect(m.calls.ack).toBe(0);
    expect((result.messages[0]?.settleError as Error).name).toBe("ConnectionClosedError");
    expect(metrics.snapshot().counters[MetricNames.ACKS_UNSENT_TOTAL]).toBe(1);
  });

  it("a shutdown that begins while an ACK is held cuts the hold to the shutdown bound", async () => {
    const m = fakeMsg();
    const link = onLink(m);
    const shutdown = new AbortController();
    const inProgress = verifyInProgressPolicy({ enabled: false, shutdownTimeoutMs: 200 }, undefined);
    const p = new CommitThenAck({ inProgress, signal: shutdown.signal, timing: { ackWaitMs: 30_000, source: "configured" } }).process([m], () => {
      link.down();
    });
    await new Promise((r) => setTimeout(r, 100));
    const aborted = performance.now();
    shutdown.abort();
    const result = await p;
    // Without the cut: held until the reconnect, however long.
    expect(performance.now() - aborted).toBeLessThan(5000);
    expect(m.calls.ack).toBe(0);
    // Counted as it is: no ACK went out, so not acked.
    expect(result).toMatchObject({ outcome: "left", acked: 0, left: 1 });
    expect(result.messages[0]?.settleError).toBeInstanceOf(DisconnectedError);
  });

  it("a connected client acks with no settle error", async () => {
    const m = fakeMsg();
    onLink(m);
    const result = await new CommitThenAck().process([m], () => undefined);
    expect(result.outcome).toBe("acked");
    expect(result.messages[0]?.settleError).toBeUndefined();
  });
});
