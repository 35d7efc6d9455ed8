/**
 * How the main thread names the heartbeat thread's failed rounds: by what the thread saw when
 * each round failed (its connection down, or lost while replies were awaited: an outage; replies
 * that did not come while it stayed up: a timeout), whatever the connection is when the books
 * are read.
 */
import diagnostics from "node:diagnostics_channel";
import { afterEach, describe, expect, it } from "vitest";
import { DiagnosticsChannels, InMemoryMetrics, MetricNames, type HeartbeatFailedEvent } from "../../../src/index.js";
import { reportThreadReading } from "../../../src/lease/beat-reports.js";
import { createSlot, failedSince, readCount, recordFailedRound, recordFailure, SLOT } from "../../../src/lease/heartbeat-thread-protocol.js";
import type { ThreadReading } from "../../../src/lease/thread-beats.js";
import { MetricsRecorder } from "../../../src/telemetry/metrics-recorder.js";
import { TraceRecorder } from "../../../src/telemetry/tracing.js";

const failed: HeartbeatFailedEvent[] = [];
const listen = (e: unknown): void => void failed.push(e as HeartbeatFailedEvent);
diagnostics.subscribe(DiagnosticsChannels.HEARTBEAT_FAILED, listen);
afterEach(() => void failed.splice(0));

const reading = (failures: number, outages: number): ThreadReading => ({ successes: 0, failures, outages, beats: 4, lastBeatAgoMs: undefined, limit: false });

describe("the thread's failed rounds", () => {
  it("the worker counts an outage with its failure; a round not answered is a failure alone", () => {
    const slot = createSlot(1, { intervalMs: 100, maxHeartbeats: 3, firstDueAt: 0, until: Number.POSITIVE_INFINITY, requireProgress: false, confirmTimeoutMs: 50 });
    recordFailure(slot, 0, 100);
    recordFailedRound(slot, true);
    recordFailedRound(slot, false);
    const into = { failures: 0, outages: 0 };
    failedSince(0, readCount(slot, SLOT.FAILED_KINDS), into);
    expect([readCount(slot, SLOT.FAILURES), into.failures, into.outages]).toEqual([3, 3, 2]);
  });

  it("a reading holds each failed round with its kind, across the word's wrap", () => {
    const slot = createSlot(1, { intervalMs: 100, maxHeartbeats: 3, firstDueAt: 0, until: Number.POSITIVE_INFINITY, requireProgress: false, confirmTimeoutMs: 50 });
    // Near the top of the word: the next rounds carry it past 2^31 and back through 0.
    Atomics.store(slot.ints, SLOT.FAILED_KINDS, 0x7fff_fffe);
    const into = { failures: 0, outages: 0 };
    let seen = readCount(slot, SLOT.FAILED_KINDS);
    const readings: Array<[number, number]> = [];
    const read = (): void => {
      const now = readCount(slot, SLOT.FAILED_KINDS);
      failedSince(seen, now, into);
      seen = now;
      readings.push([into.failures, into.outages]);
    };
    // A reading right after an outage, then one after a timeout: never the one for the other.
    recordFailedRound(slot, true);
    read();
    recordFailedRound(slot, false);
    read();
    for (let i = 0; i < 70_000; i++) recordFailedRound(slot, i % 2 === 0);
    read();
    Atomics.store(slot.ints, SLOT.FAILED_KINDS, -1);
    seen = -1;
    recordFailedRound(slot, true);
    recordFailedRound(slot, false);
    read();
    expect(readings).toEqual([
      [1, 1],
      [1, 0],
      [70_000, 35_000],
      [2, 1],
    ]);
  });

  it.each([
    { failures: 3, outages: 3, names: ["DisconnectedError"] },
    { failures: 2, outages: 0, names: ["TimeoutError"] },
    { failures: 3, outages: 1, names: ["DisconnectedError", "TimeoutError"] },
  ])("a reading of $failures failed rounds, $outages in an outage, is named $names", ({ failures, outages, names }) => {
    const sink = new InMemoryMetrics();
    reportThreadReading(reading(failures, outages), 4, false, { metrics: MetricsRecorder.for(sink), trace: TraceRecorder.NONE, batchId: 7, size: 2 });
    expect(failed.map((e) => e.errorName)).toEqual(names);
    expect(failed.every((e) => e.batchId === 7 && e.final === false)).toBe(true);
    // Counted once, whatever the names.
    expect(sink.snapshot().counters[MetricNames.IN_PROGRESS_FAILURES_TOTAL]).toBe(failures);
  });
});
