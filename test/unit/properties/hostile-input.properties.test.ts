/**
 * Hostile arguments at every public entry of the message stages: unknown option keys (any
 * string, `__proto__` included, at every options object and every nesting level), options that
 * are revoked proxies, arrays or primitives, throwing getters, revoked or incomplete messages,
 * and huge batches and reports. A malformed argument is refused with a `TypeError` (or an
 * `InProgressPolicyError` for a policy) before anything runs: no write, no fetch, no inspection,
 * no frame. A typo must never switch a safety feature off.
 */
import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  CommitThenAck,
  InProgressPolicyError,
  TemporarySinkError,
  verifyInProgressPolicy,
  withInProgress,
} from "../../../src/index.js";
import { fakeMsg, type FakeMsg } from "../../helpers/fakes.js";
import { runTimers, useVirtualTime } from "./harness.js";

const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 100, maxHeartbeats: 3, shutdownTimeoutMs: 100 }, { ackWaitMs: 1000, source: "configured" });

/** What a refused call must not have done. */
interface Probe {
  readonly msg: FakeMsg;
  ran: number;
}

const untouched = (p: Probe): boolean =>
  p.ran === 0 && p.msg.calls.working === 0 && p.msg.calls.ack === 0 && p.msg.calls.nak.length === 0 && p.msg.calls.term.length === 0;

const js = { publish: async () => ({ stream: "DLQ", seq: 1 }) };
const requester = { request: async () => ({}) };

/** Every options object of the message stages: its name in errors, its keys, a valid value, and a call that receives it. */
interface Site {
  readonly where: string;
  readonly known: readonly string[];
  readonly base: Record<string, unknown>;
  readonly call: (options: unknown, probe: Probe) => unknown;
  /** Whether a throwing getter on a known key is a TypeError here (see the note below). */
  readonly getterIsTypeError: boolean;
}

const COMMIT_THEN_ACK = ["inProgress", "metrics", "onTemporaryFailure", "deadLetter", "maxDeliver", "signal", "confirmAck", "connection", "heartbeat", "timing", "backOff"];
const FOR_CONSUMER = ["inProgress", "metrics", "onTemporaryFailure", "deadLetter", "signal", "confirmAck", "connection", "heartbeat", "backOff", "ackWaitMs"];

const write = (p: Probe) => async (): Promise<void> => void (p.ran += 1);
const jsm = (p: Probe) => ({ consumers: { info: async () => void (p.ran += 1) } });
const consumer = (p: Probe) => ({
  fetch: async () => {
    p.ran += 1;
    return [];
  },
});

// A throwing getter on a known option of CommitThenAck, process, run or forConsumer reaches the
// caller as the getter's own error (still before anything runs); those options are read in the
// consume and policy rooms. withInProgress turns it into a TypeError.
const SITES: readonly Site[] = [
  { where: "CommitThenAck options", known: COMMIT_THEN_ACK, base: { maxDeliver: 3 }, call: (o) => new CommitThenAck(o as never), getterIsTypeError: false },
  { where: "options.onTemporaryFailure", known: ["action", "delayMs", "retryInPlace"], base: { action: "nak" }, call: (o) => new CommitThenAck({ onTemporaryFailure: o as never }), getterIsTypeError: false },
  { where: "options.deadLetter", known: ["js", "subject", "timeoutMs"], base: { js, subject: "dlq.x" }, call: (o) => new CommitThenAck({ deadLetter: o as never }), getterIsTypeError: false },
  { where: "options.confirmAck", known: ["timeoutMs", "retries"], base: { retries: 1 }, call: (o) => new CommitThenAck({ confirmAck: o as never }), getterIsTypeError: false },
  { where: "options.heartbeat", known: ["onLimit", "confirm", "requireProgress"], base: { onLimit: "abort" }, call: (o) => new CommitThenAck({ heartbeat: o as never }), getterIsTypeError: false },
  {
    where: "options.heartbeat.confirm",
    known: ["connection", "timeoutMs"],
    base: { connection: requester },
    call: (o) => new CommitThenAck({ heartbeat: { confirm: o as never } }),
    getterIsTypeError: false,
  },
  { where: "process options", known: ["signal", "receivedAt"], base: { receivedAt: 0 }, call: (o, p) => new CommitThenAck().process([p.msg], write(p), o as never), getterIsTypeError: false },
  { where: "run options", known: ["batchSize", "expiresMs", "signal", "onError"], base: { batchSize: 5 }, call: (o, p) => new CommitThenAck().run(consumer(p) as never, write(p), o as never), getterIsTypeError: false },
  {
    where: "forConsumer options",
    known: FOR_CONSUMER,
    base: { ackWaitMs: 1000 },
    call: (o, p) => CommitThenAck.forConsumer(jsm(p) as never, "S", "C", o as never),
    getterIsTypeError: false,
  },
  {
    where: "withInProgress options",
    known: ["signal", "metrics", "receivedAt", "onLimit", "confirm", "connection", "requireProgress"],
    base: { onLimit: "continue" },
    call: (o, p) => withInProgress([p.msg], write(p), policy, o as never),
    getterIsTypeError: true,
  },
  {
    where: "options.confirm",
    known: ["connection", "timeoutMs"],
    base: { connection: requester },
    call: (o, p) => withInProgress([p.msg], write(p), policy, { confirm: o as never }),
    getterIsTypeError: true,
  },
];

