#!/usr/bin/env node
// npm run test:servers — the real-server tests (test/integration and the short scenarios of
// test/reliability) once per row of the matrix in scripts/matrix.json, one row after another:
// each row its own nats-server binary, Node.js runtime and @nats-io client, all from .cache/
// (scripts/fetch-nats-servers.sh fills it). A row whose client is "legacy" runs the host's side
// (tests, helpers, examples) on the `nats` 2.x devDependency and the library on the pinned 3.x
// peers beside it, leaving out the files its `exclude` lists. Then a table, and
// .ci/out/servers.json with the totals. Exit code 1 when any row failed; the table is printed
// either way.
//
//   npm run test:servers                         every row, the default files
//   npm run test:servers -- --rows=1,4           some rows (1-based)
//   npm run test:servers -- test/integration/server-facts.test.ts   other files, every row
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { arch } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const cache = join(root, ".cache");
const outDir = join(root, ".ci", "out");
const manifest = JSON.parse(readFileSync(join(root, "scripts", "matrix.json"), "utf8"));
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const DEFAULT_FILES = ["test/integration", "test/reliability"];
const FETCH_HINT = "run scripts/fetch-nats-servers.sh";
// The real-server tests mostly wait on timers (a run uses a fraction of a core): three files
// at a time keeps the whole matrix near 10 minutes on 2 cores without eating the margins.
const MAX_WORKERS = 3;

const args = process.argv.slice(2);
const rowsArg = args.find((a) => a.startsWith("--rows="));
const files = args.filter((a) => !a.startsWith("--"));
const unknown = args.filter((a) => a.startsWith("--") && !a.startsWith("--rows="));
if (unknown.length) {
  console.error(`test-servers: unknown option ${unknown[0]}: use --rows=1,3 and test file filters`);
  process.exit(2);
}
const wanted = rowsArg ? new Set(rowsArg.slice(7).split(",").map(Number)) : undefined;

/** What one row runs on, or why it cannot run. */
function resolveRow(row) {
  const server = join(cache, "nats-server", row.server, "nats-server");
  if (!existsSync(server)) return { error: `no nats-server ${row.server} in .cache/nats-server: ${FETCH_HINT}` };
  let node = process.execPath;
  if (process.versions.node.split(".")[0] !== row.node) {
    node = join(cache, "node", row.node, "node_modules", `node-linux-${arch()}`, "bin", "node");
    if (!existsSync(node)) return { error: `no Node.js ${row.node} in .cache/node: ${FETCH_HINT}` };
  }
  let clientDir;
  let client = pkg.devDependencies["@nats-io/jetstream"];
  if (row.client === "legacy") {
    client = `nats ${JSON.parse(readFileSync(join(root, "node_modules", "nats", "package.json"), "utf8")).version}`;
  } else if (row.client !== "pinned") {
    clientDir = join(cache, "nats-client", row.client);
    if (!existsSync(join(clientDir, "node_modules", "@nats-io", "jetstream"))) {
      return { error: `no client ${row.client} in .cache/nats-client: ${FETCH_HINT}` };
    }
    client = JSON.parse(readFileSync(join(clientDir, "node_modules", "@nats-io", "jetstream", "package.json"), "utf8")).version;
  }
  const serverVersion = /v?(\d+\.\d+\.\d+)/.exec(spawnSync(server, ["--version"], { encoding: "utf8" }).stdout ?? "")?.[1] ?? "?";
  const nodeVersion = spawnSync(node, ["--version"], { encoding: "utf8" }).stdout.trim().replace(/^v/, "");
  return { server, serverVersion, node, nodeVersion, clientDir, client, legacy: row.client === "legacy", exclude: row.exclude ?? [] };
}

function runVitest(r, report) {
  const env = { ...process.env, NATS_SERVER_BIN: r.server, PATH: `${dirname(r.node)}:${process.env.PATH ?? ""}`, JSIP_TEST_WORKERS: String(MAX_WORKERS) };
  delete env.JSIP_NATS_CLIENT_DIR;
  delete env.JSIP_NATS_CLIENT;
  delete env.JSIP_NATS_SERVER_VERSION;
  if (r.clientDir) env.JSIP_NATS_CLIENT_DIR = r.clientDir;
  if (r.legacy) env.JSIP_NATS_CLIENT = "legacy";
  delete env.JSIP_TEST_EXCLUDE;
  if (r.exclude.length > 0) env.JSIP_TEST_EXCLUDE = r.exclude.join(",");
  const argv = [
    join(root, "node_modules", "vitest", "vitest.mjs"),
    "run",
    ...(files.length ? files : DEFAULT_FILES),
    "--reporter=dot",
    "--reporter=json",
    `--outputFile.json=${report}`,
  ];
  return new Promise((resolve) => {
    const child = spawn(r.node, argv, { cwd: root, env, stdio: "inherit" });
    child.on("exit", (code, signal) => resolve(code ?? (signal ? 1 : 0)));
    child.on("error", () => resolve(1));
  });
}

