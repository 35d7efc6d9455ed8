import type { JsMsg } from "@nats-io/jetstream";
import { describe, expect, it } from "vitest";
import { batchConnectionClosed, closerOf } from "../../../src/nats/connection-state.js";

/** A message whose delivering client reports `closed`. */
function delivered(closed: () => boolean): JsMsg {
  return { msg: { publisher: { isClosed: closed } } } as unknown as JsMsg;
}

describe("closerOf", () => {
  it("reads what batchConnectionClosed reads: the connection with isClosed, else the first message's client", () => {
    let closed = false;
    const msgs = [delivered(() => closed)];
    const conn = { isClosed: () => false };
    expect(closerOf(conn, msgs)).toBe(conn);
    // A connection without isClosed (an untyped caller): the message's client decides, as for batchConnectionClosed.
    const closer = closerOf({} as { isClosed?: () => unknown }, msgs);
    expect(closer).toBeDefined();
    closed = true;
    expect(closer!.isClosed()).toBe(true);
    expect(batchConnectionClosed(msgs, {} as { isClosed?: () => unknown })).toBe(true);
  });

  it("is undefined when nothing can be read, and never throws", () => {
    expect(closerOf(undefined, [])).toBeUndefined();
    expect(closerOf(undefined, [{} as JsMsg])).toBeUndefined();
    const hostile = new Proxy({}, { get: () => { throw new Error("no"); } }) as JsMsg;
    expect(closerOf(undefined, [hostile])).toBeUndefined();
  });
});
