/**
 * Confirmed ACKs of a batch: the first attempt asks one reply of each run of frames to one
 * consumer, later attempts one of every frame still unconfirmed. A fake connection records the
 * frames and answers as the test says; that the server processes a connection's ACKs in order
 * (which makes a run's last reply answer for the run) is proven against a real server in
 * test/integration/commit-then-ack.test.ts.
 */
import { describe, expect, it, vi } from "vitest";
import { consumerRuns, type ConfirmingConnection } from "../../../src/nats/ack-inbox.js";
import { consumerPrefixEnd } from "../../../src/nats/message-access.js";
import { ackBatchConfirmed } from "../../../src/settle/frames.js";
import { UNBOUNDED } from "../../../src/settle/settle-budget.js";
import { fakeConfirmingConnection, fakeMsg } from "../../helpers/fakes.js";

describe("consumer runs of ACK subjects", () => {
  it("finds the consumer part of both subject forms, and nothing in other shapes", () => {
    const v1 = "$JS.ACK.ORDERS.worker.1.42.40.1700000000000000000.3";
    expect(v1.slice(0, consumerPrefixEnd(v1))).toBe("$JS.ACK.ORDERS.worker.");
    const v2 = "$JS.ACK.hub.ACCHASH.ORDERS.worker.1.42.40.1700000000000000000.3.tok";
    expect(v2.slice(0, consumerPrefixEnd(v2))).toBe("$JS.ACK.hub.ACCHASH.ORDERS.worker.");
    const v2short = "$JS.ACK.hub.ACCHASH.ORDERS.worker.1.42.40.1700000000000000000.3";
    expect(v2short.slice(0, consumerPrefixEnd(v2short))).toBe("$JS.ACK.hub.ACCHASH.ORDERS.worker.");
    expect(consumerPrefixEnd("_INBOX.abc.1")).toBe(-1);
    expect(consumerPrefixEnd("$JS.ACK.S.C.1.2")).toBe(-1);
  });

  it("groups consecutive frames to one consumer; another consumer or an odd subject starts a new run", () => {
    const a = (n: number): string => `$JS.ACK.S.A.1.${n}.${n}.0.0`;
    const b = (n: number): string => `$JS.ACK.S.B.1.${n}.${n}.0.0`;
    // A consumer whose name starts like another's is another consumer.
    const ab = (n: number): string => `$JS.ACK.S.AB.1.${n}.${n}.0.0`;
    expect(consumerRuns([a(1), a(2), a(3), b(4), b(5), a(6), "odd", "odd", ab(9), a(10)])).toEqual([[0, 1, 2], [3, 4], [5], [6], [7], [8], [9]]);
    expect(consumerRuns([])).toEqual([]);
  });
});

