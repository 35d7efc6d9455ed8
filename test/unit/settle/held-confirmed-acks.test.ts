/**
 * A loop's confirmed ACKs for a batch that committed while its connection was between servers:
 * held until the reconnect, then sent asking for replies and asked again through the election
 * that often comes with the reconnect — never a plain `+ACK` into a cluster with no consumer
 * leader. Fakes force the timing; the real-server proof is the leader-kill case with the worker
 * on the leader's server in test/reliability/loop-elections.test.ts.
 */
import { describe, expect, it, vi } from "vitest";
import type { JsMsg } from "@nats-io/jetstream";
import { AckNotConfirmedError, CommitThenAck, ConnectionClosedError, DisconnectedError, InMemoryMetrics, MetricNames, PermanentSinkError } from "../../../src/index.js";
import { AckingDeliveries, LATE_GRACE_MS, UNCONFIRMED_GRACE_MS } from "../../../src/settle/acking-deliveries.js";
import type { DeadLetterTarget } from "../../../src/settle/dead-letter.js";
import { DeliveryLimits } from "../../../src/settle/delivery-limits.js";
import { UNBOUNDED, type SettleBudget } from "../../../src/settle/settle-budget.js";
import { ackConfirmed } from "../../../src/settle/frames.js";
import { settleBatch, type WriteOutcome } from "../../../src/settle/settle-batch.js";
import { readReport } from "../../../src/settle/write-report.js";
import { Settler } from "../../../src/settle/settler.js";
import { MetricsRecorder } from "../../../src/telemetry/metrics-recorder.js";
import { fakeConfirmingConnection, fakeMsg, type FakeMsg } from "../../helpers/fakes.js";

/** The client's protocol handler as the library reads it: connected, or between servers, or closed. */
function link(): { readonly publisher: object; down(): void; up(): void; close(): void } {
  const publisher = { connected: true, closed: false, isClosed: () => publisher.closed };
  return {
    publisher,
    down: () => void (publisher.connected = false),
    up: () => void (publisher.connected = true),
    close: () => {
      publisher.connected = false;
      publisher.closed = true;
    },
  };
}

const COMMITTED: WriteOutcome = { ok: true, report: readReport(undefined, []), cancelled: false, leaseLost: false, heartbeats: 0, writeMs: 1 };

