/**
 * The invariant check every reliability scenario ends with. It reads what really happened —
 * the sink's records, the ack frames the server received (the spy), consumer info, the host
 * process's unhandled rejections — and reports each violation precisely:
 *
 * 1. nothing lost: every published sequence is committed (once in the sink) or dead-lettered;
 * 2. nothing acked early: every `+ACK` for a delivery arrives after that delivery's commit
 *    (or its confirmed dead-letter copy) was recorded;
 * 3. no beat after the end: no `+WPI` for a delivery after its final frame (`+ACK`, `+TERM`,
 *    `-NAK` of the same delivery count);
 * 4. the consumer is drained: nothing pending, nothing awaiting an ack, the ack floor at the
 *    last published sequence;
 * 5. no unhandled rejection in the host process;
 * 6. (when the scenario says why redeliveries may happen) every redelivery has a cause;
 * 7. (when the consumer's MaxDeliver is known) no message ends on its last allowed delivery
 *    without a final frame (`+ACK`, `+TERM`) or a dead-letter copy, unless the scenario
 *    exhausts it on purpose;
 * 8. no retry faster than asked: after `-NAK {"delay":ns}` on delivery dc, delivery dc+1 does
 *    not arrive before the NAK's time plus the delay (less a small tolerance), and a bare
 *    `-NAK` (immediate redelivery, a hot loop for a failing sink) is a violation unless the
 *    scenario allows it.
 *
 * Duplicates (a sequence committed by more than one delivery) are allowed — at-least-once —
 * but counted and listed.
 */
import type { ConsumerInfo } from "@nats-io/jetstream";
import type { AckFrame } from "../helpers/ack-spy.js";
import type { DeadLetterLedger, IdempotentSink } from "./sink.js";

export interface Observed {
  /** The stream under test. */
  readonly stream: string;
  /** Every stream sequence published in the scenario. */
  readonly published: readonly number[];
  readonly sink: IdempotentSink;
  readonly deadLetters?: DeadLetterLedger;
  /** The spy's frames (frames of other streams are ignored). */
  readonly frames: readonly AckFrame[];
  /** Consumer info read after the scenario settled; omit only when it cannot be read. */
  readonly consumer?: ConsumerInfo;
  /** Rejections the host process did not handle during the scenario. */
  readonly unhandled: readonly unknown[];
  /**
   * Why delivery `dc` (> 1) of `seq` happened; `undefined` means no cause on file, which is a
   * violation. Omit to count redeliveries without judging them.
   */
  readonly explainRedelivery?: (seq: number, dc: number) => string | undefined;
  /** Whether `+TERM` is an expected outcome (no dead-letter target); default false. */
  readonly allowTerm?: boolean;
  /**
   * The consumer's MaxDeliver (`-1` or `0`: unlimited). When set, a sequence whose last observed
   * delivery count reached it must have got `+ACK` or `+TERM`, or a dead-letter copy.
   */
  readonly maxDeliver?: number;
  /**
   * Sequences the scenario exhausts on purpose (no frame and no copy on their last allowed
   * delivery is the expected outcome): exempt from "nothing lost" and from rule 7 — but only
   * once they really reached MaxDeliver.
   */
  readonly exhaustedOnPurpose?: (seq: number) => boolean;
  /** Whether a bare `-NAK` (immediate redelivery) is expected; default false. */
  readonly allowBareNak?: boolean;
  /**
   * How much earlier than its NAK's delay a redelivery may be seen (the spy and the server see
   * the NAK at slightly different moments); default 50 ms. Delays are taken as sent: with a
   * BackOff whose later steps are shorter than the first the server waits less than that.
   */
  readonly nakToleranceMs?: number;
}

export interface Counts {
  published: number;
  committed: number;
  commitAttempts: number;
  /** Commit attempts beyond the first, per sequence, summed. */
  duplicateCommits: number;
  deadLettered: number;
  acks: number;
  naks: number;
  terms: number;
  beats: number;
  /** Distinct deliveries with a delivery count above 1. */
  redeliveries: number;
  maxDeliveryCount: number;
  /** `+WPI` frames for a sequence after a later delivery of it was already settled (harmless, counted). */
  staleBeats: number;
  /** Sequences that reached MaxDeliver without a final frame or a copy (declared on purpose). */
  exhausted: number;
  /** Delayed NAKs whose next delivery was seen, and the shortest margin over the delay (ms; -1: none seen). */
  nakRetries: number;
  minNakMarginMs: number;
}

export interface Redelivery {
  readonly seq: number;
  readonly dc: number;
  readonly cause: string | undefined;
}

