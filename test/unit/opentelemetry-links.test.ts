/**
 * The links of a batch span: one per distinct producer context found in the messages' headers,
 * read through the global propagator. A context repeated in a batch (one producer span that
 * published several messages) is linked once; two contexts that share a span id but not a trace
 * id are two links; a context the propagator hands back invalid is not linked.
 */
import { afterEach, describe, expect, it } from "vitest";
import { propagation, trace, TraceFlags, type Context, type TextMapPropagator } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { headers } from "@nats-io/transport-node";
import { openTelemetryTracing } from "../../src/adapters/opentelemetry.js";
import type { JsMsgLike } from "../../src/nats/client-types.js";

const TRACE_A = "0af7651916cd43dd8448eb211c80319c";
const TRACE_B = "4bf92f3577b34da6a3ce929d0e0e4736";
const SPAN_1 = "b7ad6b7169203331";
const SPAN_2 = "00f067aa0ba902b7";

function withTraceparent(value: string | undefined): JsMsgLike {
  const h = headers();
  if (value !== undefined) h.set("traceparent", value);
  return { headers: h } as unknown as JsMsgLike;
}

const parent = (traceId: string, spanId: string): string => `00-${traceId}-${spanId}-01`;

function linksOf(messages: readonly JsMsgLike[]): Array<{ traceId: string; spanId: string }> {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const batch = openTelemetryTracing({ tracerProvider: provider }).startBatch({ origin: "run", stream: "S", consumer: "c", messages })!;
  batch.end({ outcome: "acked", errorName: undefined, acked: messages.length, failed: 0 });
  const spans = exporter.getFinishedSpans();
  expect(spans).toHaveLength(1);
  return spans[0]!.links.map((l) => ({ traceId: l.context.traceId, spanId: l.context.spanId }));
}

describe("openTelemetryTracing: the links of a batch span", () => {
  afterEach(() => propagation.disable());

  it("links each producer context once, in batch order, and tells contexts apart by trace and span id", () => {
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    const links = linksOf([
      withTraceparent(parent(TRACE_A, SPAN_1)),
      withTraceparent(parent(TRACE_A, SPAN_1)),
      withTraceparent(undefined),
      withTraceparent(parent(TRACE_B, SPAN_1)),
      withTraceparent(parent(TRACE_A, SPAN_2)),
      withTraceparent(parent(TRACE_B, SPAN_1)),
      withTraceparent("not a traceparent"),
      withTraceparent(parent(TRACE_A, SPAN_1)),
    ]);
    expect(links).toEqual([
      { traceId: TRACE_A, spanId: SPAN_1 },
      { traceId: TRACE_B, spanId: SPAN_1 },
      { traceId: TRACE_A, spanId: SPAN_2 },
    ]);
  });

  it("links no context the propagator hands back invalid, and still links a valid one after it", () => {
    // A propagator of another format may set an invalid context rather than none.
    const invalid: TextMapPropagator = {
      inject: () => undefined,
      fields: () => ["x-ctx"],
      extract: (ctx: Context, carrier: unknown): Context => {
        const value = (carrier as { get(k: string): string }).get("traceparent");
        const [traceId, spanId] = value === "" ? ["0".repeat(32), "0".repeat(16)] : [value.slice(3, 35), value.slice(36, 52)];
        return trace.setSpanContext(ctx, { traceId: traceId!, spanId: spanId!, traceFlags: TraceFlags.SAMPLED, isRemote: true });
      },
    };
    propagation.setGlobalPropagator(invalid);
    const links = linksOf([withTraceparent(""), withTraceparent(""), withTraceparent(parent(TRACE_B, SPAN_2))]);
    expect(links).toEqual([{ traceId: TRACE_B, spanId: SPAN_2 }]);
  });
});
