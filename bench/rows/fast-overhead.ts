/**
 * Item 1 — overhead on fast work: `withInProgress` (disabled, and enabled with work shorter
 * than the interval) against a bare `await work()`, for batches of 1, 100 and 1,000 fake
 * messages, on an instant write and on a 100 µs write. No server: only the library's own cost.
 *
 * On a shared machine a process is preempted every few milliseconds, which would drown
 * sub-microsecond differences; so a sample is a median of short spans. Instant write: the
 * calls of a sample run in 20 blocks (each well under a millisecond), a block's time divided by
 * its calls; the sample is the median block. 100 µs write: every call is timed on its own and
 * the sample is the median call.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { verifyInProgressPolicy, withInProgress, type DisabledInProgressPolicy, type VerifiedInProgressPolicy } from "../../src/index.js";
import type { BenchConfig } from "../config.js";
import { fakeMsgs } from "../fake-msg.js";
import { figure, goals, type Figure } from "../figure.js";
import { interleave, median, medians, nowNs, spin } from "../measure.js";

type Work = () => Promise<void>;

type Policy = VerifiedInProgressPolicy | DisabledInProgressPolicy;

const BLOCKS = 20;

/** µs per call of a bare `await work()`: the median block of `calls / BLOCKS` calls. */
async function bare(work: Work, calls: number): Promise<number> {
  const per = Math.max(1, Math.round(calls / BLOCKS));
  const blocks = new Float64Array(BLOCKS);
  for (let b = 0; b < BLOCKS; b++) {
    const t0 = nowNs();
    for (let i = 0; i < per; i++) await work();
    blocks[b] = (nowNs() - t0) / per;
  }
  return median(blocks) / 1000;
}

/** µs per call of `await withInProgress(msgs, work, policy)`: the median block, as {@link bare}. */
async function wrapped(msgs: readonly JsMsg[], work: Work, policy: Policy, calls: number): Promise<number> {
  const per = Math.max(1, Math.round(calls / BLOCKS));
  const blocks = new Float64Array(BLOCKS);
  for (let b = 0; b < BLOCKS; b++) {
    const t0 = nowNs();
    for (let i = 0; i < per; i++) await withInProgress(msgs, work, policy);
    blocks[b] = (nowNs() - t0) / per;
  }
  return median(blocks) / 1000;
}

/** µs of the median bare call, each call timed on its own. */
async function bareEach(work: Work, calls: number): Promise<number> {
  const times = new Float64Array(calls);
  for (let i = 0; i < calls; i++) {
    const t0 = nowNs();
    await work();
    times[i] = nowNs() - t0;
  }
  return median(times) / 1000;
}

/** µs of the median wrapped call, each call timed on its own. */
async function wrappedEach(msgs: readonly JsMsg[], work: Work, policy: Policy, calls: number): Promise<number> {
  const times = new Float64Array(calls);
  for (let i = 0; i < calls; i++) {
    const t0 = nowNs();
    await withInProgress(msgs, work, policy);
    times[i] = nowNs() - t0;
  }
  return median(times) / 1000;
}

export async function fastOverhead(config: BenchConfig): Promise<Figure[]> {
  const c = config.overhead;
  // Work far shorter than the interval: supervision is set up and torn down, no beat is sent.
  const enabled = verifyInProgressPolicy({ enabled: true, intervalMs: 10_000, maxHeartbeats: 12 }, { ackWaitMs: 30_000, source: "configured" });
  const disabled: DisabledInProgressPolicy = { enabled: false };
  const instantWrite: Work = async () => {};
  const slowWrite: Work = async () => spin(c.slowWriteMicros);

  // Every round runs every arm of every size and write (18 arms), so a burst of load on the
  // machine spoils one round of everything — which the median drops — not all rounds of one row.
  interface Case {
    readonly kind: string;
    readonly instant: boolean;
    readonly size: number;
  }
  const cases: Case[] = [];
  const arms: Record<string, () => Promise<number>> = {};
  for (const [kind, work, instant] of [["instant write", instantWrite, true], [`${c.slowWriteMicros} µs write`, slowWrite, false]] as const) {
    for (const size of c.batchSizes) {
      const msgs = fakeMsgs(size);
      const calls = instant ? Math.max(500, Math.round(c.instantCalls / Math.sqrt(size))) : c.slowCalls;
      const key = `${cases.length}`;
      cases.push({ kind, instant, size });
      if (instant) {
        arms[`${key}/bare`] = () => bare(work, calls);
        arms[`${key}/disabled`] = () => wrapped(msgs, work, disabled, calls);
        arms[`${key}/enabled`] = () => wrapped(msgs, work, enabled, calls);
      } else {
        arms[`${key}/bare`] = () => bareEach(work, calls);
        arms[`${key}/disabled`] = () => wrappedEach(msgs, work, disabled, calls);
        arms[`${key}/enabled`] = () => wrappedEach(msgs, work, enabled, calls);
      }
    }
  }
  const samples = await interleave(arms, c.rounds, 2);
  const m = medians(samples);

  const out: Figure[] = [];
  let letter = 0;
  cases.forEach(({ kind, instant, size }, i) => {
    for (const arm of ["disabled", "enabled"] as const) {
      const goal = instant ? goals.addedAtMost(arm === "disabled" ? 0.2 : 1, "µs") : goals.ratioAtMost(1.01);
      out.push(
        figure({
          id: `1${String.fromCharCode(97 + letter++)}`,
          item: 1,
          name: `withInProgress ${arm}, batch ${size}, ${kind}`,
          unit: "µs/batch",
          value: m[`${i}/${arm}`]!,
          baselineName: instant ? "bare await work()" : "bare await work(), median call",
          baseline: m[`${i}/bare`]!,
          goal,
          samples: { value: samples[`${i}/${arm}`]!, baseline: samples[`${i}/bare`]! },
        }),
      );
    }
  });
  return out;
}
