/**
 * The library's own handle on a sink: every call guarded, so a throwing, incomplete or async
 * sink never reaches the heartbeat, the work or the caller.
 */
import type { MetricName } from "./metric-names.js";
import type { MetricLabels, MetricsSink } from "./metrics-sink.js";

/**
 * The library's own handle on a sink: every call is guarded (a throwing or incomplete sink
 * is ignored). Up/down gauges go to the sink's `addToGauge` when it has one; otherwise their
 * level is tracked here, so concurrent batches sharing one sink object report one total.
 *
 * @internal
 */
export class MetricsRecorder {
  static readonly #bySink = new WeakMap<object, MetricsRecorder>();
  static readonly NONE = new MetricsRecorder(undefined);

  readonly #sink: MetricsSink | undefined;
  readonly #levels = new Map<string, number>();
  /** Counts added by {@link MetricsRecorder.countSoon}, for the sink at the end of the current task. */
  readonly #soon = new Map<MetricName, number>();

  private constructor(sink: MetricsSink | undefined) {
    this.#sink = sink;
  }

  /** The recorder for `sink` (one per sink, so gauge levels are shared). */
  static for(sink: MetricsSink | undefined): MetricsRecorder {
    if (sink === undefined || sink === null || typeof sink !== "object") return MetricsRecorder.NONE;
    let r = MetricsRecorder.#bySink.get(sink);
    if (!r) {
      r = new MetricsRecorder(sink);
      MetricsRecorder.#bySink.set(sink, r);
    }
    return r;
  }

  get enabled(): boolean {
    return this.#sink !== undefined;
  }

  count(name: MetricName, value = 1, labels?: MetricLabels): void {
    if (this.#sink === undefined || !(value > 0)) return;
    call(this.#sink, "addCounter", name, value, labels);
  }

  /**
   * Like `count` (no labels), but summed with the other such counts of the current task and
   * handed to the sink once, in a microtask: a look at many batches makes one call per name.
   */
  countSoon(name: MetricName, value: number): void {
    if (this.#sink === undefined || !(value > 0)) return;
    const soon = this.#soon;
    if (soon.size === 0) queueMicrotask(() => this.#flushSoon());
    soon.set(name, (soon.get(name) ?? 0) + value);
  }

  #flushSoon(): void {
    for (const [name, value] of this.#soon) call(this.#sink!, "addCounter", name, value, undefined);
    this.#soon.clear();
  }

  observe(name: MetricName, value: number, labels?: MetricLabels): void {
    if (this.#sink === undefined || !Number.isFinite(value)) return;
    call(this.#sink, "recordObservation", name, value, labels);
  }

  gauge(name: MetricName, value: number, labels?: MetricLabels): void {
    if (this.#sink === undefined || !Number.isFinite(value)) return;
    call(this.#sink, "setGauge", name, value, labels);
  }

  /**
   * Moves an up/down gauge by `delta`: through the sink's `addToGauge` when it has one (the
   * shared instrument adds every contribution), else by setting the level this recorder has
   * counted for its sink (right only while one sink object feeds the instrument).
   */
  gaugeAdd(name: MetricName, delta: number): void {
    if (this.#sink === undefined || !Number.isFinite(delta) || delta === 0) return;
    if (hasMethod(this.#sink, "addToGauge")) {
      call(this.#sink, "addToGauge", name, delta, undefined);
      return;
    }
    const level = (this.#levels.get(name) ?? 0) + delta;
    this.#levels.set(name, level);
    call(this.#sink, "setGauge", name, level, undefined);
  }
}

function hasMethod(sink: MetricsSink, method: keyof MetricsSink): boolean {
  try {
    return typeof (sink as unknown as Record<string, unknown>)[method] === "function";
  } catch {
    return false;
  }
}

function call(
  sink: MetricsSink,
  method: keyof MetricsSink,
  name: MetricName,
  value: number,
  labels: MetricLabels | undefined,
): void {
  try {
    const fn = (sink as unknown as Record<string, unknown>)[method];
    if (typeof fn !== "function") return;
    const result: unknown = labels === undefined ? fn.call(sink, name, value) : fn.call(sink, name, value, labels);
    // An async sink must not leave an unhandled rejection behind.
    if (result !== null && typeof result === "object" && typeof (result as PromiseLike<unknown>).then === "function") {
      (result as Promise<unknown>).then(undefined, () => undefined);
    }
  } catch {
    // A metrics sink must never break the heartbeat, the work or the caller.
  }
}

/**
 * Refuses a `metrics` option that cannot be a sink (a function — often the adapter factory
 * itself, `prometheusMetrics` instead of `prometheusMetrics(registry)` — or a primitive):
 * such a value would silently record nothing. A partial or misbehaving object is accepted;
 * its failures are absorbed while recording.
 */
export function checkMetricsOption(value: unknown, field: string): void {
  if (value === undefined || (typeof value === "object" && value !== null)) return;
  const hint = typeof value === "function" ? ": pass the sink, not its factory (for example prometheusMetrics(registry), new InMemoryMetrics())" : ": pass a MetricsSink (for example new InMemoryMetrics())";
  throw new TypeError(`${field} must be a MetricsSink object, got ${value === null ? "null" : typeof value}${hint}`);
}
