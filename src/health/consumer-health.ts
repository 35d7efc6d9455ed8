/**
 * Consumer health from consumer info: pure derivation of one sample from the previous ones.
 * No I/O, no timers, no clock (the caller passes the time), nothing from NATS at run time.
 *
 * ## Counting redeliveries between two samples A and B
 *
 * The server keeps two cumulative pointers in `delivered`:
 *
 * - `consumer_seq` grows by one on every delivery, first deliveries and redeliveries alike;
 * - `stream_seq` is the highest stream sequence handed out for the first time. A redelivery
 *   does not move it; a purge, a deleted message or a subject outside the consumer's filter
 *   moves it past sequences that were never delivered.
 *
 * So between A and B: `Δconsumer_seq = first + redeliveries` and `first <= Δstream_seq`,
 * which gives a lower bound that a slow poll cannot miss:
 *
 * ```
 * fromSequences = max(0, Δconsumer_seq − Δstream_seq)
 * fromGauge     = max(0, num_redelivered(B) − num_redelivered(A))
 * redeliveries  = max(fromSequences, fromGauge)
 * ```
 *
 * `num_redelivered` is the number of messages that were redelivered and are not acked yet:
 * a message leaves it on ack, so it shows only for a moment. A net rise of that set is still a
 * lower bound (each new member was redelivered after A). Both terms are lower bounds, so their
 * maximum is one too: a first delivery is never counted as a redelivery.
 *
 * Assumptions and where the count is low (never high):
 *
 * - Filtered consumers, purges, deleted or expired messages ahead of the consumer, and
 *   interest or work-queue streams whose messages vanish before delivery all make
 *   `Δstream_seq` larger than the first deliveries, so redeliveries in the same interval can
 *   be hidden by the gap (the gauge term may still catch them).
 * - The drop in `num_pending` is not used as a bound: publishes between two samples raise it
 *   and a purge lowers it without a delivery, so it would turn first deliveries into phantom
 *   redeliveries.
 * - Both pointers only move forward for one consumer. A pointer that moved back, or a
 *   `created` time that changed by more than a second (a server restart may shift it by a
 *   fraction of a millisecond), means the consumer was recreated or reset: that sample
 *   starts a new baseline and counts nothing. A reset that moves back and forward again
 *   within one interval cannot be seen.
 * - The first sample of a watch (and of every new baseline) counts nothing: redeliveries
 *   before it are history, not news.
 *
 * ## Backlog growing
 *
 * Over the last `windowSamples` samples (`n >= 3`, so `n − 1` steps), the pending count never
 * falls from one sample to the next, it rises in more than half of the steps, and the total
 * rise is at least `backlogMinRise`. A burst shows as one rising step, then a flat or falling
 * line, so it is not a growing backlog; a rise that goes on is.
 *
 * ## Stalled
 *
 * A flat ack floor with messages in flight is not enough: a healthy slow write under
 * InProgress heartbeats, a delayed NAK waiting for its retry and a paused consumer hold the
 * floor just as still as a stopped worker. The floor is called stalled only on evidence that
 * a delivery was given up (the rule and its limits are in `stall-rule.ts`):
 *
 * - it has been flat for longer than the longest lease the host declared (`maxLeaseMs`, or
 *   derived from an InProgress policy), never less than AckWait; or
 * - a redelivery was counted during the flat stretch (from the sequences or from
 *   `num_redelivered`, as above), and a whole AckWait (or the declared lease, if longer) after
 *   the sample that counted it the floor is still flat and a redelivered message is still
 *   unacknowledged (`num_redelivered > 0`).
 *
 * The flat stretch starts at the first sample that saw the current floor with messages in
 * flight and the consumer not paused, so it is measured conservatively (at most one poll
 * interval short) and never starts while the consumer was idle or paused. A redelivery
 * counted by the sample that starts a stretch is not attributed to it (it may have come
 * before the floor moved).
 *
 * ## Paused (nats-server 2.11 and later)
 *
 * A paused consumer delivers nothing (acks and `+WPI` are still processed), so its floor and
 * its pending count say nothing about the workers. Consumer info then carries `paused: true`
 * and `pause_remaining` (nanoseconds), and its config `pause_until` (RFC 3339). While paused,
 * a sample is never `stalled` nor `backlogGrowing`, and the flat stretch and the backlog window
 * start again with the first sample after the pause. Older servers send none of these fields:
 * their consumers are never paused.
 */