function setup(answer: () => number | undefined, budget: SettleBudget = UNBOUNDED, deadLetter?: DeadLetterTarget, outcome: WriteOutcome = COMMITTED) {
  const sink = new InMemoryMetrics();
  const metrics = MetricsRecorder.for(sink);
  const nc = fakeConfirmingConnection(() => answer());
  const settler = new Settler({
    connection: undefined,
    confirmAck: undefined,
    onTemporaryFailure: { action: "nak" },
    deadLetter,
    nakBackOff: undefined,
    limits: new DeliveryLimits(undefined, undefined),
    metrics,
    random: Math.random,
  });
  const wire = link();
  const msgs: FakeMsg[] = [fakeMsg(), fakeMsg(), fakeMsg()];
  for (const m of msgs) (m as unknown as { msg: unknown }).msg = { publisher: wire.publisher };
  const acking = new AckingDeliveries();
  let sentAt: number | undefined;
  const settle = () =>
    settleBatch(msgs as unknown as JsMsg[], outcome, {
      settler,
      metrics,
      connection: undefined,
      budget,
      batchId: 1,
      onSent: () => void (sentAt = performance.now()),
      confirm: { options: { timeoutMs: 200, retries: 6 }, connection: nc },
      acking,
    });
  return { sink, nc, wire, msgs, acking, settle, sentAt: () => sentAt };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("a loop's confirmed ACKs over a reconnect", () => {
  it("nothing is sent while the connection is down; after the reconnect the ACKs ask for replies, are asked again while refused (an election), and end confirmed", async () => {
    // The first two rounds of answers: nobody holds the consumer; then the new leader confirms.
    let asked = 0;
    const s = setup(() => (++asked <= 2 * 3 ? 503 : 0));
    const ends = vi.spyOn(s.acking, "end");
    s.wire.down();
    const settling = s.settle();
    await sleep(150);
    expect(s.nc.frames).toEqual([]);
    expect(s.msgs.map((m) => m.calls.ack)).toEqual([0, 0, 0]);
    // Meanwhile another delivery of them is acked, not written again.
    expect(s.msgs.every((m) => s.acking.has(m as unknown as JsMsg))).toBe(true);
    // The loop's slot stays taken: no frame went out.
    expect(s.sentAt()).toBeUndefined();
    const upAt = performance.now();
    s.wire.up();
    const result = await settling;
    expect(result).toMatchObject({ outcome: "acked", acked: 3 });
    expect(result.messages.map((r) => [r.action, r.confirmed, r.settleError])).toEqual([
      ["acked", true, undefined],
      ["acked", true, undefined],
      ["acked", true, undefined],
    ]);
    // Every frame left after the reconnect, and every one asked for an answer at some point.
    expect(s.nc.frames.every((f) => f.at >= upAt)).toBe(true);
    for (const m of s.msgs) expect(s.nc.frames.filter((f) => f.subject === m.reply && f.reply !== undefined).length).toBeGreaterThanOrEqual(2);
    // Never the client's own plain ack().
    expect(s.msgs.map((m) => m.calls.ack)).toEqual([0, 0, 0]);
    expect(s.sink.snapshot().counters[MetricNames.ACKS_HELD_TOTAL]).toBe(3);
    // Answered late (asked again): still counted on their way for a grace period, and kept
    // with the confirmed ones for redeliveries (the leader that answered can die unreplicated).
    expect(s.msgs.every((m) => s.acking.has(m as unknown as JsMsg))).toBe(true);
    expect(ends.mock.calls).toEqual([[s.msgs.map((m) => m.seq), LATE_GRACE_MS, true]]);
  });

  it("a connection closed while the ACKs are held: left with ConnectionClosedError, no frame, counted unsent", async () => {
    const s = setup(() => 0);
    const ends = vi.spyOn(s.acking, "end");
    s.wire.down();
    const settling = s.settle();
    await sleep(100);
    s.wire.close();
    const result = await settling;
    expect(result).toMatchObject({ outcome: "left", acked: 0, left: 3 });
    for (const r of result.messages) expect(r.settleError).toBeInstanceOf(ConnectionClosedError);
    expect(s.nc.frames).toEqual([]);
    expect(s.sink.snapshot().counters[MetricNames.ACKS_UNSENT_TOTAL]).toBe(3);
    // Their ACKs never left: a redelivery soon after is still acked, not written again.
    expect(s.msgs.every((m) => s.acking.has(m as unknown as JsMsg))).toBe(true);
    expect(ends.mock.calls).toEqual([[s.msgs.map((m) => m.seq), UNCONFIRMED_GRACE_MS]]);
  });

  it("a shutdown's bound passing while the ACKs are held: left with DisconnectedError, no frame", async () => {
    let remaining = 150;
    const started = performance.now();
    const s = setup(() => 0, { remainingMs: () => remaining - (performance.now() - started) });
    s.wire.down();
    const result = await s.settle();
    expect(performance.now() - started).toBeLessThan(5000);
    expect(result).toMatchObject({ outcome: "left", acked: 0, left: 3 });
    for (const r of result.messages) expect(r.settleError).toBeInstanceOf(DisconnectedError);
    expect(s.nc.frames).toEqual([]);
    remaining = 0;
  });

  it("connected: the ACKs go out at once, the loop's slot is freed before the answers", async () => {
    const s = setup(() => 0);
    const result = await s.settle();
    expect(result).toMatchObject({ outcome: "acked", acked: 3 });
    expect(s.sentAt()).toBeDefined();
    expect(s.sink.snapshot().counters[MetricNames.ACKS_HELD_TOTAL] ?? 0).toBe(0);
  });

  it("a dead-lettered message's original is acked with the loop's confirmed ACK, asked again while refused: a lost ACK would bring it back for a second copy", async () => {
    let asked = 0;
    const copies: string[] = [];
    const js = { publish: async (subject: string) => (copies.push(subject), { stream: "DLQ", seq: copies.length }) };
    const failed: WriteOutcome = { ...COMMITTED, ok: false, error: new PermanentSinkError("rejected") };
    const s = setup(() => (++asked <= 3 ? 503 : 0), UNBOUNDED, { js, subject: "dlq.x" }, failed);
    const result = await s.settle();
    expect(copies).toEqual(["dlq.x", "dlq.x", "dlq.x"]);
    expect(result).toMatchObject({ outcome: "dead_lettered", deadLettered: 3 });
    expect(result.messages.map((r) => [r.action, r.confirmed])).toEqual([
      ["dead_lettered", true],
      ["dead_lettered", true],
      ["dead_lettered", true],
    ]);
    // Each original's +ACK asked for an answer, and was asked again after the refusal.
    for (const m of s.msgs) expect(s.nc.frames.filter((f) => f.subject === m.reply && f.reply !== undefined).length).toBe(2);
    expect(s.msgs.map((m) => m.calls.ack)).toEqual([0, 0, 0]);
  });
});

/** A host's own `confirmAck`: per message through `ackAck()` (no `connection`), or in one batch through its `connection`. */
function setupHost(withConnection: boolean, budget: SettleBudget = UNBOUNDED) {
  const sink = new InMemoryMetrics();
  const metrics = MetricsRecorder.for(sink);
  const nc = fakeConfirmingConnection(() => 0);
  // The batch path confirms through the inbox (subscribe, publish); `request` is the per-message retry's.
  const connection = Object.assign(nc, { request: async () => ({}) });
  const settler = new Settler({
    connection: withConnection ? connection : undefined,
    confirmAck: { timeoutMs: 200, retries: 1 },
    onTemporaryFailure: { action: "nak" },
    deadLetter: undefined,
    nakBackOff: undefined,
    limits: new DeliveryLimits(undefined, undefined),
    metrics,
    random: Math.random,
  });
  const wire = link();
  const msgs: FakeMsg[] = [fakeMsg(), fakeMsg(), fakeMsg()];
  const asked: number[] = [];
  for (const m of msgs) {
    (m as unknown as { msg: unknown }).msg = { publisher: wire.publisher };
    const ackAck = m.ackAck.bind(m);
    m.ackAck = async () => {
      asked.push(performance.now());
      return ackAck();
    };
  }
  const acking = new AckingDeliveries();
  const settle = () => settleBatch(msgs as unknown as JsMsg[], COMMITTED, { settler, metrics, connection: withConnection ? connection : undefined, budget, batchId: 1, acking });
  return { sink, nc, wire, msgs, asked, acking, settle };
}

describe.each([
  { path: "message by message (ackAck)", withConnection: false },
  { path: "in one batch (its connection)", withConnection: true },
])("a host's confirmAck over a reconnect, $path", ({ withConnection }) => {
  it("no attempt while the connection is down, past its whole window; after the reconnect the ACKs are confirmed and counted held", async () => {
    const s = setupHost(withConnection);
    s.wire.down();
    const settling = s.settle();
    // Twice its window (timeoutMs × (retries + 1) = 400 ms): it would have spent every attempt.
    await sleep(800);
    expect(s.asked).toEqual([]);
    expect(s.nc.frames).toEqual([]);
    // Meanwhile another delivery of them (the server restarted and handed them out again) is
    // acked, not written again.
    expect(s.msgs.every((m) => s.acking.has(m as unknown as JsMsg))).toBe(true);
    const upAt = performance.now();
    s.wire.up();
    const result = await settling;
    expect(result).toMatchObject({ outcome: "acked", acked: 3 });
    expect(result.messages.map((r) => [r.action, r.confirmed, r.settleError])).toEqual([
      ["acked", true, undefined],
      ["acked", true, undefined],
      ["acked", true, undefined],
    ]);
    if (withConnection) expect(s.nc.frames.length > 0 && s.nc.frames.every((f) => f.at >= upAt)).toBe(true);
    else expect(s.asked.length === 3 && s.asked.every((at) => at >= upAt)).toBe(true);
    expect(s.sink.snapshot().counters[MetricNames.ACKS_HELD_TOTAL]).toBe(3);
  });

  it("a connection closed while the ACKs wait: left with ConnectionClosedError, no frame, counted unsent", async () => {
    const s = setupHost(withConnection);
    s.wire.down();
    const settling = s.settle();
    await sleep(100);
    s.wire.close();
    const result = await settling;
    expect(result).toMatchObject({ outcome: "left", acked: 0, left: 3 });
    for (const r of result.messages) expect(r.settleError).toBeInstanceOf(ConnectionClosedError);
    expect(s.asked).toEqual([]);
    expect(s.nc.frames).toEqual([]);
    expect(s.sink.snapshot().counters[MetricNames.ACKS_UNSENT_TOTAL]).toBe(3);
  });

  it("a shutdown's bound passing while the ACKs wait: left with DisconnectedError, no frame", async () => {
    const started = performance.now();
    const s = setupHost(withConnection, { remainingMs: () => 150 - (performance.now() - started) });
    s.wire.down();
    const result = await s.settle();
    expect(performance.now() - started).toBeLessThan(5000);
    expect(result).toMatchObject({ outcome: "left", acked: 0, left: 3 });
    for (const r of result.messages) expect(r.settleError).toBeInstanceOf(DisconnectedError);
    expect(s.asked).toEqual([]);
    expect(s.nc.frames).toEqual([]);
  });
});

describe("a host's confirmAck whose connection goes down after its first attempt", () => {
  it("the next attempt waits for the reconnect and spends no retry: confirmed once the server answers", async () => {
    const wire = link();
    const requests: number[] = [];
    const publisher = Object.assign(wire.publisher, {
      request: async () => {
        requests.push(performance.now());
        return {};
      },
    });
    const m = fakeMsg();
    (m as unknown as { msg: unknown }).msg = { publisher };
    // The first attempt leaves, then the client loses its server and the reply never comes.
    m.ackAck = async () => {
      wire.down();
      throw Object.assign(new Error("timeout"), { name: "TimeoutError" });
    };
    const settling = ackConfirmed(m as unknown as JsMsg, { timeoutMs: 100, retries: 0 }, undefined, UNBOUNDED);
    await sleep(400);
    expect(requests).toEqual([]);
    const upAt = performance.now();
    wire.up();
    expect(await settling).toEqual({ confirmed: true });
    expect(requests.length === 1 && requests[0]! >= upAt).toBe(true);
  });

  it("a connection that closes instead: not confirmed, may have landed (the first frame left)", async () => {
    const wire = link();
    const m = fakeMsg();
    (m as unknown as { msg: unknown }).msg = { publisher: Object.assign(wire.publisher, { request: async () => ({}) }) };
    m.ackAck = async () => {
      wire.down();
      throw new Error("timeout");
    };
    const settling = ackConfirmed(m as unknown as JsMsg, { timeoutMs: 100, retries: 2 }, undefined, UNBOUNDED);
    await sleep(100);
    wire.close();
    const outcome = await settling;
    expect(outcome.confirmed).toBe(false);
    expect(outcome.unsent).toBeUndefined();
    expect(outcome.error).toBeInstanceOf(AckNotConfirmedError);
    expect(outcome.error).toMatchObject({ attempts: 1, lastErrorName: "ConnectionClosedError" });
  });
});

describe("WriteOutcome", () => {
  it("a resolved write cannot be settled without its report, nor a rejected one without its error (checked by tsc)", () => {
    const base = { cancelled: false, leaseLost: false, heartbeats: 0, writeMs: 1 } as const;
    // @ts-expect-error a resolved write carries the report its settling reads
    const noReport: WriteOutcome = { ...base, ok: true };
    // @ts-expect-error a rejected write carries its error
    const noError: WriteOutcome = { ...base, ok: false };
    expect([noReport.ok, noError.ok]).toEqual([true, false]);
  });
});

describe("a loop's confirmed ACKs on a connection that refuses frames (draining past its subscriptions)", () => {
  it("what left is acked (unconfirmed), what the connection refused is left with its error and counted unsent; nothing throws", async () => {
    const s = setup(() => undefined);
    const publish = s.nc.publish.bind(s.nc);
    const refusal = Object.assign(new Error("connection draining"), { name: "DrainingConnectionError" });
    s.nc.publish = (subject, payload, options) => {
      if (s.nc.frames.length >= 1) throw refusal;
      publish(subject, payload, options);
    };
    const result = await s.settle();
    expect(result.messages.map((r) => [r.action, r.confirmed, (r.settleError as Error).name])).toEqual([
      ["acked", false, "AckNotConfirmedError"],
      ["left", undefined, "DrainingConnectionError"],
      ["left", undefined, "DrainingConnectionError"],
    ]);
    expect(result).toMatchObject({ acked: 1, left: 2 });
    expect(s.nc.frames).toHaveLength(1);
    expect(s.sink.snapshot().counters[MetricNames.ACKS_UNSENT_TOTAL]).toBe(2);
  });

  it("a plain ACK the connection refuses: left with the client's error, counted unsent", async () => {
    const metrics = new InMemoryMetrics();
    const m = fakeMsg();
    m.ack = () => {
      throw Object.assign(new Error("connection draining"), { name: "DrainingConnectionError" });
    };
    const result = await new CommitThenAck({ metrics }).process([m], async () => undefined);
    expect(result.messages.map((r) => [r.action, (r.settleError as Error).name])).toEqual([["left", "DrainingConnectionError"]]);
    expect(metrics.snapshot().counters[MetricNames.ACKS_UNSENT_TOTAL]).toBe(1);
  });
});
