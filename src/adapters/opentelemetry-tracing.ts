/**
 * Traces on the OpenTelemetry API: one `CONSUMER` span per batch (per message under
 * `runEach`), following the OpenTelemetry messaging conventions, linked to every message's
 * producer context, with the host's write running inside it.
 */
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, propagation, trace, type Attributes, type Link, type TextMapGetter, type Tracer, type TracerProvider } from "@opentelemetry/api";
import { version } from "../../package.json";
import type { BatchTrace, TracedBatch, Tracing } from "../telemetry/tracing.js";
import { readAdapterOptions } from "./adapter-options.js";

/**
 * Options of {@link openTelemetryTracing}. An unknown field is a `TypeError`.
 *
 * @example
 * ```ts
 * const options: OpenTelemetryTracingOptions = { tracerProvider: provider };
 * ```
 */
export interface OpenTelemetryTracingOptions {
  /**
   * The provider of the `jetstream-inprogress` tracer. Default: the global provider, looked up
   * at each span, so an SDK registered after this call is still used.
   */
  readonly tracerProvider?: TracerProvider;
}

/** A message as the tracing hook hands it over. */
type TracedMessage = TracedBatch["messages"][number];

const FN = "openTelemetryTracing";
const KNOWN_OPTIONS = ["tracerProvider"] as const;
const TRACER_NAME = "jetstream-inprogress";

/** Reads trace context from NATS message headers (only the keys the propagator asks for). */
const headerGetter: TextMapGetter<TracedMessage["headers"]> = {
  keys: (carrier) => {
    try {
      return carrier ? [...carrier.keys()] : [];
    } catch {
      return [];
    }
  },
  get: (carrier, key) => {
    try {
      const value = carrier?.get(key);
      return value === undefined || value === "" ? undefined : value;
    } catch {
      return undefined;
    }
  },
};

/**
 * Creates a {@link Tracing} on `@opentelemetry/api` (an optional peer dependency), to pass as
 * the `tracing` option of `CommitThenAck` or `CommitThenAck.forConsumer`.
 *
 * Each batch gets a span of kind `CONSUMER` named `process <stream>`, with the messaging
 * attributes `messaging.system` (`nats`), `messaging.operation.type` and
 * `messaging.operation.name` (`process`), `messaging.destination.name` (the stream),
 * `messaging.consumer.group.name` (the durable) and `messaging.batch.message_count`; a single
 * message (`runEach`) carries `messaging.nats.message.stream_sequence` and
 * `messaging.nats.message.delivery_count` instead. The span links to each message's producer
 * context, read from its headers with the global propagator (`traceparent` with the W3C one),
 * and the host's write runs inside the span's context, so a database client's own spans
 * become its children. A batch of `process` is a child of the context active at the call; a
 * batch of the loops (`run`, `runEach`) has no parent (a root span with those links), whatever
 * was active when the loop started. Heartbeat rounds and a lost lease are span events; the settle outcome
 * is the attribute `jetstream.settle.outcome`; a failed write sets status `ERROR` and
 * `error.type` to its error's class name (never its message). Nothing else of a payload or a
 * header is read.
 *
 * @param options - the tracer provider; see {@link OpenTelemetryTracingOptions}.
 * @returns a tracing hook.
 * @throws TypeError when an option is unknown or invalid.
 *
 * @example
 * ```ts
 * import { CommitThenAck } from "jetstream-inprogress";
 * import { openTelemetryTracing } from "jetstream-inprogress/opentelemetry";
 *
 * // After the OpenTelemetry SDK has started (it registers the global provider and propagator):
 * const ack = await CommitThenAck.forConsumer(jsm, "ORDERS", "writer", { tracing: openTelemetryTracing() });
 * ```
 */
export function openTelemetryTracing(options?: OpenTelemetryTracingOptions): Tracing {
  const opts = readAdapterOptions(FN, options, KNOWN_OPTIONS);
  const provider = readProvider(opts["tracerProvider"]);
  const fixed = provider?.getTracer(TRACER_NAME, version);
  const tracer = (): Tracer => fixed ?? trace.getTracer(TRACER_NAME, version);
  return Object.freeze({
    startBatch: (batch: TracedBatch): BatchTrace => startSpan(tracer(), batch),
  });
}