describe("ackBatchConfirmed", () => {
  it("asks one reply of each run; its confirmation confirms every message of the run", async () => {
    const msgs = [fakeMsg({ consumer: "A" }), fakeMsg({ consumer: "A" }), fakeMsg({ consumer: "A" }), fakeMsg({ consumer: "B" }), fakeMsg({ consumer: "B" })];
    const nc = fakeConfirmingConnection(() => 0);
    const outcomes = await ackBatchConfirmed(msgs, { timeoutMs: 1000, retries: 1 }, nc, UNBOUNDED, false);
    expect(outcomes.map((o) => o.confirmed)).toEqual([true, true, true, true, true]);
    expect(nc.frames.map((f) => f.subject)).toEqual(msgs.map((m) => m.reply));
    // Only the last frame of each run carries a reply subject.
    expect(nc.frames.map((f) => f.reply !== undefined)).toEqual([false, false, true, false, true]);
    expect(msgs.every((m) => m.didAck)).toBe(true);
  });

  it("a run whose reply never comes is asked again frame by frame, and each answer counts for its own frame", async () => {
    const msgs = [fakeMsg(), fakeMsg(), fakeMsg()];
    let first = true;
    // The run's reply is lost; on the retry the server confirms the first two frames only.
    const nc = fakeConfirmingConnection((subject) => {
      if (first) {
        first = false;
        return undefined;
      }
      return subject === msgs[2]!.reply ? undefined : 0;
    });
    // A window of timeoutMs × (retries + 1): room for a first timer that fires late on a loaded machine.
    const outcomes = await ackBatchConfirmed(msgs, { timeoutMs: 100, retries: 3 }, nc, UNBOUNDED, false);
    expect(outcomes.map((o) => o.confirmed)).toEqual([true, true, false]);
    expect(outcomes[2]!.error).toBeInstanceOf(Error);
    expect((outcomes[2]!.error as Error).name).toBe("AckNotConfirmedError");
    // The first attempt: three frames, one reply asked; the retry: a reply asked of each; later
    // retries ask again only for the frame still unconfirmed.
    expect(nc.frames.slice(0, 6).map((f) => f.reply !== undefined)).toEqual([false, false, true, true, true, true]);
    expect(nc.frames.slice(6).every((f) => f.subject === msgs[2]!.reply && f.reply !== undefined)).toBe(true);
  });

  it("a refused run (nobody holds the consumer) is refused for all of its messages and asked again", async () => {
    const msgs = [fakeMsg(), fakeMsg()];
    let attempt = 0;
    const nc = fakeConfirmingConnection((_subject, reply) => {
      // The first attempt's run is refused (503); the retry is confirmed.
      if (/\.r\d+$/.test(reply)) {
        attempt += 1;
        return 503;
      }
      return 0;
    });
    const outcomes = await ackBatchConfirmed(msgs, { timeoutMs: 2000, retries: 2 }, nc, UNBOUNDED, false);
    expect(attempt).toBe(1);
    expect(outcomes.map((o) => o.confirmed)).toEqual([true, true]);
    expect(nc.frames).toHaveLength(4);
  });

  it("an answer naming no frame of the batch (an index out of range, not a number) is ignored", async () => {
    const msgs = [fakeMsg(), fakeMsg()];
    let deliver: ((err: unknown, msg: { subject: string }) => void) | undefined;
    const replies: string[] = [];
    const nc: ConfirmingConnection = {
      subscribe(_subject, options) {
        deliver = options.callback;
        return { unsubscribe() {} };
      },
      publish(_subject, _payload, options) {
        if (options?.reply !== undefined) replies.push(options.reply);
      },
      isClosed: () => false,
    };
    const pending = ackBatchConfirmed(msgs, { timeoutMs: 50, retries: 0 }, nc, UNBOUNDED, false);
    // The run's reply subject ends in "r1"; answers for frames that do not exist confirm nothing.
    const base = replies[0]!.replace(/r1$/, "");
    expect(deliver, "the inbox subscribed before its first frame").toBeDefined();
    for (const bogus of ["7", "r7", "-1", "x", "r", "r0", "", "1.5", " 1", "0x1"]) deliver!(null, { subject: `${base}${bogus}` });
    const outcomes = await pending;
    expect(outcomes.map((o) => o.confirmed)).toEqual([false, false]);
    // The control: the same channel carries a well-formed answer, which confirms the run.
    replies.length = 0;
    const control = ackBatchConfirmed([fakeMsg(), fakeMsg()], { timeoutMs: 50, retries: 0 }, nc, UNBOUNDED, false);
    deliver!(null, { subject: replies[0]! });
    expect((await control).map((o) => o.confirmed)).toEqual([true, true]);
  });
});

