import { describe, expect, it, vi } from "vitest";
import diagnostics from "node:diagnostics_channel";
import {
  CommitThenAck,
  DiagnosticsChannels,
  InMemoryMetrics,
  LeaseExpiredError,
  MetricNames,
  PermanentSinkError,
  TemporarySinkError,
  verifyInProgressPolicy,
  type BatchSettledEvent,
} from "../../../src/index.js";
import { fakeMsg, type FakeMsg } from "../../helpers/fakes.js";

const throwing = (err: unknown) => () => {
  throw err;
};

describe("CommitThenAck.process classification (fakes)", () => {
  it("acks every message after the write resolved, and only then", async () => {
    const msgs = [fakeMsg(), fakeMsg()];
    const order: string[] = [];
    const result = await new CommitThenAck().process(msgs, async () => {
      await new Promise((r) => setTimeout(r, 5));
      order.push(`write done, acks so far ${msgs[0]!.calls.ack}`);
    });
    order.push(`after, acks ${msgs[0]!.calls.ack}`);
    expect(order).toEqual(["write done, acks so far 0", "after, acks 1"]);
    expect(result).toMatchObject({ outcome: "acked", acked: 2, nacked: 0, left: 0 });
    expect(msgs.map((m) => m.calls.ack)).toEqual([1, 1]);
  });

  it("an unclassified error is a temporary failure (bare NAK by default), never permanent", async () => {
    const m = fakeMsg();
    const err = new Error("who knows");
    const result = await new CommitThenAck().process([m], throwing(err));
    expect(result).toMatchObject({ outcome: "nacked", nacked: 1, error: err });
    expect(m.calls.nak).toEqual([undefined]);
    expect(m.calls.term).toEqual([]);
  });

  it("non-Error throws are handled too", async () => {
    const m = fakeMsg();
    const result = await new CommitThenAck({ onTemporaryFailure: { action: "leave" } }).process([m], throwing("a string"));
    expect(result).toMatchObject({ outcome: "left", left: 1, error: "a string" });
    expect(m.calls).toMatchObject({ ack: 0, nak: [], term: [] });
  });

  it("a permanent failure without a target is terminated (bare on servers of unknown version)", async () => {
    const m = fakeMsg();
    const result = await new CommitThenAck().process([m], throwing(new PermanentSinkError()));
    expect(result.outcome).toBe("termed");
    expect(m.calls.term).toEqual([undefined]);
  });

  it("sends a Term reason only to servers that understand one", async () => {
    const modern = fakeMsg();
    await new CommitThenAck({ connection: { info: { version: "2.10.4" }, isClosed: () => false } as never }).process([modern], throwing(new PermanentSinkError()));
    expect(modern.calls.term).toEqual(["permanent failure: PermanentSinkError"]);
    const old = fakeMsg();
    await new CommitThenAck({ connection: { info: { version: "2.10.3" }, isClosed: () => false } as never }).process([old], throwing(new PermanentSinkError()));
    expect(old.calls.term).toEqual([undefined]);
  });

  it("dead-letters, then acks only after the publish resolved", async () => {
    const m = fakeMsg();
    const events: string[] = [];
    let release!: () => void;
    const published = new Promise<void>((r) => (release = r));
    const js = {
      publish: vi.fn(async (subject: string) => {
        events.push(`publish ${subject}, acked=${m.calls.ack}`);
        await published;
        events.push("publish confirmed");
      }),
    };
    const p = new CommitThenAck({ deadLetter: { js, subject: "dlq.x" } }).process([m], throwing(new PermanentSinkError()));
    await vi.waitFor(() => expect(js.publish).toHaveBeenCalled());
    expect(m.calls.ack).toBe(0);
    release();
    const result = await p;
    expect(events).toEqual(["publish dlq.x, acked=0", "publish confirmed"]);
    expect(result).toMatchObject({ outcome: "dead_lettered", deadLettered: 1 });
    expect(m.calls.ack).toBe(1);
    const [, , opts] = js.publish.mock.calls[0] as unknown as [string, Uint8Array, { msgID: string }];
    expect(opts.msgID).toBe(`S:${m.seq}`);
  });

  it("a failed dead-letter publish leaves the original redeliverable, by the temporary-failure policy", async () => {
    const m = fakeMsg();
    const boom = new Error("no stream");
    const js = { publish: vi.fn(async () => Promise.reject(boom)) };
    const result = await new CommitThenAck({ deadLetter: { js, subject: "dlq.x" }, onTemporaryFailure: { action: "nak", delayMs: 1000 } }).process(
      [m],
      throwing(new PermanentSinkError()),
    );
    expect(result.outcome).toBe("nacked");
    expect(result.messages[0]?.settleError).toBe(boom);
    expect(m.calls).toMatchObject({ ack: 0, nak: [1000], term: [] });
  });

  it("a malformed write report never turns into an ACK", async () => {
    for (const report of [{ failed: "nope" }, { failed: [{ msg: fakeMsg(), error: 1 }] }, { failed: [null] }, 42]) {
      const msgs = [fakeMsg(), fakeMsg()];
      const result = await new CommitThenAck({ onTemporaryFailure: { action: "leave" } }).process(msgs, () => report as never);
      expect(result.acked).toBe(0);
      expect(result.left).toBe(2);
      expect(result.error).toBeInstanceOf(TypeError);
    }
  });

  it("after a lost lease a temporary failure is left (a NAK would disturb the new delivery)", async () => {
    const m = fakeMsg();
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 1, maxHeartbeats: 1, shutdownTimeoutMs: 60_000 }, { ackWaitMs: 2, source: "configured" });
    const result = await new CommitThenAck({ inProgress: policy }).process([m], async (_msgs, ctx) => {
      await new Promise<void>((r) => ctx.signal.addEventListener("abort", () => r(), { once: true }));
      expect(ctx.signal.reason).toBeInstanceOf(LeaseExpiredError);
      throw new TemporarySinkError("gave up");
    });
    expect(result).toMatchObject({ outcome: "left", left: 1 });
    expect(m.calls.nak).toEqual([]);
  });

  it("a committed write is acked even when its lease was lost meanwhile", async () => {
    const m = fakeMsg();
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 1, maxHeartbeats: 1, shutdownTimeoutMs: 60_000 }, { ackWaitMs: 2, source: "configured" });
    const result = await new CommitThenAck({ inProgress: policy }).process([m], (_msgs, ctx) => new Promise<void>((r) => ctx.signal.addEventListener("abort", () => r(), { once: true })));
    expect(result.outcome).toBe("acked");
    expect(m.calls.ack).toBe(1);
  });

  it("cancellation: no frame at all, settles within the shutdown bound even if the write ignores its signal", async () => {
    const msgs = [fakeMsg(), fakeMsg()];
    const ac = new AbortController();
    const policy = verifyInProgressPolicy({ enabled: false, shutdownTimeoutMs: 50 }, undefined);
    const p = new CommitThenAck({ inProgress: policy, signal: ac.signal }).process(msgs, () => new Promise(() => undefined));
    ac.abort(new Error("SIGTERM"));
    const result = await p;
    expect(result).toMatchObject({ outcome: "cancelled", left: 2 });
    expect((result.error as Error).message).toBe("SIGTERM");
    expect(msgs.every((m) => m.calls.ack === 0 && m.calls.nak.length === 0 && m.calls.term.length === 0)).toBe(true);
  });

  it("a closed connection: nothing can reach the server, the result says left", async () => {
    const msgs = [fakeMsg()];
    const result = await new CommitThenAck({ connection: { isClosed: () => true } as never }).process(msgs, async () => undefined);
    expect(result.outcome).toBe("left");
    expect((result.messages[0]?.settleError as Error).name).toBe("ClosedConnectionError");
  });

  it("confirmed ACK: a timed-out ackAck is retried as a request on the reply subject", async () => {
    const m = fakeMsg();
    m.ackAck = async () => {
      m.didAck = true;
      throw Object.assign(new Error("timeout"), { name: "TimeoutError" });
    };
    const request = vi.fn().mockRejectedValueOnce(new Error("timeout")).mockResolvedValueOnce({});
    const result = await new CommitThenAck({ connection: { request, isClosed: () => false } as never, confirmAck: { timeoutMs: 10, retries: 2 } }).process(
      [m],
      async () => undefined,
    );
    expect(request).toHaveBeenCalledTimes(2);
    expect(request).toHaveBeenCalledWith(m.reply, "+ACK", { timeout: 10 });
    expect(result.messages[0]).toMatchObject({ action: "acked", confirmed: true });
  });

  it("confirmed ACK that never gets a reply is reported, still as acked (it may have landed)", async () => {
    const m = fakeMsg();
    m.ackAck = async () => {
      throw new Error("timeout");
    };
    const metrics = new InMemoryMetrics();
    const request = vi.fn().mockRejectedValue(new Error("timeout"));
    const result = await new CommitThenAck({ metrics, connection: { request, isClosed: () => false } as never, confirmAck: { retries: 1 } }).process([m], async () => undefined);
    expect(result.messages[0]).toMatchObject({ action: "acked", confirmed: false });
    expect(result.messages[0]?.settleError).toBeInstanceOf(Error);
    expect(metrics.snapshot().counters[MetricNames.SETTLE_FAILURES_TOTAL]).toBe(1);
  });

  it("records metrics and a batch-settled event with counts and class names only", async () => {
    const metrics = new InMemoryMetrics();
    const events: BatchSettledEvent[] = [];
    const fn = (e: unknown) => events.push(e as BatchSettledEvent);
    diagnostics.subscribe(DiagnosticsChannels.BATCH_SETTLED, fn);
    try {
      const msgs: FakeMsg[] = [fakeMsg(), fakeMsg(), fakeMsg()];
      await new CommitThenAck({ metrics }).process(msgs, (batch) => ({ failed: [{ msg: batch[0]!, error: new TemporarySinkError("secret payload") }] }));
    } finally {
      diagnostics.unsubscribe(DiagnosticsChannels.BATCH_SETTLED, fn);
    }
    const c = metrics.snapshot().counters;
    expect(c[MetricNames.MESSAGES_ACKED_TOTAL]).toBe(2);
    expect(c[MetricNames.MESSAGES_NACKED_TOTAL]).toBe(1);
    expect(c[MetricNames.MESSAGES_FAILED_TOTAL]).toBe(1);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ outcome: "partial", acked: 2, nacked: 1, batchSize: 3, errorName: "TemporarySinkError" });
    expect(JSON.stringify(events)).not.toContain("secret");
  });

  it("an empty batch does nothing", async () => {
    const write = vi.fn();
    const result = await new CommitThenAck().process([], write);
    expect(result.outcome).toBe("empty");
    expect(write).not.toHaveBeenCalled();
  });

  it("validates its options with TypeErrors naming the field", () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ inProgress: { enabled: true, intervalMs: 1000 } }, /options\.inProgress must come from verifyInProgressPolicy/],
      [{ onTemporaryFailure: { action: "drop" } }, /options\.onTemporaryFailure\.action/],
      [{ onTemporaryFailure: { action: "nak", delayMs: -1 } }, /options\.onTemporaryFailure\.delayMs/],
      [{ deadLetter: { subject: "x" } }, /options\.deadLetter\.js/],
      [{ deadLetter: { js: { publish() {} }, subject: "dlq.>" } }, /options\.deadLetter\.subject/],
      [{ signal: "stop" }, /options\.signal/],
      [{ confirmAck: { retries: 2 } }, /need options\.connection/],
      [{ confirmAck: { timeoutMs: 0, retries: 0 } }, /options\.confirmAck\.timeoutMs/],
      [{ backOff: "sometimes" }, /options\.backOff/],
      [{ connection: { info: {} } }, /options\.connection/],
      [null, /options must be an object/],
    ];
    for (const [options, pattern] of cases) expect(() => new CommitThenAck(options as never)).toThrow(pattern);
  });

  it("rejects malformed calls before running anything", async () => {
    const ack = new CommitThenAck();
    await expect(ack.process("x" as never, async () => undefined)).rejects.toThrow(TypeError);
    await expect(ack.process([], "x" as never)).rejects.toThrow(TypeError);
    const m = fakeMsg();
    await expect(ack.process([m], async () => undefined, { receivedAt: "yesterday" as never })).rejects.toThrow(/receivedAt/);
    expect(m.calls).toMatchObject({ ack: 0, nak: [], term: [] });
    await expect(ack.run({} as never, async () => undefined)).rejects.toThrow(/pull consumer/);
    await expect(ack.run({ fetch: vi.fn() } as never, async () => undefined, { batchSize: 0 })).rejects.toThrow(/batchSize/);
    await expect(ack.run({ fetch: vi.fn() } as never, async () => undefined, { expiresMs: 500 })).rejects.toThrow(/expiresMs/);
  });
});