import { consumerTimingFromConfig, nanosToMillis } from "../policy/consumer-timing.js";
import { effectiveLease, stallEvidence, type StallEvidence } from "./stall-rule.js";

/**
 * One observation of a consumer's health, derived from one consumer-info response and the
 * samples before it. Counts are messages; times are epoch milliseconds or milliseconds.
 *
 * @example
 * ```ts
 * const watch = watchConsumer(jsm, "ORDERS", "writer", {
 *   intervalMs: 10_000,
 *   maxLeaseMs: 120_000,
 *   onSample: (s: ConsumerHealthSample) => {
 *     if (s.paused) return; // nats-server 2.11+: paused until s.pausedUntil
 *     if (s.stalled) console.warn(`ack floor flat for ${s.ackFloorFlatMs} ms with ${s.ackPending} in flight (${s.stallEvidence})`);
 *   },
 * });
 * ```
 */
export interface ConsumerHealthSample {
  /** The stream the consumer belongs to. */
  readonly stream: string;
  /** The consumer's name. */
  readonly consumer: string;
  /** When the consumer info arrived (epoch milliseconds, `Date.now()`). */
  readonly at: number;
  /** `num_pending`: messages the consumer has not delivered yet — the lag. */
  readonly pending: number;
  /** `num_ack_pending`: messages delivered and not yet acknowledged — in flight. */
  readonly ackPending: number;
  /** `num_redelivered`: messages redelivered and not yet acknowledged (shows only for a moment). */
  readonly redelivered: number;
  /** `num_waiting`: pull requests waiting for messages (0 when absent, for push consumers). */
  readonly waiting: number;
  /** `delivered.consumer_seq`: deliveries so far, redeliveries included. */
  readonly delivered: number;
  /** `delivered.stream_seq`: the highest stream sequence delivered for the first time. */
  readonly deliveredStreamSeq: number;
  /** `ack_floor.consumer_seq`: every delivery up to here is settled. */
  readonly ackFloor: number;
  /** `ack_floor.stream_seq`: every stream sequence up to here is acknowledged. */
  readonly ackFloorStreamSeq: number;
  /** The consumer's AckWait in milliseconds, read from the same consumer info; `undefined` when absent or invalid. */
  readonly ackWaitMs: number | undefined;
  /**
   * Redeliveries since the previous sample, from the delivered sequences and from
   * `num_redelivered` (the larger of two lower bounds; see the module notes). `0` on a
   * baseline sample.
   */
  readonly redeliveriesSinceLastSample: number;
  /**
   * How long the ack floor has been flat while messages were in flight and the consumer was
   * not paused; `0` when nothing is in flight or while paused.
   */
  readonly ackFloorFlatMs: number;
  /**
   * Messages are in flight, the ack floor is flat, and there is evidence that a worker
   * stopped: the floor has been flat for longer than {@link ConsumerHealthSample.leaseMs},
   * or a message was redelivered during the flat stretch and, a whole AckWait (or the lease,
   * if longer) after it, the floor is still flat and a redelivered message still unacked
   * (`num_redelivered > 0`). A healthy heartbeated write, a delayed
   * NAK and a paused consumer are not stalls. Always `false` while paused.
   */
  readonly stalled: boolean;
  /** Which evidence made the sample stalled; `undefined` when it is not. */
  readonly stallEvidence: StallEvidence | undefined;
  /**
   * The longest lease the watch allows one delivery before a flat floor counts as stalled:
   * the declared `maxLeaseMs` or the lease of the `inProgress` policy (the longer of the two),
   * never below AckWait. `undefined` when the host declared none (then only a redelivery
   * counts as evidence).
   */
  readonly leaseMs: number | undefined;
  /** The pending count kept rising across the window (see the module notes) — a backlog, not a burst. Always `false` while paused. */
  readonly backlogGrowing: boolean;
  /**
   * The consumer is paused (nats-server 2.11 and later: consumer info `paused`): it delivers
   * nothing until the pause ends. Always `false` on older servers.
   */
  readonly paused: boolean;
  /**
   * When the pause ends (epoch milliseconds), while paused and when known: the arrival time
   * plus `pause_remaining`, else the config's `pause_until`. `undefined` when not paused.
   */
  readonly pausedUntil: number | undefined;
  /** This sample starts a new baseline (first sample, or the consumer was recreated or reset): nothing is compared with earlier samples. */
  readonly baseline: boolean;
}

