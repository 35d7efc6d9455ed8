/**
 * Keeps the public surface honest: every export of every entry point carries TSDoc with an
 * example, the root barrel exports no internals, and the set of public names stays as it is.
 */
import { join } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const entries = ["src/index.ts", "src/adapters/prometheus.ts", "src/adapters/opentelemetry.ts"];

function exportedDeclarations(entry: string): Array<{ name: string; docs: string }> {
  const program = ts.createProgram([join(root, entry)], { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, moduleResolution: ts.ModuleResolutionKind.Bundler, skipLibCheck: true, noEmit: true });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(join(root, entry))!;
  const moduleSymbol = checker.getSymbolAtLocation(source)!;
  return checker.getExportsOfModule(moduleSymbol).map((sym) => {
    const target = sym.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(sym) : sym;
    const docs = (target.declarations ?? [])
      .map((d) => ts.getJSDocCommentsAndTags(d).map((j) => j.getText()).join("\n"))
      .join("\n");
    return { name: sym.getName(), docs };
  });
}

describe("public API", () => {
  for (const entry of entries) {
    it(`every export of ${entry} has TSDoc with an @example`, () => {
      const exports = exportedDeclarations(entry);
      expect(exports.length).toBeGreaterThan(0);
      const missing = exports.filter((e) => !e.docs.includes("@example")).map((e) => e.name);
      expect(missing).toEqual([]);
    });
  }

  it("the root barrel exports no internals", () => {
    const names = exportedDeclarations("src/index.ts").map((e) => e.name);
    for (const internal of ["superviseWork", "isVerifiedPolicy", "nanosToMillis", "MetricsRecorder", "METRIC_DEFINITIONS", "Scheduler", "sendRound", "publishEvent"]) {
      expect(names).not.toContain(internal);
    }
  });
});

describe("the public names", () => {
  // Adding a name is a deliberate, documented change (CHANGELOG); removing or renaming one breaks users.
  const EXPECTED: Record<string, readonly string[]> = {
    "src/index.ts": [
      "ACK_WAIT_SAFETY_RATIO", "AckNotConfirmedError", "BackOffMode", "BatchEventBase", "BatchOutcome", "BatchResult", "BatchSettledEvent", "BatchTrace", "BatchWrite",
      "CheckOptions", "CommitThenAck", "CommitThenAckOptions", "ConfirmAckOptions", "ConnectionClosedError", "ConsumerBinding",
      "ConsumerHealthSample", "ConsumerInfoSource",
      "ConsumerPolicyError", "ConsumerPolicyReason", "ConsumerPollFailure", "ConsumerTiming", "ConsumerWatch",
      "DEFAULT_IN_PROGRESS_POLICY", "DeadLetterError", "DeadLetterFailure", "DeadLetterHeaders", "DeadLetterTarget",
      "DiagnosticsChannels", "DisabledInProgressPolicy", "DisconnectedError", "EventLoopStallEvent",
      "FailedMessage", "ForConsumerOptions", "HeartbeatConfirmation", "HeartbeatFailedEvent", "HeartbeatLimitError",
      "HeartbeatLimitEvent", "HeartbeatSentEvent", "HeartbeatThreadConnection", "HeartbeatThreadOption", "InMemoryMetrics", "InProgressPolicy", "InProgressPolicyError", "JetStreamManagerLike", "JsMsgLike", "Lease",
      "LeaseExpiredError", "LeaseExpiredEvent", "MessageExhaustedEvent", "MessageResult", "MetricLabels", "MetricName", "MetricNames", "MetricsSink",
      "MetricsSnapshot", "MsgHdrsLike", "NatsConnectionLike", "PermanentSinkError", "PolicyCheck", "PolicyViolation", "ProcessOptions", "PullConsumerLike", "PullOptions", "RunEachOptions",
      "RunErrorContext", "RunOptions", "StallEvidence",
      "TemporaryFailureAction", "TemporarySinkError", "TracedBatch", "TracedOutcome", "Tracing", "VerifiedInProgressPolicy", "ViolationCode", "WatchConsumerOptions",
      "WithInProgressOptions", "WorkContext", "WriteReport", "WriteReportCheck", "WriteReportExpected", "checkInProgressPolicy", "consumerTimingFromConfig",
      "verifyInProgressPolicy", "watchConsumer", "withInProgress",
    ],
    "src/adapters/prometheus.ts": ["DEFAULT_COUNT_BUCKETS", "DEFAULT_SECONDS_BUCKETS", "PrometheusMetricsOptions", "prometheusMetrics"],
    "src/adapters/opentelemetry.ts": ["OpenTelemetryMetricNames", "OpenTelemetryMetricsOptions", "OpenTelemetryTracingOptions", "openTelemetryMetrics", "openTelemetryTracing"],
  };
  for (const [entry, names] of Object.entries(EXPECTED)) {
    it(`${entry} exports exactly the documented names`, () => {
      expect(exportedDeclarations(entry).map((e) => e.name).sort()).toEqual([...names].sort());
    });
  }
});
