/**
 * Watching a consumer's health: one consumer-info request at a time, on a timer, turned into
 * samples, metrics and callbacks. Nothing here throws into the host after the options were
 * accepted.
 */
import { MetricNames } from "../telemetry/metric-names.js";
import { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { MetricLabels } from "../telemetry/metrics-sink.js";
import { ConsumerHealthTracker, readConsumerInfo, type ConsumerHealthSample, type ConsumerInfoFields } from "./consumer-health.js";
import { checkArguments, type ConsumerInfoSource, type WatchConsumerOptions, type WatchSettings } from "./watch-options.js";

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
 * `stalled` needs evidence that a worker stopped, not only a flat ack floor: a healthy write
 * kept alive by InProgress heartbeats, a delayed NAK and a paused consumer hold the floor
 * too. Declare the longest lease a healthy delivery may hold (`maxLeaseMs`, or the workers'
 * verified `inProgress` policy) and a floor flat for longer than that is a stall; with or
 * without it, a message redelivered while the floor is flat that does not move the floor
 * within a further AckWait (or the lease) is one. While the consumer is paused (nats-server
 * 2.11+), neither `stalled` nor `backlogGrowing` is reported.
 *
 * Metrics, per sample: gauges `consumer_pending_messages`, `consumer_ack_pending_messages`,
 * `consumer_stalled`, `consumer_backlog_growing` and `consumer_paused` (0/1), counter
 * `consumer_redelivered_messages_total`. Labels `{ stream, consumer }` only with `labels: true`.
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
 * import { InMemoryMetrics, consumerTimingFromConfig, verifyInProgressPolicy, watchConsumer } from "jetstream-inprogress";
 *
 * const jsm = await jetstreamManager(nc, { checkAPI: false });
 * const metrics = new InMemoryMetrics();
 * const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 10_000 }, consumerTimingFromConfig(await jsm.consumers.info("ORDERS", "writer")));
 * const watch = watchConsumer(jsm, "ORDERS", "writer", {
 *   intervalMs: 10_000,
 *   metrics,
 *   inProgress: policy, // healthy heartbeated writes are not stalls
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

class ConsumerWatcher {
  readonly #jsm: ConsumerInfoSource;
  readonly #stream: string;
  readonly #consumer: string;
  readonly #settings: WatchSettings;
  readonly #metrics: MetricsRecorder;
  readonly #labels: MetricLabels | undefined;
  readonly #tracker: ConsumerHealthTracker;
  readonly #onAbort = (): void => this.stop();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;
  #failures = 0;
  #latest: ConsumerHealthSample | undefined;

  constructor(jsm: ConsumerInfoSource, stream: string, consumer: string, settings: WatchSettings) {
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
      declaredLeaseMs: settings.declaredLeaseMs,
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
    m.gauge(MetricNames.CONSUMER_PAUSED, sample.paused ? 1 : 0, labels);
    m.count(MetricNames.CONSUMER_REDELIVERED_MESSAGES_TOTAL, sample.redeliveriesSinceLastSample, labels);
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

