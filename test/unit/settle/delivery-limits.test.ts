/**
 * Each consumer's MaxDeliver for settling: the host's, learnt, or read once from the server and
 * cached; an unreadable one is `unknown` (never "deliveries left") and read again later.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { CommitThenAck, ConsumerPolicyError, InMemoryMetrics, MetricNames, TemporarySinkError } from "../../../src/index.js";
import { DeliveryLimits } from "../../../src/settle/delivery-limits.js";
import { fakeMsg } from "../../helpers/fakes.js";

function connection(answer: (subject: string) => unknown) {
  const subjects: string[] = [];
  return {
    subjects,
    request: async (subject: string) => {
      subjects.push(subject);
      const body = answer(subject);
      if (body instanceof Error) throw body;
      return { data: new TextEncoder().encode(JSON.stringify(body)) };
    },
  };
}

describe("DeliveryLimits", () => {
  afterEach(() => vi.useRealTimers());

  it("the host's limit applies to every consumer, with no request", async () => {
    const conn = connection(() => ({ config: { max_deliver: 9 } }));
    const limits = new DeliveryLimits(3, conn);
    expect(limits.limitFor(fakeMsg())).toBe(3);
    expect(conn.subjects).toEqual([]);
  });

  it("reads a consumer's limit once (consumer info on the given connection), shared by concurrent lookups, per stream and consumer", async () => {
    const conn = connection(() => ({ config: { max_deliver: 5 } }));
    const limits = new DeliveryLimits(undefined, conn);
    const [a, b] = [limits.limitFor(fakeMsg({ stream: "S", consumer: "C" })), limits.limitFor(fakeMsg({ stream: "S", consumer: "C" }))];
    expect(await a).toBe(5);
    expect(await b).toBe(5);
    expect(limits.limitFor(fakeMsg({ stream: "S", consumer: "C" }))).toBe(5);
    await limits.limitFor(fakeMsg({ stream: "S", consumer: "D" }));
    expect(conn.subjects).toEqual(["$JS.API.CONSUMER.INFO.S.C", "$JS.API.CONSUMER.INFO.S.D"]);
  });

  it("an absent max_deliver is the server's default, unlimited; a domain's messages are read through its API prefix", async () => {
    const conn = connection(() => ({ config: {} }));
    const limits = new DeliveryLimits(undefined, conn);
    const m = fakeMsg({ stream: "S", consumer: "C" });
    (m.info as { domain: string }).domain = "hub";
    expect(await limits.limitFor(m)).toBe(-1);
    expect(conn.subjects).toEqual(["$JS.hub.API.CONSUMER.INFO.S.C"]);
  });

  it("unreadable (an API error, no responder, no connection): unknown, and read again after a minute", async () => {
    vi.useFakeTimers();
    let answer: unknown = { error: { code: 403, description: "permission denied" } };
    const conn = connection(() => answer);
    const limits = new DeliveryLimits(undefined, conn);
    expect(await limits.limitFor(fakeMsg())).toBe("unknown");
    expect(limits.limitFor(fakeMsg())).toBe("unknown");
    expect(conn.subjects).toHaveLength(1);
    vi.advanceTimersByTime(61_000);
    answer = { config: { max_deliver: 4 } };
    expect(await limits.limitFor(fakeMsg())).toBe(4);
    expect(await new DeliveryLimits(undefined, undefined).limitFor(fakeMsg({ maxDeliver: "unreadable" }))).toBe("unknown");
  });

  it("a limit a loop learnt is used as it is", () => {
    const conn = connection(() => new Error("no responders"));
    const limits = new DeliveryLimits(undefined, conn);
    limits.learn("S", "C", 2);
    expect(limits.limitFor(fakeMsg({ stream: "S", consumer: "C" }))).toBe(2);
    expect(conn.subjects).toEqual([]);
  });
});

describe("CommitThenAck with the consumer's MaxDeliver unknown to it", () => {
  it("reads it from the server: no NAK on the last delivery (reported exhausted), a NAK before it", async () => {
    const ack = new CommitThenAck();
    const first = fakeMsg({ deliveryCount: 1, maxDeliver: 2 });
    const last = fakeMsg({ deliveryCount: 2, maxDeliver: 2 });
    const r1 = await ack.process([first], () => Promise.reject(new TemporarySinkError()));
    const r2 = await ack.process([last], () => Promise.reject(new TemporarySinkError()));
    expect(r1.outcome).toBe("nacked");
    expect(r2.outcome).toBe("exhausted");
    expect(last.calls.nak).toEqual([]);
  });

  it("unreadable: a temporary failure is left (never NAKed into nothing), with a settle error that says why; successes need no read", async () => {
    const metrics = new InMemoryMetrics();
    const ack = new CommitThenAck({ metrics });
    const ok = fakeMsg({ maxDeliver: "unreadable" });
    expect((await ack.process([ok], async () => undefined)).outcome).toBe("acked");
    const m = fakeMsg({ maxDeliver: "unreadable" });
    const r = await ack.process([m], () => Promise.reject(new TemporarySinkError()));
    expect(r).toMatchObject({ outcome: "left", left: 1, nacked: 0 });
    expect(m.calls.nak).toEqual([]);
    const err = r.messages[0]!.settleError as ConsumerPolicyError;
    expect(err).toBeInstanceOf(ConsumerPolicyError);
    expect(err.reason).toBe("max_deliver_unknown");
    expect(err.message).toMatch(/pass options\.maxDeliver/);
    expect(metrics.snapshot().counters[MetricNames.SETTLE_FAILURES_TOTAL]).toBe(1);
  });
});
