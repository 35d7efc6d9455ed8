/**
 * The layout as a contract (docs/architecture.md): rooms by stage, data flowing one way, no
 * import circle (`import type` included), no oversized file, and a pure guardrail room.
 */
import { readFileSync, readdirSync } from "node:fs";
import { join, relative, resolve, dirname } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const srcDir = join(root, "src");

/** Which rooms each room may import from (besides itself). `root` is `index.ts`. */
const ALLOWED: Record<string, readonly string[]> = {
  errors: [],
  policy: ["errors"],
  telemetry: ["errors", "nats"],
  nats: ["errors"],
  lease: ["errors", "policy", "telemetry", "nats"],
  settle: ["errors", "policy", "telemetry", "nats", "lease"],
  consume: ["errors", "policy", "telemetry", "nats", "lease", "settle"],
  health: ["errors", "policy", "telemetry"],
  adapters: ["errors", "telemetry"],
  root: ["errors", "policy", "telemetry", "nats", "lease", "settle", "consume", "health"],
};

const MAX_LINES = 500;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : [],
  );
}

function roomOf(file: string): string {
  const rel = relative(srcDir, file);
  if (rel === "index.ts") return "root";
  if (rel === "errors.ts") return "errors";
  return rel.split("/")[0]!;
}

/** Every module specifier a file imports or re-exports, `import type` and `import()` included. */
function specifiers(file: string): string[] {
  const info = ts.preProcessFile(readFileSync(file, "utf8"), true, true);
  return info.importedFiles.map((f) => f.fileName);
}

const files = sourceFiles(srcDir).sort();
/** file -> the library files it imports. */
const graph = new Map<string, string[]>(
  files.map((file) => [
    file,
    specifiers(file)
      .filter((s) => s.startsWith("."))
      .map((s) => resolve(dirname(file), s.replace(/\.js$/, ".ts")))
      .filter((target) => target.startsWith(srcDir)),
  ]),
);

describe("the layout", () => {
  it("has the rooms by stage and nothing else at the root but index.ts and errors.ts (which gathers errors/)", () => {
    const top = readdirSync(srcDir).sort();
    expect(top).toEqual(["adapters", "consume", "errors", "errors.ts", "health", "index.ts", "lease", "nats", "policy", "settle", "telemetry"]);
  });

  it("every import names an existing file", () => {
    for (const [file, targets] of graph) {
      for (const t of targets) expect(files, `${relative(root, file)} imports ${relative(root, t)}`).toContain(t);
    }
  });

  it("no source file is over 500 lines", () => {
    const long = files
      .map((f) => ({ file: relative(root, f), lines: readFileSync(f, "utf8").split("\n").length }))
      .filter((f) => f.lines > MAX_LINES);
    expect(long).toEqual([]);
  });

  it("data flows one way: a room imports only from the rooms below it", () => {
    const wrong: string[] = [];
    for (const [file, targets] of graph) {
      const from = roomOf(file);
      for (const t of targets) {
        const to = roomOf(t);
        if (to !== from && !ALLOWED[from]!.includes(to)) wrong.push(`${relative(root, file)} -> ${relative(root, t)}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it("no import circle, types included", () => {
    expect(findCycles(graph).map((c) => c.map((f) => relative(srcDir, f)).join(" -> "))).toEqual([]);
  });

  it("the circle check finds a planted circle (it can fail)", () => {
    const planted = new Map([["a", ["b"]], ["b", ["c"]], ["c", ["a"]], ["d", ["a"]]]);
    expect(findCycles(planted)).toEqual([["a", "b", "c", "a"]]);
  });
});

/** Every circle reachable in `g`, each as the path that closes it. */
function findCycles(g: ReadonlyMap<string, readonly string[]>): string[][] {
  const state = new Map<string, "open" | "done">();
  const cycles: string[][] = [];
  const visit = (node: string, path: string[]): void => {
    if (state.get(node) === "done") return;
    if (state.get(node) === "open") {
      cycles.push([...path.slice(path.indexOf(node)), node]);
      return;
    }
    state.set(node, "open");
    for (const next of g.get(node) ?? []) visit(next, [...path, node]);
    state.set(node, "done");
  };
  for (const node of g.keys()) visit(node, []);
  return cycles;
}

describe("the policy room is pure", () => {
  const policyFiles = files.filter((f) => roomOf(f) === "policy");

  it("has files to check", () => {
    expect(policyFiles.length).toBeGreaterThan(5);
  });

  for (const file of policyFiles) {
    const text = readFileSync(file, "utf8");
    const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");

    it(`${relative(root, file)}: nothing from NATS at run time, no Node built-ins, no dynamic imports`, () => {
      const imports = [...code.matchAll(/^(?:import|export)\s+(type\s+)?[^;]*?from\s+"([^"]+)"/gm)].map((m) => ({ typeOnly: Boolean(m[1]), from: m[2]! }));
      for (const i of imports) {
        if (i.from.startsWith("@nats-io/")) expect(i.typeOnly, i.from).toBe(true);
        else expect(i.from.startsWith("."), i.from).toBe(true);
      }
      expect(code).not.toMatch(/\brequire\(|\bimport\(/);
    });

    it(`${relative(root, file)}: no I/O, no timers and no clock`, () => {
      expect(code).not.toMatch(/\b(setTimeout|setInterval|setImmediate|queueMicrotask|Date\.now|new Date|performance\.|process\.|hrtime|fetch\(|node:)/);
    });
  }
});
