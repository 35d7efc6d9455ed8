/**
 * The options of `watchConsumer`, checked once: a misspelt or out-of-range option is a
 * `TypeError` naming the field, the value, the limit and the fix.
 */
import type { DisabledInProgressPolicy, VerifiedInProgressPolicy } from "../policy/in-progress-policy.js";
import { readOptionKeys } from "../policy/option-keys.js";
import { isVerifiedPolicy } from "../policy/verified-policies.js";
import type { MetricsSink } from "../telemetry/metrics-sink.js";
import type { ConsumerHealthSample } from "./consumer-health.js";
import { leaseFromPolicy } from "./stall-rule.js";

/** Shortest poll interval: consumer info is a JetStream API request served by the consumer leader. */
const MIN_INTERVAL_MS = 100;
const MAX_INTERVAL_MS = 3_600_000;
const DEFAULT_WINDOW_SAMPLES = 6;
const MIN_WINDOW_SAMPLES = 3;
const MAX_WINDOW_SAMPLES = 1000;
const DEFAULT_MAX_BACKOFF_MS = 30_000;

/** The longest lease a host may declare: above any policy's `intervalMs × maxHeartbeats` + window. */
const MAX_LEASE_MS = 2 ** 46;

const KNOWN_OPTIONS: readonly string[] = Object.freeze([
  "intervalMs",
  "signal",
  "metrics",
  "labels",
  "windowSamples",
  "backlogMinRise",
  "maxBackoffMs",
  "maxLeaseMs",
  "inProgress",
  "onSample",
  "onError",
]);

/**
 * What {@link watchConsumer} needs from a JetStream manager: only `consumers.info`. A
 * `JetStreamManager` of `@nats-io/jetstream` 3.x or of `nats` 2.x fits; so does anything else
 * with that one method (its answer is read as untrusted data), and an identity that
 * may only publish to `$JS.API.CONSUMER.INFO.<stream>.<consumer>` (and receive its replies)
 * is enough. Create such a manager with `jetstreamManager(nc, { checkAPI: false })`, since
 * the default check reads account info.
 *
 * @example
 * ```ts
 * const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: 2000 });
 * const source: ConsumerInfoSource = jsm;
 * ```
 */
export interface ConsumerInfoSource {
  /** The consumer API; only `info(stream, consumer)` is called. */
  readonly consumers: {
    /** The consumer's info: its state (delivered, ack floor, pending) and config. */
    info(stream: string, consumer: string): Promise<unknown>;
  };
}

/**
 * Details of a failed poll, passed to {@link WatchConsumerOptions.onError}.
 *
 * @example
 * ```ts
 * const onError = (err: unknown, f: ConsumerPollFailure) =>
 *   console.warn(`consumer info failed ${f.consecutiveFailures}× in a row, next try in ${f.retryInMs} ms`, err);
 * ```
 */
export interface ConsumerPollFailure {
  /** Failed polls in a row, this one included (reset by a success). */
  readonly consecutiveFailures: number;
  /** When the next poll starts, in milliseconds from now (the backoff). */
  readonly retryInMs: number;
  /** When the failure was noticed (epoch milliseconds). */
  readonly at: number;
}

/**
 * Options of {@link watchConsumer}. Durations are milliseconds. Unknown fields are refused
 * (a misspelt option must not be ignored silently).
 *
 * @example
 * ```ts
 * const options: WatchConsumerOptions = {
 *   intervalMs: 15_000,
 *   metrics,
 *   labels: true,
 *   signal: shutdown.signal,
 *   onError: (err) => log.warn({ err }, "consumer info poll failed"),
 * };
 * ```
 */
