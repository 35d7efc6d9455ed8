/**
 * One look per interval for every batch the heartbeat thread beats, instead of one per batch.
 *
 * A batch on the thread needs the main thread for what the thread cannot see or do: a delivery
 * the work settled itself, the host's connection closing, a round that failed, the limit, and
 * a lease that ran out. While the thread's summary in shared memory shows every slot's last
 * round went out (`FAILING` 0) and no new limit, each slot's last beat is at most one interval
 * older than the earliest due time the thread published after its last tick, so no member's
 * lease can end before that time plus the smallest (window − interval) among them: the
 * horizon. Before it, a look reads the summary, the host connections and the members'
 * deliveries (one field each); at it, or when the summary shows anything else, every member
 * takes its own look, as without the watch. A member joins at its start, only while nothing
 * reads its books per beat (metrics, a trace, `heartbeatSent` listeners); until the thread has
 * scheduled its slot and passed its first due time, the member's own first deadline bounds
 * the horizon instead.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { isSettled } from "../nats/message-access.js";
import { CONTROL, nowEpochMs, readHeadDue, type ControlBlock } from "./heartbeat-thread-protocol.js";
import { wantsLeaseEvent } from "./lease-events.js";
import { joinWindowMs, type Scheduler, type ScheduledTask, type SchedulerEntry } from "./scheduler.js";

/** A batch under the watch (a thread-mode supervision). */
export interface WatchMember {
  readonly intervalMs: number;
  /** The lease window less the interval: how long a beaten lease outlives the thread's next round. */
  readonly slackMs: number;
  readonly watchMsgs: readonly JsMsg[];
  /** What reports the host's connection closed (a connection, or a message's client), if readable. */
  readonly closer: { isClosed(): unknown } | undefined;
  /** Its slot's place in the order the thread's slots were posted. */
  readonly registration: number;
  /** Epoch ms of its slot's first round. */
  readonly firstDueAt: number;
  /** Where each delivery sits in the watch (-1: not watched); owned by the watch. */
  watchSlots: number[] | undefined;
  /** Its own look (books, deadline); it leaves the watch when it no longer belongs. Returns its deadline while it stays. */
  look(now: number): number;
  /** A delivery of it was settled by the work: release it on the thread. */
  settledSeen(now: number): void;
  /**
   * With a metrics sink: counts the rounds the thread sent since its last count, at every look
   * that does not ask for its own (`undefined`: nothing counts its rounds).
   */
  readonly tally: (() => void) | undefined;
}

const watches = new WeakMap<Scheduler, WeakMap<ControlBlock, ThreadWatch>>();
/** The watches with members, by the thread they watch (for {@link lookNow}). */
const watching = new WeakMap<ControlBlock, Set<ThreadWatch>>();

/**
 * The thread failed for good: every watch of it looks at once, so its batches go back to beats
 * from the main thread now, not at the next look (an interval on, which can be past a lease
 * whose last round the server refused).
 */
export function lookNow(control: ControlBlock): void {
  for (const w of watching.get(control) ?? []) w.lookNow();
}

export class ThreadWatch implements ScheduledTask {
  schedulerEntry: SchedulerEntry | undefined = undefined;
  earlyMs = 0;
  readonly #scheduler: Scheduler;
  readonly #control: ControlBlock;
  readonly #members = new Set<WatchMember>();
  /** The members with a `tally`. */
  readonly #tallied = new Set<WatchMember>();
  readonly #closers = new Map<{ isClosed(): unknown }, number>();
  // One entry per watched delivery, in three parallel lists: a look reads each message once.
  readonly #msgs: JsMsg[] = [];
  readonly #owners: WatchMember[] = [];
  readonly #indexes: number[] = [];
  #limitsSeen = 0;
  /** When its next look is scheduled (Infinity: none). */
  #due = Number.POSITIVE_INFINITY;
  // Members that joined before the thread is known to have scheduled their slot and passed its
  // first due time: the head does not bound them yet, their own first deadline does.
  #pendingRegistration = 0;
  #pendingFirstDue = Number.NEGATIVE_INFINITY;
  #pendingDeadline = Number.POSITIVE_INFINITY;
  #intervalMs = Number.POSITIVE_INFINITY;
  #slackMs = Number.POSITIVE_INFINITY;
  /** The thread's clock (epoch ms), read beside the scheduler's. */
  readonly #epochNow: () => number;

