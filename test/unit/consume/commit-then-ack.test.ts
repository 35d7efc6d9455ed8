import { describe, expect, it, vi } from "vitest";
import diagnostics from "node:diagnostics_channel";
import {
  CommitThenAck,
  DiagnosticsChannels,
  InMemoryMetrics,
  LeaseExpiredError,
  MetricNames,
  DeadLetterError,
  ConsumerPolicyError,
  PermanentSinkError,
  TemporarySinkError,
  verifyInProgressPolicy,
  type BatchSettledEvent,
} from "../../../src/index.js";
import { deferred, fakeMsg, type FakeMsg } from "../../helpers/fakes.js";

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

  it("an unclassified error is a temporary failure, NAKed by default with a delay that grows with the delivery count", async () => {
    const err = new Error("who knows");
    const delays: number[] = [];
    for (const deliveryCount of [1, 2, 3, 8]) {
      const m = fakeMsg({ deliveryCount });
      const result = await new CommitThenAck().process([m], throwing(err));
      expect(result).toMatchObject({ outcome: "nacked", nacked: 1, error: err });
      expect(m.calls.term).toEqual([]);
      expect(m.calls.nak).toHaveLength(1);
      const sent = m.calls.nak[0]!;
      expect(result.messages[0]?.requestedDelayMs).toBe(sent);
      delays.push(sent);
    }
    // 1 s, 2 s, 4 s, then capped at 60 s; jitter only lengthens, by at most 20%.
    const base = [1000, 2000, 4000, 60_000];
    delays.forEach((d, i) => {
      expect(d).toBeGreaterThanOrEqual(base[i]!);
      expect(d).toBeLessThanOrEqual(base[i]! * 1.2);
    });
  });

  it("delayMs: 0 is the explicit bare NAK; a fixed delay is sent as is", async () => {
    const bare = fakeMsg();
    await new CommitThenAck({ onTemporaryFailure: { action: "nak", delayMs: 0 } }).process([bare], throwing(new TemporarySinkError()));
    expect(bare.calls.nak).toEqual([undefined]);
    const fixed = fakeMsg({ deliveryCount: 5 });
    await new CommitThenAck({ onTemporaryFailure: { action: "nak", delayMs: 750 } }).process([fixed], throwing(new TemporarySinkError()));
    expect(fixed.calls.nak).toEqual([750]);
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

  it("after a shutdown a dead-letter retry waits only the settle budget, not its own timeout", async () => {
    const m = fakeMsg({ deliveryCount: 1 });
    const shutdown = new AbortController();
    const timeouts: Array<number | undefined> = [];
    const js = {
      publish: vi.fn((_subject: string, _data: unknown, opts?: { timeout?: number }) => {
        timeouts.push(opts?.timeout);
        if (timeouts.length === 1) {
          // The first copy fails at once, as the host begins to shut down.
          shutdown.abort();
          return Promise.reject(new Error("no responders"));
        }
        // The retry gets no answer: it fails only at its timeout.
        return new Promise((_, reject) => setTimeout(() => reject(new Error("TimeoutError")), opts?.timeout ?? 60_000));
      }),
    };
    const inProgress = verifyInProgressPolicy({ enabled: false, shutdownTimeoutMs: 400 }, undefined);
    const ack = new CommitThenAck({ inProgress, signal: shutdown.signal, maxDeliver: 1, deadLetter: { js: js as never, subject: "dlq.x", timeoutMs: 60_000 } });
    const started = performance.now();
    const result = await ack.process([m], throwing(new PermanentSinkError("poison")));
    // Without the cap the retry would wait the target's 60 s.
    expect(performance.now() - started).toBeLessThan(5000);
    expect(timeouts[0]).toBe(60_000);
    expect(timeouts.length).toBeGreaterThanOrEqual(2);
    for (const t of timeouts.slice(1)) expect(t).toBeLessThanOrEqual(400);
    expect(result.messages[0]).toMatchObject({ action: "exhausted" });
    expect(m.calls.ack).toBe(0);
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
        return { stream: "DLQ", seq: 1, duplicate: false };
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
    // Unique per stream, consumer and sequence: two consumers of one stream keep two copies.
    expect(opts.msgID).toBe(`S:C:${m.seq}`);
  });

  it("a dead-letter publish that returns no PubAck (a core connection's publish) is not a copy: nothing is acked", async () => {
    for (const ack of [undefined, {}, { stream: "DLQ" }, { seq: 3 }, { stream: "", seq: 1 }, 7]) {
      const m = fakeMsg();
      const js = { publish: vi.fn(async () => ack) };
      const result = await new CommitThenAck({ deadLetter: { js, subject: "dlq.x" } }).process([m], throwing(new PermanentSinkError()));
      expect(result.outcome).toBe("left");
      expect(result.messages[0]?.settleError).toBeInstanceOf(DeadLetterError);
      expect((result.messages[0]?.settleError as DeadLetterError).reason).toBe("not_confirmed");
      expect(m.calls).toMatchObject({ ack: 0, nak: [], term: [] });
    }
  });

  it("a copy stored by the source stream itself is refused and the target marked unusable", async () => {
    const js = { publish: vi.fn(async () => ({ stream: "S", seq: 9 })) };
    const ack = new CommitThenAck({ deadLetter: { js, subject: "s.dlq" } });
    const first = fakeMsg();
    const r1 = await ack.process([first], throwing(new PermanentSinkError()));
    expect((r1.messages[0]?.settleError as DeadLetterError).reason).toBe("source_stream");
    expect(first.calls.ack).toBe(0);
    const second = fakeMsg();
    const r2 = await ack.process([second], throwing(new PermanentSinkError()));
    expect((r2.messages[0]?.settleError as DeadLetterError).reason).toBe("target_unusable");
    expect(js.publish).toHaveBeenCalledTimes(1);
    expect(second.calls).toMatchObject({ ack: 0, nak: [], term: [] });
  });

  it("a failed dead-letter publish leaves the original redeliverable: nothing sent, no NAK loop", async () => {
    const m = fakeMsg();
    const boom = new Error("no stream");
    const js = { publish: vi.fn(async () => Promise.reject(boom)) };
    const result = await new CommitThenAck({ deadLetter: { js, subject: "dlq.x" }, onTemporaryFailure: { action: "nak", delayMs: 1000 } }).process(
      [m],
      throwing(new PermanentSinkError()),
    );
    expect(result.outcome).toBe("left");
    const settleError = result.messages[0]?.settleError as DeadLetterError;
    expect(settleError).toBeInstanceOf(DeadLetterError);
    expect(settleError.reason).toBe("publish_failed");
    expect(settleError.publishErrorName).toBe("Error");
    expect(settleError.cause).toBeUndefined();
    expect(m.calls).toMatchObject({ ack: 0, nak: [], term: [] });
  });

  it("a write's own result (a driver's result, a count, ids) is success: only a value with a failed key is a report", async () => {
    for (const value of [{ rowCount: 3, rows: [] }, 42, [1, 2], "ok", { failed: undefined }, null, true, { failedRows: [] }]) {
      const msgs = [fakeMsg(), fakeMsg()];
      const result = await new CommitThenAck().process(msgs, () => value as never);
      expect(result, JSON.stringify(value)).toMatchObject({ outcome: "acked", acked: 2 });
      expect(result.reportError).toBeUndefined();
    }
  });

  it("a report in a slightly wrong shape fails closed: every message a temporary failure (NAKed), never an ACK, and reportError says why", async () => {
    const shapes: Array<[string, (batch: readonly FakeMsg[]) => unknown, RegExp]> = [
      ["{ failed: [msg] }", (b) => ({ failed: [b[1]] }), /1 entry (that is not \{ msg, error \}|naming a message not of this batch)/],
      ["{ failed: [{ message: msg, error }] }", (b) => ({ failed: [{ message: b[1], error: new Error("x") }] }), /1 entry that is not \{ msg, error \}/],
      ["{ failed: [{ msg: seq, error }] }", (b) => ({ failed: [{ msg: b[1]!.seq, error: new Error("x") }] }), /1 entry naming a message not of this batch/],
      ["{ failed: { msg, error } }", (b) => ({ failed: { msg: b[1], error: new Error("x") } }), /failed = an object, not an array|not an array/],
      ["{ failed: new Set([msg]) }", (b) => ({ failed: new Set([b[1]]) }), /not an array/],
      ["{ failed: 0 } (a driver's count)", () => ({ failed: 0 }), /not an array/],
      ["a mix of good and bad entries", (b) => ({ failed: [{ msg: b[0], error: new Error("x") }, { msg: fakeMsg(), error: 1 }, null] }), /not \{ msg, error \}.*not of this batch/],
    ];
    for (const [name, report, why] of shapes) {
      const msgs = [fakeMsg(), fakeMsg(), fakeMsg()];
      const result = await new CommitThenAck().process(msgs, (batch) => report(batch as FakeMsg[]) as never);
      expect(result, name).toMatchObject({ outcome: "nacked", acked: 0, nacked: 3 });
      expect(msgs.every((m) => m.calls.ack === 0 && m.calls.nak.length === 1), name).toBe(true);
      expect(result.reportError, name).toBeInstanceOf(TypeError);
      expect(result.reportError?.message, name).toMatch(why);
      for (const r of result.messages) expect(r.error, name).toBe(result.reportError);
    }
  });

  it("a report entry whose error cannot be read still fails the message it names; the others are acked", async () => {
    const [named, other] = [fakeMsg(), fakeMsg()];
    const entry = Object.defineProperty({ msg: named, error: undefined as unknown }, "error", {
      get() {
        throw new Error("broken getter");
      },
    });
    const result = await new CommitThenAck({ onTemporaryFailure: { action: "leave" } }).process([named, other], () => ({ failed: [entry] }));
    expect(result.messages.map((m) => m.action)).toEqual(["left", "acked"]);
    expect(named.calls.ack).toBe(0);
    expect(result.messages[0]?.error).toBeInstanceOf(TypeError);
    expect(result.reportError).toBeUndefined();
  });

  it("a report that cannot be read (a throwing getter, a revoked proxy) counts every message as failed", async () => {
    const throwingReport = Object.defineProperty({}, "failed", {
      get() {
        throw new Error("broken getter");
      },
    });
    const msgs = [fakeMsg(), fakeMsg()];
    const result = await new CommitThenAck({ onTemporaryFailure: { action: "leave" } }).process(msgs, () => throwingReport as never);
    expect(result).toMatchObject({ acked: 0, left: 2 });
    expect(result.reportError).toBeInstanceOf(TypeError);
    // A revoked proxy cannot even be awaited: the write itself counts as failed.
    const { proxy, revoke } = Proxy.revocable({ failed: [] }, {});
    revoke();
    const again = [fakeMsg(), fakeMsg()];
    const revoked = await new CommitThenAck({ onTemporaryFailure: { action: "leave" } }).process(again, () => proxy as never);
    expect(revoked).toMatchObject({ acked: 0, left: 2 });
    expect(revoked.error).toBeInstanceOf(TypeError);
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

  it("cancellation: a write that stops is left with no frame at all", async () => {
    const msgs = [fakeMsg(), fakeMsg()];
    const ac = new AbortController();
    const policy = verifyInProgressPolicy({ enabled: false, shutdownTimeoutMs: 50 }, undefined);
    const p = new CommitThenAck({ inProgress: policy, signal: ac.signal }).process(msgs, (_m, ctx) => new Promise((_r, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason), { once: true })));
    ac.abort(new Error("SIGTERM"));
    const result = await p;
    expect(result).toMatchObject({ outcome: "cancelled", left: 2 });
    expect((result.error as Error).message).toBe("SIGTERM");
    expect(msgs.every((m) => m.calls.ack === 0 && m.calls.nak.length === 0 && m.calls.term.length === 0)).toBe(true);
  });

  it("a write that ignores its signal is abandoned at the bound: no frame while it runs, its late commit acked, its late failure left", async () => {
    const ac = new AbortController();
    const policy = verifyInProgressPolicy({ enabled: false, shutdownTimeoutMs: 50 }, undefined);
    const ack = new CommitThenAck({ inProgress: policy, signal: ac.signal, maxDeliver: 1, deadLetter: { js: { publish: async () => ({ stream: "DLQ", seq: 1 }) }, subject: "dlq.x" } });
    const committing = [fakeMsg()];
    const failing = [fakeMsg()];
    let commit!: () => void;
    let fail!: (e: unknown) => void;
    const p1 = ack.process(committing, () => new Promise<void>((r) => (commit = r)));
    const p2 = ack.process(failing, () => new Promise<void>((_r, reject) => (fail = reject)));
    ac.abort(new Error("SIGTERM"));
    const [r1, r2] = await Promise.all([p1, p2]);
    expect(r1).toMatchObject({ outcome: "abandoned", abandoned: 1, acked: 0 });
    expect(r2).toMatchObject({ outcome: "abandoned", abandoned: 1 });
    expect(ack.abandoned).toBe(2);
    // Nothing while they run, not even on the last allowed delivery: no ACK, no copy.
    expect([...committing, ...failing].every((m) => m.calls.ack === 0 && m.calls.nak.length === 0 && m.calls.term.length === 0)).toBe(true);
    commit();
    fail(new Error("deadlock"));
    await ack.drain();
    expect(ack.abandoned).toBe(0);
    expect(committing[0]!.calls.ack).toBe(1);
    // The late failure on its last delivery: its copy is made only now that the write is known to have failed.
    expect(failing[0]!.calls.ack).toBe(1);
  });

  it("confirmAck: null (an untyped caller) is refused with the field and the fix, everywhere options are taken, before any request", async () => {
    const nullAck = /^options\.confirmAck must be \{ timeoutMs\?, retries\? \} or false, got null: leave it out for the default, or pass false for plain ACKs$/;
    expect(() => new CommitThenAck({ confirmAck: null } as never)).toThrow(nullAck);
    expect(() => new CommitThenAck({ confirmAck: null, connection: { isClosed: () => false, request: async () => undefined } } as never)).toThrow(nullAck);
    const info = vi.fn(async () => ({ config: { ack_wait: 30_000_000_000, ack_policy: "explicit" } }));
    await expect(CommitThenAck.forConsumer({ consumers: { info } } as never, "S", "C", { confirmAck: null } as never)).rejects.toThrow(nullAck);
    expect(info).not.toHaveBeenCalled();
  });

  it("forConsumer refuses inProgress: null as the constructor does (only a missing policy is the disabled default)", async () => {
    const info = vi.fn(async () => ({ name: "C", config: { durable_name: "C", ack_wait: 30_000_000_000, ack_policy: "explicit", max_deliver: -1 } }));
    const err = await CommitThenAck.forConsumer({ consumers: { info } } as never, "S", "C", { inProgress: null } as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConsumerPolicyError);
    expect((err as ConsumerPolicyError).reason).toBe("policy_violation");
    expect((err as ConsumerPolicyError).violations?.map((v) => v.code)).toEqual(["invalid_policy"]);
    await expect(CommitThenAck.forConsumer({ consumers: { info } } as never, "S", "C", {})).resolves.toBeInstanceOf(CommitThenAck);
  });

  it("forConsumer refuses a misspelt policy field before any request: a missing consumer does not hide it", async () => {
    const info = vi.fn(async () => {
      throw Object.assign(new Error("consumer not found"), { code: 10014 });
    });
    const err = await CommitThenAck.forConsumer({ consumers: { info } } as never, "S", "C", { inProgress: { enabled: true, interval_ms: 1000 } } as never).catch((e: unknown) => e);
    expect((err as ConsumerPolicyError).reason).toBe("policy_violation");
    expect((err as ConsumerPolicyError).violations?.map((v) => v.code)).toEqual(["unknown_field"]);
    expect((err as Error).message).toMatch(/unknown field "interval_ms"/);
    expect(info).not.toHaveBeenCalled();
  });

  it("confirmAck with a connection that cannot send requests is refused at construction", () => {
    expect(() => new CommitThenAck({ confirmAck: {}, connection: { isClosed: () => false } as never })).toThrow(/options\.connection must be a NatsConnection with request\(\) when confirmAck is set/);
    expect(() => new CommitThenAck({ confirmAck: {}, connection: { isClosed: () => false, request: async () => undefined } as never })).not.toThrow();
  });

  it("a closed connection: nothing can reach the server, the result says left", async () => {
    const msgs = [fakeMsg()];
    const result = await new CommitThenAck({ connection: { isClosed: () => true } as never }).process(msgs, async () => undefined);
    expect(result.outcome).toBe("left");
    expect((result.messages[0]?.settleError as Error).name).toBe("ConnectionClosedError");
  });

  it("a closed connection on the last allowed delivery: a failed message is exhausted, not left", async () => {
    const failed = fakeMsg({ deliveryCount: 3 });
    const committed = fakeMsg({ deliveryCount: 3 });
    const metrics = new InMemoryMetrics();
    const result = await new CommitThenAck({ connection: { isClosed: () => true } as never, maxDeliver: 3, metrics }).process(
      [failed, committed],
      async () => ({ failed: [{ msg: failed, error: new TemporarySinkError("down") }] }),
    );
    expect(result.messages.map((m) => m.action)).toEqual(["exhausted", "left"]);
    expect(result).toMatchObject({ outcome: "partial", exhausted: 1, left: 1 });
    expect((result.messages[0]?.settleError as Error).name).toBe("ConnectionClosedError");
    expect(metrics.snapshot().counters[MetricNames.MESSAGES_EXHAUSTED_TOTAL]).toBe(1);
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
      [{ deadletter: {} }, /unknown option "deadletter" — did you mean "deadLetter"/],
      [{ onTemporaryFailures: { action: "nak" } }, /did you mean "onTemporaryFailure"/],
      [{ onTemporaryFailure: { action: "nak", delay: 5000 } }, /options\.onTemporaryFailure: unknown option "delay" — did you mean "delayMs"/],
      [{ onTemporaryFailure: { action: "leave", delayMs: 5000 } }, /delayMs only applies/],
      [{ deadLetter: { js: { publish() {}, subscribe() {}, flush() {} }, subject: "dlq.x" } }, /core NatsConnection/],
      [{ deadLetter: { js: { publish() {} }, subject: "dlq.x", timeout: 5 } }, /did you mean "timeoutMs"/],
      [{ confirmAck: { retry: 2 } }, /did you mean "retries"/],
      [{ heartbeat: { onlimit: "abort" } }, /options\.heartbeat: unknown option "onlimit" — did you mean "onLimit"/],
      [{ heartbeat: { onLimit: "stop" } }, /options\.heartbeat\.onLimit/],
      [{ heartbeat: { confirm: {} } }, /options\.heartbeat\.confirm\.connection/],
      [{ maxDeliver: 1.5 }, /options\.maxDeliver/],
      [{ confirmAck: { timeoutMs: 0, retries: 0 } }, /options\.confirmAck\.timeoutMs/],
      [{ backOff: "sometimes" }, /options\.backOff/],
      [{ connection: { info: {} } }, /options\.connection/],
      [5, /must be an object/],
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
    await expect(ack.run({ fetch: vi.fn() } as never, async () => undefined, { batchsize: 5 } as never)).rejects.toThrow(/did you mean "batchSize"/);
    await expect(ack.process([m], async () => undefined, { signl: undefined } as never)).rejects.toThrow(/did you mean "signal"/);
  });
});

describe("CommitThenAck: getters and early aborts (JavaScript callers)", () => {
  it("a known option whose getter throws is a TypeError naming it, before anything runs", async () => {
    const throwing = Object.defineProperty({}, "deadLetter", {
      enumerable: true,
      get() {
        throw new Error("getter bug");
      },
    });
    expect(() => new CommitThenAck(throwing as never)).toThrow(/options\.deadLetter could not be read/);
    const m = fakeMsg();
    const processOptions = Object.defineProperty({}, "signal", { enumerable: true, get: () => { throw new Error("x"); } });
    await expect(new CommitThenAck().process([m], async () => undefined, processOptions as never)).rejects.toThrow(TypeError);
    expect(m.calls).toMatchObject({ ack: 0, nak: [], term: [] });
  });

  it("a signal aborted before the write starts is a cancellation, whatever its reason", async () => {
    const ac = new AbortController();
    ac.abort(new TypeError("shutdown, reported as a TypeError"));
    const m = fakeMsg({ deliveryCount: 2 });
    const write = vi.fn();
    const result = await new CommitThenAck({ signal: ac.signal, maxDeliver: 2 }).process([m], write);
    expect(write).not.toHaveBeenCalled();
    // The last delivery: nothing would bring it back, so it is reported exhausted.
    expect(result).toMatchObject({ outcome: "cancelled", exhausted: 1 });
  });
});

describe("CommitThenAck: one listener on the host's signal", () => {
  it("forty concurrent batches on one instance signal add one listener, and no MaxListenersExceededWarning", async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error): void => void warnings.push(w);
    process.on("warning", onWarning);
    try {
      const shutdown = new AbortController();
      let added = 0;
      const original = shutdown.signal.addEventListener.bind(shutdown.signal);
      shutdown.signal.addEventListener = ((...args: Parameters<AbortSignal["addEventListener"]>) => {
        added += 1;
        original(...args);
      }) as AbortSignal["addEventListener"];
      const ack = new CommitThenAck({ signal: shutdown.signal, inProgress: verifyInProgressPolicy({ enabled: true, intervalMs: 1000 }, { ackWaitMs: 30_000, source: "configured" }) });
      const gate = deferred();
      const all = Array.from({ length: 40 }, () => ack.process([fakeMsg()], () => gate.promise));
      await new Promise((r) => setTimeout(r, 10));
      gate.resolve();
      const results = await Promise.all(all);
      expect(results.every((r) => r.outcome === "acked")).toBe(true);
      expect(added).toBe(1);
      await new Promise((r) => setImmediate(r));
      expect(warnings.filter((w) => w.name === "MaxListenersExceededWarning")).toEqual([]);
    } finally {
      process.off("warning", onWarning);
    }
  });
});