/**
 * The numbers of one consumer-info response, checked.
 *
 * @internal
 */
export interface ConsumerInfoFields {
  readonly pending: number;
  readonly ackPending: number;
  readonly redelivered: number;
  readonly waiting: number;
  readonly delivered: number;
  readonly deliveredStreamSeq: number;
  readonly ackFloor: number;
  readonly ackFloorStreamSeq: number;
  readonly ackWaitMs: number | undefined;
  /** The consumer's creation time (epoch ms) as the server reports it, to notice a recreated consumer. */
  readonly createdMs: number | undefined;
  /** `paused: true` in the info (nats-server 2.11+). */
  readonly paused: boolean;
  /** `pause_remaining` in milliseconds, when paused and present. */
  readonly pauseRemainingMs: number | undefined;
  /** The config's `pause_until` (epoch ms), when paused and present. */
  readonly pauseUntilMs: number | undefined;
}

/**
 * Reads the fields the health checks need from an untrusted consumer-info response.
 *
 * @throws TypeError naming the field when a required count or sequence is missing or not a
 *   non-negative integer (the poll then counts as failed).
 * @internal
 */
export function readConsumerInfo(info: unknown): ConsumerInfoFields {
  const root = record(info, "consumer info");
  const delivered = record(root["delivered"], "consumer info delivered");
  const floor = record(root["ack_floor"], "consumer info ack_floor");
  const ackWaitMs = consumerTimingFromConfig(info).ackWaitMs;
  const created = typeof root["created"] === "string" ? Date.parse(root["created"]) : Number.NaN;
  // Optional fields of newer servers: anything malformed is read as absent, never thrown.
  const paused = root["paused"] === true;
  const remaining = paused ? nanosToMillis(root["pause_remaining"]) : Number.NaN;
  const config = root["config"];
  const until =
    paused && config !== null && typeof config === "object" && typeof (config as Record<string, unknown>)["pause_until"] === "string"
      ? Date.parse((config as Record<string, string>)["pause_until"] as string)
      : Number.NaN;
  return {
    pending: count(root["num_pending"], "num_pending"),
    ackPending: count(root["num_ack_pending"], "num_ack_pending"),
    redelivered: count(root["num_redelivered"], "num_redelivered"),
    waiting: root["num_waiting"] === undefined ? 0 : count(root["num_waiting"], "num_waiting"),
    delivered: count(delivered["consumer_seq"], "delivered.consumer_seq"),
    deliveredStreamSeq: count(delivered["stream_seq"], "delivered.stream_seq"),
    ackFloor: count(floor["consumer_seq"], "ack_floor.consumer_seq"),
    ackFloorStreamSeq: count(floor["stream_seq"], "ack_floor.stream_seq"),
    ackWaitMs: ackWaitMs !== undefined && Number.isFinite(ackWaitMs) && ackWaitMs > 0 ? ackWaitMs : undefined,
    createdMs: Number.isFinite(created) ? created : undefined,
    paused,
    pauseRemainingMs: Number.isFinite(remaining) && remaining >= 0 ? remaining : undefined,
    pauseUntilMs: Number.isFinite(until) ? until : undefined,
  };
}

