/**
 * Every ```ts block of the README and of the API guide is a complete program: this test runs
 * each one with tsx against a real nats-server (NATS_URL) and holds its `// prints: …` comments
 * to what it printed — each one a whole line of its output, in order — so the docs cannot drift
 * from the code. A block that shows heartbeats is run a second time with them switched off
 * (`enabled: false`): its printed evidence must then differ, or it proves nothing.
 */
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type NatsServer } from "../helpers/nats-server.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const tmp = join(root, "test", ".readme-tmp");

const PAGES = ["README.md", "docs/api-guide.md"];
const blocks = PAGES.flatMap((page) =>
  [...readFileSync(join(root, page), "utf8").matchAll(/```ts\n([\s\S]*?)```/g)].map((m, i) => ({ name: `${page} block ${i + 1}`, code: m[1] ?? "" })),
);

/** The `// prints: …` comments of a block, in order. */
function promised(code: string): string[] {
  return [...code.matchAll(/\/\/ prints: (.*)$/gm)].map((m) => m[1]!.trim());
}

/**
 * The promised lines `stdout` does not print, each as a whole line and after the one before:
 * an empty list when the output keeps every promise.
 */
function brokenPromises(promises: readonly string[], stdout: string): string[] {
  const lines = stdout.split("\n").map((l) => l.trim());
  const broken: string[] = [];
  let from = 0;
  for (const p of promises) {
    const at = lines.indexOf(p, from);
    if (at === -1) broken.push(p);
    else from = at + 1;
  }
  return broken;
}

/** The block with heartbeats switched off, or `undefined` when it shows none. */
function withoutHeartbeats(code: string): string | undefined {
  return /\benabled: true\b/.test(code) ? code.replace(/\benabled: true\b/g, "enabled: false") : undefined;
}

describe("the promise check", () => {
  it("wants each promise as a whole line, in order", () => {
    const out = "2 heartbeats; redelivered: 0\npartial 2 1\n2\n";
    expect(brokenPromises(["partial 2 1", "2"], out)).toEqual([]);
    // A fragment of a line is not what the comment promised.
    expect(brokenPromises(["heartbeats; redelivered: 0"], out)).toEqual(["heartbeats; redelivered: 0"]);
    expect(brokenPromises(["2", "partial 2 1"], out)).toEqual(["partial 2 1"]);
  });
});

describe("README and API guide examples run", () => {
  let srv: NatsServer;
  beforeAll(async () => {
    srv = await startServer();
    mkdirSync(tmp, { recursive: true });
  });
  afterAll(async () => {
    await srv?.dispose();
    rmSync(tmp, { recursive: true, force: true });
  });

  async function execute(name: string, code: string): Promise<string> {
    const file = join(tmp, `${name.replace(/[^\w]+/g, "-")}.ts`);
    writeFileSync(file, code);
    const { stdout } = await run(join(root, "node_modules", ".bin", "tsx"), [file], {
      cwd: root,
      env: { ...process.env, NATS_URL: srv.url },
      timeout: 60_000,
    });
    return stdout;
  }

  it("has examples on both pages, the README's quick start among them", () => {
    for (const page of PAGES) expect(blocks.filter((b) => b.name.startsWith(page)).length, page).toBeGreaterThan(0);
    expect(blocks[0]?.code).toContain("CommitThenAck.forConsumer");
    expect(promised(blocks[0]?.code ?? "").length).toBeGreaterThan(0);
  });

  it.each(blocks.map((b) => [b.name, b.code] as const))("%s runs and prints what its comments say", async (name, code) => {
    const stdout = await execute(name, code);
    expect(brokenPromises(promised(code), stdout), stdout).toEqual([]);
  });

  const heartbeatBlocks = blocks.filter((b) => withoutHeartbeats(b.code) !== undefined && promised(b.code).length > 0);

  it("some blocks show heartbeats", () => {
    expect(heartbeatBlocks.length).toBeGreaterThanOrEqual(3);
  });

  it.each(heartbeatBlocks.map((b) => [b.name, b.code] as const))("%s prints something else with heartbeats off", async (name, code) => {
    const stdout = await execute(`${name} off`, withoutHeartbeats(code)!).catch((err: { stdout?: string }) => err.stdout ?? "");
    expect(brokenPromises(promised(code), stdout), stdout).not.toEqual([]);
  });
});
