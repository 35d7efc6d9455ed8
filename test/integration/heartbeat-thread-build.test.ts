/**
 * The heartbeat thread's worker is found from every way the library runs: the TypeScript
 * sources (this suite, through tsx), and the ESM and CommonJS builds (a bundle built the way
 * tsup.config.ts builds the package, with the worker as its own entry beside it).
 */
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { build } from "tsup";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { workerSource } from "../../src/lease/heartbeat-thread-worker.js";
import { startServer, type NatsServer } from "../helpers/nats-server.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const CHILD = join(root, "test", "helpers", "heartbeat-thread-built-child.mjs");

let srv: NatsServer;
// Inside the project, so the bundles resolve @nats-io/* from its node_modules like an install would.
mkdirSync(join(root, "test", ".tmp"), { recursive: true });
const outDir = mkdtempSync(join(root, "test", ".tmp", "build-"));

beforeAll(async () => {
  srv = await startServer();
  await build({
    entry: { index: "src/lease/heartbeat-thread.ts", "heartbeat-thread": "src/lease/heartbeat-thread-entry.ts" },
    outDir,
    format: ["esm", "cjs"],
    shims: true,
    dts: false,
    target: "node20",
    platform: "node",
    splitting: false,
    silent: true,
    config: false,
  });
});

afterAll(async () => {
  rmSync(outDir, { recursive: true, force: true });
  await srv.dispose();
});

describe("the worker file", () => {
  it("is the built sibling for each build, the TypeScript entry for the sources", () => {
    expect(workerSource("file:///app/node_modules/jetstream-inprogress/dist/index.js")).toEqual({ kind: "file", url: new URL("file:///app/node_modules/jetstream-inprogress/dist/heartbeat-thread.js") });
    expect(workerSource("file:///app/node_modules/jetstream-inprogress/dist/index.cjs")).toEqual({ kind: "file", url: new URL("file:///app/node_modules/jetstream-inprogress/dist/heartbeat-thread.cjs") });
    const sources = workerSource("file:///repo/src/lease/heartbeat-thread-worker.ts");
    expect(sources).toMatchObject({ kind: "sources", tsxFrom: "/repo/src/lease/heartbeat-thread-worker.ts" });
    expect(sources.kind === "sources" && sources.entry.href).toBe("file:///repo/src/lease/heartbeat-thread-entry.ts");
  });

  it("starts and beats from the ESM and the CommonJS build, and the process exits by itself", async () => {
    expect(readdirSync(outDir).sort()).toEqual(["heartbeat-thread.cjs", "heartbeat-thread.js", "index.cjs", "index.js"]);
    const [esm, cjs] = await Promise.all(
      ["index.js", "index.cjs"].map((file) => run(process.execPath, [CHILD, join(outDir, file), srv.url], { cwd: root, timeout: 30_000 })),
    );
    for (const out of [esm!, cjs!]) {
      expect(JSON.parse(out.stdout.trim())).toEqual({ frames: 3, beats: 3 });
    }
  });
});
