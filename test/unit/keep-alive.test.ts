/**
 * The library's bounded waits keep the host process alive while they last. A host whose shutdown
 * awaits withInProgress (or a held ACK) with nothing else pending must not have Node exit
 * mid-await (exit code 13, "unsettled top-level await"): the work's value, or the bound's
 * rejection, must be printed and the process must exit 0. Each case runs in a child process
 * whose own timers are all unref'd.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const CHILD = join(root, "test", "helpers", "keep-alive-child.ts");

async function child(mode: string): Promise<{ code: number; out: Record<string, unknown> }> {
  try {
    const { stdout } = await run(process.execPath, ["--import", "tsx", CHILD, mode], { cwd: root, timeout: 30_000 });
    return { code: 0, out: JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}") as Record<string, unknown> };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    throw new Error(`child "${mode}" exited with code ${String(e.code)}; stdout: ${e.stdout ?? ""}; stderr: ${(e.stderr ?? "").slice(0, 2000)}`);
  }
}

describe("bounded waits keep the host process alive", () => {
  it("withInProgress after an abort: the work's value 300 ms later, exit 0; past the bound, the rejection", async () => {
    const [bound, expiry] = await Promise.all([child("shutdown-bound"), child("shutdown-expiry")]);
    expect(bound.code).toBe(0);
    expect(bound.out).toMatchObject({ value: "written" });
    // The work's own 300 ms, not the 2 s bound.
    expect(bound.out["ms"]).toBeGreaterThanOrEqual(250);
    expect(bound.out["ms"]).toBeLessThan(1800);
    expect(expiry.code).toBe(0);
    expect(expiry.out).toMatchObject({ rejected: "shutdown" });
    expect(expiry.out["ms"]).toBeGreaterThanOrEqual(450);
    expect(expiry.out["ms"]).toBeLessThan(2500);
  });

  it("a held ACK waits for the reconnect: acked once the connection is back, exit 0", async () => {
    const held = await child("held-ack");
    expect(held.code).toBe(0);
    expect(held.out).toMatchObject({ action: "acked", settleError: "", acks: 1 });
    expect(held.out["ms"]).toBeGreaterThanOrEqual(250);
  });
});
