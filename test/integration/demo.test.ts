/**
 * `npm run demo` runs examples/demo.ts with tsx: here the same, against the throwaway
 * nats-server the demo starts itself.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const tsx = join(root, "node_modules", ".bin", "tsx");
const demo = join(root, "examples", "demo.ts");

/** The environment without NATS_URL, so the demo starts its own server. */
function envWithout(...names: string[]): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const n of names) delete env[n];
  return env;
}

/** The two numbers of a row of the demo's result table. */
function row(stdout: string, label: string): [number, number] {
  const m = new RegExp(`^\\s*${label}\\s+(\\d+)\\s+(\\d+)\\s*$`, "m").exec(stdout);
  if (!m) throw new Error(`no "${label}" row in the demo output:\n${stdout}`);
  return [Number(m[1]), Number(m[2])];
}

describe("npm run demo", () => {
  it("shows redeliveries and duplicate commits without heartbeats, none with them, a refused policy and the metrics, in under a minute", async () => {
    const started = performance.now();
    const { stdout } = await run(tsx, [demo], { cwd: root, env: envWithout("NATS_URL"), timeout: 90_000 });
    const seconds = (performance.now() - started) / 1000;

    expect(stdout).toContain("a throwaway server on nats://127.0.0.1:");
    expect(row(stdout, "messages")).toEqual([6, 6]);
    const [redeliveredWithout, redeliveredWith] = row(stdout, "redeliveries");
    const [duplicatesWithout, duplicatesWith] = row(stdout, "duplicate commits");
    expect(redeliveredWithout).toBeGreaterThan(0);
    expect(duplicatesWithout).toBeGreaterThan(0);
    expect(redeliveredWith).toBe(0);
    expect(duplicatesWith).toBe(0);
    const [deliveriesWithout, deliveriesWith] = row(stdout, "deliveries");
    expect(deliveriesWithout).toBe(6 + redeliveredWithout);
    expect(deliveriesWith).toBe(6);
    const [beatsWithout, beatsWith] = row(stdout, "heartbeats sent");
    expect(beatsWithout).toBe(0);
    expect(beatsWith).toBeGreaterThanOrEqual(6 * 3);
    expect(stdout).toMatch(/^\s*wall time\s+\d+\.\d s\s+\d+\.\d s\s*$/m);

    expect(stdout).toContain("refused before the first fetch: ConsumerPolicyError (policy_violation)");
    expect(stdout).toContain("interval_too_close_to_ack_wait: intervalMs 2000 must be below 1600 ms");
    expect(row(stdout, "messages_acked_total")[1]).toBe(6);
    expect(row(stdout, "in_progress_failures_total")).toEqual([0, 0]);
    expect(row(stdout, "in_progress_lease_expired_total")).toEqual([0, 0]);
    expect(seconds).toBeLessThan(60);
  }, 120_000);

  it("without nats-server and without NATS_URL it says in one line how to install it and exits non-zero", async () => {
    const env = { ...envWithout("NATS_URL"), NATS_SERVER_BIN: join(root, "test", ".tmp", "no-such-nats-server") };
    const failure = await run(tsx, [demo], { cwd: root, env, timeout: 30_000 }).then(
      () => undefined,
      (err: unknown) => err as { code?: number; stdout: string; stderr: string },
    );
    expect(failure).toBeDefined();
    expect(failure!.code).not.toBe(0);
    expect(failure!.stdout).toBe("");
    const lines = failure!.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^demo: nats-server not found: install it \(Debian: apt-get install -y nats-server\)/);
    expect(lines[0]).toContain("NATS_URL");
  });
});
