/**
 * withInProgress reads its arguments once, before the work starts; a throwing getter anywhere
 * in them is a malformed argument like any other, refused with a TypeError (never the getter's
 * own error, which a caller cannot tell from a failure of its work).
 */
import { describe, expect, it } from "vitest";
import { CommitThenAck, verifyInProgressPolicy, withInProgress } from "../../../src/index.js";
import { fakeMsg } from "../../helpers/fakes.js";

const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 100 }, { ackWaitMs: 1000, source: "configured" });
const getter = (target: object, key: string): object =>
  Object.defineProperty(target, key, {
    enumerable: true,
    get() {
      throw new Error(`getter ${key}`);
    },
  });

describe("withInProgress arguments with throwing getters", () => {
  it("a throwing option, policy field or message is a TypeError, and the work never starts", async () => {
    let ran = 0;
    const work = async (): Promise<void> => void (ran += 1);
    for (const key of ["signal", "metrics", "receivedAt", "onLimit", "confirm", "connection", "requireProgress"]) {
      const err = await withInProgress([fakeMsg()], work, policy, getter({}, key) as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TypeError);
      expect((err as TypeError).cause).toBeInstanceOf(Error);
    }
    await expect(withInProgress([fakeMsg()], work, policy, { confirm: getter({}, "connection") } as never)).rejects.toBeInstanceOf(TypeError);
    await expect(withInProgress([fakeMsg()], work, getter({}, "enabled") as never)).rejects.toBeInstanceOf(TypeError);
    await expect(withInProgress([getter(fakeMsg(), "working")] as never, work, policy)).rejects.toBeInstanceOf(TypeError);
    expect(ran).toBe(0);
  });

  it("process refuses such a batch before anything is sent, instead of NAKing it as a failed write", async () => {
    const good = fakeMsg();
    let ran = 0;
    const err = await new CommitThenAck({ inProgress: policy })
      .process([good, getter(fakeMsg(), "working")] as never, async () => void (ran += 1))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TypeError);
    expect(ran).toBe(0);
    expect(good.calls).toMatchObject({ working: 0, ack: 0, nak: [], term: [] });
  });

  it("a metrics option that cannot be a sink (the adapter factory itself, a string) is a TypeError, not silence", async () => {
    const factory = (): unknown => ({});
    let ran = 0;
    await expect(withInProgress(fakeMsg(), () => void (ran += 1), policy, { metrics: factory as never })).rejects.toThrow(/options\.metrics must be a MetricsSink object, got function: pass the sink, not its factory/);
    await expect(withInProgress(fakeMsg(), () => void (ran += 1), policy, { metrics: "prom" as never })).rejects.toThrow(/options\.metrics must be a MetricsSink object, got string/);
    expect(ran).toBe(0);
    expect(() => new CommitThenAck({ metrics: factory as never })).toThrow(/options\.metrics must be a MetricsSink object/);
  });
});
