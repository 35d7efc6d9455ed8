/**
 * What an editor shows at the call site: every field of every public options object, written
 * where it is passed (`inProgress: { maxHeartbeats }` inside `forConsumer`'s options, say),
 * has documentation in the language service's quick info — also through `Partial<>`, `Omit<>`
 * and unions — and says more than its own name.
 */
import { join } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const probeFile = join(root, "test", "unit", "__options_probe__.ts");

/**
 * Where options are passed, with `{}` marking the object, and the exported type whose fields
 * belong there (a union's members are listed one by one).
 */
const SITES: ReadonlyArray<readonly [site: string, call: string, types: readonly string[]]> = [
  ["forConsumer", `CommitThenAck.forConsumer(jsm, "S", "C", {})`, ["ForConsumerOptions"]],
  ["forConsumer inProgress", `CommitThenAck.forConsumer(jsm, "S", "C", { inProgress: {} })`, ["InProgressPolicy"]],
  ["constructor", `new CommitThenAck({})`, ["CommitThenAckOptions"]],
  ["deadLetter", `new CommitThenAck({ deadLetter: {} })`, ["DeadLetterTarget"]],
  ["confirmAck", `new CommitThenAck({ confirmAck: {} })`, ["ConfirmAckOptions"]],
  ["onTemporaryFailure", `new CommitThenAck({ onTemporaryFailure: {} })`, ["NakAction"]],
  ["heartbeat", `new CommitThenAck({ heartbeat: {} })`, ["HeartbeatFineTuning"]],
  ["heartbeat confirm", `new CommitThenAck({ heartbeat: { confirm: {} } })`, ["HeartbeatConfirmation"]],
  ["run", `ack.run(consumer, write, {})`, ["RunOptions"]],
  ["run pull", `ack.run(consumer, write, { pull: {} })`, ["PullOptions"]],
  ["runEach", `ack.runEach(consumer, handle, {})`, ["RunEachOptions"]],
  ["process", `ack.process(msgs, write, {})`, ["ProcessOptions"]],
  ["withInProgress", `withInProgress(msgs, work, policy, {})`, ["WithInProgressOptions"]],
  ["check options", `checkInProgressPolicy(undefined, timing, {})`, ["CheckOptions"]],
  ["consumer timing", `checkInProgressPolicy(undefined, {})`, ["ConsumerTiming"]],
  ["watchConsumer", `watchConsumer(jsm, "S", "C", {})`, ["WatchConsumerOptions"]],
  ["prometheusMetrics", `prometheusMetrics({})`, ["PrometheusMetricsOptions"]],
  ["openTelemetryMetrics", `openTelemetryMetrics({})`, ["OpenTelemetryMetricsOptions"]],
  ["openTelemetryTracing", `openTelemetryTracing({})`, ["OpenTelemetryTracingOptions"]],
];

const HEADER = `
import { CommitThenAck, checkInProgressPolicy, watchConsumer, withInProgress, type CommitThenAckOptions, type ConfirmAckOptions, type ForConsumerOptions, type TemporaryFailureAction,
  type DeadLetterTarget, type HeartbeatConfirmation, type RunOptions, type PullOptions, type RunEachOptions, type ProcessOptions, type WithInProgressOptions,
  type InProgressPolicy, type CheckOptions, type ConsumerTiming, type WatchConsumerOptions } from "jetstream-inprogress";
import { prometheusMetrics, type PrometheusMetricsOptions } from "jetstream-inprogress/prometheus";
import { openTelemetryMetrics, openTelemetryTracing, type OpenTelemetryMetricsOptions, type OpenTelemetryTracingOptions } from "jetstream-inprogress/opentelemetry";
declare const jsm: any, ack: CommitThenAck, consumer: any, write: any, handle: any, msgs: any, work: any, policy: any, timing: any;
type NakAction = Extract<TemporaryFailureAction, { action: "nak" }>;
type HeartbeatFineTuning = NonNullable<CommitThenAckOptions["heartbeat"]>;
export type Probe = [ForConsumerOptions, CommitThenAckOptions, ConfirmAckOptions, DeadLetterTarget, HeartbeatConfirmation, RunOptions, PullOptions, RunEachOptions, ProcessOptions,
  WithInProgressOptions, InProgressPolicy, CheckOptions, ConsumerTiming, WatchConsumerOptions, PrometheusMetricsOptions, OpenTelemetryMetricsOptions,
  OpenTelemetryTracingOptions, NakAction, HeartbeatFineTuning];
`;

function compilerOptions(): ts.CompilerOptions {
  const config = ts.readConfigFile(join(root, "tsconfig.json"), (p) => ts.sys.readFile(p));
  return { ...ts.parseJsonConfigFileContent(config.config, ts.sys, root).options, noEmit: true };
}

