/**
 * The runbook stays true to the code: every metric the library can emit is in it, every
 * metric-looking name in it exists (allowing the documented `myapp_` prefix and the histogram
 * series suffixes), its OpenTelemetry names are the real ones, its links resolve, and the
 * README points operators to it.
 */
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { MetricNames } from "../../src/index.js";
import { METRIC_DEFINITIONS } from "../../src/telemetry/metric-names.js";
import { OpenTelemetryMetricNames } from "../../src/adapters/opentelemetry-names.js";

const root = join(import.meta.dirname, "..", "..");
const runbookPath = join(root, "docs", "runbook.md");
const runbook = readFileSync(runbookPath, "utf8");
const names: ReadonlySet<string> = new Set(Object.values(MetricNames));
const histograms: ReadonlySet<string> = new Set(METRIC_DEFINITIONS.filter((d) => d.kind === "observation").map((d) => d.name));

const PREFIX = "myapp_";
/** Tokens that look like a metric name of this library. */
const METRIC_LIKE = /(_total|_seconds|_active|_messages|_stalled|_growing|_per_batch)$/;

/** Inline code spans and fenced PromQL blocks: where metric names are written. */
function codeTexts(markdown: string): string[] {
  const blocks = [...markdown.matchAll(/```promql\n([\s\S]*?)```/g)].map((m) => m[1] ?? "");
  const withoutFences = markdown.replace(/```[\s\S]*?```/g, "");
  const spans = [...withoutFences.matchAll(/`([^`\n]+)`/g)].map((m) => m[1] ?? "");
  return [...blocks, ...spans];
}

/** The stable metric a token names, after removing the prefix and a histogram series suffix. */
function stableName(token: string): string {
  let t = token.startsWith(PREFIX) ? token.slice(PREFIX.length) : token;
  const series = /_(bucket|sum|count)$/.exec(t);
  if (series && histograms.has(t.slice(0, series.index))) t = t.slice(0, series.index);
  return t;
}

describe("docs/runbook.md", () => {
  it("names every metric the code can emit", () => {
    const missing = Object.values(MetricNames).filter((n) => !new RegExp(`\`${n}\``).test(runbook));
    expect(missing).toEqual([]);
  });

  it("names no metric the code does not have (prefix and histogram series allowed)", () => {
    const unknown = new Set<string>();
    let seen = 0;
    for (const text of codeTexts(runbook)) {
      for (const [token] of text.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
        // The prefix itself and bare suffixes (`_total`, `_bucket`) are named in the text too.
        if (token === PREFIX || token.startsWith("_")) continue;
        const stable = stableName(token);
        const looksLikeMetric = METRIC_LIKE.test(stable) || /_(bucket|sum|count)$/.test(token) || token.startsWith(PREFIX);
        if (!looksLikeMetric) continue;
        seen += 1;
        if (!names.has(stable)) unknown.add(token);
      }
    }
    expect([...unknown]).toEqual([]);
    expect(seen).toBeGreaterThan(Object.keys(MetricNames).length);
  });

  it("has PromQL for the alerts, with the documented prefix", () => {
    const promql = [...runbook.matchAll(/```promql\n([\s\S]*?)```/g)].map((m) => m[1] ?? "").join("\n");
    for (const name of [
      MetricNames.IN_PROGRESS_FAILURES_TOTAL,
      MetricNames.IN_PROGRESS_MAX_HEARTBEATS_REACHED_TOTAL,
      MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL,
      MetricNames.IN_PROGRESS_HEARTBEATS_PER_BATCH,
      MetricNames.SETTLE_FAILURES_TOTAL,
      MetricNames.FETCH_FAILURES_TOTAL,
      MetricNames.MESSAGES_FAILED_TOTAL,
      MetricNames.CONSUMER_STALLED,
      MetricNames.CONSUMER_BACKLOG_GROWING,
      MetricNames.CONSUMER_POLL_FAILURES_TOTAL,
    ]) {
      expect(promql, name).toMatch(new RegExp(`\\b${PREFIX}${name}(_bucket|_sum|_count)?\\b`));
    }
    // Every metric in PromQL carries the prefix the text announces.
    const unprefixed = Array.from(promql.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g), (m) => m[0]).filter(
      (token) => names.has(stableName(token)) && !token.startsWith(PREFIX),
    );
    expect(unprefixed).toEqual([]);
  });

  it("uses the real OpenTelemetry names", () => {
    const otel = new Set<string>(Object.values(OpenTelemetryMetricNames));
    const used = [...runbook.matchAll(/`(jetstream\.[a-z0-9_.]+)`/g)].map((m) => m[1] ?? "");
    expect(used.length).toBeGreaterThan(0);
    for (const n of used) expect(otel, n).toContain(n);
    const pairs = Array.from(runbook.matchAll(/`([a-z_]+)` → `(jetstream\.[a-z0-9_.]+)`/g), (m) => [m[1] ?? "", m[2] ?? ""] as const);
    expect(pairs.length).toBeGreaterThan(0);
    for (const [stable, otelName] of pairs) {
      expect(OpenTelemetryMetricNames[stable as keyof typeof OpenTelemetryMetricNames], stable).toBe(otelName);
    }
  });

  it("links only to files that exist, and covers consumer health, diagnostics and what leaves the process", () => {
    for (const [, target] of runbook.matchAll(/\]\(([^)#]+)(#[^)]*)?\)/g)) {
      if (/^[a-z]+:/.test(target ?? "")) continue;
      expect(existsSync(resolve(dirname(runbookPath), target ?? "")), target).toBe(true);
    }
    for (const heading of ["## Consumer health", "## What leaves the process", "## Alerts", "## Metrics", "## OpenTelemetry names"]) {
      expect(runbook).toContain(`\n${heading}\n`);
    }
    expect(runbook).toContain("(opentelemetry.md)");
    expect(runbook).toContain("(diagnostics.md)");
  });
});

describe("links to the runbook", () => {
  it("the README has an Operations section linking the runbook and the diagnostics events", () => {
    const readme = readFileSync(join(root, "README.md"), "utf8");
    const section = /\n## Operations\n([\s\S]*?)(\n## |$)/.exec(readme)?.[1] ?? "";
    expect(section).toContain("(docs/runbook.md)");
    expect(section).toContain("(docs/diagnostics.md)");
  });

  it("nothing points to the old consumer-health runbook any more", () => {
    expect(existsSync(join(root, "docs", "runbook-consumer-health.md"))).toBe(false);
    const files = [join(root, "README.md"), join(root, "CHANGELOG.md"), ...readdirSync(join(root, "docs")).filter((f) => f.endsWith(".md")).map((f) => join(root, "docs", f))];
    for (const f of files) expect(readFileSync(f, "utf8"), f).not.toContain("runbook-consumer-health");
  });
});
