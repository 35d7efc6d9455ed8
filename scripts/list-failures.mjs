#!/usr/bin/env node
// Names the tests that failed in the vitest JSON reports under .ci/out (npm test and each row of
// the server matrix), so the end of a CI log says which ones, not only how many.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";

const out = join(import.meta.dirname, "..", ".ci", "out");
const reports = [join(out, "test.json")];
const rows = join(out, "servers");
if (existsSync(rows)) for (const f of readdirSync(rows).sort()) if (f.endsWith(".json")) reports.push(join(rows, f));
const root = join(import.meta.dirname, "..");
const lines = [];
for (const file of reports) {
  if (!existsSync(file)) continue;
  let report;
  try {
    report = JSON.parse(readFileSync(file, "utf8"));
  } catch {
    lines.push(`${relative(out, file)}: unreadable report`);
    continue;
  }
  for (const suite of report.testResults ?? []) {
    const failed = (suite.assertionResults ?? []).filter((a) => a.status === "failed");
    if (failed.length === 0 && suite.status === "failed") lines.push(`${relative(out, file)}: ${relative(root, suite.name)}: ${String(suite.message ?? "failed").split("\n")[0].slice(0, 200)}`);
    for (const a of failed) {
      const why = String(a.failureMessages?.[0] ?? "").split("\n")[0].slice(0, 200);
      lines.push(`${relative(out, file)}: ${relative(root, suite.name)} > ${a.fullName ?? a.title}${why ? ` — ${why}` : ""}`);
    }
  }
}
const MAX = 30;
for (const l of lines.slice(0, MAX)) console.log(`::: failed test: ${l}`);
if (lines.length > MAX) console.log(`::: … and ${lines.length - MAX} more failed tests`);