function startSpan(tracer: Tracer, batch: TracedBatch): BatchTrace {
  const messages = batch.messages;
  const stream = batch.stream ?? "unknown";
  const attributes: Attributes = {
    "messaging.system": "nats",
    "messaging.operation.type": "process",
    "messaging.operation.name": "process",
    "messaging.destination.name": stream,
  };
  if (batch.consumer !== undefined) attributes["messaging.consumer.group.name"] = batch.consumer;
  if (messages.length === 1) {
    const info = readInfo(messages[0]!);
    if (info !== undefined) {
      attributes["messaging.nats.message.stream_sequence"] = info.streamSequence;
      attributes["messaging.nats.message.delivery_count"] = info.deliveryCount;
    }
  } else {
    attributes["messaging.batch.message_count"] = messages.length;
  }
  // A loop's batch is caused by its messages (the links), not by whatever span was active
  // when the loop started: that one ended long ago, and every batch would hang under it.
  const parent = batch.origin === "process" ? context.active() : ROOT_CONTEXT;
  const span = tracer.startSpan(`process ${stream}`, { kind: SpanKind.CONSUMER, attributes, links: producerLinks(messages) }, parent);
  const active = trace.setSpan(parent, span);
  return {
    run: (fn) => context.with(active, fn),
    heartbeat: ({ beat, failedMessages }) => {
      span.addEvent("heartbeat", { "jetstream.heartbeat.round": beat, "jetstream.heartbeat.failed_messages": failedMessages });
    },
    leaseLost: (overdueMs) => {
      span.addEvent("lease_lost", { "jetstream.lease.overdue_ms": Math.round(overdueMs) });
    },
    end: (outcome) => {
      span.setAttribute("jetstream.settle.outcome", outcome.outcome);
      if (outcome.errorName !== undefined) {
        span.setAttribute("error.type", outcome.errorName);
        span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.errorName });
      }
      span.end();
    },
  };
}

/** One link per message whose headers carry a valid producer context (duplicates kept once). */
function producerLinks(messages: readonly TracedMessage[]): Link[] {
  const links: Link[] = [];
  // Keyed by span id, with the trace ids seen with it: building a "trace/span" string key for
  // every message cost more than the lookup, and a repeated context skips the validity check.
  const seen = new Map<string, string | string[]>();
  for (const m of messages) {
    let headers: TracedMessage["headers"];
    try {
      headers = m.headers;
    } catch {
      continue;
    }
    if (headers === undefined) continue;
    const spanContext = trace.getSpanContext(propagation.extract(ROOT_CONTEXT, headers, headerGetter));
    if (spanContext === undefined) continue;
    const { spanId, traceId } = spanContext;
    const known = seen.get(spanId);
    if (known === traceId || (Array.isArray(known) && known.includes(traceId))) continue;
    if (!trace.isSpanContextValid(spanContext)) continue;
    if (known === undefined) seen.set(spanId, traceId);
    else if (Array.isArray(known)) known.push(traceId);
    else seen.set(spanId, [known, traceId]);
    links.push({ context: spanContext });
  }
  return links;
}

function readInfo(m: TracedMessage): { streamSequence: number; deliveryCount: number } | undefined {
  try {
    const info = m.info;
    return typeof info?.streamSequence === "number" && typeof info.deliveryCount === "number"
      ? { streamSequence: info.streamSequence, deliveryCount: info.deliveryCount }
      : undefined;
  } catch {
    return undefined;
  }
}

function readProvider(value: unknown): TracerProvider | undefined {
  if (value === undefined) return undefined;
  if (value === null || typeof value !== "object" || typeof (value as { getTracer?: unknown }).getTracer !== "function") {
    throw new TypeError(`${FN}: tracerProvider must be an OpenTelemetry TracerProvider (it has getTracer); pass your SDK's provider, or leave it out to use the global one`);
  }
  return value as TracerProvider;
}
