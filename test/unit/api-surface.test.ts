/**
 * Keeps the public surface honest: every export of every entry point carries TSDoc with an
 * example, and the guardrail module stays pure (no NATS at run time, no I/O, no timers, no clock).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const entries = ["src/index.ts", "src/prometheus.ts", "src/opentelemetry.ts"];

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

describe("the guardrail module is pure", () => {
  const text = readFileSync(join(root, "src", "guardrails.ts"), "utf8");
  const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");

  it("imports nothing from NATS at run time, and only the error classes besides", () => {
    const imports = [...code.matchAll(/^import\s+(type\s+)?[^;]*?from\s+"([^"]+)"/gm)].map((m) => ({ typeOnly: Boolean(m[1]), from: m[2] }));
    for (const i of imports) {
      if (i.from!.startsWith("@nats-io/")) expect(i.typeOnly).toBe(true);
      else expect(i.from).toBe("./errors.js");
    }
    expect(code).not.toMatch(/\brequire\(|\bimport\(/);
  });

  it("has no I/O, no timers and no clock", () => {
    expect(code).not.toMatch(/\b(setTimeout|setInterval|setImmediate|queueMicrotask|Date\.now|new Date|performance\.|process\.|hrtime|fetch\(|node:)/);
  });
});