/**
 * The cumulative counters the redelivery estimate compares.
 *
 * @internal
 */
export interface DeliveryCounters {
  /** `delivered.consumer_seq`. */
  readonly delivered: number;
  /** `delivered.stream_seq`. */
  readonly deliveredStreamSeq: number;
  /** `num_redelivered`. */
  readonly redelivered: number;
}

/**
 * Redeliveries between two samples of the same consumer: the larger of
 * `Δconsumer_seq − Δstream_seq` and the rise of `num_redelivered`, never below 0. Returns 0
 * when a delivered pointer moved back (a recreated or reset consumer; see
 * {@link isDiscontinuity}).
 *
 * @internal
 */
export function estimateRedeliveries(prev: DeliveryCounters, cur: DeliveryCounters): number {
  const dConsumer = cur.delivered - prev.delivered;
  const dStream = cur.deliveredStreamSeq - prev.deliveredStreamSeq;
  if (dConsumer < 0 || dStream < 0) return 0;
  const fromSequences = Math.max(0, dConsumer - dStream);
  const fromGauge = Math.max(0, cur.redelivered - prev.redelivered);
  return Math.max(fromSequences, fromGauge);
}

/**
 * A recreated consumer has a new creation time; a restarted server may report the same
 * consumer's creation time shifted by a fraction of a millisecond.
 */
const CREATED_TOLERANCE_MS = 1000;

/**
 * Whether `cur` cannot continue `prev`: a delivered pointer moved back, or the consumer's
 * creation time changed by more than a second.
 *
 * @internal
 */
export function isDiscontinuity(prev: ConsumerInfoFields, cur: ConsumerInfoFields): boolean {
  if (cur.delivered < prev.delivered || cur.deliveredStreamSeq < prev.deliveredStreamSeq) return true;
  if (prev.createdMs === undefined || cur.createdMs === undefined) return false;
  return Math.abs(cur.createdMs - prev.createdMs) > CREATED_TOLERANCE_MS;
}

/**
 * Whether a window of pending counts (oldest first) shows a growing backlog: at least three
 * samples, no step down, a rise in more than half of the steps, and a total rise of at least
 * `minRise`.
 *
 * @internal
 */
export function isBacklogGrowing(pendings: readonly number[], minRise: number): boolean {
  if (pendings.length < 3) return false;
  let rising = 0;
  for (let i = 1; i < pendings.length; i++) {
    const step = (pendings[i] as number) - (pendings[i - 1] as number);
    if (step < 0) return false;
    if (step > 0) rising += 1;
  }
  const steps = pendings.length - 1;
  const total = (pendings[pendings.length - 1] as number) - (pendings[0] as number);
  return rising * 2 > steps && total >= minRise;
}

/**
 * Settings of a {@link ConsumerHealthTracker}.
 *
 * @internal
 */
export interface TrackerSettings {
  readonly stream: string;
  readonly consumer: string;
  /** Samples in the backlog window (>= 3). */
  readonly windowSamples: number;
  /** Smallest total rise across the window that counts as growth (>= 1). */
  readonly backlogMinRise: number;
  /**
   * The longest lease the host declared (ms; `0` for "one AckWait"), or `undefined` for none.
   * See `stall-rule.ts`.
   */
  readonly declaredLeaseMs?: number | undefined;
}

/**
 * Turns consumer-info responses into {@link ConsumerHealthSample}s, remembering what the
 * derived signals need: the previous counters, the pending window and when the ack floor
 * was last seen to move.
 *
 * @internal
 */
export class ConsumerHealthTracker {
  readonly #settings: TrackerSettings;
  #prev: ConsumerInfoFields | undefined;
  #pendings: number[] = [];
  #flatSince: number | undefined;
  #redeliveredAt: number | undefined;

