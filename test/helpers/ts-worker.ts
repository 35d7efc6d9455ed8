/**
 * A worker thread running a TypeScript file from the sources: Node 20 does not apply an
 * `--import tsx` loader to a worker's entry, so a CommonJS bootstrap registers tsx's ESM loader
 * in the worker first (as the library does for its heartbeat thread under the sources).
 */
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Worker } from "node:worker_threads";

const root = join(import.meta.dirname, "..", "..");

export function tsWorker(file: string, workerData: unknown): Worker {
  const boot =
    `const { createRequire } = require("node:module");` +
    `const { dirname, join } = require("node:path");` +
    `const { pathToFileURL } = require("node:url");` +
    `const pkg = createRequire(${JSON.stringify(join(root, "package.json"))}).resolve("tsx/package.json");` +
    `const api = require(pkg).exports["./esm/api"].import;` +
    `import(pathToFileURL(join(dirname(pkg), typeof api === "string" ? api : api.default)).href)` +
    `.then((m) => { m.register(); return import(${JSON.stringify(pathToFileURL(file).href)}); });`;
  return new Worker(boot, { eval: true, workerData });
}
