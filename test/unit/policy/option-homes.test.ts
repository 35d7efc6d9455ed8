/**
 * A key given to the wrong options object is refused with the place it belongs, at every
 * public entry that takes options; a typo with nothing near it reads as a sentence.
 */
import { describe, expect, it, vi } from "vitest";
import { CommitThenAck, ConsumerPolicyError, checkInProgressPolicy, withInProgress } from "../../../src/index.js";
import { optionHome } from "../../../src/policy/option-homes.js";
import { readOptionKeys } from "../../../src/policy/option-keys.js";

/** A manager whose consumer info is never asked for: every case here fails before any request. */
const jsm = { consumers: { info: vi.fn(async () => ({})) } };
const consumer = { fetch: vi.fn() };
const write = async (): Promise<void> => undefined;
const FOR_CONSUMER_POLICY = /it belongs in options\.inProgress\.(\w+) of CommitThenAck\.forConsumer, the InProgress policy: forConsumer\(jsm, stream, consumer, \{ inProgress: \{ \1 \} \}\)/;

describe("policy fields given outside the policy", () => {
  it.each(["enabled", "intervalMs", "maxHeartbeats", "shutdownTimeoutMs"])("%s at the top level of forConsumer names options.inProgress", async (key) => {
    const err = await CommitThenAck.forConsumer(jsm as never, "ORDERS", "writer", { [key]: 1 } as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TypeError);
    expect((err as Error).message).toMatch(new RegExp(`^forConsumer options: unknown option "${key}" — it belongs in options\\.inProgress\\.${key} of CommitThenAck\\.forConsumer`));
    expect((err as Error).message).toContain("Given here it would change nothing; move it there (known: inProgress, metrics,");
    expect(jsm.consumers.info).not.toHaveBeenCalled();
  });

  it.each(["run", "runEach"] as const)("maxHeartbeats and shutdownTimeoutMs in %s() options name the instance's policy", async (loop) => {
    const ack = new CommitThenAck();
    for (const key of ["maxHeartbeats", "shutdownTimeoutMs"]) {
      const options = { [key]: 3 } as never;
      const err = await (loop === "run" ? ack.run(consumer as never, write, options) : ack.runEach(consumer as never, write, options)).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TypeError);
      expect((err as Error).message).toMatch(new RegExp(`^${loop} options: unknown option "${key}" — `));
      expect((err as Error).message).toMatch(FOR_CONSUMER_POLICY);
    }
    expect(consumer.fetch).not.toHaveBeenCalled();
  });

  it("in the constructor, a policy field points to verifyInProgressPolicy and forConsumer", () => {
    expect(() => new CommitThenAck({ intervalMs: 5000 } as never)).toThrow(
      'CommitThenAck options: unknown option "intervalMs" — it belongs in the InProgress policy: options.inProgress = verifyInProgressPolicy({ intervalMs }, timing)',
    );
  });

  it("in options.heartbeat, intervalMs and maxHeartbeats name options.inProgress", () => {
    expect(() => new CommitThenAck({ heartbeat: { maxHeartbeats: 5 } } as never)).toThrow(
      'options.heartbeat: unknown option "maxHeartbeats" — it belongs in options.inProgress.maxHeartbeats, the InProgress policy',
    );
    expect(() => new CommitThenAck({ heartbeat: { intervalMs: 5 } } as never)).toThrow(/options\.heartbeat: unknown option "intervalMs" — it belongs in options\.inProgress\.intervalMs/);
  });

  it("in withInProgress options, a policy field names the third argument", async () => {
    const work = vi.fn();
    await expect(withInProgress([], work, { enabled: false }, { maxHeartbeats: 3 } as never)).rejects.toThrow(
      /withInProgress options: unknown option "maxHeartbeats" — it belongs in the policy, withInProgress's third argument/,
    );
    expect(work).not.toHaveBeenCalled();
  });

  it("in process() options, a policy field names the instance's policy", async () => {
    const ack = new CommitThenAck();
    await expect(ack.process([], write, { intervalMs: 1000 } as never)).rejects.toThrow(/^process options: unknown option "intervalMs" — it belongs in options\.inProgress\.intervalMs of CommitThenAck\.forConsumer/);
  });
});

