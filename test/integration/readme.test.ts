/**
 * Every ```ts block of the README is a complete program: this test runs each one with tsx
 * against a real nats-server (NATS_URL) and checks its `// prints: …` comments against what
 * it printed, so the README cannot drift from the code.
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

const blocks = [...readFileSync(join(root, "README.md"), "utf8").matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] ?? "");

describe("README examples run", () => {
  let srv: NatsServer;
  beforeAll(async () => {
    srv = await startServer();
    mkdirSync(tmp, { recursive: true });
  });
  afterAll(async () => {
    await srv?.dispose();
    rmSync(tmp, { recursive: true, force: true });
  });

  it("has examples", () => {
    expect(blocks.length).toBeGreaterThan(0);
  });

  it.each(blocks.map((code, i) => [i + 1, code] as const))("block %i runs", async (i, code) => {
    const file = join(tmp, `block-${i}.ts`);
    writeFileSync(file, code);
    const { stdout } = await run(join(root, "node_modules", ".bin", "tsx"), [file], {
      cwd: root,
      env: { ...process.env, NATS_URL: srv.url },
      timeout: 60_000,
    });
    // Every `// prints: …` comment in the block must be true of its output.
    const promised = [...code.matchAll(/\/\/ prints: (.*)$/gm)].map((m) => m[1]!.trim());
    for (const text of promised) expect(stdout).toContain(text);
  });
});