describe("ackBatchConfirmed for a host's explicit confirmAck", () => {
  it("refused ACKs (an election) are asked again every 100 ms within timeoutMs × (retries + 1), spending no retry, until the new leader confirms", async () => {
    const msgs = [fakeMsg(), fakeMsg()];
    const started = performance.now();
    // Nobody holds the consumer for 350 ms; then the new leader answers.
    const nc = fakeConfirmingConnection(() => (performance.now() - started < 350 ? 503 : 0));
    // Two retries (spent by 300 ms had refusals counted), but a window of 250 ms × 3; no
    // bridging of elections (a host's own options).
    const outcomes = await ackBatchConfirmed(msgs, { timeoutMs: 250, retries: 2 }, nc, UNBOUNDED, false);
    expect(outcomes).toEqual([{ confirmed: true }, { confirmed: true }]);
    expect(nc.frames.filter((f) => f.reply !== undefined).length).toBeGreaterThanOrEqual(3);
  });

  it("a consumer that stays refused is reported once the window passed, with the refusal", async () => {
    const msgs = [fakeMsg()];
    const started = performance.now();
    const nc = fakeConfirmingConnection(() => 503);
    const [outcome] = await ackBatchConfirmed(msgs, { timeoutMs: 100, retries: 1 }, nc, UNBOUNDED, false);
    expect(performance.now() - started).toBeGreaterThanOrEqual(190);
    expect(outcome).toMatchObject({ confirmed: false, error: { name: "AckNotConfirmedError", lastFailure: "no_responders" } });
  });
});

describe("ackBatchConfirmed when the server refuses the inbox's subscription", () => {
  it("a batch waiting for answers ends at its next timer with the refusal; the next batches send plain ACKs at once, reported with it; 30 s later the inbox subscribes again", async () => {
    let answer: number | undefined;
    const base = fakeConfirmingConnection(() => answer);
    let callback: ((err: unknown, msg: { subject: string }) => void) | undefined;
    let subscriptions = 0;
    const nc: typeof base = {
      ...base,
      subscribe(subject, options) {
        subscriptions += 1;
        callback = options.callback;
        return base.subscribe(subject, options);
      },
    };
    const denied = Object.assign(new Error("Permissions Violation for Subscription"), { name: "PermissionViolationError" });
    const first = [fakeMsg(), fakeMsg()];
    const started = performance.now();
    // A window of 100 ms × 11: without the refusal it would wait all of it.
    const waiting = ackBatchConfirmed(first, { timeoutMs: 100, retries: 10 }, nc, UNBOUNDED, false);
    // The server's -ERR arrives; the client hands it to the subscription and closes it.
    callback!(denied, { subject: "" });
    const outcomes = await waiting;
    expect(performance.now() - started).toBeLessThan(1000);
    for (const o of outcomes) expect(o).toMatchObject({ confirmed: false, error: { name: "AckNotConfirmedError", lastErrorName: "PermissionViolationError" } });
    const sent = nc.frames.length;
    const second = [fakeMsg()];
    expect(await ackBatchConfirmed(second, { timeoutMs: 100, retries: 10 }, nc, UNBOUNDED, false)).toEqual([{ confirmed: false, error: denied }]);
    expect(nc.frames.slice(sent).map((f) => [f.subject, f.reply])).toEqual([[second[0]!.reply, undefined]]);
    expect(subscriptions).toBe(1);
    // 30 s on (permissions may have been reloaded): the inbox subscribes again.
    const now = performance.now.bind(performance);
    const later = vi.spyOn(performance, "now").mockImplementation(() => now() + 30_001);
    try {
      answer = 0;
      expect(await ackBatchConfirmed([fakeMsg()], { timeoutMs: 100, retries: 10 }, nc, UNBOUNDED, false)).toEqual([{ confirmed: true }]);
      expect(subscriptions).toBe(2);
    } finally {
      later.mockRestore();
    }
  });
});

describe("the loops' own confirmation when the server refuses the inbox's subscription", () => {
  it("the batch that met the refusal reports it; later batches send plain ACKs, unconfirmed, with no error each (the host did not ask for confirmation)", async () => {
    const base = fakeConfirmingConnection(() => undefined);
    let callback: ((err: unknown, msg: { subject: string }) => void) | undefined;
    const nc: typeof base = {
      ...base,
      subscribe(subject, options) {
        callback = options.callback;
        return base.subscribe(subject, options);
      },
    };
    const denied = Object.assign(new Error("Permissions Violation for Subscription"), { name: "PermissionViolationError" });
    const waiting = ackBatchConfirmed([fakeMsg()], { timeoutMs: 100, retries: 6 }, nc, UNBOUNDED, true);
    callback!(denied, { subject: "" });
    const [met] = await waiting;
    expect(met).toMatchObject({ confirmed: false, error: { name: "AckNotConfirmedError", lastErrorName: "PermissionViolationError" } });
    const sent = nc.frames.length;
    const later = [fakeMsg(), fakeMsg()];
    expect(await ackBatchConfirmed(later, { timeoutMs: 100, retries: 6 }, nc, UNBOUNDED, true)).toEqual([{ confirmed: false }, { confirmed: false }]);
    expect(nc.frames.slice(sent).map((f) => [f.subject, f.reply])).toEqual(later.map((m) => [m.reply, undefined]));
  });
});

