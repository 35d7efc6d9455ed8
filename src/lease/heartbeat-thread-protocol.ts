/**
 * The heartbeat thread's shared memory: what the main thread and the worker tell each other
 * without a message, so it works while the main thread's event loop is blocked.
 *
 * Two kinds of block, each a SharedArrayBuffer:
 * - the control block, one per thread: a wake counter, the connection's state and its
 *   disconnect and error counts, and the summary the main thread's watch reads once per
 *   interval instead of every slot (slots failing, limits reached, registrations posted and
 *   scheduled, and the head: the earliest due time in the worker's schedule);
 * - a slot, one per supervised batch (a batch of N deliveries shares one slot): its state,
 *   schedule, counters, times, and a bitmap of released deliveries. The reply subjects are
 *   posted once, with the slot, at registration; nothing else about a batch is a message.
 *
 * Memory ordering: every field another thread may touch is read and written with `Atomics`,
 * which JavaScript makes sequentially consistent. The one handshake that depends on it is the
 * stop: the main thread stores STOPPED then reads SENDING; the worker stores SENDING then reads
 * STATE. Whatever the interleaving, one of them sees the other's store: either the worker skips
 * the round, or the main thread waits until the round's publishes are done. So once a stop
 * (or a release) returns, the worker publishes nothing more for that batch (or delivery).
 * The progress wake works the same way (PROGRESS / WAITING). Fields written before a slot is
 * posted are seen by the worker: postMessage orders them.
 *
 * Times are epoch milliseconds on the `performance.timeOrigin + performance.now()` scale, which
 * both threads read alike (they agree within the wall-clock step between their two origins),
 * stored as integer microseconds in a BigInt64Array: Atomics work on integer views only.
 */
import type { CheckedThreadConnection } from "./heartbeat-thread-options.js";

/** Bumped when the layout changes: threads of two layouts never share a registry entry. */
export const PROTOCOL_VERSION = 4;

/** Control block fields (Int32). */
export const CONTROL = {
  /** Bumped by the main thread to wake the worker (`Atomics.notify`). */
  WAKE: 0,
  /** 1 while the worker's connection is up. */
  CONNECTED: 1,
  /** 1 once the worker's connection came up the first time. */
  READY: 2,
  /** Disconnects of the worker's connection. */
  DISCONNECTS: 3,
  /** Errors the worker's connection reported (permissions, protocol, a failed connect). */
  ERRORS: 4,
  /** 1 once the worker's connection is closed for good. */
  CLOSED: 5,
  /** Slots whose last due round was not handed to a connected connection (they wait for a retry). */
  FAILING: 6,
  /** Bumped each time a slot reaches its `maxHeartbeats`. */
  LIMITS: 7,
  /** Slots the main thread posted for registration (bumped before each post). */
  POSTED: 8,
  /** Slots the worker scheduled, in the order posted; bumped after the head due time that includes it. */
  REGISTERED: 9,
} as const;
const CONTROL_INTS = 12;
/** After the ints: the earliest due time in the worker's schedule after its last tick (BigInt64, epoch µs). */
const CONTROL_HEAD_OFFSET = CONTROL_INTS * 4;

/** Slot fields (Int32). */
export const SLOT = {
  /** {@link SlotState}. */
  STATE: 0,
  /** 1 while the worker publishes this slot's round. */
  SENDING: 1,
  /** Deliveries in the batch. */
  COUNT: 2,
  MAX_BEATS: 3,
  /** Rounds handed to the worker's connection while it was up (counted against MAX_BEATS). */
  BEATS: 4,
  /** Rounds that could not be sent (connection down) or were not confirmed. */
  FAILURES: 5,
  /** Bumped by the main thread on each sign of progress (`requireProgress`). */
  PROGRESS: 6,
  /** PROGRESS as the worker read it at its last beat. */
  PROGRESS_SEEN: 7,
  /** 1 while a due beat waits for progress: the main thread then wakes the worker. */
  WAITING: 8,
  /** {@link SLOT_FLAGS}. */
  FLAGS: 9,
  INTERVAL_MS: 10,
  /** Deliveries released so far (bits set in the bitmap). */
  RELEASED: 11,
  /** Rounds whose every request got a reply (confirmed beats). */
  CONFIRMED: 12,
  CONFIRM_TIMEOUT_MS: 13,
  /**
   * FAILURES again, by kind, in one word the main thread reads at once: +1 for a round that
   * failed for an outage (the connection was down when it was due, or was lost while a confirmed
   * round waited for its replies), +{@link OTHER_FAILURE} for any other. Counted when it
   * happens: the main thread may read long after the connection came back. One word, so a
   * reading never holds a round without its kind.
   */
  FAILED_KINDS: 14,
} as const;

