import { describe, expect, it } from "vitest";
import { nextTurn } from "../../../src/nats/next-turn.js";

describe("nextTurn", () => {
  it("is one promise for every caller in a turn, resolved in its check phase, and a new one after", async () => {
    const order: string[] = [];
    const a = nextTurn();
    const b = nextTurn();
    expect(b).toBe(a);
    setImmediate(() => order.push("immediate queued after"));
    void a.then(() => order.push("turn"));
    queueMicrotask(() => order.push("microtask"));
    await a;
    // After this turn's microtasks, before an immediate queued later in the same turn.
    expect(order).toEqual(["microtask", "turn"]);
    const c = nextTurn();
    expect(c).not.toBe(a);
    await c;
    expect(order).toEqual(["microtask", "turn", "immediate queued after"]);
  });
});
