/**
 * Delivery count and stream sequence: read from the ack subject itself (both forms), from the
 * client's `info` when the subject has another shape, and `undefined` when neither says.
 */
import { describe, expect, it } from "vitest";
import type { JsMsg } from "@nats-io/jetstream";
import { deliveryCount, storedStamp, streamSequence } from "../../../src/nats/message-access.js";

const msg = (reply: string | undefined, info?: { deliveryCount: number; streamSequence: number }): JsMsg =>
  ({
    reply,
    get info() {
      if (info === undefined) throw new Error("no delivery info");
      return info;
    },
  }) as unknown as JsMsg;

describe("delivery count and stream sequence", () => {
  it("reads both from the ack subject without the client's info (both subject forms)", () => {
    for (const reply of [
      "$JS.ACK.ORDERS.worker.3.42.40.1700000000000000000.0",
      "$JS.ACK.hub.ACCHASH.ORDERS.worker.3.42.40.1700000000000000000.0",
      "$JS.ACK.hub.ACCHASH.ORDERS.worker.3.42.40.1700000000000000000.0.tok",
    ]) {
      expect([deliveryCount(msg(reply)), streamSequence(msg(reply))]).toEqual([3, 42]);
    }
  });

  it("asks the client's info for a subject of another shape, and says undefined when neither can tell", () => {
    const info = { deliveryCount: 2, streamSequence: 7 };
    expect([deliveryCount(msg("$JS.ACK.S.C.x.y.1.2.3", info)), streamSequence(msg("$JS.ACK.S.C.x.y.1.2.3", info))]).toEqual([2, 7]);
    expect([deliveryCount(msg(undefined, info)), streamSequence(msg("_INBOX.abc", info))]).toEqual([2, 7]);
    expect([deliveryCount(msg("$JS.ACK.S.C.0.0.1.2.3")), streamSequence(msg(undefined))]).toEqual([undefined, undefined]);
  });

  it("reads each message's own numbers when reads of several messages alternate (the last subject read is remembered)", () => {
    const a = msg("$JS.ACK.S.C.1.10.10.0.0");
    const b = msg("$JS.ACK.S.C.2.20.21.0.0");
    const weird = msg("$JS.ACK.S.C.x.30.1.0.0", { deliveryCount: 5, streamSequence: 30 });
    expect([deliveryCount(a), streamSequence(b), streamSequence(a), deliveryCount(b)]).toEqual([1, 20, 10, 2]);
    expect([deliveryCount(weird), streamSequence(weird), deliveryCount(a), streamSequence(weird)]).toEqual([5, 30, 1, 30]);
    // An equal subject in another string object reads the same.
    expect(streamSequence(msg(["$JS.ACK.S.C.2.20", "21.0.0"].join(".")))).toBe(20);
  });
});

describe("the stored message's timestamp", () => {
  it("is read from the ack subject (both forms), the same for every delivery of one stored message, and differs between two", () => {
    const stamps = [
      "$JS.ACK.ORDERS.worker.1.42.40.1764700000123456789.0",
      "$JS.ACK.ORDERS.worker.3.42.77.1764700000123456789.5",
      "$JS.ACK.hub.ACCHASH.ORDERS.worker.3.42.40.1764700000123456789.0",
      "$JS.ACK.hub.ACCHASH.ORDERS.worker.2.42.40.1764700000123456789.0.tok",
    ].map((r) => storedStamp(msg(r)));
    expect(stamps[0]).toBeGreaterThan(1.7e18);
    expect(new Set(stamps).size).toBe(1);
    // The same sequence in a stream made again a few milliseconds later.
    expect(storedStamp(msg("$JS.ACK.ORDERS.worker.2.42.1.1764700000128456789.0"))).not.toBe(stamps[0]);
  });

  it("asks the client's info (a bigint or a number) for another shape; undefined when neither can tell", () => {
    const withInfo = (timestampNanos: unknown): JsMsg => ({ reply: "_INBOX.x", info: { timestampNanos } }) as unknown as JsMsg;
    expect(storedStamp(withInfo(1764700000123456789n))).toBe(Number(1764700000123456789n));
    expect(storedStamp(withInfo(5))).toBe(5);
    expect(storedStamp(withInfo("5"))).toBeUndefined();
    expect(storedStamp(msg("$JS.ACK.S.C.1.2.3.x.0"))).toBeUndefined();
    expect(storedStamp(msg(undefined))).toBeUndefined();
  });
});