  private constructor(scheduler: Scheduler, control: ControlBlock, epochNow: () => number) {
    this.#scheduler = scheduler;
    this.#control = control;
    this.#epochNow = epochNow;
    this.#limitsSeen = Atomics.load(control.ints, CONTROL.LIMITS);
  }

  /** The watch of one thread on one scheduler (`epochNow`: the thread's clock, for tests on a manual one). */
  static of(scheduler: Scheduler, control: ControlBlock, epochNow: () => number = nowEpochMs): ThreadWatch {
    let byControl = watches.get(scheduler);
    if (byControl === undefined) watches.set(scheduler, (byControl = new WeakMap()));
    let w = byControl.get(control);
    if (w === undefined) byControl.set(control, (w = new ThreadWatch(scheduler, control, epochNow)));
    return w;
  }

  /** Whether `m` is under the watch (for assertions). */
  has(m: WatchMember): boolean {
    return this.#members.has(m);
  }

  /**
   * Takes `m` under the watch (no-op when it is), its lease ending at `deadline` (scheduler time)
   * unless beaten; its own task is the caller's to cancel.
   */
  join(m: WatchMember, now: number, deadline: number): void {
    if (this.#members.has(m)) return;
    this.#members.add(m);
    if (this.#members.size === 1) {
      let set = watching.get(this.#control);
      if (set === undefined) watching.set(this.#control, (set = new Set()));
      set.add(this);
    }
    if (m.tally !== undefined) this.#tallied.add(m);
    this.#pendingRegistration = Math.max(this.#pendingRegistration, m.registration);
    this.#pendingFirstDue = Math.max(this.#pendingFirstDue, m.firstDueAt);
    this.#pendingDeadline = Math.min(this.#pendingDeadline, deadline);
    const slots: number[] = [];
    m.watchMsgs.forEach((msg, i) => {
      if (isSettled(msg)) {
        slots.push(-1);
        return;
      }
      slots.push(this.#msgs.length);
      this.#msgs.push(msg);
      this.#owners.push(m);
      this.#indexes.push(i);
    });
    m.watchSlots = slots;
    if (m.closer !== undefined) this.#closers.set(m.closer, (this.#closers.get(m.closer) ?? 0) + 1);
    this.#intervalMs = Math.min(this.#intervalMs, m.intervalMs);
    this.#slackMs = Math.min(this.#slackMs, m.slackMs);
    this.earlyMs = joinWindowMs(this.#intervalMs);
    // A member with a shorter interval, or a lease that ends sooner, brings the next look forward.
    this.#arm(Math.min(now + m.intervalMs, this.#pendingDeadline), now);
  }

  /** No member's lease ends before this while the summary shows nothing else (scheduler time). */
  #horizon(now: number): number {
    // REGISTERED before the head: a head read after it includes every slot it counts.
    const registered = Atomics.load(this.#control.ints, CONTROL.REGISTERED);
    const head = readHeadDue(this.#control);
    // Every pending slot scheduled, and the thread past its first due time: each was beaten then
    // (or its round failed, which FAILING shows), so the head bounds it from now on.
    if (registered >= this.#pendingRegistration && head > this.#pendingFirstDue) this.#pendingDeadline = Number.POSITIVE_INFINITY;
    return Math.min(now + (head - this.#epochNow()) + this.#slackMs, this.#pendingDeadline);
  }

  /** Looks within a millisecond (see {@link lookNow}). */
  lookNow(): void {
    const now = this.#scheduler.clock.now();
    this.#arm(now, now);
  }

  /** Looks next at `at`, or earlier if it is already due to. */
  #arm(at: number, now: number): void {
    if (this.#scheduler.has(this) && this.#due <= at) return;
    this.#due = Math.max(at, now + 1);
    this.#scheduler.schedule(this, this.#due, now);
  }

  /** Lets `m` go (no-op when it is not watched). */
  leave(m: WatchMember): void {
    if (!this.#members.delete(m)) return;
    this.#tallied.delete(m);
    const slots = m.watchSlots ?? [];
    for (let i = 0; i < slots.length; i++) if (slots[i]! >= 0) this.#remove(slots[i]!);
    m.watchSlots = undefined;
    if (m.closer !== undefined) {
      const n = (this.#closers.get(m.closer) ?? 1) - 1;
      if (n > 0) this.#closers.set(m.closer, n);
      else this.#closers.delete(m.closer);
    }
    if (this.#members.size === 0) {
      watching.get(this.#control)?.delete(this);
      this.#scheduler.cancel(this);
      this.#due = Number.POSITIVE_INFINITY;
      this.#pendingDeadline = Number.POSITIVE_INFINITY;
      this.#intervalMs = Number.POSITIVE_INFINITY;
      this.#slackMs = Number.POSITIVE_INFINITY;
    }
  }

  /** Swaps the last entry into `pos`. */
  #remove(pos: number): void {
    const owner = this.#owners[pos]!;
    owner.watchSlots![this.#indexes[pos]!] = -1;
    const last = this.#msgs.length - 1;
    if (pos !== last) {
      const moved = this.#owners[last]!;
      this.#msgs[pos] = this.#msgs[last]!;
      this.#owners[pos] = moved;
      this.#indexes[pos] = this.#indexes[last]!;
      moved.watchSlots![this.#indexes[pos]!] = pos;
    }
    this.#msgs.pop();
    this.#owners.pop();
    this.#indexes.pop();
  }

  run(now: number): void {
    this.#due = Number.POSITIVE_INFINITY;
    if (this.#members.size === 0) return;
    const ints = this.#control.ints;
    const limits = Atomics.load(ints, CONTROL.LIMITS);
    const horizon = this.#horizon(now);
    let everyone =
      limits !== this.#limitsSeen ||
      Atomics.load(ints, CONTROL.FAILING) !== 0 ||
      Atomics.load(ints, CONTROL.CLOSED) !== 0 ||
      !(horizon > now + this.earlyMs) ||
      wantsLeaseEvent("heartbeatSent");
    this.#limitsSeen = limits;
    if (!everyone) for (const c of this.#closers.keys()) if (this.#closed(c)) everyone = true;
    // At the horizon at the latest; after a look at everyone, at the first member's deadline.
    const bound = everyone ? this.#lookAtEveryone(now) : (this.#lookAtDeliveries(now), this.#tally(), horizon);
    if (this.#members.size === 0) return;
    this.#arm(Math.min(now + this.#intervalMs, bound), now);
  }

  #closed(c: { isClosed(): unknown }): boolean {
    try {
      return c.isClosed() === true;
    } catch {
      return false;
    }
  }

  /** Every member's own look; returns the earliest deadline among those that stay. */
  #lookAtEveryone(now: number): number {
    this.#intervalMs = Number.POSITIVE_INFINITY;
    this.#slackMs = Number.POSITIVE_INFINITY;
    let first = Number.POSITIVE_INFINITY;
    for (const m of [...this.#members]) first = Math.min(first, m.look(now));
    for (const m of this.#members) {
      this.#intervalMs = Math.min(this.#intervalMs, m.intervalMs);
      this.#slackMs = Math.min(this.#slackMs, m.slackMs);
    }
    if (this.#members.size > 0) this.earlyMs = joinWindowMs(this.#intervalMs);
    return first;
  }

  /** The rounds of every member with a metrics sink, counted (their own look counts them too). */
  #tally(): void {
    for (const m of this.#tallied) {
      try {
        m.tally!();
      } catch {
        // A count that failed never stops the watch; the member's own look counts again.
      }
    }
  }

  /** The deliveries the work settled itself: released on the thread by their batch. */
  #lookAtDeliveries(now: number): void {
    const msgs = this.#msgs;
    let settled: WatchMember[] | undefined;
    for (let pos = msgs.length - 1; pos >= 0; pos--) {
      if (!isSettled(msgs[pos]!)) continue;
      (settled ??= []).push(this.#owners[pos]!);
      this.#remove(pos);
    }
    if (settled !== undefined) for (const m of new Set(settled)) m.settledSeen(now);
  }
}

/** A batch's seat under the watch of its thread: it joins and leaves as the batch allows. */
export class WatchSeat implements WatchMember {
  watchSlots: number[] | undefined = undefined;
  #watch: ThreadWatch | undefined = undefined;

  constructor(
    readonly intervalMs: number,
    readonly slackMs: number,
    readonly watchMsgs: readonly JsMsg[],
    readonly closer: { isClosed(): unknown } | undefined,
    readonly registration: number,
    readonly firstDueAt: number,
    readonly look: (now: number) => number,
    readonly settledSeen: (now: number) => void,
    readonly tally: (() => void) | undefined,
  ) {}

  get joined(): boolean {
    return this.#watch !== undefined;
  }

  join(scheduler: Scheduler, control: ControlBlock, now: number, deadline: number): void {
    (this.#watch ??= ThreadWatch.of(scheduler, control)).join(this, now, deadline);
  }

  leave(): void {
    this.#watch?.leave(this);
    this.#watch = undefined;
  }
}
