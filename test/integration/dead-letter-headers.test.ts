/**
 * Headers of the host's own on dead-letter copies (`deadLetter.headers`), read back from a
 * real dead-letter stream: what the host returns travels with the copy next to the library's
 * headers; nothing of the error travels by default; a hook that throws or returns what cannot
 * be set never holds the copy back — it is published with the library's headers, the original
 * is acknowledged, and the problem is reported.
 */
import { describe, expect, it } from "vitest";
import { headers as natsHeaders } from "@nats-io/transport-node";
import {
  CommitThenAck,
  DeadLetterError,
  DeadLetterHeaders,
  InMemoryMetrics,
  MetricNames,
  PermanentSinkError,
  TemporarySinkError,
  type DeadLetterTarget,
  type RunErrorContext,
} from "../../src/index.js";
import { consumerInfo, createFixture, eventually, fetchBatch, uniqueName, type Fixture } from "../helpers/jetstream.js";
import { useServer } from "../helpers/server-fixture.js";

/** A CHECK constraint's refusal, shaped like a MariaDB driver error: errno 4025 and a message naming the row. */
function checkConstraintError(): Error {
  return Object.assign(new Error("CONSTRAINT `orders.amount` failed for `shop`.`orders` (card 4111-1111)"), { errno: 4025, code: "ER_CONSTRAINT_FAILED" });
}

/** What a copy carries without host headers: the library's, and the message id its publish sets. */
const LIBRARY_HEADERS = [...Object.values(DeadLetterHeaders), "Nats-Msg-Id"].sort();

