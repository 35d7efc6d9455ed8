/**
 * Settling when a frame cannot be sent. nats.js never throws from ack(), nak() or term(), but
 * the library guards each call; what it reports then must still be true: a frame that did not
 * leave is never reported as sent, and a message that will not come back is never reported as
 * "left" (which promises a redelivery).
 */
import diagnostics from "node:diagnostics_channel";
import { describe, expect, it } from "vitest";
import {
  CommitThenAck,
  DiagnosticsChannels,
  InMemoryMetrics,
  MetricNames,
  PermanentSinkError,
  type MessageExhaustedEvent,
} from "../../../src/index.js";
import { fakeMsg, type FakeMsg } from "../../helpers/fakes.js";

function throwingOn(m: FakeMsg, method: "ack" | "nak" | "term"): FakeMsg {
  (m as unknown as Record<string, () => never>)[method] = () => {
    throw new Error(`${method}() failed`);
  };
  return m;
}

const permanent = (): never => {
  throw new PermanentSinkError("poison");
};

describe("settling when a frame cannot be sent (fakes)", () => {
  it("a throwing ack() is reported as left with its error, never as acked", async () => {
    const failing = throwingOn(fakeMsg(), "ack");
    const fine = fakeMsg();
    const metrics = new InMemoryMetrics();
    const result = await new CommitThenAck({ metrics }).process([failing, fine], async () => undefined);
    expect(result.messages.map((m) => m.action)).toEqual(["left", "acked"]);
    expect(result.messages[0]!.settleError).toBeInstanceOf(Error);
    expect((result.messages[0]!.settleError as Error).message).toBe("ack() failed");
    expect(result).toMatchObject({ outcome: "partial", acked: 1, left: 1 });
    expect(metrics.snapshot().counters[MetricNames.MESSAGES_ACKED_TOTAL]).toBe(1);
    expect(metrics.snapshot().counters[MetricNames.SETTLE_FAILURES_TOTAL]).toBe(1);
  });

  it("a confirmed dead-letter copy whose ACK throws is left (the copy exists; the original is not acknowledged)", async () => {
    const m = throwingOn(fakeMsg(), "ack");
    const js = { publish: async () => ({ stream: "DLQ", seq: 9 }) };
    const result = await new CommitThenAck({ deadLetter: { js, subject: "dlq.x" } }).process([m], permanent);
    expect(result.messages[0]).toMatchObject({ action: "left" });
    expect(result.messages[0]!.settleError).toBeInstanceOf(Error);
    expect(result.deadLettered).toBe(0);
  });

  it("a throwing term() on the last allowed delivery is exhausted, counted and published — never left", async () => {
    const m = throwingOn(fakeMsg({ deliveryCount: 3 }), "term");
    const metrics = new InMemoryMetrics();
    const events: MessageExhaustedEvent[] = [];
    const listener = (e: unknown): void => void events.push(e as MessageExhaustedEvent);
    diagnostics.subscribe(DiagnosticsChannels.MESSAGE_EXHAUSTED, listener);
    try {
      const result = await new CommitThenAck({ maxDeliver: 3, metrics }).process([m], permanent);
      expect(result).toMatchObject({ outcome: "exhausted", exhausted: 1, left: 0, termed: 0 });
      expect(result.messages[0]!.error).toBeInstanceOf(PermanentSinkError);
      expect((result.messages[0]!.settleError as Error).message).toBe("term() failed");
      expect(metrics.snapshot().counters[MetricNames.MESSAGES_EXHAUSTED_TOTAL]).toBe(1);
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ deliveryCount: 3, maxDeliver: 3, reason: "no_dead_letter_target", errorName: "Error" });
    } finally {
      diagnostics.unsubscribe(DiagnosticsChannels.MESSAGE_EXHAUSTED, listener);
    }
  });

  it("a throwing term() or nak() with deliveries left is left with its error: AckWait brings the message back", async () => {
    const term = throwingOn(fakeMsg({ deliveryCount: 1 }), "term");
    const r1 = await new CommitThenAck({ maxDeliver: 3 }).process([term], permanent);
    expect(r1.messages[0]).toMatchObject({ action: "left" });
    expect(r1.messages[0]!.settleError).toBeInstanceOf(Error);
    const nak = throwingOn(fakeMsg({ deliveryCount: 2 }), "nak");
    const r2 = await new CommitThenAck({ maxDeliver: 3 }).process([nak], () => {
      throw new Error("sink down");
    });
    expect(r2.messages[0]).toMatchObject({ action: "left" });
    expect(r2.messages[0]!.settleError).toBeInstanceOf(Error);
  });
});