export interface InvariantReport {
  readonly violations: readonly string[];
  readonly counts: Counts;
  /** Sequences committed more than once: the attempts' delivery counts and workers. */
  readonly duplicates: ReadonlyArray<{ seq: number; attempts: string[] }>;
  readonly redeliveries: readonly Redelivery[];
}

const FINAL = new Set(["+ACK", "+TERM", "-NAK"]);
const fmt = (ms: number): string => `${ms.toFixed(1)} ms`;

export function checkInvariants(o: Observed): InvariantReport {
  const violations: string[] = [];
  const frames = o.frames.filter((f) => f.stream === o.stream);
  const sink = o.sink;
  const attempts = sink.attempts.filter((a) => a.stream === o.stream);
  const deadLetters = (o.deadLetters?.records ?? []).filter((r) => r.stream === o.stream);
  const published = [...new Set(o.published)].sort((a, b) => a - b);
  const publishedSet = new Set(published);

  // When each delivery of each sequence was first seen: by the sink (delivery, commit attempt,
  // failure) or by the spy (any frame of that delivery).
  const seenAt = new Map<string, number>();
  const lastDc = new Map<number, number>();
  const see = (seq: number, dc: number, at: number): void => {
    const k = `${seq}/${dc}`;
    const t = seenAt.get(k);
    if (t === undefined || at < t) seenAt.set(k, at);
    if (dc > (lastDc.get(seq) ?? 0)) lastDc.set(seq, dc);
  };
  for (const d of [...sink.deliveries, ...sink.attempts, ...sink.failures]) if (d.stream === o.stream) see(d.seq, d.dc, d.at);
  for (const f of frames) see(f.streamSequence, f.deliveryCount, f.at);
  const maxDeliver = o.maxDeliver !== undefined && o.maxDeliver > 0 ? o.maxDeliver : undefined;
  const reachedLast = (seq: number): boolean => maxDeliver !== undefined && (lastDc.get(seq) ?? 0) >= maxDeliver;
  const onPurpose = (seq: number): boolean => o.exhaustedOnPurpose?.(seq) === true && reachedLast(seq);

  // 1. Nothing lost.
  for (const seq of published) {
    const committed = sink.committed(o.stream, seq);
    const dead = deadLetters.find((r) => r.seq === seq);
    if (!committed && !dead && onPurpose(seq)) continue;
    if (!committed && !dead) {
      violations.push(`seq ${seq} lost: neither committed nor dead-lettered (${history(seq, sink, frames, o.stream)})`);
    } else if (committed && dead) {
      violations.push(`seq ${seq} both committed (dc ${committed.dc}) and dead-lettered (dc ${dead.dc})`);
    }
  }
  for (const a of attempts) {
    if (!publishedSet.has(a.seq)) violations.push(`seq ${a.seq} committed by ${a.worker} but never published in this scenario`);
  }

  // 2. No +ACK before the commit of the same delivery.
  for (const f of frames) {
    if (f.kind !== "+ACK") continue;
    const evidence = [
      ...attempts.filter((a) => a.seq === f.streamSequence && a.dc === f.deliveryCount).map((a) => ({ at: a.at, what: `commit by ${a.worker}` })),
      ...deadLetters.filter((r) => r.seq === f.streamSequence && r.dc === f.deliveryCount).map((r) => ({ at: r.at, what: "dead-letter copy" })),
    ].sort((a, b) => a.at - b.at);
    const first = evidence[0];
    if (!first) {
      violations.push(`seq ${f.streamSequence} dc ${f.deliveryCount}: +ACK received at ${fmt(f.at)} but that delivery was never committed or dead-lettered`);
    } else if (first.at >= f.at) {
      violations.push(
        `seq ${f.streamSequence} dc ${f.deliveryCount}: +ACK received at ${fmt(f.at)}, ${fmt(first.at - f.at)} before its ${first.what} was recorded at ${fmt(first.at)}`,
      );
    }
  }

  // 3. No +WPI after the final frame of the same delivery.
  const byDelivery = new Map<string, AckFrame[]>();
  for (const f of frames) {
    const k = `${f.streamSequence}/${f.deliveryCount}`;
    let list = byDelivery.get(k);
    if (!list) byDelivery.set(k, (list = []));
    list.push(f);
  }
  for (const list of byDelivery.values()) {
    const final = list.find((f) => FINAL.has(f.kind));
    if (!final) continue;
    const late = list.filter((f) => f.kind === "+WPI" && f.at > final.at);
    if (late.length > 0) {
      violations.push(
        `seq ${final.streamSequence} dc ${final.deliveryCount}: ${late.length} +WPI after its ${final.kind} at ${fmt(final.at)} (first at ${fmt(late[0]!.at)})`,
      );
    }
  }
  if (!o.allowTerm) {
    for (const f of frames) if (f.kind === "+TERM") violations.push(`seq ${f.streamSequence} dc ${f.deliveryCount}: unexpected +TERM`);
  }

  // 4. The consumer is drained.
  if (o.consumer) {
    const c = o.consumer;
    const last = published.at(-1) ?? 0;
    if (c.num_ack_pending !== 0) violations.push(`consumer: ${c.num_ack_pending} message(s) still awaiting an ack`);
    if (c.num_pending !== 0) violations.push(`consumer: ${c.num_pending} message(s) never delivered`);
    if (c.ack_floor.stream_seq < last) violations.push(`consumer: ack floor at stream seq ${c.ack_floor.stream_seq}, last published ${last}`);
  } else {
    violations.push("consumer info was not read: the drained-consumer check did not run");
  }

  // 5. No unhandled rejection.
  for (const e of o.unhandled) violations.push(`unhandled rejection: ${describe(e)}`);

  // 6. Redeliveries and their causes.
  const redeliveryKeys = new Map<string, { seq: number; dc: number }>();
  const noteDelivery = (seq: number, dc: number): void => {
    if (dc > 1) redeliveryKeys.set(`${seq}/${dc}`, { seq, dc });
  };
  for (const d of sink.deliveries) if (d.stream === o.stream) noteDelivery(d.seq, d.dc);
  for (const a of attempts) noteDelivery(a.seq, a.dc);
  for (const f of frames) noteDelivery(f.streamSequence, f.deliveryCount);
  const redeliveries: Redelivery[] = [...redeliveryKeys.values()]
    .sort((a, b) => a.seq - b.seq || a.dc - b.dc)
    .map(({ seq, dc }) => ({ seq, dc, cause: o.explainRedelivery?.(seq, dc) }));
  if (o.explainRedelivery) {
    for (const r of redeliveries) {
      if (r.cause === undefined) violations.push(`seq ${r.seq} delivered again (dc ${r.dc}) with no recorded cause (${history(r.seq, sink, frames, o.stream)})`);
    }
  }

  // 7. Nothing ends on its last allowed delivery without a final frame or a copy.
  let exhausted = 0;
  if (maxDeliver !== undefined) {
    for (const seq of published) {
      if (!reachedLast(seq)) continue;
      const ended = frames.some((f) => f.streamSequence === seq && (f.kind === "+ACK" || f.kind === "+TERM")) || deadLetters.some((r) => r.seq === seq);
      if (ended) continue;
      if (onPurpose(seq)) {
        exhausted += 1;
        continue;
      }
      violations.push(
        `seq ${seq} ended on its last allowed delivery (dc ${lastDc.get(seq)}, MaxDeliver ${maxDeliver}) with neither +ACK/+TERM nor a dead-letter copy (${history(seq, sink, frames, o.stream)})`,
      );
    }
  }
  if (o.exhaustedOnPurpose) {
    for (const seq of published) {
      if (o.exhaustedOnPurpose(seq) && !reachedLast(seq)) violations.push(`seq ${seq} declared exhausted on purpose but its last delivery seen is dc ${lastDc.get(seq) ?? 0} of MaxDeliver ${o.maxDeliver ?? "unknown"}`);
    }
  }

  // 8. No retry faster than the NAK asked, and no bare NAK.
  const tolerance = o.nakToleranceMs ?? 50;
  let nakRetries = 0;
  let minNakMarginMs = Number.POSITIVE_INFINITY;
  for (const f of frames) {
    if (f.kind !== "-NAK") continue;
    const delayMs = nakDelayMs(f.payload);
    if (delayMs === undefined) {
      if (!o.allowBareNak) violations.push(`seq ${f.streamSequence} dc ${f.deliveryCount}: bare -NAK at ${fmt(f.at)} (immediate redelivery: a failing sink retries as fast as it fails)`);
      continue;
    }
    const next = seenAt.get(`${f.streamSequence}/${f.deliveryCount + 1}`);
    // A delivery seen before this NAK was not caused by it (the NAK came after a redelivery).
    if (next === undefined || next <= f.at) continue;
    nakRetries += 1;
    const margin = next - (f.at + delayMs);
    minNakMarginMs = Math.min(minNakMarginMs, margin);
    if (margin < -tolerance) {
      violations.push(
        `seq ${f.streamSequence}: delivery ${f.deliveryCount + 1} seen ${fmt(next - f.at)} after the -NAK of delivery ${f.deliveryCount} at ${fmt(f.at)}, which asked for ${fmt(delayMs)}`,
      );
    }
  }

  // Duplicates and counts.
  const attemptsBySeq = new Map<number, string[]>();
  for (const a of attempts) {
    let list = attemptsBySeq.get(a.seq);
    if (!list) attemptsBySeq.set(a.seq, (list = []));
    list.push(`dc${a.dc}@${a.worker}`);
  }
  const duplicates = [...attemptsBySeq].filter(([, l]) => l.length > 1).map(([seq, l]) => ({ seq, attempts: l }));
  const settledAt = new Map<number, { dc: number; at: number }>();
  for (const f of frames) {
    if (!FINAL.has(f.kind) || f.kind === "-NAK") continue;
    const s = settledAt.get(f.streamSequence);
    if (!s || f.at < s.at) settledAt.set(f.streamSequence, { dc: f.deliveryCount, at: f.at });
  }
  const staleBeats = frames.filter((f) => {
    if (f.kind !== "+WPI") return false;
    const s = settledAt.get(f.streamSequence);
    return s !== undefined && s.dc > f.deliveryCount && f.at > s.at;
  }).length;
  const kinds = (k: string): number => frames.filter((f) => f.kind === k).length;
  const counts: Counts = {
    published: published.length,
    committed: sink.committedSequences(o.stream).length,
    commitAttempts: attempts.length,
    duplicateCommits: duplicates.reduce((n, d) => n + d.attempts.length - 1, 0),
    deadLettered: o.deadLetters ? o.deadLetters.sequences(o.stream).length : 0,
    acks: kinds("+ACK"),
    naks: kinds("-NAK"),
    terms: kinds("+TERM"),
    beats: kinds("+WPI"),
    redeliveries: redeliveries.length,
    maxDeliveryCount: Math.max(1, ...frames.map((f) => f.deliveryCount), ...attempts.map((a) => a.dc)),
    staleBeats,
    exhausted,
    nakRetries,
    minNakMarginMs: nakRetries === 0 ? -1 : Math.round(minNakMarginMs),
  };
  return { violations, counts, duplicates, redeliveries };
}