/**
 * What a failed round that was not an outage adds to FAILED_KINDS; an outage adds 1. The word
 * wraps: the difference between two readings, modulo 2^32, holds the outages in its low 16 bits
 * and the others above, exactly while fewer than 65,536 rounds of each kind fail between two
 * readings (the main thread reads about every interval; the thread fails at most a round per retry).
 */
export const OTHER_FAILURE = 0x1_0000;

/** Main thread: the rounds failed between two readings of FAILED_KINDS (`before`, `after`), into `into` (no allocation). */
export function failedSince(before: number, after: number, into: { failures: number; outages: number }): void {
  const d = (after - before) >>> 0;
  into.outages = d & (OTHER_FAILURE - 1);
  into.failures = into.outages + Math.trunc(d / OTHER_FAILURE);
}
const SLOT_INTS = 16;

/** Slot times (BigInt64, epoch microseconds). */
export const TIME = {
  /** When the next beat is due (written by the main thread at registration, then by the worker). */
  NEXT_DUE: 0,
  /** No beat at or after this time (the main thread may move it either way). */
  UNTIL: 1,
  /** The last round handed to a connected connection (or, confirmed, answered in full). */
  LAST_BEAT: 2,
} as const;
const SLOT_TIMES = 4;
const TIMES_OFFSET = SLOT_INTS * 4;
const BITS_OFFSET = TIMES_OFFSET + SLOT_TIMES * 8;

/** `active`: beating; `stopped`: by the main thread; `limit`: maxHeartbeats reached. */
export type SlotState = "active" | "stopped" | "limit";
export const STATE_ACTIVE = 1;
export const STATE_STOPPED = 2;
export const STATE_LIMIT = 3;

export const SLOT_FLAGS = { REQUIRE_PROGRESS: 1, CONFIRM: 2 } as const;

/** Stored for "never" (also for Infinity and NaN). */
const NEVER = 1n << 62n;

// Read once: the getter costs microseconds, and a thread's origin never changes.
const ORIGIN = performance.timeOrigin;

/** Epoch milliseconds on the scale both threads share. */
export function nowEpochMs(): number {
  return ORIGIN + performance.now();
}

export function toTime(ms: number): bigint {
  return Number.isFinite(ms) ? BigInt(Math.round(ms * 1000)) : NEVER;
}

export function fromTime(t: bigint): number {
  return t >= NEVER ? Number.POSITIVE_INFINITY : Number(t) / 1000;
}

export interface ControlBlock {
  readonly buffer: SharedArrayBuffer;
  readonly ints: Int32Array;
  /** [0]: the head due time (see {@link publishHeadDue}). */
  readonly head: BigInt64Array;
}

export function createControl(): ControlBlock {
  return controlBlock(new SharedArrayBuffer(CONTROL_HEAD_OFFSET + 8));
}

export function controlBlock(buffer: SharedArrayBuffer): ControlBlock {
  return { buffer, ints: new Int32Array(buffer, 0, CONTROL_INTS), head: new BigInt64Array(buffer, CONTROL_HEAD_OFFSET, 1) };
}

/**
 * Worker, after each tick: the earliest due time left in its schedule (Infinity: none). Every
 * slot whose last round went out (FAILING 0) was sent one interval before its next due time,
 * so no such slot's last beat is older than this minus its interval.
 */