function readReport(file) {
  try {
    const r = JSON.parse(readFileSync(file, "utf8"));
    const failedTests = r.testResults.flatMap((f) =>
      f.assertionResults.filter((a) => a.status === "failed").map((a) => `${relative(root, f.name)} > ${a.fullName}`),
    );
    const brokenFiles = r.testResults.filter((f) => f.status === "failed" && f.assertionResults.length === 0).map((f) => relative(root, f.name));
    return {
      files: r.testResults.length,
      passed: r.numPassedTests,
      failed: r.numFailedTests + (r.numRuntimeErrors ?? 0) + brokenFiles.length,
      failures: [...failedTests, ...brokenFiles.map((f) => `${f} (did not run)`)],
    };
  } catch {
    return undefined;
  }
}

mkdirSync(join(outDir, "servers"), { recursive: true });
const results = [];
const rows = manifest.rows.map((row, i) => ({ ...row, index: i + 1 })).filter((row) => !wanted || wanted.has(row.index));
for (const row of rows) {
  const r = resolveRow(row);
  const label = `nats-server ${row.server}, Node ${row.node}, client ${row.client}`;
  if (r.error) {
    console.log(`\n::: row ${row.index}/${manifest.rows.length}: ${label}: cannot run: ${r.error}`);
    results.push({ row: row.index, server: row.server, node: row.node, client: row.client, files: 0, passed: 0, failed: 1, durationS: 0, ok: false, failures: [r.error] });
    continue;
  }
  const without = r.exclude.length > 0 ? ` (without ${r.exclude.join(", ")})` : "";
  console.log(`\n::: row ${row.index}/${manifest.rows.length}: nats-server ${r.serverVersion}, Node ${r.nodeVersion}, client ${r.client}${without}`);
  const report = join(outDir, "servers", `row-${row.index}.json`);
  rmSync(report, { force: true });
  const started = performance.now();
  const code = await runVitest(r, report);
  const durationS = Math.round((performance.now() - started) / 100) / 10;
  const counts = readReport(report) ?? { files: 0, passed: 0, failed: 1, failures: ["no test report: vitest did not finish"] };
  const ok = code === 0 && counts.failed === 0;
  results.push({ row: row.index, server: r.serverVersion, node: r.nodeVersion, client: r.client, ...counts, durationS, ok });
}

const header = ["row", "nats-server", "node", "client", "files", "passed", "failed", "duration"];
const lines = results.map((x) => [String(x.row), x.server, x.node, x.client, String(x.files), String(x.passed), String(x.failed), `${x.durationS.toFixed(1)} s`]);
const widths = header.map((h, c) => Math.max(h.length, ...lines.map((l) => l[c].length)));
const fmt = (cells) => cells.map((cell, c) => (c >= 4 ? cell.padStart(widths[c]) : cell.padEnd(widths[c]))).join("  ");
const totals = {
  passed: results.reduce((n, x) => n + x.passed, 0),
  failed: results.reduce((n, x) => n + x.failed, 0),
  durationS: Math.round(results.reduce((n, x) => n + x.durationS, 0) * 10) / 10,
};
console.log("\nserver matrix");
console.log(fmt(header));
for (const l of lines) console.log(fmt(l));
console.log(`total: ${totals.passed} passed, ${totals.failed} failed, ${totals.durationS.toFixed(1)} s`);
for (const x of results.filter((y) => !y.ok)) {
  console.log(`row ${x.row} (nats-server ${x.server}, Node ${x.node}, client ${x.client}) failed:`);
  for (const f of x.failures.length ? x.failures : ["vitest exited non-zero"]) console.log(`  ${f}`);
}
writeFileSync(join(outDir, "servers.json"), `${JSON.stringify({ ...totals, rows: results }, null, 2)}\n`);
process.exit(results.every((x) => x.ok) && results.length > 0 ? 0 : 1);
