import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import type { JsMsg } from "@nats-io/jetstream";
import { runBatches } from "../../../src/consume/run-loop.js";
import type { PullSource } from "../../../src/consume/pull-source.js";
import { validateRunOptions } from "../../../src/consume/run-options.js";
import type { BatchResult } from "../../../src/settle/batch-result.js";
import { emptyResult } from "../../../src/settle/summarize.js";
import { MetricsRecorder } from "../../../src/telemetry/metrics-recorder.js";
import { deferred, fakeMsg } from "../../helpers/fakes.js";

/** A source that hands out prepared batches, one per pull. */
function scripted(batches: JsMsg[][], onPull?: () => void): PullSource & { pulls: number[] } {
  const pulls: number[] = [];
  return {
    pulls,
    async pull(request, take) {
      pulls.push(request.max);
      onPull?.();
      const next = batches.shift() ?? [];
      for (const m of next) take(m, Date.now());
      if (next.length === 0) await new Promise((r) => setTimeout(r, 5));
    },
    close: async () => [],
  };
}

const context = (source: PullSource, process: (msgs: JsMsg[]) => Promise<BatchResult>) => ({
  source,
  metrics: MetricsRecorder.NONE,
  connection: undefined,
  shutdownTimeoutMs: 1000,
  waitAfterFirstMs: undefined,
  maxAckPending: undefined,
  process,
});

describe("runBatches", () => {
  it("hands each batch over with its receive times, by position in the batch", async () => {
    const stop = new AbortController();
    const batches = [[fakeMsg(), fakeMsg(), fakeMsg()], [fakeMsg()]];
    const seen: Array<Array<number | undefined>> = [];
    let foreign: number | undefined = 0;
    const before = Date.now();
    const source = scripted(batches, () => {
      if (batches.length === 1) stop.abort();
    });
    await runBatches({ ...validateRunOptions({}), signal: stop.signal }, {
      ...context(source, async () => emptyResult()),
      process: async (msgs, receivedAt) => {
        seen.push(msgs.map((m, i) => receivedAt(m, i)));
        foreign = receivedAt(fakeMsg(), 0);
        return emptyResult();
      },
    });
    // The second batch arrived as the loop was stopped: it is written, not handed back.
    expect(seen.map((s) => s.length)).toEqual([3, 1]);
    for (const t of seen.flat()) expect(t).toBeGreaterThanOrEqual(before);
    expect(foreign).toBeUndefined();
  });

  it("never has more batches in flight than concurrency, and pulls while fewer are", async () => {
    const stop = new AbortController();
    const batches = Array.from({ length: 12 }, () => [fakeMsg()]);
    let inFlight = 0;
    let most = 0;
    const gates: Array<() => void> = [];
    const source = scripted(batches);
    const done = runBatches({ ...validateRunOptions({ concurrency: 3 }), signal: stop.signal }, context(source, async () => {
      inFlight += 1;
      most = Math.max(most, inFlight);
      const d = deferred();
      gates.push(() => d.resolve());
      await d.promise;
      inFlight -= 1;
      return emptyResult();
    }));
    await new Promise((r) => setTimeout(r, 50));
    expect(inFlight).toBe(3);
    expect(source.pulls).toHaveLength(3);
    gates.shift()!();
    await new Promise((r) => setTimeout(r, 20));
    expect(source.pulls).toHaveLength(4);
    stop.abort();
    for (const g of gates.splice(0)) g();
    await new Promise((r) => setTimeout(r, 5));
    for (const g of gates.splice(0)) g();
    await done;
    expect(most).toBe(3);
  });

  it("resolves only after every started batch has settled", async () => {
    const stop = new AbortController();
    const d = deferred();
    let settled = false;
    const done = runBatches({ ...validateRunOptions({ concurrency: 2 }), signal: stop.signal }, context(scripted([[fakeMsg()]]), async () => {
      await d.promise;
      settled = true;
      return emptyResult();
    }));
    await new Promise((r) => setTimeout(r, 20));
    stop.abort();
    let resolved = false;
    void done.then(() => (resolved = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(resolved).toBe(false);
    d.resolve();
    await done;
    expect(settled).toBe(true);
  });

  it("a loop restarted after each failure leaves no listener on the host's signal", async () => {
    const host = new AbortController();
    const closed = { isClosed: () => true } as never;
    const failing: PullSource = {
      pull: async () => {
        throw new Error("connection closed");
      },
      close: async () => [],
    };
    for (let i = 0; i < 12; i++) {
      await expect(runBatches({ ...validateRunOptions({}), signal: host.signal }, { ...context(failing, async () => emptyResult()), connection: closed })).rejects.toThrow("connection closed");
    }
    expect(getEventListeners(host.signal, "abort")).toHaveLength(0);
  });

  it("the shutdown bound of batches written after the abort does not outlive the loop", async () => {
    const stop = new AbortController();
    const timeouts = (): number => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
    const batches = [[fakeMsg()], [fakeMsg()], [fakeMsg()]];
    const before = timeouts();
    let written = 0;
    // Every pull after the first hands a batch over while the loop is already stopping.
    const source = scripted(batches, () => {
      if (batches.length < 3) stop.abort();
    });
    const leftover: PullSource = { ...source, close: async () => [{ m: fakeMsg(), at: Date.now() }] };
    await runBatches({ ...validateRunOptions({ concurrency: 4 }), signal: stop.signal }, {
      ...context(leftover, async () => emptyResult()),
      shutdownTimeoutMs: 60_000,
      process: async () => {
        written += 1;
        return emptyResult();
      },
    });
    expect(written).toBe(3);
    expect(timeouts()).toBeLessThanOrEqual(before);
  });
});