export function publishHeadDue(control: ControlBlock, epochMs: number): void {
  Atomics.store(control.head, 0, toTime(epochMs));
}

/** Main thread: the worker's last published head due time (0 before its first tick). */
export function readHeadDue(control: ControlBlock): number {
  return fromTime(Atomics.load(control.head, 0));
}

/** Wakes the worker (it waits on WAKE with `Atomics.waitAsync`). */
export function wakeWorker(control: ControlBlock): void {
  Atomics.add(control.ints, CONTROL.WAKE, 1);
  Atomics.notify(control.ints, CONTROL.WAKE);
}

export interface Slot {
  readonly buffer: SharedArrayBuffer;
  readonly ints: Int32Array;
  readonly times: BigInt64Array;
  readonly bits: Int32Array;
  readonly count: number;
}

/** What a slot starts with. */
export interface SlotInit {
  readonly intervalMs: number;
  readonly maxHeartbeats: number;
  /** Epoch ms of the first beat. */
  readonly firstDueAt: number;
  /** Epoch ms; no beat at or after it (Infinity: none). */
  readonly until: number;
  readonly requireProgress: boolean;
  /** Reply timeout of confirmed beats, or undefined for plain ones. */
  readonly confirmTimeoutMs: number | undefined;
}

/** A new slot for `count` deliveries (main thread, before it is posted). */
export function createSlot(count: number, init: SlotInit): Slot {
  const words = Math.ceil(count / 32);
  const slot = slotView(new SharedArrayBuffer(BITS_OFFSET + Math.max(1, words) * 4), count);
  const { ints, times } = slot;
  Atomics.store(ints, SLOT.COUNT, count);
  Atomics.store(ints, SLOT.MAX_BEATS, init.maxHeartbeats);
  Atomics.store(ints, SLOT.INTERVAL_MS, init.intervalMs);
  Atomics.store(ints, SLOT.FLAGS, (init.requireProgress ? SLOT_FLAGS.REQUIRE_PROGRESS : 0) | (init.confirmTimeoutMs !== undefined ? SLOT_FLAGS.CONFIRM : 0));
  Atomics.store(ints, SLOT.CONFIRM_TIMEOUT_MS, init.confirmTimeoutMs ?? 0);
  Atomics.store(times, TIME.NEXT_DUE, toTime(init.firstDueAt));
  Atomics.store(times, TIME.UNTIL, toTime(init.until));
  Atomics.store(ints, SLOT.STATE, STATE_ACTIVE);
  return slot;
}

/** The views over a slot's buffer (either thread). */
export function slotView(buffer: SharedArrayBuffer, count: number): Slot {
  const words = Math.max(1, Math.ceil(count / 32));
  return {
    buffer,
    ints: new Int32Array(buffer, 0, SLOT_INTS),
    times: new BigInt64Array(buffer, TIMES_OFFSET, SLOT_TIMES),
    bits: new Int32Array(buffer, BITS_OFFSET, words),
    count,
  };
}

export function slotState(slot: Slot): SlotState {
  const s = Atomics.load(slot.ints, SLOT.STATE);
  return s === STATE_ACTIVE ? "active" : s === STATE_LIMIT ? "limit" : "stopped";
}

/** How long a stop waits, at most, for a round the worker is publishing right now. */
export const STOP_WAIT_MS = 1000;

/** Waits (blocking, bounded) until the worker is not publishing this slot's round. */
function quiesce(slot: Slot, waitMs: number): boolean {
  const deadline = performance.now() + waitMs;
  while (Atomics.load(slot.ints, SLOT.SENDING) === 1) {
    const left = deadline - performance.now();
    if (left <= 0) return false;
    // A round is a loop of synchronous publishes: microseconds to a few milliseconds.
    Atomics.wait(slot.ints, SLOT.SENDING, 1, Math.min(left, 50));
  }
  return true;
}

/**
 * Main thread: no more beats for this slot. Returns once the worker is not publishing it (so
 * nothing more leaves for it); `false` only if a round did not end within `waitMs`.
 */
