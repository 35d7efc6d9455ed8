/**
 * The options of the consumer loops (`run`, `runEach`), checked once before the first pull.
 */
import { ConsumerPolicyError } from "../errors.js";
import { readOptionKeys } from "../policy/option-keys.js";
import { describe, isIntegerIn } from "../policy/untrusted.js";
import type { JsMsgLike } from "../nats/client-types.js";
import type { BatchResult } from "../settle/batch-result.js";
import type { ConsumerBinding } from "./consumer-binding.js";

/**
 * What a pull request carries besides its size and expiry (nats-server 2.11+ priority
 * groups): the group to pull through, and for `overflow` consumers the thresholds or the
 * priority of this worker.
 *
 * @example
 * ```ts
 * const pinned: PullOptions = { group: "orders" };
 * const overflow: PullOptions = { group: "orders", min_pending: 1_000 };
 * ```
 */
export interface PullOptions {
  /** The priority group (1 to 16 characters); required when the consumer has priority groups. */
  readonly group?: string;
  /** `overflow`: serve this pull only while the consumer has at least this many messages pending. */
  readonly min_pending?: number;
  /** `overflow`: serve this pull only while at least this many messages await an ACK. */
  readonly min_ack_pending?: number;
  /** `prioritized` (nats-server 2.12+): this worker's priority, 0 (highest) ..= 9. */
  readonly priority?: number;
}

/**
 * What the loop was doing when it met an error (`onError`'s second argument).
 *
 * - `start`: checking the consumer before the first pull (the loop goes on);
 * - `fetch`: a pull failed (retried with a backoff);
 * - `report`: the write's report could not be fully read (`BatchResult.reportError`);
 * - `settle`: a message's frame failed or could not be confirmed (`MessageResult.settleError`);
 * - `callback`: `onBatch` or `onResult` threw.
 *
 * @example
 * ```ts
 * const onError = (err: unknown, ctx: RunErrorContext) => log.warn({ during: ctx.during, name: (err as Error).name });
 * ```
 */
export interface RunErrorContext {
  /** What the loop was doing. */
  readonly during: "start" | "fetch" | "report" | "settle" | "callback";
  /** For `fetch`: failures in a row, this one included. */
  readonly consecutiveFailures?: number;
  /** For `fetch`: the pause before the next pull, in milliseconds; absent when the connection is closed for good or draining (the loop then ends). */
  readonly retryInMs?: number;
  /** For `settle`: the action the message got. */
  readonly action?: string;
}

/**
 * Options of {@link CommitThenAck.run}.
 *
 * @typeParam M - the consumer's message type (`onBatch` gets its results).
 *
 * @example
 * ```ts
 * const options: RunOptions = {
 *   batchSize: 100,
 *   concurrency: 4,
 *   signal: shutdown.signal,
 *   onBatch: (r) => log.debug({ outcome: r.outcome, acked: r.acked }),
 *   onError: (err, ctx) => log.warn({ during: ctx.during, name: (err as Error).name }),
 * };
 * ```
 */
export interface RunOptions<M extends JsMsgLike = JsMsgLike> {
  /** Messages per pull and per write, integer 1 ..= 10,000; default 100. */
  readonly batchSize?: number;
  /**
   * How long one pull request stays open, integer 1000 ..= 3,600,000 ms (the client's
   * minimum is 1000); default 1000. A pull is never cut short (the server may be delivering
   * into it), so a partial batch starts when its pull expires: this is the longest a partial
   * batch waits. A value above the lease bound — the heartbeat interval with heartbeats on, a
   * quarter of the consumer's AckWait with them off (1000 ms when unknown), never below 1000
   * — is clamped to it and reported to `onError` (`pull_expiry_clamped`). Messages waiting
   * for their batch are heartbeated from their arrival (heartbeats on). A shutdown waits for
   * the open pull to end, so it adds up to this much.
   */
  readonly expiresMs?: number;
  /** Batches written at once, integer 1 ..= 256; default 1. The next pull goes out while fewer are in flight. */
  readonly concurrency?: number;
  /** Stops the loop gracefully (combined with the instance's signal). */
  readonly signal?: AbortSignal;
  /** Every settled batch's result. Throwing is reported to `onError` and never stops the loop. */
  readonly onBatch?: (result: BatchResult<M>) => void;
  /** Every error the loop sees, with what it was doing. Throwing is ignored. */
  readonly onError?: (error: unknown, context: RunErrorContext) => void;
  /** Passed to every pull request (priority groups, nats-server 2.11+). */
  readonly pull?: PullOptions;
}

