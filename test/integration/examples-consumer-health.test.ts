import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { startServer } from "../helpers/nats-server.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const tsx = join(root, "node_modules", ".bin", "tsx");

describe("examples against a real nats-server", () => {
  it("consumer-health prints three samples, then removes its stream", async () => {
    await using srv = await startServer();
    const { stdout } = await run(tsx, [join(root, "examples", "consumer-health.ts")], {
      cwd: root,
      env: { ...process.env, NATS_URL: srv.url },
      timeout: 60_000,
    });
    const lines = stdout.trim().split("\n");
    expect(lines.filter((l) => l.startsWith("sample "))).toEqual([
      "sample 1: pending=5 ackPending=0 redelivered=0 delivered=0 ackFloor=0 stalled=false backlogGrowing=false",
      "sample 2: pending=2 ackPending=1 redelivered=0 delivered=3 ackFloor=2 stalled=false backlogGrowing=false",
      "sample 3: pending=2 ackPending=0 redelivered=0 delivered=3 ackFloor=3 stalled=false backlogGrowing=false",
    ]);
    expect(stdout).toContain('"consumer_pending_messages":2');
    expect(lines.at(-1)).toBe("cleaned up");

    const nc = await srv.connect();
    try {
      const jsm = await jetstreamManager(nc);
      const names: string[] = [];
      for await (const name of jsm.streams.names()) names.push(name);
      expect(names).toEqual([]);
    } finally {
      await nc.close();
    }
  });
});