describe("instance and loop options given to each other", () => {
  it.each([
    ["batchSize", "ack.run(consumer, write, { batchSize })"],
    ["concurrency", "ack.run(consumer, write, { concurrency })"],
    ["onBatch", "ack.run(consumer, write, { onBatch })"],
    ["expiresMs", "ack.run(consumer, write, { expiresMs })"],
  ])("%s given to the constructor or forConsumer names run() and runEach()", async (key, call) => {
    expect(() => new CommitThenAck({ [key]: 1 } as never)).toThrow(`CommitThenAck options: unknown option "${key}" — it belongs in the options of run() or runEach(): ${call}`);
    await expect(CommitThenAck.forConsumer(jsm as never, "ORDERS", "writer", { [key]: 1 } as never)).rejects.toThrow(`forConsumer options: unknown option "${key}" — it belongs in the options of run() or runEach()`);
  });

  it("a pull option at the top level names options.pull", async () => {
    await expect(new CommitThenAck().run(consumer as never, write, { group: "orders" } as never)).rejects.toThrow('run options: unknown option "group" — it belongs in options.pull.group');
    expect(() => new CommitThenAck({ group: "orders" } as never)).toThrow(/it belongs in the pull options of run\(\) or runEach\(\): ack\.run\(consumer, write, \{ pull: \{ group \} \}\)/);
  });

  it.each(["deadLetter", "metrics", "tracing", "onTemporaryFailure", "confirmAck", "inProgress", "ackWaitMs"])("%s given to run() names the instance", async (key) => {
    await expect(new CommitThenAck().run(consumer as never, write, { [key]: {} } as never)).rejects.toThrow(
      `run options: unknown option "${key}" — it belongs in the instance: CommitThenAck.forConsumer(jsm, stream, consumer, { ${key} }) or new CommitThenAck({ ${key} })`,
    );
  });

  it("run's onResult and runEach's onBatch name the other loop", async () => {
    const ack = new CommitThenAck();
    await expect(ack.run(consumer as never, write, { onResult: () => undefined } as never)).rejects.toThrow('run options: unknown option "onResult" — it belongs in runEach(); run() reports each batch through onBatch');
    await expect(ack.runEach(consumer as never, write, { onBatch: () => undefined } as never)).rejects.toThrow('runEach options: unknown option "onBatch" — it belongs in run(); runEach() reports each message through onResult');
  });

  it("heartbeat fine-tuning at the top level names options.heartbeat; dead-letter and NAK fields name their objects", () => {
    expect(() => new CommitThenAck({ onLimit: "abort" } as never)).toThrow('CommitThenAck options: unknown option "onLimit" — it belongs in options.heartbeat.onLimit');
    expect(() => new CommitThenAck({ subject: "dlq" } as never)).toThrow('unknown option "subject" — it belongs in options.deadLetter.subject');
    expect(() => new CommitThenAck({ delayMs: 5 } as never)).toThrow('unknown option "delayMs" — it belongs in options.onTemporaryFailure.delayMs');
  });

  it("forConsumer names what it reads from the server itself", async () => {
    await expect(CommitThenAck.forConsumer(jsm as never, "ORDERS", "writer", { maxDeliver: 5 } as never)).rejects.toThrow(
      'forConsumer options: unknown option "maxDeliver" — it belongs in new CommitThenAck({ maxDeliver }); forConsumer reads the consumer\'s MaxDeliver from the server',
    );
    expect(jsm.consumers.info).not.toHaveBeenCalled();
  });

  it("withInProgress names CommitThenAck for settling options", async () => {
    await expect(withInProgress([], () => undefined, { enabled: false }, { deadLetter: {} } as never)).rejects.toThrow(
      /withInProgress options: unknown option "deadLetter" — it belongs in CommitThenAck: new CommitThenAck\(\{ deadLetter \}\); withInProgress only sends heartbeats/,
    );
  });
});

describe("a misplaced key in the policy itself", () => {
  it("backOff and batchSize in a policy name where they belong", () => {
    const r = checkInProgressPolicy({ enabled: false, backOff: "aware", batchSize: 10 }, undefined);
    expect(r.ok).toBe(false);
    const messages = r.ok ? [] : r.violations.map((v) => v.message);
    expect(messages).toEqual([
      'unknown field "backOff": it is not a policy field but belongs in the options, not the policy: checkInProgressPolicy(policy, timing, { backOff }), or CommitThenAck.forConsumer(jsm, stream, consumer, { backOff }); move it there (policy fields: enabled, intervalMs, maxHeartbeats, shutdownTimeoutMs)',
      'unknown field "batchSize": it is not a policy field but belongs in the options of run() or runEach(): ack.run(consumer, write, { batchSize }); move it there (policy fields: enabled, intervalMs, maxHeartbeats, shutdownTimeoutMs)',
    ]);
  });

  it("forConsumer reports a misplaced key inside inProgress as a policy violation naming its place", async () => {
    const info = { stream_name: "ORDERS", name: "writer", config: { durable_name: "writer", ack_policy: "explicit", ack_wait: 30_000_000_000, max_deliver: -1 } };
    const manager = { consumers: { info: async () => info } };
    const err = await CommitThenAck.forConsumer(manager as never, "ORDERS", "writer", { inProgress: { enabled: true, intervalMs: 1000, concurrency: 4 } } as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConsumerPolicyError);
    expect((err as ConsumerPolicyError).reason).toBe("policy_violation");
    expect(String((err as Error).message)).toContain('unknown field "concurrency": it is not a policy field but belongs in the options of run() or runEach()');
  });
});

describe("the wording of a refusal", () => {
  it("a field with nothing near it ends its sentence before the advice (no missing separator)", () => {
    const r = checkInProgressPolicy({ enabled: false, heartbeatIntervalMs: 1000 }, undefined);
    expect(r.ok ? "" : r.violations[0]?.message).toBe(
      'unknown field "heartbeatIntervalMs". A misspelt field would silently keep its default; rename or remove it (known fields: enabled, intervalMs, maxHeartbeats, shutdownTimeoutMs)',
    );
    expect(() => readOptionKeys("run options", { zzzzzzzz: 1 }, ["batchSize"], "run")).toThrow(
      'run options: unknown option "zzzzzzzz". A misspelt option would silently keep its default; rename or remove it (known: batchSize)',
    );
  });

  it("a typo still gets its guess, in every options object", () => {
    expect(() => readOptionKeys("run options", { batchsize: 1 }, ["batchSize"], "run")).toThrow(
      'run options: unknown option "batchsize" — did you mean "batchSize"? A misspelt option would silently keep its default',
    );
  });

  it("only own entries of the table count: inherited names are typos, not homes", () => {
    for (const key of ["__proto__", "constructor", "toString", "hasOwnProperty"]) expect(optionHome("run", key)).toBeUndefined();
    expect(optionHome("run", "maxHeartbeats")).toMatch(/^options\.inProgress\.maxHeartbeats of CommitThenAck\.forConsumer/);
    // A key that is known where it was given has no other home there.
    expect(optionHome("run", "batchSize")).toBeUndefined();
  });
});
