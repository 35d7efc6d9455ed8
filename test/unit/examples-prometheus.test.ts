import { spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");

/** Starts the example on a free port; resolves once it prints the address it listens on. `exited` settles after its output is read. */
async function start(env: Record<string, string>) {
  // node itself with the tsx loader: a signal then reaches the example, not a wrapper process.
  const child = spawn(process.execPath, ["--import", "tsx", join(root, "examples", "prometheus.ts")], {
    cwd: root,
    env: { ...process.env, PORT: "0", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const output = { stdout: [] as string[], stderr: "" };
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (output.stderr += chunk));
  const exited = once(child, "close") as Promise<[number | null, NodeJS.Signals | null]>;
  const lines = createInterface({ input: child.stdout });
  // The example prints its address once it listens: no polling, no sleep.
  const url = await new Promise<string | undefined>((resolve) => {
    lines.on("line", (line) => {
      output.stdout.push(line);
      const m = /^serving metrics on (http:\/\/localhost:\d+\/metrics)$/.exec(line);
      if (m?.[1]) resolve(m[1].replace("localhost", "127.0.0.1"));
    });
    lines.on("close", () => resolve(undefined));
  });
  const stop = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
  };
  return { child, url, output, exited, stop };
}

describe("examples/prometheus.ts", () => {
  it("serves the prefixed metrics at /metrics, then exits cleanly (EXAMPLE_ONCE=1)", async () => {
    const { url, output, exited, stop } = await start({ EXAMPLE_ONCE: "1" });
    try {
      expect(url, `stdout: ${output.stdout.join("\n")}\nstderr: ${output.stderr}`).toBeDefined();

      const res = await fetch(url ?? "");
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
      const body = await res.text();
      expect(body).toContain("# TYPE myapp_in_progress_attempts_total counter\nmyapp_in_progress_attempts_total 3\n");
      expect(body).toMatch(/^myapp_messages_acked_total 100$/m);
      expect(body).toMatch(/^myapp_current_in_progress_batches_active 0$/m);
      expect(body).toMatch(/^myapp_batch_write_seconds_bucket\{le="15"\} 1$/m);
      expect(body).toMatch(/^myapp_in_progress_heartbeat_seconds_count 1$/m);

      const [code, signal] = await exited;
      expect({ code, signal, stderr: output.stderr }).toEqual({ code: 0, signal: null, stderr: "" });
      expect(output.stdout.at(-1)).toBe("stopped");
    } finally {
      stop();
    }
  });

  it.each(["SIGTERM", "SIGINT"] as const)("stops cleanly on %s", async (sig) => {
    const { child, url, output, exited, stop } = await start({});
    try {
      expect(url, `stderr: ${output.stderr}`).toBeDefined();
      const res = await fetch(url ?? "");
      expect(await res.text()).toContain("myapp_messages_acked_total 100");
      const notFound = await fetch((url ?? "").replace("/metrics", "/other"));
      expect(notFound.status).toBe(404);
      await notFound.arrayBuffer();
      child.kill(sig);
      const [code, signal] = await exited;
      expect({ code, signal, stderr: output.stderr }).toEqual({ code: 0, signal: null, stderr: "" });
      expect(output.stdout.at(-1)).toBe("stopped");
    } finally {
      stop();
    }
  });
});
