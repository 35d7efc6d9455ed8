/**
 * Item 11 — the cost of traces: `CommitThenAck.process` of a batch of 100 fake messages, each
 * carrying its producer's `traceparent`, with a 1 ms write, once with `openTelemetryTracing`
 * (an SDK tracer provider whose processor drops every span, the W3C propagator and the async
 * context manager registered, as a service would have them) and once without. No server: the
 * span, the 100 links read from the headers and the context switch are the whole difference.
 * A sample is the median batch of a block of batches; the arms alternate by round.
 */
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, SimpleSpanProcessor, type ReadableSpan, type SpanExporter } from "@opentelemetry/sdk-trace-base";
import { headers } from "@nats-io/transport-node";
import type { JsMsg } from "@nats-io/jetstream";
import { CommitThenAck } from "../../src/index.js";
import { openTelemetryTracing } from "../../src/adapters/opentelemetry.js";
import type { Bench } from "../context.js";
import { fakeMsgs } from "../fake-msg.js";
import { figure, goals, type Figure } from "../figure.js";
import { interleave, median, medians, nowNs } from "../measure.js";

/** Drops every span: what is measured is the library's and the SDK's work, not an export. */
const dropAll: SpanExporter = {
  export: (_spans: ReadableSpan[], done) => done({ code: 0 }),
  shutdown: async () => undefined,
};

function tracedMessages(n: number): JsMsg[] {
  const producer = new BasicTracerProvider().getTracer("producer");
  return fakeMsgs(n).map((m) => {
    const span = producer.startSpan("send");
    const h = headers();
    propagation.inject(trace.setSpan(context.active(), span), h, { set: (carrier, key, value) => carrier.set(key, value) });
    span.end();
    (m as unknown as { headers: unknown }).headers = h;
    return m;
  });
}

export async function tracingCost(bench: Bench): Promise<Figure[]> {
  const c = bench.config.tracing;
  const manager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(manager);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(dropAll)] });
  try {
    const msgs = tracedMessages(c.batchSize);
    const write = (): Promise<void> => new Promise((r) => setTimeout(r, c.writeMs));
    const reset = (): void => {
      for (const m of msgs) (m as unknown as { didAck: boolean }).didAck = false;
    };
    const arm = (ack: CommitThenAck) => async (): Promise<number> => {
      const times = new Float64Array(c.batches);
      for (let i = 0; i < c.batches; i++) {
        reset();
        const t0 = nowNs();
        await ack.process(msgs, write);
        times[i] = nowNs() - t0;
      }
      return median(times) / 1000;
    };
    const samples = await interleave(
      {
        off: arm(new CommitThenAck()),
        on: arm(new CommitThenAck({ tracing: openTelemetryTracing({ tracerProvider: provider }) })),
      },
      c.rounds,
      1,
    );
    const m = medians(samples);
    return [
      figure({
        id: "11a",
        item: 11,
        name: `CommitThenAck.process with openTelemetryTracing, batch ${c.batchSize} (each with a traceparent), ${c.writeMs} ms write`,
        unit: "µs/batch",
        value: m.on,
        baselineName: "the same without tracing",
        baseline: m.off,
        goal: goals.ratioAtMost(1.1),
        samples: { value: samples.on, baseline: samples.off },
      }),
    ];
  } finally {
    await provider.shutdown();
    context.disable();
    propagation.disable();
  }
}