/**
 * Options of {@link CommitThenAck.runEach}.
 *
 * @typeParam M - the consumer's message type (`onResult` gets its results).
 *
 * @example
 * ```ts
 * const options: RunEachOptions = { concurrency: 32, signal: shutdown.signal, onResult: (r) => metrics.observe(r.writeMs) };
 * ```
 */
export interface RunEachOptions<M extends JsMsgLike = JsMsgLike> {
  /** Handlers running at once, integer 1 ..= 10,000; default 1. */
  readonly concurrency?: number;
  /**
   * The most messages one pull asks for, integer 1 ..= 10,000; default `concurrency`. A pull
   * asks only for free handlers, so at most `concurrency` messages are held and none waits
   * for a handler.
   */
  readonly batchSize?: number;
  /**
   * How long one pull request stays open, integer 1000 ..= 3,600,000 ms; default 1000. Clamped
   * to the lease bound as for `run` (reported as `pull_expiry_clamped`); a shutdown waits for
   * open pulls to end, so it adds up to this much.
   */
  readonly expiresMs?: number;
  /** Stops the loop gracefully (combined with the instance's signal). */
  readonly signal?: AbortSignal;
  /** Every settled message's result (a batch of one: `result.messages[0]`). Throwing is reported and ignored. */
  readonly onResult?: (result: BatchResult<M>) => void;
  /** Every error the loop sees, with what it was doing. Throwing is ignored. */
  readonly onError?: (error: unknown, context: RunErrorContext) => void;
  /** Passed to every pull request (priority groups, nats-server 2.11+). */
  readonly pull?: PullOptions;
}

/** The checked settings of a loop. */
export interface LoopSettings {
  readonly batchSize: number;
  readonly expiresMs: number;
  readonly concurrency: number;
  readonly signal: AbortSignal | undefined;
  readonly onSettled: ((result: BatchResult) => void) | undefined;
  readonly onError: ((error: unknown, context: RunErrorContext) => void) | undefined;
  readonly pull: PullOptions | undefined;
  /** The most messages the loop holds at once, and how that number comes about. */
  readonly capacity: number;
  readonly capacityRule: string;
}

const RUN_KEYS = ["batchSize", "expiresMs", "concurrency", "signal", "onBatch", "onError", "pull"] as const;
const RUN_EACH_KEYS = ["concurrency", "batchSize", "expiresMs", "signal", "onResult", "onError", "pull"] as const;
const PULL_KEYS = ["group", "min_pending", "min_ack_pending", "priority"] as const;

/** Checks the options of `run`; throws a `TypeError` naming the option, its value and the fix. */
export function validateRunOptions(options: unknown): LoopSettings {
  const o = readOptionKeys("run options", options, RUN_KEYS, "run") as RunOptions;
  const concurrency = integer("concurrency", o.concurrency, 1, 1, 256);
  const batchSize = integer("batchSize", o.batchSize, 100, 1, 10_000);
  return {
    ...common("run", o),
    batchSize,
    concurrency,
    onSettled: callback("run", "onBatch", o.onBatch),
    capacity: concurrency * batchSize,
    capacityRule: "concurrency × batchSize",
  };
}

/** Checks the options of `runEach`. */
export function validateRunEachOptions(options: unknown): LoopSettings {
  const o = readOptionKeys("runEach options", options, RUN_EACH_KEYS, "runEach") as RunEachOptions;
  const concurrency = integer("concurrency", o.concurrency, 1, 1, 10_000);
  const batchSize = integer("batchSize", o.batchSize, concurrency, 1, 10_000);
  return {
    ...common("runEach", o),
    batchSize,
    concurrency,
    onSettled: callback("runEach", "onResult", o.onResult),
    // Pulls ask only for free handlers: nothing waits for one.
    capacity: concurrency,
    capacityRule: "concurrency",
  };
}

function common(fn: string, o: RunOptions | RunEachOptions): Pick<LoopSettings, "expiresMs" | "signal" | "onError" | "pull"> {
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) throw new TypeError(`${fn} options.signal must be an AbortSignal, got ${describe(o.signal)}: pass controller.signal of an AbortController`);
  const expiresMs = o.expiresMs ?? 1000;
  if (!isIntegerIn(expiresMs, 1000, 3_600_000)) {
    throw new TypeError(`expiresMs must be an integer in 1000 ..= 3600000 (the client's minimum fetch expiry is 1000 ms), got ${describe(expiresMs)}: use a number of milliseconds in that range`);
  }
  return { expiresMs, signal: o.signal, onError: callback(fn, "onError", o.onError), pull: validatePull(fn, o.pull) };
}

