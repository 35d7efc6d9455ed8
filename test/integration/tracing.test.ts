/**
 * Traces of every batch on a real nats-server, recorded by the OpenTelemetry SDK's in-memory
 * exporter: one CONSUMER span per batch (per message under runEach) with the messaging
 * attributes, links to every producer's context carried in the message headers, the host's
 * write inside the span (its own spans are children), heartbeat and lease events, the settle
 * outcome, and an ERROR status that names only the error class.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { context, propagation, SpanKind, SpanStatusCode, trace, type Tracer } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { headers } from "@nats-io/transport-node";
import { CommitThenAck, TemporarySinkError } from "../../src/index.js";
import { openTelemetryTracing } from "../../src/adapters/opentelemetry.js";
import { createFixture, eventually, fetchBatch, type Fixture } from "../helpers/jetstream.js";
import { useServer } from "../helpers/server-fixture.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("OpenTelemetry traces on a real nats-server", () => {
  const fx = useServer();
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const contextManager = new AsyncLocalStorageContextManager();
  let producer: Tracer;

  beforeAll(() => {
    context.setGlobalContextManager(contextManager.enable());
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    producer = provider.getTracer("producer");
  });
  afterAll(async () => {
    context.disable();
    propagation.disable();
    await provider.shutdown();
  });
  beforeEach(() => exporter.reset());

  /** Publishes `n` messages, each from its own producer span, with the context in its headers. */
  async function publishTraced(f: Fixture, n: number): Promise<string[]> {
    const spanIds: string[] = [];
    for (let i = 0; i < n; i++) {
      const span = producer.startSpan("send", { kind: SpanKind.PRODUCER });
      const h = headers();
      propagation.inject(trace.setSpan(context.active(), span), h, { set: (carrier, key, value) => carrier.set(key, value) });
      await f.js.publish(f.subject, `m-${i}`, { headers: h });
      spanIds.push(span.spanContext().spanId);
      span.end();
    }
    return spanIds;
  }

  const consumerSpans = (): ReadableSpan[] => exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.CONSUMER);

  it("one CONSUMER span per batch: messaging attributes, a link to each producer, the write's spans as children, heartbeat events, the outcome", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1000 });
    const producers = await publishTraced(f, 3);
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
      inProgress: { enabled: true, intervalMs: 300, maxHeartbeats: 20 },
      tracing: openTelemetryTracing({ tracerProvider: provider }),
    });
    const db = provider.getTracer("db");
    const result = await ack.process(await fetchBatch(f, 3), async () => {
      await db.startActiveSpan("INSERT orders", async (span) => {
        await sleep(800);
        span.end();
      });
    });
    expect(result.outcome).toBe("acked");
    const [span] = consumerSpans();
    expect(consumerSpans()).toHaveLength(1);
    expect(span!.name).toBe(`process ${f.stream}`);
    expect(span!.attributes).toMatchObject({
      "messaging.system": "nats",
      "messaging.operation.type": "process",
      "messaging.operation.name": "process",
      "messaging.destination.name": f.stream,
      "messaging.consumer.group.name": f.consumer,
      "messaging.batch.message_count": 3,
      "jetstream.settle.outcome": "acked",
    });
    expect(span!.links.map((l) => l.context.spanId).sort()).toEqual([...producers].sort());
    const child = exporter.getFinishedSpans().find((s) => s.name === "INSERT orders")!;
    expect(child.parentSpanContext?.spanId).toBe(span!.spanContext().spanId);
    expect(child.spanContext().traceId).toBe(span!.spanContext().traceId);
    const beats = span!.events.filter((e) => e.name === "heartbeat");
    expect(beats.length).toBeGreaterThanOrEqual(2);
    expect(beats[0]!.attributes).toEqual({ "jetstream.heartbeat.round": 1, "jetstream.heartbeat.failed_messages": 0 });
    expect(span!.status.code).toBe(SpanStatusCode.UNSET);
    // Nothing of a payload or a header but the trace context.
    expect(JSON.stringify(span!.attributes)).not.toContain("m-");
  });

  it("a failed write: status ERROR with the error's class name, never its message", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    await publishTraced(f, 1);
    const ack = new CommitThenAck({ tracing: openTelemetryTracing({ tracerProvider: provider }), onTemporaryFailure: { action: "leave" } });
    await ack.process(await fetchBatch(f, 1), () => {
      throw new TemporarySinkError("password=hunter2 in the driver's message");
    });
    const [span] = consumerSpans();
    expect(span!.status).toEqual({ code: SpanStatusCode.ERROR, message: "TemporarySinkError" });
    expect(span!.attributes["error.type"]).toBe("TemporarySinkError");
    expect(span!.attributes["jetstream.settle.outcome"]).toBe("left");
    expect(JSON.stringify({ attributes: span!.attributes, events: span!.events, status: span!.status })).not.toContain("hunter2");
  });

  it("a lost lease is a span event", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1000 });
    await publishTraced(f, 1);
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
      inProgress: { enabled: true, intervalMs: 300, maxHeartbeats: 1 },
      tracing: openTelemetryTracing({ tracerProvider: provider }),
    });
    await ack.process(await fetchBatch(f, 1), () => sleep(1800));
    const [span] = consumerSpans();
    expect(span!.events.map((e) => e.name)).toEqual(["heartbeat", "lease_lost"]);
  });

  it("runEach: one span per message, with its stream sequence and delivery count, linked to its producer", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    const producers = await publishTraced(f, 3);
    const ack = new CommitThenAck({ tracing: openTelemetryTracing({ tracerProvider: provider }) });
    const shutdown = new AbortController();
    let settled = 0;
    const running = ack.runEach(await f.js.consumers.get(f.stream, f.consumer), () => sleep(20), {
      concurrency: 2,
      signal: shutdown.signal,
      onResult: () => void (settled += 1),
    });
    await eventually(() => settled === 3, "three messages settled");
    shutdown.abort();
    await running;
    const spans = consumerSpans().sort((a, b) => Number(a.attributes["messaging.nats.message.stream_sequence"]) - Number(b.attributes["messaging.nats.message.stream_sequence"]));
    expect(spans).toHaveLength(3);
    spans.forEach((s, i) => {
      expect(s.attributes["messaging.nats.message.stream_sequence"]).toBe(i + 1);
      expect(s.attributes["messaging.nats.message.delivery_count"]).toBe(1);
      expect(s.attributes["messaging.batch.message_count"]).toBeUndefined();
      expect(s.links.map((l) => l.context.spanId)).toEqual([producers[i]]);
    });
  });

  it.each(["run", "runEach"] as const)("%s: batch spans are roots linked to their producers, never children of the span active when the loop started", async (loop) => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    const producers = await publishTraced(f, 4);
    const ack = new CommitThenAck({ tracing: openTelemetryTracing({ tracerProvider: provider }) });
    const db = provider.getTracer("db");
    const write = () => db.startActiveSpan("INSERT orders", (s) => sleep(20).then(() => s.end()));
    const shutdown = new AbortController();
    let settled = 0;
    const consumer = await f.js.consumers.get(f.stream, f.consumer);
    // A service's startup span is active when the loop starts, and ends right after.
    const startup = provider.getTracer("service").startSpan("startup");
    const running = context.with(trace.setSpan(context.active(), startup), () =>
      loop === "run"
        ? ack.run(consumer, write, { batchSize: 2, signal: shutdown.signal, onBatch: (r) => void (settled += r.messages.length) })
        : ack.runEach(consumer, write, { concurrency: 2, signal: shutdown.signal, onResult: () => void (settled += 1) }),
    );
    startup.end();
    await eventually(() => settled === 4, "four messages settled");
    shutdown.abort();
    await running;

    const spans = consumerSpans();
    expect(spans.length).toBeGreaterThanOrEqual(loop === "run" ? 2 : 4);
    for (const span of spans) {
      expect(span.parentSpanContext).toBeUndefined();
      expect(span.spanContext().traceId).not.toBe(startup.spanContext().traceId);
    }
    expect(spans.flatMap((s) => s.links.map((l) => l.context.spanId)).sort()).toEqual([...producers].sort());
    // The write still runs inside its batch's span.
    const batchIds = new Set(spans.map((s) => s.spanContext().spanId));
    const inserts = exporter.getFinishedSpans().filter((s) => s.name === "INSERT orders");
    expect(inserts.length).toBe(spans.length);
    for (const insert of inserts) expect(batchIds.has(insert.parentSpanContext?.spanId ?? "")).toBe(true);
  });

  it("process: the batch span is a child of the span active at the call (the host's own fetch loop)", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    await publishTraced(f, 1);
    const ack = new CommitThenAck({ tracing: openTelemetryTracing({ tracerProvider: provider }) });
    const poll = provider.getTracer("service").startSpan("poll orders");
    const batch = await fetchBatch(f, 1);
    await context.with(trace.setSpan(context.active(), poll), () => ack.process(batch, () => undefined));
    poll.end();
    const [span] = consumerSpans();
    expect(span!.parentSpanContext?.spanId).toBe(poll.spanContext().spanId);
    expect(span!.spanContext().traceId).toBe(poll.spanContext().traceId);
  });

  it("without a provider option it uses the global provider, registered even after the hook was made", async () => {
    const tracing = openTelemetryTracing();
    expect(trace.setGlobalTracerProvider(provider)).toBe(true);
    try {
      const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
      await publishTraced(f, 1);
      await new CommitThenAck({ tracing }).process(await fetchBatch(f, 1), () => undefined);
      expect(consumerSpans()).toHaveLength(1);
    } finally {
      trace.disable();
    }
  });

  it("refuses an unknown option and a provider that is not one", () => {
    expect(() => openTelemetryTracing({ provider } as never)).toThrow(TypeError);
    expect(() => openTelemetryTracing({ tracerProvider: {} as never })).toThrow(/tracerProvider must be an OpenTelemetry TracerProvider/);
  });
});