export function stopSlot(slot: Slot, waitMs = STOP_WAIT_MS): boolean {
  Atomics.store(slot.ints, SLOT.STATE, STATE_STOPPED);
  return quiesce(slot, waitMs);
}

/** Main thread: delivery `index` gets no more beats. `true` when it was not released before. */
export function releaseDelivery(slot: Slot, index: number, waitMs = STOP_WAIT_MS): boolean {
  const bit = 1 << (index & 31);
  const before = Atomics.or(slot.bits, index >> 5, bit);
  const fresh = (before & bit) === 0;
  if (fresh) Atomics.add(slot.ints, SLOT.RELEASED, 1);
  quiesce(slot, waitMs);
  return fresh;
}

export function isReleased(slot: Slot, index: number): boolean {
  return (Atomics.load(slot.bits, index >> 5) & (1 << (index & 31))) !== 0;
}

/** Main thread: one sign of progress. `true` when the worker waits for it (wake it). */
export function addProgress(slot: Slot): boolean {
  Atomics.add(slot.ints, SLOT.PROGRESS, 1);
  return Atomics.load(slot.ints, SLOT.WAITING) === 1;
}

/** What the worker does with a slot now. */
export type BeatPlan =
  | { readonly kind: "beat"; readonly progress: number }
  /** Nothing before `at` (epoch ms). */
  | { readonly kind: "wait"; readonly at: number }
  /** Due, waiting for progress: the main thread wakes the worker when it comes. */
  | { readonly kind: "idle" }
  /** Never again (stopped, limit reached, every delivery released): forget the slot. */
  | { readonly kind: "drop" };

/**
 * Worker: what to do with a slot at `now` (epoch ms). A beat due within `earlyMs` is due now,
 * so beats that fall close together leave in one tick and one socket write.
 */
export function planBeat(slot: Slot, now: number, earlyMs: number): BeatPlan {
  const { ints, times } = slot;
  if (Atomics.load(ints, SLOT.STATE) !== STATE_ACTIVE) return { kind: "drop" };
  if (Atomics.load(ints, SLOT.RELEASED) >= slot.count) return { kind: "drop" };
  if (Atomics.load(ints, SLOT.BEATS) >= Atomics.load(ints, SLOT.MAX_BEATS)) {
    Atomics.compareExchange(ints, SLOT.STATE, STATE_ACTIVE, STATE_LIMIT);
    return { kind: "drop" };
  }
  const due = fromTime(Atomics.load(times, TIME.NEXT_DUE));
  if (due > now + earlyMs) return { kind: "wait", at: due };
  const interval = Atomics.load(ints, SLOT.INTERVAL_MS);
  if (now >= fromTime(Atomics.load(times, TIME.UNTIL))) {
    // Past its bound: no beat; look again later in case the main thread moves the bound.
    Atomics.store(times, TIME.NEXT_DUE, toTime(now + interval));
    return { kind: "wait", at: now + interval };
  }
  const progress = Atomics.load(ints, SLOT.PROGRESS);
  if ((Atomics.load(ints, SLOT.FLAGS) & SLOT_FLAGS.REQUIRE_PROGRESS) !== 0 && progress === Atomics.load(ints, SLOT.PROGRESS_SEEN)) {
    Atomics.store(ints, SLOT.WAITING, 1);
    // Read again after announcing the wait: progress that came meanwhile is not missed.
    const again = Atomics.load(ints, SLOT.PROGRESS);
    if (again === progress) return { kind: "idle" };
    Atomics.store(ints, SLOT.WAITING, 0);
    return { kind: "beat", progress: again };
  }
  return { kind: "beat", progress };
}

/** Worker: about to publish a round. `false`: the slot was stopped meanwhile, publish nothing. */
export function beginRound(slot: Slot): boolean {
  Atomics.store(slot.ints, SLOT.SENDING, 1);
  if (Atomics.load(slot.ints, SLOT.STATE) === STATE_ACTIVE) return true;
  endSending(slot);
  return false;
}

