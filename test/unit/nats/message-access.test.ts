/**
 * Delivery count and stream sequence: read from the ack subject itself (both forms), from the
 * client's `info` when the subject has another shape, and `undefined` when neither says.
 */
import { describe, expect, it } from "vitest";
import type { JsMsg } from "@nats-io/jetstream";
import { deliveryCount, streamSequence } from "../../../src/nats/message-access.js";

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
