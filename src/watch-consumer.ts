/**
 * Watching a consumer's health: one consumer-info request at a time, on a timer, turned into
 * samples, metrics and callbacks. Nothing here throws into the host after the options were
 * accepted.
 */
import type { ConsumerAPI } from "@nats-io/jetstream";
import {
  ConsumerHealthTracker,
  readConsumerInfo,
  type ConsumerHealthSample,
  type ConsumerInfoFields,
} from "./consumer-health.js";
import { MetricNames, MetricsRecorder, type MetricLabels, type MetricsSink } from "./metrics.js";

/** Shortest poll interval: consumer info is a JetStream API request served by the consumer leader. */
const MIN_INTERVAL_MS = 100;
const MAX_INTERVAL_MS = 3_600_000;
const DEFAULT_WINDOW_SAMPLES = 6;
const MIN_WINDOW_SAMPLES = 3;
const MAX_WINDOW_SAMPLES = 1000;
const DEFAULT_MAX_BACKOFF_MS = 30_000;

const KNOWN_OPTIONS: ReadonlySet<string> = new Set([
  "intervalMs",
  "signal",
  "metrics",
  "labels",
  "windowSamples",
  "backlogMinRise",
  "maxBackoffMs",
  "onSample",
  "onError",
]);

/**
 * What {@link watchConsumer} needs from a JetStream manager: only `consumers.info`. A
 * `JetStreamManager` fits; so does anything else with that one method, and an identity that
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
  readonly consumers: Pick<ConsumerAPI, "info">;
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
  /** Called with every sample. Exceptions and rejections are swallowed. */
  readonly onSample?: (sample: ConsumerHealthSample) => void;
  /**
   * Called with every failed poll (server down, permission denied, consumer deleted, a
   * malformed answer). Exceptions and rejections are swallowed.
   */
  readonly onError?: (error: unknown, failure: ConsumerPollFailure) => void;
}

/**
 * A running watch, returned by {@link watchConsumer}. `using watch = watchConsumer(...)`
 * stops it at the end of the scope.
 *
 * @example
 * ```ts
 * const watch = watchConsumer(jsm, "ORDERS", "writer", { intervalMs: 10_000 });
 * setInterval(() => console.log(watch.latest()?.pending), 60_000).unref();
 * process.once("SIGTERM", () => watch.stop());
 * ```
 */
export interface ConsumerWatch {
  /** The most recent sample, or `undefined` before the first successful poll. */
  latest(): ConsumerHealthSample | undefined;
  /** Stops polling at once: clears the timer and ignores a poll still in flight. Idempotent. */
  stop(): void;
  /** Same as `stop()`. */
  [Symbol.dispose](): void;
}

/**
 * Watches a consumer's health by polling its consumer info, and only that: the lag
 * (`num_pending`), messages in flight, redeliveries, a growing backlog and a stalled ack
 * floor, as {@link ConsumerHealthSample}s, consumer_* metrics and callbacks.
 *
 * The first poll starts at once; each next one `intervalMs` after the previous one finished.
 * A failed poll is counted (`consumer_poll_failures_total`), reported to `onError` and
 * retried with a doubling delay up to `maxBackoffMs`; it never throws or rejects into the
 * host. The timer is unref'd, so a watch alone does not keep the process alive.
 *
 * Metrics, per sample: gauges `consumer_pending_messages`, `consumer_ack_pending_messages`,
 * `consumer_stalled` and `consumer_backlog_growing` (0/1), counter
 * `consumer_redelivered_messages`. Labels `{ stream, consumer }` only with `labels: true`.
 *
 * @param jsm - a JetStream manager, or anything with `consumers.info` (see {@link ConsumerInfoSource}).
 * @param stream - the stream's name.
 * @param consumer - the consumer's (durable) name.
 * @param options - interval, callbacks, metrics and thresholds (see {@link WatchConsumerOptions}).
 * @returns a handle with `latest()` and `stop()`.
 * @throws TypeError naming the field, the value, the limit and the fix when an argument is invalid.
 *
 * @example
 * ```ts
 * import { jetstreamManager } from "@nats-io/jetstream";
 * import { InMemoryMetrics, watchConsumer } from "jetstream-inprogress";
 *
 * const jsm = await jetstreamManager(nc, { checkAPI: false });
 * const metrics = new InMemoryMetrics();
 * const watch = watchConsumer(jsm, "ORDERS", "writer", {
 *   intervalMs: 10_000,
 *   metrics,
 *   onSample: (s) => {
 *     if (s.stalled) console.warn(`ORDERS/writer: ack floor flat ${s.ackFloorFlatMs} ms, ${s.ackPending} in flight`);
 *     if (s.backlogGrowing) console.warn(`ORDERS/writer: backlog growing, ${s.pending} pending`);
 *   },
 *   onError: (err, f) => console.warn(`consumer info failed (${f.consecutiveFailures}×)`, err),
 * });
 * // ... on shutdown:
 * watch.stop();
 * ```
 */
export function watchConsumer(
  jsm: ConsumerInfoSource,
  stream: string,
  consumer: string,
  options: WatchConsumerOptions,
): ConsumerWatch {
  const settings = checkArguments(jsm, stream, consumer, options);
  const watcher = new ConsumerWatcher(jsm, stream, consumer, settings);
  watcher.start();
  const handle: ConsumerWatch = {
    latest: () => watcher.latest,
    stop: () => watcher.stop(),
    [Symbol.dispose]: () => watcher.stop(),
  };
  return Object.freeze(handle);
}

