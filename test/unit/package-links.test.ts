/**
 * The package's documentation reaches its users: the checks behind `npm run check:package`
 * (dead relative links in the README and the shipped docs pages, example paths the README
 * names, imports of shipped examples, files that must not ship), and this repository's README
 * and docs against the files `package.json` ships.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";

interface DeadLink {
  readonly from: string;
  readonly target: string;
  readonly resolved: string;
}
interface CheckPackage {
  unexpectedFiles(files: readonly string[]): string[];
  linkTargets(markdown: string): string[];
  deadLinks(from: string, markdown: string, files: readonly string[]): DeadLink[];
  examplePaths(markdown: string): string[];
  missingExamples(markdown: string, files: readonly string[]): string[];
  unresolvedImports(from: string, source: string, files: readonly string[]): Array<{ from: string; specifier: string }>;
  packageProblems(files: readonly string[], read: (path: string) => string): string[];
  loadProblems(names: { cjs: Record<string, string[] | string>; esm: Record<string, string[] | string> }): string[];
}

const root = join(import.meta.dirname, "..", "..");
// A computed specifier: the script is plain JavaScript without declarations.
const check = (await import(pathToFileURL(join(root, "scripts", "check-package.mjs")).href)) as CheckPackage;

const FILES = ["package.json", "README.md", "LICENSE", "dist/index.js", "docs/runbook.md", "docs/backoff.md", "docs/server-versions.md", "examples/with-in-progress.ts"];

describe("link checker", () => {
  it("a README with a dead relative link fails", () => {
    const readme = "See [the runbook](docs/runbook.md) and [the missing page](docs/missing.md).";
    expect(check.deadLinks("README.md", readme, FILES)).toEqual([{ from: "README.md", target: "docs/missing.md", resolved: "docs/missing.md" }]);
    const problems = check.packageProblems(FILES, (p) => (p === "README.md" ? readme : ""));
    expect(problems).toEqual(["README.md: link (docs/missing.md) does not resolve inside the package (docs/missing.md)"]);
  });

  it("resolves anchors, titles, images, reference links and links relative to a docs page", () => {
    const readme = [
      "[alerts](docs/runbook.md#alerts) [titled](docs/backoff.md \"BackOff\") ![logo](docs/logo.png)",
      "[ref]: docs/gone.md",
      "[dir](docs/) [up](./README.md)",
    ].join("\n");
    expect(check.deadLinks("README.md", readme, FILES).map((d) => d.target)).toEqual(["docs/logo.png", "docs/gone.md"]);
    const page = "[versions](server-versions.md) [home](../README.md) [src](../src/index.ts) [outside](../../elsewhere.md)";
    expect(check.deadLinks("docs/backoff.md", page, FILES).map((d) => d.target)).toEqual(["../src/index.ts", "../../elsewhere.md"]);
  });

  it("ignores URLs, same-page anchors and anything inside code", () => {
    const readme = [
      "[site](https://example.org/x) [mail](mailto:a@b.c) [here](#install)",
      "`[inline](docs/not-a-link.md)`",
      "```md",
      "[fenced](docs/not-a-link-either.md)",
      "```",
    ].join("\n");
    expect(check.linkTargets(readme)).toEqual(["https://example.org/x", "mailto:a@b.c", "#install"]);
    expect(check.deadLinks("README.md", readme, FILES)).toEqual([]);
  });

  it("an example path the README names must be in the package, wherever it is written", () => {
    const readme = [
      "Run `npx tsx node_modules/jetstream-inprogress/examples/with-in-progress.ts`.",
      "```sh",
      "npx tsx examples/postgres-sink.ts",
      "```",
      "`examples/prometheus.js` serves /metrics.",
    ].join("\n");
    expect(check.examplePaths(readme)).toEqual(["examples/with-in-progress.ts", "examples/postgres-sink.ts", "examples/prometheus.js"]);
    expect(check.missingExamples(readme, FILES)).toEqual(["examples/postgres-sink.ts", "examples/prometheus.js"]);
  });

  it("a shipped example importing a file that is not shipped fails", () => {
    const demo = 'import { x } from "jetstream-inprogress";\nimport { startServer } from "../test/helpers/nats-server.js";\nimport { y } from "./with-in-progress.js";';
    expect(check.unresolvedImports("examples/demo.ts", demo, [...FILES, "examples/demo.ts"])).toEqual([
      { from: "examples/demo.ts", specifier: "../test/helpers/nats-server.js" },
    ]);
    const cjs = 'const { x } = require("jetstream-inprogress");\nconst helper = require("./helper.cjs");\nconst ok = require("./with-in-progress.js");';
    expect(check.unresolvedImports("examples/worker.cjs", cjs, FILES)).toEqual([{ from: "examples/worker.cjs", specifier: "./helper.cjs" }]);
  });

  it("only the build, the top-level texts, docs pages and examples may ship", () => {
    expect(check.unexpectedFiles([...FILES, "examples/commonjs-worker.cjs", "docs/api/index.html", "src/index.ts", "test/unit/x.test.ts", "examples/demo.ts", ".env"])).toEqual([
      "docs/api/index.html",
      "src/index.ts",
      "test/unit/x.test.ts",
      ".env",
    ]);
  });
});

describe("loading the packed entry points", () => {
  const entries = ["jetstream-inprogress", "jetstream-inprogress/prometheus", "jetstream-inprogress/opentelemetry"];
  const same = (names: string[]) => Object.fromEntries(entries.map((e) => [e, names]));

  it("passes when require() and import see the same names", () => {
    expect(check.loadProblems({ cjs: same(["CommitThenAck", "withInProgress"]), esm: same(["CommitThenAck", "withInProgress"]) })).toEqual([]);
  });

  it("fails when an entry does not load, has no exports, or differs between require() and import", () => {
    const cjs = { ...same(["CommitThenAck", "withInProgress"]), "jetstream-inprogress/prometheus": "Cannot find module './dist/prometheus.cjs'" };
    const esm = { ...same(["CommitThenAck"]), "jetstream-inprogress/opentelemetry": [] };
    expect(check.loadProblems({ cjs, esm })).toEqual([
      "jetstream-inprogress: require() and import see different names (only require: withInProgress; only import: -)",
      "require() of jetstream-inprogress/prometheus failed: Cannot find module './dist/prometheus.cjs'",
      "import of jetstream-inprogress/opentelemetry gave no exports",
    ]);
  });

  it("fails when the root entry has no CommitThenAck", () => {
    expect(check.loadProblems({ cjs: same(["withInProgress"]), esm: same(["withInProgress"]) })).toEqual(["jetstream-inprogress does not export CommitThenAck"]);
  });
});

describe("this package", () => {
  it("packing builds it first: a fresh clone has no dist/ to ship", () => {
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: Record<string, string>; files: string[] };
    expect(pkg.scripts["prepack"]).toBe("npm run build");
    expect(pkg.files).toContain("dist");
  });

  it("its README and docs pages link only to files it ships, and every example the README names ships", () => {
    const out = execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
    const [packed] = JSON.parse(out) as Array<{ files: Array<{ path: string }> }>;
    const paths = (packed?.files ?? []).map((f) => f.path);
    expect(paths).toContain("docs/runbook.md");
    expect(paths).toContain("examples/commonjs-worker.cjs");
    expect(paths).toContain("docs/api-guide.md");
    // About the source checkout, which the package does not contain: kept in the repository only.
    expect(paths).not.toContain("docs/architecture.md");
    expect(paths).not.toContain("docs/development.md");
    expect(paths.some((p) => p.startsWith("docs/api/"))).toBe(false);
    const problems = check.packageProblems(
      paths.filter((p) => !p.startsWith("dist/")),
      (p) => readFileSync(join(root, p), "utf8"),
    );
    expect(problems).toEqual([]);
  });
});
