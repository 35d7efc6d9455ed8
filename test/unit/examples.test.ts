import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const tsx = join(root, "node_modules", ".bin", "tsx");

describe("examples", () => {
  it("check-policy prints the refusal, the grouped violations and the verified policy", async () => {
    const { stdout } = await run(tsx, [join(root, "examples", "check-policy.ts")], { cwd: root, timeout: 60_000 });
    expect(stdout).toContain("refused interval_too_close_to_ack_wait: intervalMs 24000 must be below 24000 ms");
    expect(stdout).toContain("unknown_field, invalid_max_heartbeats");
    expect(stdout).toContain("verified: every 10000 ms, at most 30 beats");
  });
});
