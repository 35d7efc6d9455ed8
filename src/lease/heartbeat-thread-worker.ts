/**
 * Starting the heartbeat thread's worker from wherever this module runs: the ESM build
 * (`dist/index.js` starts `dist/heartbeat-thread.js`), the CommonJS build (`dist/index.cjs`
 * starts `dist/heartbeat-thread.cjs`; tsup's shim turns `import.meta.url` into this file's URL
 * there), or the TypeScript sources (tests, tsx: the worker first registers tsx's loader, then
 * imports `heartbeat-thread-entry.ts`).
 */
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import type { WorkerInput } from "./heartbeat-thread-protocol.js";

/** How the worker is loaded from a module at `moduleUrl`. */
export type WorkerSource =
  | { readonly kind: "file"; readonly url: URL }
  | { readonly kind: "sources"; readonly entry: URL; readonly tsxFrom: string };

/** Where the worker's code is, for a module running from `moduleUrl` (this module's URL). */
export function workerSource(moduleUrl: string): WorkerSource {
  const path = new URL(moduleUrl).pathname;
  if (path.endsWith(".ts")) {
    return { kind: "sources", entry: new URL("./heartbeat-thread-entry.ts", moduleUrl), tsxFrom: fileURLToPath(moduleUrl) };
  }
  return { kind: "file", url: new URL(path.endsWith(".cjs") ? "./heartbeat-thread.cjs" : "./heartbeat-thread.js", moduleUrl) };
}

/**
 * Starts a worker running the heartbeat thread's entry. Node 20 applies `--import` loaders to a
 * worker's later imports but not to its entry file, so from the sources a small CommonJS
 * bootstrap registers tsx's loader in the worker (tsx resolved from this module), then imports
 * the entry.
 */
export function startHeartbeatWorker(workerData: WorkerInput, moduleUrl: string = import.meta.url): Worker {
  const source = workerSource(moduleUrl);
  if (source.kind === "file") return new Worker(source.url, { workerData });
  const boot =
    `const { createRequire } = require("node:module");` +
    `const { dirname, join } = require("node:path");` +
    `const { pathToFileURL } = require("node:url");` +
    // tsx's ESM API, as its package exports it for import (resolved from this module).
    `const pkg = createRequire(${JSON.stringify(source.tsxFrom)}).resolve("tsx/package.json");` +
    `const api = require(pkg).exports["./esm/api"].import;` +
    `const url = pathToFileURL(join(dirname(pkg), typeof api === "string" ? api : api.default)).href;` +
    `import(url).then((m) => { m.register(); return import(${JSON.stringify(source.entry.href)}); });`;
  return new Worker(boot, { eval: true, workerData });
}