export interface WatchConsumerOptions {
  /**
   * Time from the end of one poll to the start of the next, integer 100 ..= 3,600,000.
   * Polls never overlap: a slow answer delays the next poll instead of stacking requests.
   */
  readonly intervalMs: number;
  /** Stops the watch when aborted (same as `stop()`). An already aborted signal starts nothing. */
  readonly signal?: AbortSignal;
  /** Where the consumer_* metrics go; calls that throw are ignored. */
  readonly metrics?: MetricsSink;
  /**
   * Label the metrics with `{ stream, consumer }`. Default `false`: names are only used as
   * labels when the host asks, since it knows whether they are few and not sensitive.
   */
  readonly labels?: boolean;
  /** Samples in the backlog window, integer 3 ..= 1000. Default 6. */
  readonly windowSamples?: number;
  /** Smallest total rise of the pending count across the window that counts as a growing backlog, integer >= 1. Default 1. */
  readonly backlogMinRise?: number;
  /**
   * Longest wait between polls after failures, integer `intervalMs` ..= 3,600,000. After `n`
   * failures in a row the next poll waits `min(intervalMs × 2^n, maxBackoffMs)`; a success
   * returns to `intervalMs`. Default `max(intervalMs, 30000)`.
   */
  readonly maxBackoffMs?: number;
  /**
   * The longest time one healthy delivery may hold a message without settling it, in
   * milliseconds (integer >= 1): the longest heartbeated write, plus one redelivery window —
   * and, if your workers NAK with a delay, at least the longest NAK delay. A flat ack floor
   * longer than this (and never less than the consumer's AckWait) is a stall. Without it (and
   * without `inProgress`) only a redelivery that does not move the floor counts as a stall.
   * With both, the longer lease counts.
   */
  readonly maxLeaseMs?: number;
  /**
   * The InProgress policy the workers run under, to derive the lease from:
   * `intervalMs × maxHeartbeats` plus the redelivery window it was verified against (AckWait,
   * or the longest BackOff step in BackOff-aware mode). A policy from
   * `verifyInProgressPolicy`, or `{ enabled: false }` (no beats: the lease is one AckWait).
   */
  readonly inProgress?: VerifiedInProgressPolicy | DisabledInProgressPolicy;
  /** Called with every sample. Exceptions and rejections are swallowed. */
  readonly onSample?: (sample: ConsumerHealthSample) => void;
  /**
   * Called with every failed poll (server down, permission denied, consumer deleted, a
   * malformed answer). Exceptions and rejections are swallowed.
   */
  readonly onError?: (error: unknown, failure: ConsumerPollFailure) => void;
}


/** The checked settings of one watch. */
export interface WatchSettings {
  readonly intervalMs: number;
  readonly maxBackoffMs: number;
  readonly windowSamples: number;
  readonly backlogMinRise: number;
  readonly signal: AbortSignal | undefined;
  readonly metrics: MetricsSink | undefined;
  readonly labels: boolean;
  /** The declared lease (`0`: one AckWait), or `undefined` when none was declared. */
  readonly declaredLeaseMs: number | undefined;
  readonly onSample: ((sample: ConsumerHealthSample) => void) | undefined;
  readonly onError: ((error: unknown, failure: ConsumerPollFailure) => void) | undefined;
}

/** Checks the arguments of `watchConsumer`; throws a `TypeError` on the first bad one. */
export function checkArguments(jsm: unknown, stream: unknown, consumer: unknown, options: unknown): WatchSettings {
  const consumers = isObject(jsm) ? (jsm as { consumers?: unknown }).consumers : undefined;
  if (!isObject(consumers) || typeof (consumers as { info?: unknown }).info !== "function") {
    fail("jsm", jsm, "an object with consumers.info(stream, consumer)", "pass a JetStreamManager, e.g. await jetstreamManager(nc, { checkAPI: false })");
  }
  checkName("stream", stream);
  checkName("consumer", consumer);
  if (options === undefined || options === null) {
    fail("options", options, "an object", "pass at least { intervalMs: 10_000 }");
  }
  const o = readOptionKeys("watchConsumer options", options, KNOWN_OPTIONS);

  const intervalMs = o["intervalMs"];
  if (!isIntegerIn(intervalMs, MIN_INTERVAL_MS, MAX_INTERVAL_MS)) {
    fail(
      "options.intervalMs",
      intervalMs,
      `an integer from ${MIN_INTERVAL_MS} to ${MAX_INTERVAL_MS} (milliseconds)`,
      "poll every few seconds or more, e.g. intervalMs: 10_000",
    );
  }
  const windowSamples = o["windowSamples"] ?? DEFAULT_WINDOW_SAMPLES;
  if (!isIntegerIn(windowSamples, MIN_WINDOW_SAMPLES, MAX_WINDOW_SAMPLES)) {
    fail(
      "options.windowSamples",
      windowSamples,
      `an integer from ${MIN_WINDOW_SAMPLES} to ${MAX_WINDOW_SAMPLES}`,
      `use at least ${MIN_WINDOW_SAMPLES} samples so one burst cannot look like a trend, or leave it out (default ${DEFAULT_WINDOW_SAMPLES})`,
    );
  }
  const backlogMinRise = o["backlogMinRise"] ?? 1;
  if (!isIntegerIn(backlogMinRise, 1, Number.MAX_SAFE_INTEGER)) {
    fail("options.backlogMinRise", backlogMinRise, "an integer >= 1 (messages)", "leave it out (default 1) or set the smallest rise worth a warning");
  }
  const maxBackoffMs = o["maxBackoffMs"] ?? Math.max(intervalMs, DEFAULT_MAX_BACKOFF_MS);
  if (!isIntegerIn(maxBackoffMs, intervalMs, MAX_INTERVAL_MS)) {
    fail(
      "options.maxBackoffMs",
      maxBackoffMs,
      `an integer from intervalMs (${intervalMs}) to ${MAX_INTERVAL_MS} (milliseconds)`,
      "leave it out (default max(intervalMs, 30000)) or raise it to at least intervalMs",
    );
  }
  const signal = o["signal"];
  if (signal !== undefined && !isAbortSignal(signal)) {
    fail("options.signal", signal, "an AbortSignal", "pass controller.signal, or leave it out");
  }
  const metrics = o["metrics"];
  if (metrics !== undefined && !isObject(metrics)) {
    fail("options.metrics", metrics, "an object implementing MetricsSink", "pass e.g. new InMemoryMetrics(), or leave it out");
  }
  const labels = o["labels"] ?? false;
  if (typeof labels !== "boolean") {
    fail("options.labels", labels, "a boolean", "use labels: true to label metrics with { stream, consumer }");
  }
  const declaredLeaseMs = readLease(o["maxLeaseMs"], o["inProgress"]);
  const onSample = o["onSample"];
  if (onSample !== undefined && typeof onSample !== "function") {
    fail("options.onSample", onSample, "a function", "pass (sample) => { ... }, or leave it out");
  }
  const onError = o["onError"];
  if (onError !== undefined && typeof onError !== "function") {
    fail("options.onError", onError, "a function", "pass (error, failure) => { ... }, or leave it out");
  }
  return {
    intervalMs,
    maxBackoffMs,
    windowSamples,
    backlogMinRise,
    signal: signal as AbortSignal | undefined,
    metrics: metrics as MetricsSink | undefined,
    labels,
    declaredLeaseMs,
    onSample: onSample as WatchSettings["onSample"],
    onError: onError as WatchSettings["onError"],
  };
}

