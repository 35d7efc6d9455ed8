import { describe, expect, it } from "vitest";
import type { JsMsg } from "@nats-io/jetstream";
import { MetricsRecorder } from "../../../src/telemetry/metrics-recorder.js";
import { runLoop } from "../../../src/consume/run-loop.js";
import { fakeMsg } from "../../helpers/fakes.js";

describe("runLoop", () => {
  it("hands each batch over with its receive times, by position in the batch", async () => {
    const batches = [[fakeMsg(), fakeMsg(), fakeMsg()], [fakeMsg()]];
    const stop = new AbortController();
    const seen: Array<Array<number | undefined>> = [];
    let foreign: number | undefined = 0;
    const before = Date.now();
    await runLoop(
      {
        fetch: async () => {
          const next = batches.shift() ?? [];
          if (batches.length === 0) stop.abort();
          return (async function* () {
            yield* next;
          })() as never;
        },
      },
      {
        metrics: MetricsRecorder.NONE,
        connection: undefined,
        shutdownTimeoutMs: 1000,
        signal: stop.signal,
        process: async (msgs: JsMsg[], receivedAt) => {
          seen.push(msgs.map((m, i) => receivedAt(m, i)));
          foreign = receivedAt(fakeMsg(), 0);
        },
      },
    );
    // The second batch arrived as the loop was stopped: it is written, not handed back.
    expect(seen.map((s) => s.length)).toEqual([3, 1]);
    for (const t of seen.flat()) expect(t).toBeGreaterThanOrEqual(before);
    expect(foreign).toBeUndefined();
  });
});