  constructor(settings: TrackerSettings) {
    this.#settings = settings;
  }

  /** Derives the sample for `info`, received at `at` (epoch ms). */
  update(info: ConsumerInfoFields, at: number): ConsumerHealthSample {
    const prev = this.#prev;
    const baseline = prev === undefined || isDiscontinuity(prev, info);
    if (baseline || info.paused) {
      // A pause holds the floor and lets the backlog rise by design: judge neither, and start
      // both again after it.
      this.#pendings = [];
      this.#flatSince = undefined;
      this.#redeliveredAt = undefined;
    }
    const redeliveries = baseline || prev === undefined ? 0 : estimateRedeliveries(prev, info);

    let backlogGrowing = false;
    if (!info.paused) {
      this.#pendings.push(info.pending);
      if (this.#pendings.length > this.#settings.windowSamples) this.#pendings.shift();
      backlogGrowing =
        this.#pendings.length === this.#settings.windowSamples &&
        isBacklogGrowing(this.#pendings, this.#settings.backlogMinRise);
    }

    let ackFloorFlatMs = 0;
    if (info.ackPending === 0 || info.paused) {
      // Nothing in flight: a flat floor is an idle consumer, not a stuck one.
      this.#flatSince = undefined;
      this.#redeliveredAt = undefined;
    } else {
      const moved =
        prev === undefined || prev.ackFloor !== info.ackFloor || prev.ackFloorStreamSeq !== info.ackFloorStreamSeq;
      if (this.#flatSince === undefined || moved) {
        this.#flatSince = at;
        this.#redeliveredAt = undefined;
      } else if (redeliveries > 0 && this.#redeliveredAt === undefined) {
        this.#redeliveredAt = at;
      }
      ackFloorFlatMs = Math.max(0, at - this.#flatSince);
    }
    const leaseMs = effectiveLease(this.#settings.declaredLeaseMs, info.ackWaitMs);
    const evidence = info.paused
      ? undefined
      : stallEvidence({
          ackPending: info.ackPending,
          ackWaitMs: info.ackWaitMs,
          flatMs: ackFloorFlatMs,
          sinceRedeliveryMs: this.#redeliveredAt === undefined ? undefined : Math.max(0, at - this.#redeliveredAt),
          redeliveredInFlight: info.redelivered,
          leaseMs,
        });

    this.#prev = info;
    return Object.freeze({
      stream: this.#settings.stream,
      consumer: this.#settings.consumer,
      at,
      pending: info.pending,
      ackPending: info.ackPending,
      redelivered: info.redelivered,
      waiting: info.waiting,
      delivered: info.delivered,
      deliveredStreamSeq: info.deliveredStreamSeq,
      ackFloor: info.ackFloor,
      ackFloorStreamSeq: info.ackFloorStreamSeq,
      ackWaitMs: info.ackWaitMs,
      redeliveriesSinceLastSample: redeliveries,
      ackFloorFlatMs,
      stalled: evidence !== undefined,
      stallEvidence: evidence,
      leaseMs,
      backlogGrowing,
      paused: info.paused,
      pausedUntil: pausedUntil(info, at),
      baseline,
    });
  }
}

/** When a pause ends, in the local clock: `at + pause_remaining` (no clock skew), else `pause_until`. */
function pausedUntil(info: ConsumerInfoFields, at: number): number | undefined {
  if (!info.paused) return undefined;
  if (info.pauseRemainingMs !== undefined) return Math.round(at + info.pauseRemainingMs);
  return info.pauseUntilMs;
}

function record(value: unknown, what: string): Record<string, unknown> {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new TypeError(`${what} is not an object`);
  }
  return value as Record<string, unknown>;
}

function count(value: unknown, field: string): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) {
    throw new TypeError(`consumer info ${field} must be a non-negative integer, got ${String(value)}`);
  }
  return value;
}
