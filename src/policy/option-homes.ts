/**
 * Where an option belongs when it was given to the wrong options object: a policy field in
 * `run()`'s options, a loop option given to the constructor. Refused like a typo, but with
 * the place it goes, since "unknown" sends the reader looking for a spelling mistake.
 */
import { DEFAULT_IN_PROGRESS_POLICY } from "./in-progress-policy.js";

/** The options objects of the public API that can receive a key meant for another one. */
export type OptionsObject = "policy" | "forConsumer" | "constructor" | "run" | "runEach" | "process" | "withInProgress" | "heartbeat";

/** The fields of an InProgress policy. */
const POLICY_FIELDS = Object.keys(DEFAULT_IN_PROGRESS_POLICY);
/** The options of an instance (the constructor, `forConsumer`). */
const INSTANCE_KEYS = ["inProgress", "metrics", "tracing", "onTemporaryFailure", "deadLetter", "maxDeliver", "confirmAck", "connection", "heartbeat", "backOff"] as const;
/** The options of the loops. */
const LOOP_KEYS = ["batchSize", "expiresMs", "concurrency", "onBatch", "onResult", "onError", "pull"] as const;
const PULL_KEYS = ["group", "min_pending", "min_ack_pending", "priority"] as const;
const HEARTBEAT_KEYS = ["onLimit", "confirm", "requireProgress"] as const;
const DEAD_LETTER_KEYS = ["js", "subject"] as const;
const TEMPORARY_FAILURE_KEYS = ["action", "delayMs"] as const;

type Homes = Readonly<Record<string, string>>;

function homes(keys: readonly string[], home: (key: string) => string): Record<string, string> {
  return Object.fromEntries(keys.map((key) => [key, home(key)]));
}

const FOR_CONSUMER_POLICY = (key: string) => `options.inProgress.${key} of CommitThenAck.forConsumer, the InProgress policy: forConsumer(jsm, stream, consumer, { inProgress: { ${key} } })`;
const LOOP = (key: string) => `the options of run() or runEach(): ack.run(consumer, write, { ${key} })`;
const INSTANCE = (key: string) => `the instance: CommitThenAck.forConsumer(jsm, stream, consumer, { ${key} }) or new CommitThenAck({ ${key} })`;

/** What both ways of making an instance share. */
const INSTANCE_HOMES: Homes = {
  ...homes(LOOP_KEYS, LOOP),
  ...homes(PULL_KEYS, (key) => `the pull options of run() or runEach(): ack.run(consumer, write, { pull: { ${key} } })`),
  ...homes(HEARTBEAT_KEYS, (key) => `options.heartbeat.${key}`),
  ...homes(DEAD_LETTER_KEYS, (key) => `options.deadLetter.${key}`),
  ...homes(TEMPORARY_FAILURE_KEYS, (key) => `options.onTemporaryFailure.${key}`),
  receivedAt: "the options of process(): ack.process(msgs, write, { receivedAt }) (the loops record it themselves)",
};

const LOOP_HOMES: Homes = {
  ...homes(POLICY_FIELDS, FOR_CONSUMER_POLICY),
  ...homes([...INSTANCE_KEYS, "ackWaitMs"], INSTANCE),
  ...homes(HEARTBEAT_KEYS, (key) => `the instance's heartbeat options: CommitThenAck.forConsumer(jsm, stream, consumer, { heartbeat: { ${key} } })`),
  ...homes(PULL_KEYS, (key) => `options.pull.${key}`),
  receivedAt: "the options of process(); the loops record when each message arrived themselves",
};

const HOMES: Readonly<Record<OptionsObject, Homes>> = {
  policy: {
    backOff: "the options, not the policy: checkInProgressPolicy(policy, timing, { backOff }), or CommitThenAck.forConsumer(jsm, stream, consumer, { backOff })",
    ackWaitMs: "the consumer (its ack_wait), read with consumerTimingFromConfig(info); forConsumer reads it from the server",
    ...homes(LOOP_KEYS, LOOP),
    ...homes(INSTANCE_KEYS.filter((k) => k !== "inProgress" && k !== "backOff"), INSTANCE),
    ...homes(HEARTBEAT_KEYS, (key) => `the heartbeat options: withInProgress(msgs, work, policy, { ${key} }), or CommitThenAck's options.heartbeat.${key}`),
  },
  forConsumer: {
    ...INSTANCE_HOMES,
    ...homes(POLICY_FIELDS, FOR_CONSUMER_POLICY),
    timing: "new CommitThenAck({ timing }); forConsumer reads the consumer's timing from the server",
    maxDeliver: "new CommitThenAck({ maxDeliver }); forConsumer reads the consumer's MaxDeliver from the server",
  },
  constructor: {
    ...INSTANCE_HOMES,
    ...homes(
      POLICY_FIELDS,
      (key) => `the InProgress policy: options.inProgress = verifyInProgressPolicy({ ${key} }, timing), or CommitThenAck.forConsumer(jsm, stream, consumer, { inProgress: { ${key} } }), which verifies it for you`,
    ),
    ackWaitMs: "CommitThenAck.forConsumer(jsm, stream, consumer, { ackWaitMs }), which compares it with the consumer's",
  },
  run: { ...LOOP_HOMES, onResult: "runEach(); run() reports each batch through onBatch" },
  runEach: { ...LOOP_HOMES, onBatch: "run(); runEach() reports each message through onResult" },
  process: {
    ...homes(POLICY_FIELDS, FOR_CONSUMER_POLICY),
    ...homes([...INSTANCE_KEYS, "ackWaitMs"], INSTANCE),
    ...homes(LOOP_KEYS, (key) => `${LOOP(key)}; process() writes a batch you fetched yourself`),
  },
  withInProgress: {
    ...homes(POLICY_FIELDS, (key) => `the policy, withInProgress's third argument: withInProgress(msgs, work, verifyInProgressPolicy({ ${key} }, timing))`),
    inProgress: "withInProgress's third argument (the verified policy itself)",
    ...homes(["deadLetter", "onTemporaryFailure", "confirmAck", "maxDeliver", "tracing", "backOff"], (key) => `CommitThenAck: new CommitThenAck({ ${key} }); withInProgress only sends heartbeats, CommitThenAck settles`),
    ...homes(LOOP_KEYS, LOOP),
    timeoutMs: "options.confirm.timeoutMs",
  },
  heartbeat: {
    ...homes(POLICY_FIELDS, (key) => `options.inProgress.${key}, the InProgress policy (options.heartbeat only fine-tunes it: onLimit, confirm, requireProgress)`),
    timeoutMs: "options.heartbeat.confirm.timeoutMs",
  },
};

/**
 * Where `key` belongs when it was given to `object`'s options, or `undefined` when it belongs
 * to no other options object (then it is a typo, or unknown everywhere).
 */
export function optionHome(object: OptionsObject, key: string): string | undefined {
  const table = HOMES[object];
  return Object.hasOwn(table, key) ? table[key] : undefined;
}