/** The declared lease: the longer of `maxLeaseMs` and the policy's lease; `undefined` for none. */
function readLease(maxLeaseMs: unknown, inProgress: unknown): number | undefined {
  if (maxLeaseMs !== undefined && !isIntegerIn(maxLeaseMs, 1, MAX_LEASE_MS)) {
    fail(
      "options.maxLeaseMs",
      maxLeaseMs,
      `an integer from 1 to ${MAX_LEASE_MS} (milliseconds)`,
      "declare the longest heartbeated write plus one AckWait, e.g. maxLeaseMs: 120_000, or pass inProgress: policy",
    );
  }
  let fromPolicy: number | undefined;
  if (inProgress !== undefined) {
    if (isVerifiedPolicy(inProgress)) {
      fromPolicy = leaseFromPolicy(inProgress);
    } else if (isObject(inProgress) && (inProgress as { enabled?: unknown }).enabled === false) {
      fromPolicy = 0;
    } else {
      fail(
        "options.inProgress",
        inProgress,
        "a policy returned by verifyInProgressPolicy, or { enabled: false }",
        "pass the verified policy the workers use (an unverified one says nothing about the consumer's AckWait), or declare maxLeaseMs",
      );
    }
  }
  if (maxLeaseMs === undefined) return fromPolicy;
  return Math.max(maxLeaseMs as number, fromPolicy ?? 0);
}

function checkName(field: "stream" | "consumer", value: unknown): void {
  // The same characters JetStream refuses in stream and durable names: they would turn the
  // API subject into a different (or wildcard) subject.
  if (typeof value !== "string" || value.length === 0 || /[\s.*>/\\\u0000-\u001f\u007f]/u.test(value)) {
    fail(field, value, "a non-empty name without whitespace, '.', '*', '>', '/', '\\' or control characters", `pass the ${field}'s name exactly as the server knows it`);
  }
}

function fail(field: string, value: unknown, limit: string, fix: string): never {
  throw new TypeError(`watchConsumer: ${field} must be ${limit}, got ${show(value)}: ${fix}`);
}

function show(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "function") return "a function";
  if (value === null || typeof value !== "object") return String(value);
  return Array.isArray(value) ? "an array" : "an object";
}

function isObject(value: unknown): value is object {
  return value !== null && typeof value === "object";
}

function isIntegerIn(value: unknown, min: number, max: number): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= min && value <= max;
}

function isAbortSignal(value: unknown): value is AbortSignal {
  return (
    isObject(value) &&
    typeof (value as AbortSignal).aborted === "boolean" &&
    typeof (value as AbortSignal).addEventListener === "function" &&
    typeof (value as AbortSignal).removeEventListener === "function"
  );
}
