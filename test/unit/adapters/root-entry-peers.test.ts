/**
 * The root entry point must load without the optional peers of the metrics adapters
 * (`prom-client`, `@opentelemetry/api`). The test builds the package afresh with the
 * project's tsup configuration (no stale dist), then:
 * - reads the root bundles: no import or require of either peer;
 * - loads them in a child process in which both peers cannot be resolved, by `import` (a
 *   module resolve hook) and by `require` (a `Module._resolveFilename` hook);
 * - checks the block works: the adapter bundles fail to load under it, and load and record
 *   without it (the peers stay external, never bundled).
 */
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { build, type Options } from "tsup";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import config from "../../../tsup.config.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..", "..");
// Inside the project, so the bundles resolve @nats-io/* and the peers from its node_modules.
const out = join(root, "test", ".tmp", `root-entry-${process.pid}`);
const PEERS = ["prom-client", "@opentelemetry/api"];

const BLOCK_PEERS = `
import Module, { register } from "node:module";
const peers = ${JSON.stringify(PEERS)};
const blocked = (s) => peers.some((p) => s === p || s.startsWith(p + "/"));
const resolveFilename = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (blocked(request)) throw Object.assign(new Error("blocked optional peer " + request), { code: "MODULE_NOT_FOUND" });
  return resolveFilename.call(this, request, ...rest);
};
const hook = 'const peers = ' + JSON.stringify(peers) + ';' +
  'export async function resolve(s, c, next) {' +
  '  if (peers.some((p) => s === p || s.startsWith(p + "/"))) throw Object.assign(new Error("blocked optional peer " + s), { code: "ERR_MODULE_NOT_FOUND" });' +
  '  return next(s, c);' +
  '}';
register("data:text/javascript," + encodeURIComponent(hook));
`;

// Loads each bundle, and reports its export names or the error message.
const LOAD_ALL = `
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
const dir = process.argv[1];
const require = createRequire(import.meta.url);
const result = {};
for (const entry of ["index", "prometheus", "opentelemetry"]) {
  try { result[entry + ".js"] = Object.keys(await import(pathToFileURL(dir + "/" + entry + ".js").href)).sort(); }
  catch (err) { result[entry + ".js"] = "error: " + err.message; }
  try { result[entry + ".cjs"] = Object.keys(require(dir + "/" + entry + ".cjs")).sort(); }
  catch (err) { result[entry + ".cjs"] = "error: " + err.message; }
}
console.log(JSON.stringify(result));
`;

// Uses the adapter bundles with the peers present.
const USE_ADAPTERS = `
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { Registry } from "prom-client";
const dir = process.argv[1];
const require = createRequire(import.meta.url);
const lines = [];
for (const mod of [await import(pathToFileURL(dir + "/prometheus.js").href), require(dir + "/prometheus.cjs")]) {
  const registry = new Registry();
  mod.prometheusMetrics({ registry, prefix: "app_" }).addCounter("messages_acked_total", 2);
  lines.push((await registry.metrics()).split("\\n").find((l) => l.startsWith("app_messages_acked_total ")));
}
for (const mod of [await import(pathToFileURL(dir + "/opentelemetry.js").href), require(dir + "/opentelemetry.cjs")]) {
  mod.openTelemetryMetrics().addCounter("messages_acked_total", 2);
  lines.push(mod.OpenTelemetryMetricNames.messages_acked_total);
}
console.log(JSON.stringify(lines));
`;

async function node(args: string[]): Promise<unknown> {
  const { stdout } = await run(process.execPath, args, { cwd: root, timeout: 30_000 });
  return JSON.parse(stdout.trim().split("\n").at(-1) ?? "null");
}

describe("the root entry point without the optional peers", () => {
  beforeAll(async () => {
    rmSync(out, { recursive: true, force: true });
    mkdirSync(out, { recursive: true });
    await build({ ...(config as Options), config: false, outDir: out, dts: false, sourcemap: false, clean: false, silent: true });
    writeFileSync(join(out, "block-peers.mjs"), BLOCK_PEERS);
  });

  afterAll(() => {
    rmSync(out, { recursive: true, force: true });
  });

  it("has no import or require of a peer in the root bundles", () => {
    for (const file of ["index.js", "index.cjs"]) {
      const code = readFileSync(join(out, file), "utf8");
      for (const peer of PEERS) expect(code.includes(peer), `${file} mentions ${peer}`).toBe(false);
    }
  });

  it("keeps the peers external in the adapter bundles", () => {
    const expected = { prometheus: "prom-client", opentelemetry: "@opentelemetry/api" } as const;
    for (const [entry, peer] of Object.entries(expected)) {
      const esm = readFileSync(join(out, `${entry}.js`), "utf8");
      const cjs = readFileSync(join(out, `${entry}.cjs`), "utf8");
      expect(esm).toContain(`from '${peer}'`);
      expect(cjs).toContain(`require('${peer}')`);
      // Not bundled: prom-client's and the OpenTelemetry API's own sources are absent.
      for (const code of [esm, cjs]) {
        expect(code).not.toContain("Missing mandatory help parameter");
        expect(code).not.toContain("setGlobalMeterProvider");
      }
    }
  });

  it("loads by import and by require while both peers are unresolvable; the adapters do not", async () => {
    const result = (await node(["--import", join(out, "block-peers.mjs"), "--input-type=module", "-e", LOAD_ALL, out])) as Record<string, unknown>;
    for (const file of ["index.js", "index.cjs"]) {
      expect(result[file], file).toEqual(expect.arrayContaining(["InMemoryMetrics", "MetricNames", "verifyInProgressPolicy"]));
    }
    expect(result["prometheus.js"]).toMatch(/^error: blocked optional peer prom-client/);
    expect(result["prometheus.cjs"]).toMatch(/^error: blocked optional peer prom-client/);
    expect(result["opentelemetry.js"]).toMatch(/^error: blocked optional peer @opentelemetry\/api/);
    expect(result["opentelemetry.cjs"]).toMatch(/^error: blocked optional peer @opentelemetry\/api/);
  });

  it("loads the adapter bundles, ESM and CommonJS, when the peers are installed", async () => {
    const lines = await node(["--input-type=module", "-e", USE_ADAPTERS, out]);
    expect(lines).toEqual(["app_messages_acked_total 2", "app_messages_acked_total 2", "jetstream.messages.acked", "jetstream.messages.acked"]);
  });
});