/** Calls `site` and returns what it threw or rejected with (`undefined` if it did neither). */
async function refusal(site: Site, options: unknown, probe: Probe): Promise<unknown> {
  try {
    const r = site.call(options, probe);
    await r;
    return undefined;
  } catch (err) {
    return err;
  }
}

const siteArb = fc.constantFrom(...SITES);
/** Any key but a known one; `__proto__` and friends included. */
const keyArb = fc.oneof(fc.string({ minLength: 1, maxLength: 40 }), fc.constantFrom("__proto__", "constructor", "toString", "hasOwnProperty", ""), fc.string({ unit: "grapheme", maxLength: 50 }));

function withOwn(base: Record<string, unknown>, key: string, value: unknown): Record<string, unknown> {
  const o = { ...base };
  Object.defineProperty(o, key, { value, enumerable: true, configurable: true, writable: true });
  return o;
}

const shown = (key: string): string => JSON.stringify(key.length > 32 ? `${key.slice(0, 32)}…` : key);

describe("hostile input at the message stages", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("refuses every unknown option key with a TypeError naming it, before anything runs", async () => {
    await fc.assert(
      fc.asyncProperty(siteArb, keyArb, fc.anything(), async (site, key, value) => {
        fc.pre(!site.known.includes(key));
        const probe: Probe = { msg: fakeMsg(), ran: 0 };
        const err = await refusal(site, withOwn(site.base, key, value), probe);
        expect(err).toBeInstanceOf(TypeError);
        const message = (err as TypeError).message;
        expect(message.startsWith(`${site.where}: unknown option ${shown(key)}`)).toBe(true);
        expect(untouched(probe)).toBe(true);
      }),
      { numRuns: 400 },
    );
  });

  it("refuses a known key in the wrong case and names the one meant", async () => {
    await fc.assert(
      fc.asyncProperty(siteArb, fc.nat(), fc.constantFrom("upper", "lower", "snake"), async (site, pick, style) => {
        const known = site.known[pick % site.known.length]!;
        const key = style === "upper" ? known.toUpperCase() : style === "lower" ? known.toLowerCase() : known.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
        fc.pre(key !== known);
        const probe: Probe = { msg: fakeMsg(), ran: 0 };
        const err = await refusal(site, withOwn(site.base, key, site.base[known] ?? 1), probe);
        expect(err).toBeInstanceOf(TypeError);
        expect((err as TypeError).message).toContain(`did you mean "${known}"?`);
        expect(untouched(probe)).toBe(true);
      }),
      { numRuns: 150 },
    );
  });

  it("refuses options that are revoked proxies, arrays, primitives or have throwing getters, before anything runs", async () => {
    const shapes = ["revoked", "array", "number", "string", "function", "getter", "proxy-keys-throw"] as const;
    await fc.assert(
      fc.asyncProperty(siteArb, fc.constantFrom(...shapes), fc.nat(), async (site, shape, pick) => {
        const known = site.known[pick % site.known.length]!;
        const options = ((): unknown => {
          switch (shape) {
            case "revoked": {
              const r = Proxy.revocable({}, {});
              r.revoke();
              return r.proxy;
            }
            case "array":
              return [site.base];
            case "number":
              return 7;
            case "string":
              return "options";
            case "function":
              return () => site.base;
            case "getter":
              return Object.defineProperty({ ...site.base }, known, {
                enumerable: true,
                get() {
                  throw new Error("getter");
                },
              });
            case "proxy-keys-throw":
              return new Proxy(site.base, {
                ownKeys() {
                  throw new Error("ownKeys");
                },
              });
          }
        })();
        const probe: Probe = { msg: fakeMsg(), ran: 0 };
        const err = await refusal(site, options, probe);
        expect(err).toBeDefined();
        if (shape !== "getter" || site.getterIsTypeError) expect(err).toBeInstanceOf(TypeError);
        expect(untouched(probe)).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it("refuses malformed batches and policies before the work starts, and before anything is sent", async () => {
    const revoked = (): unknown => {
      const r = Proxy.revocable({}, {});
      r.revoke();
      return r.proxy;
    };
    const throwing = (key: string): unknown =>
      Object.defineProperty(fakeMsg(), key, {
        get() {
          throw new Error(`getter ${key}`);
        },
      });
    // Hostile members of a batch (with heartbeats enabled, every member must be a message).
    const members = [() => revoked(), () => throwing("working"), () => null, () => 7, () => ({ ...fakeMsg(), working: "no" })];
    const notBatches = [() => revoked(), () => "msgs", () => 12, () => null, () => undefined];
    const policies = [
      () => revoked(),
      () => ({ ...policy }),
      () => ({ enabled: true }),
      () => Object.defineProperty({}, "enabled", { enumerable: true, get: () => { throw new Error("getter"); } }),
      () => null,
      () => "on",
    ];
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.record({ member: fc.nat(members.length - 1) }), fc.record({ notBatch: fc.nat(notBatches.length - 1) }), fc.constant({})),
        fc.option(fc.nat(policies.length - 1)),
        fc.boolean(),
        async (b, p, viaProcess) => {
          fc.pre(Object.keys(b).length > 0 || p !== null);
          // A throwing getter on the policy given to the constructor reaches the caller as the
          // getter's own error (the options are read in the consume room): not checked here.
          fc.pre(!(viaProcess && p === 3));
          const good = fakeMsg();
          let ran = 0;
          const work = async (): Promise<void> => void (ran += 1);
          const batch = "member" in b ? [good, members[b.member]!()] : "notBatch" in b ? notBatches[b.notBatch]!() : [good];
          let err: unknown;
          try {
            // process takes its policy at construction, where a hostile one is refused at once.
            if (viaProcess) await new CommitThenAck({ inProgress: (p === null ? policy : policies[p]!()) as never }).process(batch as never, work);
            else await withInProgress(batch as never, work, (p === null ? policy : policies[p]!()) as never);
          } catch (e) {
            err = e;
          }
          expect(err instanceof TypeError || err instanceof InProgressPolicyError).toBe(true);
          expect(ran).toBe(0);
          expect(good.calls).toMatchObject({ working: 0, ack: 0, nak: [], term: [] });
        },
      ),
      { numRuns: 200 },
    );
    for (const w of [undefined, null, "write", {}, revoked()]) {
      await expect(new CommitThenAck().process([fakeMsg()], w as never)).rejects.toBeInstanceOf(TypeError);
      await expect(withInProgress([fakeMsg()], w as never, policy)).rejects.toBeInstanceOf(TypeError);
    }
  });

  it("settles hostile messages of a written batch without rejecting: a revoked one is left, the rest acknowledged", async () => {
    const r = Proxy.revocable({}, {});
    r.revoke();
    const infoThrows = Object.defineProperty(fakeMsg(), "info", {
      get() {
        throw new Error("getter info");
      },
    });
    const good = fakeMsg({ deliveryCount: 3 });
    const result = await new CommitThenAck({ maxDeliver: 3 }).process([good, r.proxy as FakeMsg, infoThrows], async () => undefined);
    expect(result.messages.map((m) => m.action)).toEqual(["acked", "left", "acked"]);
    expect(result.messages[1]!.settleError).toBeInstanceOf(TypeError);
    // A failed write: an unreadable delivery count counts as a first delivery (a NAK of 1 s),
    // never as the last one.
    const failed = await new CommitThenAck({ maxDeliver: 3 }).process([fakeMsg({ deliveryCount: 3 }), infoThrows], () => {
      throw new TemporarySinkError();
    });
    expect(failed.messages.map((m) => m.action)).toEqual(["exhausted", "nacked"]);
    expect(failed.messages[1]!.requestedDelayMs).toBeGreaterThanOrEqual(1000);
  });

  it("huge batches and reports: 20,000 messages, a report of 40,000 entries, bounded beats", async () => {
    const msgs = Array.from({ length: 20_000 }, () => fakeMsg());
    const named = msgs.filter((_, i) => i % 2 === 0);
    const entries = [...named.map((msg) => ({ msg, error: new TemporarySinkError() })), ...named.map((msg) => ({ msg, error: new Error("again") })), ...Array.from({ length: 1000 }, () => ({ error: 1 }))];
    const t0 = performance.now();
    const result = await new CommitThenAck({ onTemporaryFailure: { action: "leave" } }).process(msgs, async () => ({ failed: entries }) as never);
    expect(performance.now() - t0).toBeLessThan(3000);
    // 1,000 entries without msg: the report fails closed, so nothing is acked.
    expect(result).toMatchObject({ outcome: "left", acked: 0, left: 20_000 });
    expect(result.reportError).toBeInstanceOf(TypeError);
    expect(msgs.every((m) => m.calls.ack === 0)).toBe(true);
    const clean = await new CommitThenAck({ onTemporaryFailure: { action: "leave" } }).process(msgs.map(() => fakeMsg()), async (batch) => ({
      failed: batch.filter((_, i) => i % 2 === 0).map((msg) => ({ msg, error: new TemporarySinkError() })),
    }));
    expect(clean).toMatchObject({ outcome: "partial", acked: 10_000, left: 10_000 });
    expect(clean.messages[0]!.error).toBeInstanceOf(TemporarySinkError);

    useVirtualTime();
    const big = Array.from({ length: 10_000 }, () => fakeMsg());
    let done = false;
    void withInProgress(big, () => new Promise((resolve) => setTimeout(resolve, 10_000)), policy).then(() => (done = true));
    await runTimers({ done: () => done, settleMs: Number.POSITIVE_INFINITY, limitMs: 1e9 });
    expect(done).toBe(true);
    expect(big.every((m) => m.calls.working === 3)).toBe(true);
  });
});