describe("ackBatchConfirmed on a connection that refuses", () => {
  const refusal = (): Error => Object.assign(new Error("connection draining"), { name: "DrainingConnectionError" });

  it("a draining connection gets plain ACKs (no reply can come back): every frame leaves, unconfirmed, no error", async () => {
    const msgs = [fakeMsg(), fakeMsg(), fakeMsg()];
    let subscribed = 0;
    const nc = { ...fakeConfirmingConnection(() => 0), isDraining: () => true };
    nc.subscribe = () => ((subscribed += 1), { unsubscribe() {} });
    const outcomes = await ackBatchConfirmed(msgs, { timeoutMs: 1000, retries: 1 }, nc, UNBOUNDED, true);
    expect(outcomes).toEqual(msgs.map(() => ({ confirmed: false })));
    expect(nc.frames.map((f) => [f.subject, f.reply])).toEqual(msgs.map((m) => [m.reply, undefined]));
    expect(subscribed).toBe(0);
  });

  it("a reply subscription refused by a closed connection falls back to plain ACKs, and the next batch asks for the subscription again", async () => {
    const base = fakeConfirmingConnection(() => 0);
    let refuse = true;
    const nc: typeof base = {
      ...base,
      // Closed when it refuses: the refusal that means "no replies".
      isClosed: () => refuse,
      subscribe(subject, options) {
        if (refuse) throw refusal();
        return base.subscribe(subject, options);
      },
    };
    const first = [fakeMsg(), fakeMsg()];
    expect(await ackBatchConfirmed(first, { timeoutMs: 1000, retries: 1 }, nc, UNBOUNDED, false)).toEqual([{ confirmed: false }, { confirmed: false }]);
    expect(nc.frames.every((f) => f.reply === undefined)).toBe(true);
    refuse = false;
    const second = [fakeMsg()];
    expect(await ackBatchConfirmed(second, { timeoutMs: 1000, retries: 1 }, nc, UNBOUNDED, false)).toEqual([{ confirmed: true }]);
  });

  it("a fault that is no refusal is reported with every ACK, not taken for 'unconfirmed': the ACKs still leave", async () => {
    const msgs = [fakeMsg(), fakeMsg()];
    const nc = fakeConfirmingConnection(() => 0);
    const fault = new Error("a fault in the batch");
    const options = {
      retries: 1,
      get timeoutMs(): number {
        throw fault;
      },
    };
    const outcomes = await ackBatchConfirmed(msgs, options, nc, UNBOUNDED, false);
    expect(outcomes).toEqual([
      { confirmed: false, error: fault },
      { confirmed: false, error: fault },
    ]);
    expect(nc.frames.map((f) => [f.subject, f.reply])).toEqual(msgs.map((m) => [m.reply, undefined]));
  });

  it("a reply subscription refused on an open connection is a fault: every ACK leaves plain with it as its error, and the next batch asks again", async () => {
    const base = fakeConfirmingConnection(() => 0);
    const fault = new Error("invalid subject");
    let refuse = true;
    let asked = 0;
    const nc: typeof base = {
      ...base,
      subscribe(subject, options) {
        asked += 1;
        if (refuse) throw fault;
        return base.subscribe(subject, options);
      },
    };
    const first = [fakeMsg(), fakeMsg()];
    expect(await ackBatchConfirmed(first, { timeoutMs: 1000, retries: 1 }, nc, UNBOUNDED, false)).toEqual([
      { confirmed: false, error: fault },
      { confirmed: false, error: fault },
    ]);
    expect(nc.frames.map((f) => [f.subject, f.reply])).toEqual(first.map((m) => [m.reply, undefined]));
    expect(first.every((m) => m.didAck)).toBe(true);
    refuse = false;
    const second = [fakeMsg()];
    expect(await ackBatchConfirmed(second, { timeoutMs: 1000, retries: 1 }, nc, UNBOUNDED, false)).toEqual([{ confirmed: true }]);
    expect(asked).toBe(2);
  });

  it("a publish refused mid-batch: the frames before it left (unconfirmed), the rest are unsent with the refusal", async () => {
    const msgs = [fakeMsg({ consumer: "A" }), fakeMsg({ consumer: "A" }), fakeMsg({ consumer: "B" }), fakeMsg({ consumer: "B" })];
    const base = fakeConfirmingConnection(() => undefined);
    const err = refusal();
    const nc: typeof base = {
      ...base,
      publish(subject, payload, options) {
        if (base.frames.length === 3) throw err;
        base.publish(subject, payload, options);
      },
    };
    const outcomes = await ackBatchConfirmed(msgs, { timeoutMs: 1000, retries: 1 }, nc, UNBOUNDED, false);
    expect(nc.frames).toHaveLength(3);
    expect(outcomes.slice(0, 3).map((o) => [o.confirmed, o.unsent, (o.error as Error).name])).toEqual([
      [false, undefined, "AckNotConfirmedError"],
      [false, undefined, "AckNotConfirmedError"],
      [false, undefined, "AckNotConfirmedError"],
    ]);
    expect(outcomes[3]).toEqual({ confirmed: false, unsent: true, error: err });
  });

  it("a publish refused on a connection that closed: unsent, the library's ConnectionClosedError", async () => {
    const base = fakeConfirmingConnection(() => undefined);
    const nc: typeof base = {
      ...base,
      isClosed: () => true,
      publish() {
        throw Object.assign(new Error("closed"), { name: "ClosedConnectionError" });
      },
    };
    const [o] = await ackBatchConfirmed([fakeMsg()], { timeoutMs: 1000, retries: 1 }, nc, UNBOUNDED, false);
    expect(o).toMatchObject({ confirmed: false, unsent: true });
    expect((o!.error as Error).name).toBe("ConnectionClosedError");
    expect(((o!.error as Error).cause as Error).name).toBe("ClosedConnectionError");
  });

  it("a retry refused in its timer ends the batch (nothing thrown from the timer): the frames left in the first attempt, unconfirmed", async () => {
    const base = fakeConfirmingConnection(() => undefined);
    const nc: typeof base = {
      ...base,
      publish(subject, payload, options) {
        if (base.frames.length >= 2) throw refusal();
        base.publish(subject, payload, options);
      },
    };
    const outcomes = await ackBatchConfirmed([fakeMsg(), fakeMsg()], { timeoutMs: 20, retries: 3 }, nc, UNBOUNDED, false);
    expect(outcomes.map((o) => [o.confirmed, o.unsent, (o.error as Error).name])).toEqual([
      [false, undefined, "AckNotConfirmedError"],
      [false, undefined, "AckNotConfirmedError"],
    ]);
    expect((outcomes[0]!.error as { lastErrorName?: string }).lastErrorName).toBe("DrainingConnectionError");
  });

  it("a connection that starts to drain while the answers are awaited is not asked again: no reply can come back", async () => {
    let draining = false;
    const nc = { ...fakeConfirmingConnection(() => undefined), isDraining: () => draining };
    const pending = ackBatchConfirmed([fakeMsg()], { timeoutMs: 20, retries: 5 }, nc, UNBOUNDED, true);
    draining = true;
    const [o] = await pending;
    expect(o).toMatchObject({ confirmed: false });
    expect((o!.error as Error).name).toBe("AckNotConfirmedError");
    expect(nc.frames).toHaveLength(1);
  });
});