describe("dead-letter headers chosen by the host, on a real nats-server", () => {
  const fx = useServer();

  async function setUp(body = "order-7", originalHeaders?: Record<string, string>): Promise<{ f: Fixture; dlq: string; dlqSubject: string }> {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    const dlq = uniqueName("DLQ");
    const dlqSubject = `${dlq.toLowerCase()}.dead`;
    await f.jsm.streams.add({ name: dlq, subjects: [dlqSubject] });
    const h = natsHeaders();
    for (const [k, v] of Object.entries(originalHeaders ?? {})) h.set(k, v);
    await f.js.publish(f.subject, body, { headers: h });
    return { f, dlq, dlqSubject };
  }

  async function copyHeaders(f: Fixture, dlq: string): Promise<Record<string, string[]>> {
    const copy = await f.jsm.streams.getMessage(dlq, { seq: 1 });
    const out: Record<string, string[]> = {};
    for (const [k, v] of copy?.header ?? []) out[k] = v;
    return out;
  }

  it("carries the reason the host chose (a CHECK constraint, errno 4025) next to the library's headers", async () => {
    const { f, dlq, dlqSubject } = await setUp("order-7", { "Order-Id": "7", traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" });
    const seen: Array<{ subject: string; error: unknown }> = [];
    const target: DeadLetterTarget = {
      js: f.js,
      subject: dlqSubject,
      headers: (msg, error) => {
        seen.push({ subject: msg.subject, error });
        const cause = error instanceof Error ? (error.cause as { errno?: number } | undefined) : undefined;
        return { "Reject-Reason": "amount must be positive", "Reject-Errno": String(cause?.errno), "Order-Id": ["7", "7b"] };
      },
    };
    const ack = new CommitThenAck({ deadLetter: target });
    const [m] = await fetchBatch(f, 1);
    const result = await ack.process([m!], () => {
      throw new PermanentSinkError("row refused by a CHECK constraint", { cause: checkConstraintError() });
    });

    expect(result.outcome).toBe("dead_lettered");
    expect(result.messages[0]?.settleError).toBeUndefined();
    expect(seen).toHaveLength(1);
    expect(seen[0]?.subject).toBe(f.subject);
    expect(seen[0]?.error).toBeInstanceOf(PermanentSinkError);
    const h = await copyHeaders(f, dlq);
    expect(h["Reject-Reason"]).toEqual(["amount must be positive"]);
    expect(h["Reject-Errno"]).toEqual(["4025"]);
    // A name the original carries takes the host's values; the other original headers stay.
    expect(h["Order-Id"]).toEqual(["7", "7b"]);
    expect(h["traceparent"]).toEqual(["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]);
    expect(h[DeadLetterHeaders.ERROR]).toEqual(["PermanentSinkError"]);
    expect(h[DeadLetterHeaders.STREAM]).toEqual([f.stream]);
    expect(h[DeadLetterHeaders.STREAM_SEQUENCE]).toEqual(["1"]);
    expect((await consumerInfo(f)).num_ack_pending).toBe(0);
  });

  it("without a hook nothing of the error travels: only its class name", async () => {
    const { f, dlq, dlqSubject } = await setUp();
    const ack = new CommitThenAck({ deadLetter: { js: f.js, subject: dlqSubject } });
    const result = await ack.process(await fetchBatch(f, 1), () => {
      throw new PermanentSinkError("row refused", { cause: checkConstraintError() });
    });
    expect(result.outcome).toBe("dead_lettered");
    const h = await copyHeaders(f, dlq);
    expect(Object.keys(h).sort()).toEqual(LIBRARY_HEADERS);
    expect(JSON.stringify(h)).not.toContain("4111");
    expect(JSON.stringify(h)).not.toContain("4025");
  });

  it("takes any iterable of pairs (a Headers, a Map) and an empty answer", async () => {
    const { f, dlq, dlqSubject } = await setUp();
    const ack = new CommitThenAck({ deadLetter: { js: f.js, subject: dlqSubject, headers: () => new Headers({ "Reject-Reason": "bad json" }) } });
    expect((await ack.process(await fetchBatch(f, 1), () => Promise.reject(new PermanentSinkError("x")))).outcome).toBe("dead_lettered");
    expect((await copyHeaders(f, dlq))["reject-reason"]).toEqual(["bad json"]);

    const other = await setUp();
    const none = new CommitThenAck({ deadLetter: { js: other.f.js, subject: other.dlqSubject, headers: () => undefined } });
    const r = await none.process(await fetchBatch(other.f, 1), () => Promise.reject(new PermanentSinkError("x")));
    expect(r.outcome).toBe("dead_lettered");
    expect(r.messages[0]?.settleError).toBeUndefined();
  });

  const junk: Array<[string, () => unknown, RegExp]> = [
    ["throws", () => {
      throw new Error("hook bug: SELECT * FROM cards");
    }, /options\.deadLetter\.headers threw \(Error\)/],
    ["returns a Nats- header", () => ({ "Nats-Msg-Id": "x" }), /"Nats-Msg-Id": Nats-\* headers are the server's and Dead-Letter-\* headers the library's/],
    ["overrides a Dead-Letter- header", () => ({ "dead-letter-error": "Nope" }), /"dead-letter-error": Nats-\* headers are the server's/],
    ["returns a number value", () => ({ "Reject-Errno": 4025 }), /a number value for "Reject-Errno": values must be strings/],
    ["returns a line break", () => ({ "Reject-Reason": "a\r\nNats-Expected-Stream: X" }), /a value with a line break for "Reject-Reason"/],
    ["returns a name with a colon", () => ({ "Reject:Reason": "x" }), /the header name "Reject:Reason": use printable ASCII without spaces or ":"/],
    ["returns a promise", async () => ({ "Reject-Reason": "late" }), /returned a promise/],
    ["returns a string", () => "Reject-Reason: x", /returned string/],
    ["returns a dump", () => ({ "Reject-Reason": "x".repeat(20_000) }), /more than 16384 bytes of headers/],
    ["yields pairs without end", () => (function* () {
      for (;;) yield ["Reject-Reason", []];
    })(), /more than 256 headers/],
  ];
  it.each(junk)("a hook that %s: the copy is still published with the library's headers, the original acked, the problem reported", async (_, hook, why) => {
    const { f, dlq, dlqSubject } = await setUp();
    const metrics = new InMemoryMetrics();
    const ack = new CommitThenAck({ metrics, deadLetter: { js: f.js, subject: dlqSubject, headers: hook as never } });
    const result = await ack.process(await fetchBatch(f, 1), () => Promise.reject(new PermanentSinkError("refused")));

    expect(result.outcome).toBe("dead_lettered");
    const r = result.messages[0]!;
    expect(r.action).toBe("dead_lettered");
    expect(r.settleError).toBeInstanceOf(DeadLetterError);
    expect((r.settleError as DeadLetterError).reason).toBe("headers_refused");
    expect((r.settleError as DeadLetterError).message).toContain("published with the library's headers only");
    expect(((r.settleError as Error).cause as Error).message).toMatch(why);
    expect(metrics.snapshot().counters[MetricNames.SETTLE_FAILURES_TOTAL]).toBe(1);
    expect(metrics.snapshot().counters[MetricNames.MESSAGES_DEAD_LETTERED_TOTAL]).toBe(1);
    const h = await copyHeaders(f, dlq);
    expect(Object.keys(h).sort()).toEqual(LIBRARY_HEADERS);
    expect(h[DeadLetterHeaders.ERROR]).toEqual(["PermanentSinkError"]);
    await eventually(async () => (await consumerInfo(f)).num_ack_pending === 0, "the original acknowledged");
  });

  it("run() reports a refused header set to onError (during settle) and dead-letters the temporary failure on its last delivery", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000, maxDeliver: 1 });
    const dlq = uniqueName("DLQ");
    const dlqSubject = `${dlq.toLowerCase()}.dead`;
    await f.jsm.streams.add({ name: dlq, subjects: [dlqSubject] });
    await f.js.publish(f.subject, "a");
    await f.js.publish(f.subject, "b");
    const errors: Array<{ error: unknown; ctx: RunErrorContext }> = [];
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
      deadLetter: {
        js: f.js,
        subject: dlqSubject,
        headers: (msg, error) => (msg.string() === "a" ? { "Reject-Reason": error instanceof TemporarySinkError ? "sink still down" : "?" } : { "Nats-Rollup": "all" }),
      },
    });
    const outcomes: string[] = [];
    const shutdown = new AbortController();
    const running = ack.run(await f.js.consumers.get(f.stream, f.consumer), () => Promise.reject(new TemporarySinkError("sink down")), {
      batchSize: 1,
      signal: shutdown.signal,
      onBatch: (r) => outcomes.push(r.outcome),
      onError: (error, ctx) => errors.push({ error, ctx }),
    });
    await eventually(() => outcomes.length >= 2, "both messages settled", 20_000);
    shutdown.abort();
    await running;

    expect(outcomes).toEqual(["dead_lettered", "dead_lettered"]);
    const settle = errors.filter((e) => e.ctx.during === "settle");
    expect(settle).toHaveLength(1);
    expect(settle[0]?.ctx.action).toBe("dead_lettered");
    expect((settle[0]?.error as DeadLetterError).reason).toBe("headers_refused");
    const reasons = await Promise.all([1, 2].map(async (seq) => (await f.jsm.streams.getMessage(dlq, { seq }))?.header.get("Reject-Reason") ?? ""));
    expect(reasons.sort()).toEqual(["", "sink still down"]);
    expect((await consumerInfo(f)).num_ack_pending).toBe(0);
  });

  it("refuses a hook that is not a function when the instance is made", () => {
    const js = { publish: async () => ({ stream: "X", seq: 1 }) };
    expect(() => new CommitThenAck({ deadLetter: { js, subject: "dlq.x", headers: { "Reject-Reason": "x" } as never } })).toThrow(
      /options\.deadLetter\.headers must be a function \(msg, error\) => \(\{ name: value \}\), got object/,
    );
    expect(() => new CommitThenAck({ deadLetter: { js, subject: "dlq.x", header: () => ({}) } as never })).toThrow(/did you mean "headers"\?/);
  });
});