function endSending(slot: Slot): void {
  Atomics.store(slot.ints, SLOT.SENDING, 0);
  Atomics.notify(slot.ints, SLOT.SENDING);
}

/**
 * Worker: the round's publishes are done. `accepted` (handed to a connected connection, not
 * awaiting confirmation) sets LAST_BEAT. The beat is counted before SENDING clears, so a
 * stopped slot's count is final.
 */
export function endRound(slot: Slot, now: number, progress: number, accepted: boolean): void {
  const { ints, times } = slot;
  const beats = Atomics.add(ints, SLOT.BEATS, 1) + 1;
  Atomics.store(ints, SLOT.PROGRESS_SEEN, progress);
  Atomics.store(ints, SLOT.WAITING, 0);
  if (accepted) Atomics.store(times, TIME.LAST_BEAT, toTime(now));
  Atomics.store(times, TIME.NEXT_DUE, toTime(now + Atomics.load(ints, SLOT.INTERVAL_MS)));
  if (beats >= Atomics.load(ints, SLOT.MAX_BEATS)) Atomics.compareExchange(ints, SLOT.STATE, STATE_ACTIVE, STATE_LIMIT);
  endSending(slot);
}

/** Worker: a due round could not be sent (connection down); try again after `retryMs`. */
export function recordFailure(slot: Slot, now: number, retryMs: number): void {
  recordFailedRound(slot, true);
  Atomics.store(slot.times, TIME.NEXT_DUE, toTime(now + retryMs));
}

/** Worker: a round failed; `outage`: for the connection (down, or lost while the round waited). */
export function recordFailedRound(slot: Slot, outage: boolean): void {
  Atomics.add(slot.ints, SLOT.FAILED_KINDS, outage ? 1 : OTHER_FAILURE);
  Atomics.add(slot.ints, SLOT.FAILURES, 1);
}

/** Worker: every request of the round sent at `sentAt` got a reply. */
export function recordConfirmed(slot: Slot, sentAt: number): void {
  Atomics.add(slot.ints, SLOT.CONFIRMED, 1);
  const t = toTime(sentAt);
  // Replies of two rounds may land out of order: keep the later send time.
  for (;;) {
    const before = Atomics.load(slot.times, TIME.LAST_BEAT);
    if (before >= t || Atomics.compareExchange(slot.times, TIME.LAST_BEAT, before, t) === before) return;
  }
}

/** Worker: make a slot due now (after a reconnect, for a round that failed). */
export function dueNow(slot: Slot, now: number): void {
  Atomics.store(slot.times, TIME.NEXT_DUE, toTime(now));
}

/** Main thread: the epoch ms of the last accepted beat, or undefined before the first. */
export function lastBeatAt(slot: Slot): number | undefined {
  const t = Atomics.load(slot.times, TIME.LAST_BEAT);
  return t === 0n ? undefined : fromTime(t);
}

export function setUntil(slot: Slot, until: number): void {
  Atomics.store(slot.times, TIME.UNTIL, toTime(until));
}

export function readCount(slot: Slot, field: (typeof SLOT)[keyof typeof SLOT]): number {
  return Atomics.load(slot.ints, field);
}

/** What the worker is started with (`workerData`). */
export interface WorkerInput {
  readonly control: SharedArrayBuffer;
  readonly connection: CheckedThreadConnection;
}

/** Messages to the worker. */
export type ToWorker =
  /** A new slot and its deliveries' reply subjects, posted once. */
  | { readonly type: "register"; readonly id: number; readonly buffer: SharedArrayBuffer; readonly subjects: readonly string[] }
  /** Answer once the server processed everything published so far (PING/PONG). */
  | { readonly type: "flush"; readonly id: number }
  /** Close the connection and end. */
  | { readonly type: "close" };

/** Messages from the worker. */
export type FromWorker =
  | { readonly type: "ready" }
  /** The connection failed to open or closed for good; the worker ends. */
  | { readonly type: "failed"; readonly message: string }
  | { readonly type: "flushed"; readonly ids: readonly number[]; readonly ok: boolean; readonly why?: string }
  | { readonly type: "closed" };