interface Settings {
  readonly intervalMs: number;
  readonly maxBackoffMs: number;
  readonly windowSamples: number;
  readonly backlogMinRise: number;
  readonly signal: AbortSignal | undefined;
  readonly metrics: MetricsSink | undefined;
  readonly labels: boolean;
  readonly onSample: ((sample: ConsumerHealthSample) => void) | undefined;
  readonly onError: ((error: unknown, failure: ConsumerPollFailure) => void) | undefined;
}

class ConsumerWatcher {
  readonly #jsm: ConsumerInfoSource;
  readonly #stream: string;
  readonly #consumer: string;
  readonly #settings: Settings;
  readonly #metrics: MetricsRecorder;
  readonly #labels: MetricLabels | undefined;
  readonly #tracker: ConsumerHealthTracker;
  readonly #onAbort = (): void => this.stop();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;
  #failures = 0;
  #latest: ConsumerHealthSample | undefined;

  constructor(jsm: ConsumerInfoSource, stream: string, consumer: string, settings: Settings) {
    this.#jsm = jsm;
    this.#stream = stream;
    this.#consumer = consumer;
    this.#settings = settings;
    this.#metrics = MetricsRecorder.for(settings.metrics);
    this.#labels = settings.labels ? Object.freeze({ stream, consumer }) : undefined;
    this.#tracker = new ConsumerHealthTracker({
      stream,
      consumer,
      windowSamples: settings.windowSamples,
      backlogMinRise: settings.backlogMinRise,
    });
  }

  get latest(): ConsumerHealthSample | undefined {
    return this.#latest;
  }

  start(): void {
    const signal = this.#settings.signal;
    if (signal?.aborted) {
      this.#stopped = true;
      return;
    }
    signal?.addEventListener("abort", this.#onAbort, { once: true });
    this.#run();
  }

  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#settings.signal?.removeEventListener("abort", this.#onAbort);
  }

  #run(): void {
    this.#timer = undefined;
    // #pollOnce handles its own failures; the catch only keeps a bug from becoming an
    // unhandled rejection in the host.
    this.#pollOnce().then(
      (delay) => this.#schedule(delay),
      () => this.#schedule(this.#settings.intervalMs),
    );
  }

  #schedule(delayMs: number): void {
    if (this.#stopped) return;
    const timer = setTimeout(() => this.#run(), delayMs);
    timer.unref();
    this.#timer = timer;
  }

  /** One poll; resolves with the delay before the next one. */
  async #pollOnce(): Promise<number> {
    let fields: ConsumerInfoFields;
    try {
      const info: unknown = await this.#jsm.consumers.info(this.#stream, this.#consumer);
      if (this.#stopped) return 0;
      fields = readConsumerInfo(info);
    } catch (err) {
      if (this.#stopped) return 0;
      return this.#failed(err);
    }
    this.#failures = 0;
    const sample = this.#tracker.update(fields, Date.now());
    this.#latest = sample;
    const m = this.#metrics;
    const labels = this.#labels;
    m.gauge(MetricNames.CONSUMER_PENDING_MESSAGES, sample.pending, labels);
    m.gauge(MetricNames.CONSUMER_ACK_PENDING_MESSAGES, sample.ackPending, labels);
    m.gauge(MetricNames.CONSUMER_STALLED, sample.stalled ? 1 : 0, labels);
    m.gauge(MetricNames.CONSUMER_BACKLOG_GROWING, sample.backlogGrowing ? 1 : 0, labels);
    m.count(MetricNames.CONSUMER_REDELIVERED_MESSAGES, sample.redeliveriesSinceLastSample, labels);
    callGuarded(this.#settings.onSample, sample);
    return this.#settings.intervalMs;
  }

  #failed(err: unknown): number {
    this.#failures += 1;
    const { intervalMs, maxBackoffMs } = this.#settings;
    // Cap the exponent so the product stays finite; maxBackoffMs bounds it anyway.
    const retryInMs = Math.min(maxBackoffMs, intervalMs * 2 ** Math.min(this.#failures, 32));
    this.#metrics.count(MetricNames.CONSUMER_POLL_FAILURES_TOTAL, 1, this.#labels);
    callGuarded(this.#settings.onError, err, Object.freeze({ consecutiveFailures: this.#failures, retryInMs, at: Date.now() }));
    return retryInMs;
  }
}

function callGuarded<A extends unknown[]>(fn: ((...args: A) => unknown) | undefined, ...args: A): void {
  if (fn === undefined) return;
  try {
    const result = fn(...args);
    // An async callback must not leave an unhandled rejection behind.
    if (result !== null && typeof result === "object" && typeof (result as PromiseLike<unknown>).then === "function") {
      (result as Promise<unknown>).then(undefined, () => undefined);
    }
  } catch {
    // A host callback must never stop the watch or reach the host's event loop.
  }
}

function checkArguments(jsm: unknown, stream: unknown, consumer: unknown, options: unknown): Settings {
  const consumers = isObject(jsm) ? (jsm as { consumers?: unknown }).consumers : undefined;
  if (!isObject(consumers) || typeof (consumers as { info?: unknown }).info !== "function") {
    fail("jsm", jsm, "an object with consumers.info(stream, consumer)", "pass a JetStreamManager, e.g. await jetstreamManager(nc, { checkAPI: false })");
  }
  checkName("stream", stream);
  checkName("consumer", consumer);
  if (!isObject(options) || Array.isArray(options)) {
    fail("options", options, "an object", "pass at least { intervalMs: 10_000 }");
  }
  const o = options as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!KNOWN_OPTIONS.has(key)) {
      fail(`options.${key}`, o[key], `one of ${[...KNOWN_OPTIONS].join(", ")}`, "remove or correct the misspelt option");
    }
  }

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
    onSample: onSample as Settings["onSample"],
    onError: onError as Settings["onError"],
  };
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