function validatePull(fn: string, value: unknown): PullOptions | undefined {
  if (value === undefined) return undefined;
  const p = readOptionKeys(`${fn} options.pull`, value, PULL_KEYS) as PullOptions;
  if (p.group !== undefined && !(typeof p.group === "string" && /^[A-Za-z0-9_\-=/]{1,16}$/.test(p.group))) {
    throw new TypeError(`${fn} options.pull.group must be a priority group name of 1 to 16 letters, digits, _ - = or /, got ${JSON.stringify(p.group)}`);
  }
  for (const key of ["min_pending", "min_ack_pending"] as const) {
    if (p[key] !== undefined && !isIntegerIn(p[key], 1, Number.MAX_SAFE_INTEGER)) throw new TypeError(`${fn} options.pull.${key} must be a positive integer, got ${String(p[key])}`);
  }
  if (p.priority !== undefined && !isIntegerIn(p.priority, 0, 9)) throw new TypeError(`${fn} options.pull.priority must be an integer in 0 ..= 9, got ${String(p.priority)}`);
  if ((p.min_pending !== undefined || p.min_ack_pending !== undefined || p.priority !== undefined) && p.group === undefined) {
    throw new TypeError(`${fn} options.pull: min_pending, min_ack_pending and priority need a group: add group, the consumer's priority group`);
  }
  return Object.freeze({ ...p });
}

/**
 * Refuses, before the first pull, a pull that the consumer's priority groups would refuse on
 * every fetch ("priority group missing"), naming the groups.
 */
export function checkPullAgainstBinding(pull: PullOptions | undefined, binding: ConsumerBinding | undefined): void {
  if (binding === undefined) return;
  const groups = binding.priorityGroups;
  const group = pull?.group;
  if (groups.length > 0 && (group === undefined || !groups.includes(group))) {
    const list = groups.map((g) => JSON.stringify(g)).join(", ");
    throw new ConsumerPolicyError("priority_group_required", {
      stream: binding.stream,
      consumer: binding.consumer,
      message: `its priority policy is ${binding.priorityPolicy ?? "set"} with groups ${list}: every pull must name one — pass { pull: { group: ${JSON.stringify(groups[0])} } }${group === undefined ? "" : ` (got ${JSON.stringify(group)})`}`,
    });
  }
  if (groups.length === 0 && group !== undefined) {
    throw new ConsumerPolicyError("priority_group_required", {
      stream: binding.stream,
      consumer: binding.consumer,
      message: `it has no priority groups, so a pull naming group ${JSON.stringify(group)} would be refused: remove pull.group`,
    });
  }
}

/** Calls a host callback; what it throws or rejects never reaches the loop. */
export function callGuarded<A extends unknown[]>(fn: ((...args: A) => unknown) | undefined, ...args: A): unknown {
  if (fn === undefined) return undefined;
  try {
    const result = fn(...args);
    if (result !== null && typeof result === "object" && typeof (result as PromiseLike<unknown>).then === "function") {
      (result as Promise<unknown>).then(undefined, () => undefined);
    }
    return undefined;
  } catch (err) {
    return err ?? new Error("a callback threw nothing");
  }
}

/** Reports what a settled batch says went wrong to `onError`, and hands the result to `onSettled`. */
export function reportSettled(settings: LoopSettings, result: BatchResult): void {
  const onError = settings.onError;
  if (onError !== undefined) {
    if (result.reportError !== undefined) callGuarded(onError, result.reportError, Object.freeze({ during: "report" as const }));
    for (const m of result.messages) {
      if (m.settleError !== undefined) callGuarded(onError, m.settleError, Object.freeze({ during: "settle" as const, action: m.action }));
    }
  }
  const thrown = callGuarded(settings.onSettled, result);
  if (thrown !== undefined) callGuarded(onError, thrown, Object.freeze({ during: "callback" as const }));
}

/** The messages' receive times, by position in the batch. */
export type ReceivedAt = (m: JsMsgLike, index: number) => number | undefined;

function callback<F>(fn: string, name: string, value: F | undefined): F | undefined {
  if (value !== undefined && typeof value !== "function") throw new TypeError(`${fn} options.${name} must be a function`);
  return value;
}

function integer(field: string, value: unknown, fallback: number, min: number, max: number): number {
  const v = value ?? fallback;
  if (!isIntegerIn(v, min, max)) throw new TypeError(`${field} must be an integer in ${min} ..= ${max}, got ${describe(v)}: ${typeof v === "number" ? `use one in that range, or leave it out for ${fallback}` : `use a number, or leave it out for ${fallback}`}`);
  return v;
}