function languageService(files: Map<string, string>): ts.LanguageService {
  const options = compilerOptions();
  const host: ts.LanguageServiceHost = {
    getCompilationSettings: () => options,
    getScriptFileNames: () => [...files.keys()],
    getScriptVersion: () => "1",
    getScriptSnapshot: (f) => {
      const text = files.get(f) ?? ts.sys.readFile(f);
      return text === undefined ? undefined : ts.ScriptSnapshot.fromString(text);
    },
    getCurrentDirectory: () => root,
    getDefaultLibFileName: (o) => ts.getDefaultLibFilePath(o),
    fileExists: (f) => files.has(f) || ts.sys.fileExists(f),
    readFile: (f) => files.get(f) ?? ts.sys.readFile(f),
    readDirectory: ts.sys.readDirectory,
    directoryExists: ts.sys.directoryExists,
    getDirectories: ts.sys.getDirectories,
  };
  return ts.createLanguageService(host, ts.createDocumentRegistry());
}

/** The field names of each probed type, from the type checker. */
function fieldsOf(ls: ts.LanguageService): Map<string, string[]> {
  const program = ls.getProgram()!;
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(probeFile)!;
  const probe = source.statements.find((s): s is ts.TypeAliasDeclaration => ts.isTypeAliasDeclaration(s) && s.name.text === "Probe")!;
  const out = new Map<string, string[]>();
  for (const element of (probe.type as ts.TupleTypeNode).elements) {
    const name = (element as ts.TypeReferenceNode).typeName.getText(source);
    const type = checker.getTypeFromTypeNode(element);
    out.set(name, checker.getPropertiesOfType(type).map((p) => p.getName()).filter((n) => !n.startsWith("__")));
  }
  return out;
}

/** A field's value in the probe: any, except a union's discriminant, which picks its member as a host's literal does. */
const valueOf = (field: string): string => (field === "action" ? `"nak"` : "undefined as never");

describe("options fields show their documentation at the call site", () => {
  // Pass 1: learn the fields; pass 2: write each site with every field and ask for quick info.
  const first = languageService(new Map([[probeFile, HEADER]]));
  const fields = fieldsOf(first);
  let body = HEADER;
  const probes: Array<{ site: string; field: string; offset: number }> = [];
  for (const [site, call, types] of SITES) {
    const names = types.flatMap((t) => fields.get(t) ?? []);
    const inner = names.map((n) => `${n}: ${valueOf(n)}`).join(", ");
    const at = call.lastIndexOf("{}");
    const line = `void (${call.slice(0, at)}{ ${inner} }${call.slice(at + 2)});\n`;
    const start = body.length + `void (${call.slice(0, at)}{ `.length;
    let cursor = start;
    for (const n of names) {
      probes.push({ site, field: n, offset: cursor });
      cursor += `${n}: ${valueOf(n)}, `.length;
    }
    body += line;
  }
  const ls = languageService(new Map([[probeFile, body]]));

  it("finds the fields of every options type", () => {
    for (const [, , types] of SITES) for (const t of types) expect(fields.get(t)?.length ?? 0, t).toBeGreaterThan(0);
    expect(fields.get("ForConsumerOptions")).toEqual(expect.arrayContaining(["inProgress", "deadLetter", "ackWaitMs", "tracing"]));
    expect(fields.get("DeadLetterTarget")).toContain("headers");
  });

  it("the probe type checks (each field is written where it belongs)", () => {
    const errors = ls.getSemanticDiagnostics(probeFile).map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
    expect(errors).toEqual([]);
  });

  it("every field has documentation that says more than its name", () => {
    const undocumented: string[] = [];
    for (const p of probes) {
      const info = ls.getQuickInfoAtPosition(probeFile, p.offset);
      const docs = ts.displayPartsToString(info?.documentation).trim();
      if (docs.length < 12) undocumented.push(`${p.site}: ${p.field} (${JSON.stringify(docs)})`);
    }
    expect(probes.length).toBeGreaterThan(80);
    expect(undocumented).toEqual([]);
  });

  it("the policy fields inside forConsumer's inProgress carry their range and default", () => {
    for (const field of ["intervalMs", "maxHeartbeats", "shutdownTimeoutMs"]) {
      const p = probes.find((x) => x.site === "forConsumer inProgress" && x.field === field)!;
      const docs = ts.displayPartsToString(ls.getQuickInfoAtPosition(probeFile, p.offset)?.documentation);
      expect(docs, field).toMatch(/Default \d+/);
      expect(docs, field).toMatch(/\d ..= [\d,]+/);
    }
  });
});