/** Throws one error listing every violation (at most 40), with the counts. */
export function assertInvariants(report: InvariantReport, scenario: string): void {
  if (report.violations.length === 0) return;
  const shown = report.violations.slice(0, 40);
  const more = report.violations.length - shown.length;
  throw new Error(
    [
      `${scenario}: ${report.violations.length} invariant violation(s)`,
      ...shown.map((v) => `  - ${v}`),
      ...(more > 0 ? [`  … and ${more} more`] : []),
      `  counts: ${formatCounts(report.counts)}`,
    ].join("\n"),
  );
}

/** The counts as one `key=value` line. */
export function formatCounts(counts: Counts | Record<string, number | string>): string {
  return Object.entries(counts)
    .map(([k, v]) => `${k}=${v}`)
    .join(" ");
}

/** Prints one summary line into the test output. */
export function printSummary(scenario: string, report: InvariantReport, extra: Record<string, number | string> = {}): void {
  console.log(`[reliability] ${scenario}: ${formatCounts({ ...report.counts, ...extra })}`);
}

/** The delay a `-NAK` frame asks for, in ms; `undefined` for a bare NAK (no delay, or 0). */
export function nakDelayMs(payload: string): number | undefined {
  const body = payload.slice("-NAK".length).trim();
  if (body === "") return undefined;
  try {
    const delay = (JSON.parse(body) as { delay?: unknown }).delay;
    return typeof delay === "number" && delay > 0 ? delay / 1e6 : undefined;
  } catch {
    return undefined;
  }
}

function history(seq: number, sink: IdempotentSink, frames: readonly AckFrame[], stream: string): string {
  const deliveries = sink.deliveries.filter((d) => d.stream === stream && d.seq === seq).map((d) => `dc${d.dc}@${d.worker}`);
  const failures = sink.failures.filter((d) => d.stream === stream && d.seq === seq).map((d) => `${d.kind}@dc${d.dc}`);
  const seen = frames.filter((f) => f.streamSequence === seq).map((f) => `${f.kind}@dc${f.deliveryCount}`);
  return `deliveries [${deliveries.join(" ")}], failures [${failures.join(" ")}], frames [${seen.join(" ")}]`;
}

function describe(e: unknown): string {
  if (e instanceof Error) return `${e.name}: ${e.message}`;
  return String(e);
}
