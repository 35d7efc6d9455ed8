/**
 * The CommonJS example (`examples/commonjs-worker.cjs`) against a real nats-server: it loads
 * the library with require(), writes slow batches under heartbeats, dead-letters the refused
 * row with the reason it chose, retries the outage and stops on its own or on SIGTERM. (The
 * packed build itself is loaded with require() by `npm run check:package`.)
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type NatsServer } from "../helpers/nats-server.js";

const root = join(import.meta.dirname, "..", "..");

/** Starts the example; `lines` fills as it prints, `exited` settles once its output is read. */
function start(url: string) {
  // node itself with the tsx loader (which maps the package name to the sources): a signal reaches the example.
  const child = spawn(process.execPath, ["--import", "tsx", join(root, "examples", "commonjs-worker.cjs")], {
    cwd: root,
    env: { ...process.env, NATS_URL: url },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const waiters: Array<{ pattern: RegExp; resolve: () => void }> = [];
  createInterface({ input: child.stdout }).on("line", (line) => {
    lines.push(line);
    for (const w of waiters.filter((x) => x.pattern.test(line))) w.resolve();
  });
  const exited = once(child, "close") as Promise<[number | null, NodeJS.Signals | null]>;
  const printed = (pattern: RegExp) => new Promise<void>((resolve) => (lines.some((l) => pattern.test(l)) ? resolve() : waiters.push({ pattern, resolve })));
  return { child, lines, exited, printed, stderr: () => stderr };
}

describe("examples/commonjs-worker.cjs on a real server", () => {
  let srv: NatsServer;
  beforeAll(async () => {
    srv = await startServer();
  });
  afterAll(async () => {
    await srv?.dispose();
  });

  it("writes every order, dead-letters the refused one with its reason, keeps slow batches alive and exits cleanly", async () => {
    const run = start(srv.url);
    try {
      const [code, signal] = await run.exited;
      const out = run.lines.join("\n");
      expect({ code, signal, stderr: run.stderr() }, out).toEqual({ code: 0, signal: null, stderr: "" });
      expect(run.lines).toContain("written: 1, 2, 3, 4, 6");
      expect(run.lines).toContain("dead-lettered: order 5 (PermanentSinkError), Reject-Reason: amount must be positive (errno 4025)");
      // 2.5 s writes against a 2 s AckWait: only heartbeats keep them from another delivery.
      expect(Number(/^heartbeats accepted: (\d+)$/m.exec(out)?.[1])).toBeGreaterThanOrEqual(4);
      // At most the batch that met the outage came back (three messages); none for a lost lease.
      const [, deliveries, orders, pending] = /^deliveries: (\d+) for (\d+) orders, ack pending: (\d+)$/m.exec(out) ?? [];
      expect(Number(orders)).toBe(6);
      expect(Number(deliveries)).toBeGreaterThanOrEqual(6);
      expect(Number(deliveries)).toBeLessThanOrEqual(9);
      expect(Number(pending)).toBe(0);
      expect(run.lines.at(-1)).toBe("stopped");
    } finally {
      run.child.kill("SIGKILL");
    }
  });

  it("stops gracefully on SIGTERM, cleans up and exits 0", async () => {
    const run = start(srv.url);
    try {
      await run.printed(/^started$/);
      run.child.kill("SIGTERM");
      const [code, signal] = await run.exited;
      expect({ code, signal, stderr: run.stderr() }, run.lines.join("\n")).toEqual({ code: 0, signal: null, stderr: "" });
      expect(run.lines).toContain("SIGTERM: stopping");
      expect(run.lines.some((l) => /^deliveries: \d+ for \d+ orders, ack pending: \d+$/.test(l)), run.lines.join("\n")).toBe(true);
      expect(run.lines.at(-1)).toBe("stopped");
    } finally {
      run.child.kill("SIGKILL");
    }
  });
});
