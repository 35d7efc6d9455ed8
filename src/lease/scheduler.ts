/**
 * The one shared heartbeat timer: tasks (supervised batches) register a due time; a binary
 * min-heap orders them; a single unref'd timer is armed for the earliest. Work per tick is
 * proportional to the tasks that are due, never to all tasks, and thousands of concurrent
 * batches still mean one timer handle.
 */

/** A clock and timer source; the default reads the real ones lazily so fake timers apply. */
export interface Clock {
  /** Monotonic milliseconds. */
  now(): number;
  setTimer(fn: () => void, ms: number): unknown;
  clearTimer(handle: unknown): void;
}

/**
 * The longest delay `setTimeout` holds: 2^31 − 1 ms (about 24.8 days). A longer one (or NaN)
 * fires after 1 ms with a warning, so a timer re-armed for a far due time would spin.
 */
export const MAX_TIMER_DELAY_MS = 2_147_483_647;

/**
 * A delay `setTimeout` can hold: 0 for a due time already passed, at most
 * {@link MAX_TIMER_DELAY_MS} (NaN and Infinity included) for one further away; the timer then
 * fires early and whoever armed it arms it again.
 */
export function timerDelay(ms: number): number {
  if (ms <= 0) return 0;
  return ms < MAX_TIMER_DELAY_MS ? ms : MAX_TIMER_DELAY_MS;
}

export const systemClock: Clock = {
  now: () => performance.now(),
  setTimer: (fn, ms) => {
    const t = setTimeout(fn, timerDelay(ms));
    // The heartbeat must never keep a host process alive on its own.
    t.unref?.();
    return t;
  },
  clearTimer: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/**
 * Runs, in one call, tasks of one kind that fell due in the same tick (`due[from]` to
 * `due[to - 1]`, each its own task with its own books). Why: a task per message interleaves
 * each message's frame with its bookkeeping; sending every frame first and then keeping every
 * book keeps each loop hot (a `+WPI` publish costs about half as much in a loop of its own). It
 * must run each task as `run` would and keep one task's failure from the others.
 */
export interface Cohort {
  runAll(due: readonly SchedulerEntry[], from: number, to: number, now: number, clock: Clock): void;
}

/** Something the scheduler runs when it is due. */
export interface ScheduledTask {
  /** Called with the current time and the time it was due. */
  run(now: number, due: number): void;
  /** Tasks that name the same cohort and fall due together are run by it, in one call. */
  readonly cohort?: Cohort | undefined;
  /**
   * How early (ms) a tick that runs anyway may run this task, when more than
   * {@link COALESCE_MS} (see {@link joinWindowMs}). Read while the task is at the head of the heap.
   */
  readonly earlyMs?: number | undefined;
  /**
   * The scheduler's bookkeeping for this task (its place in the heap), kept on the task so
   * scheduling needs no lookup. Start it as `undefined` and leave it to the scheduler.
   */
  schedulerEntry?: SchedulerEntry | undefined;
}

/** A task's place in a scheduler's heap. */
export interface SchedulerEntry {
  readonly owner: Scheduler;
  readonly task: ScheduledTask;
  due: number;
  index: number;
}

type Entry = SchedulerEntry;

/**
 * A tick also runs the tasks due within this many milliseconds: heartbeats that fall close
 * together (messages that arrived together) go out in one tick, and so in one socket write,
 * instead of one tick each. It also covers timers firing a little early against
 * `performance.now()`. A task run early decides for itself what is due (a lease is never
 * declared lost before its deadline).
 */
export const COALESCE_MS = 20;

/** The most a beat is brought forward to join a tick (see {@link joinWindowMs}). */
export const JOIN_MAX_MS = 100;

/**
 * How early a task that repeats every `intervalMs` may run to join a tick that runs anyway: a
 * tenth of the interval, at least {@link COALESCE_MS}, at most {@link JOIN_MAX_MS}. Why: batches
 * that arrived tens of milliseconds apart would otherwise wake the process once each, every
 * interval, for ever; each wake-up starts on cold caches and costs more per frame than the
 * frames of one tick (item 10 of the benchmarks). A task run early stays in step with the tick
 * it joined, so a join costs one early beat, and a message is still refreshed at least every
 * `intervalMs`.
 */
export function joinWindowMs(intervalMs: number): number {
  return Math.max(COALESCE_MS, Math.min(JOIN_MAX_MS, intervalMs / 10));
}

export class Scheduler {
  readonly #clock: Clock;
  readonly #heap: Entry[] = [];
  #timer: unknown = undefined;
  #timerDue = Number.POSITIVE_INFINITY;
  #running = false;

  constructor(clock: Clock = systemClock) {
    this.#clock = clock;
  }

  get clock(): Clock {
    return this.#clock;
  }

  /** When the next task is due (`undefined` with none): how late a tick runs shows a blocked loop. */
  get nextDue(): number | undefined {
    return this.#heap[0]?.due;
  }

  /** Told at every tick, before the due tasks run, when the first of them was due. */
  onTick: ((now: number, due: number) => void) | undefined = undefined;

  /** Tasks waiting to run. */
  get size(): number {
    return this.#heap.length;
  }

  /** Whether a timer is currently armed (there is at most one). */
  get armed(): boolean {
    return this.#timer !== undefined;
  }

  /**
   * Schedules `task` at `due` (monotonic ms), replacing any earlier schedule of it. `now`, when
   * the caller just read the clock, spares reading it again. A due time further away than a
   * timer holds is reached by re-arming; a NaN due time means never.
   */
  schedule(task: ScheduledTask, due: number, now?: number): void {
    // NaN would break the heap order and never be due: it is "never", like Infinity.
    if (Number.isNaN(due)) due = Number.POSITIVE_INFINITY;
    const existing = this.#entryOf(task);
    if (existing) {
      const before = existing.due;
      existing.due = due;
      if (due < before) this.#up(existing.index);
      else this.#down(existing.index);
    } else {
      // A task rescheduled after it ran keeps its entry: no allocation per beat.
      const kept = task.schedulerEntry;
      const entry: Entry = kept !== undefined && kept.owner === this ? kept : { owner: this, task, due, index: 0 };
      entry.due = due;
      entry.index = this.#heap.length;
      this.#heap.push(entry);
      task.schedulerEntry = entry;
      this.#up(entry.index);
    }
    this.#arm(now);
  }

  /** Removes `task`; it will not run again unless scheduled again. */
  cancel(task: ScheduledTask): void {
    const entry = this.#entryOf(task);
    if (!entry) return;
    // Out of the heap, but kept on the task for its next schedule.
    const index = entry.index;
    entry.index = -1;
    const last = this.#heap.pop();
    if (last && last !== entry) {
      this.#heap[index] = last;
      last.index = index;
      this.#up(last.index);
      this.#down(last.index);
    }
    this.#arm();
  }

  /** Whether `task` is scheduled. */
  has(task: ScheduledTask): boolean {
    return this.#entryOf(task) !== undefined;
  }

  #entryOf(task: ScheduledTask): Entry | undefined {
    const entry = task.schedulerEntry;
    return entry !== undefined && entry.owner === this && entry.index >= 0 ? entry : undefined;
  }

  #arm(now?: number): void {
    if (this.#running) return; // #tick re-arms once it is done.
    const first = this.#heap[0];
    if (!first) {
      this.#disarm();
      return;
    }
    if (this.#timer !== undefined && this.#timerDue <= first.due) return;
    this.#disarm();
    const at = now ?? this.#clock.now();
    const wait = first.due - at;
    const delay = timerDelay(wait);
    // Clamped: the timer fires before the task is due, finds nothing to run and re-arms.
    this.#timerDue = delay < wait ? at + delay : first.due;
    this.#timer = this.#clock.setTimer(() => this.#tick(), delay);
  }

  #disarm(): void {
    if (this.#timer !== undefined) this.#clock.clearTimer(this.#timer);
    this.#timer = undefined;
    this.#timerDue = Number.POSITIVE_INFINITY;
  }

  #tick(): void {
    this.#timer = undefined;
    this.#timerDue = Number.POSITIVE_INFINITY;
    this.#running = true;
    try {
      const now = this.#clock.now();
      const head = this.#heap[0];
      if (head !== undefined && this.onTick !== undefined) {
        try {
          this.onTick(now, head.due);
        } catch {
          // An observer's failure never stops the timer.
        }
      }
      // Take every due task first, then run them: a task that reschedules itself "now" runs
      // on the next tick instead of spinning this loop.
      const due: Entry[] = [];
      // A task at the head that may run earlier is taken as well: up to its own early window.
      for (let first = this.#heap[0]; first && first.due <= now + Math.max(COALESCE_MS, first.task.earlyMs ?? 0); first = this.#heap[0]) {
        this.cancel(first.task);
        due.push(first);
      }
      for (let i = 0; i < due.length; ) {
        const entry = due[i]!;
        const cohort = entry.task.cohort;
        // Due tasks of one cohort that follow each other in heap order run together.
        let j = i + 1;
        if (cohort !== undefined) while (j < due.length && due[j]!.task.cohort === cohort) j++;
        try {
          if (cohort === undefined || j === i + 1) entry.task.run(now, entry.due);
          else cohort.runAll(due, i, j, now, this.#clock);
        } catch {
          // A task's own failure handling lives in the task; the timer must keep going.
        }
        i = j;
      }
    } finally {
      this.#running = false;
      this.#arm();
    }
  }

  #up(i: number): void {
    const heap = this.#heap;
    const entry = heap[i];
    if (!entry) return;
    while (i > 0) {
      const parentIndex = (i - 1) >> 1;
      const parent = heap[parentIndex]!;
      if (parent.due <= entry.due) break;
      heap[i] = parent;
      parent.index = i;
      i = parentIndex;
    }
    heap[i] = entry;
    entry.index = i;
  }

  #down(i: number): void {
    const heap = this.#heap;
    const entry = heap[i];
    if (!entry) return;
    const n = heap.length;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const child = r < n && heap[r]!.due < heap[l]!.due ? r : l;
      if (heap[child]!.due >= entry.due) break;
      heap[i] = heap[child]!;
      heap[i]!.index = i;
      i = child;
    }
    heap[i] = entry;
    entry.index = i;
  }
}

let shared: Scheduler | undefined;

/** The process-wide scheduler used by `withInProgress` unless a test injects its own. */
export function sharedScheduler(): Scheduler {
  shared ??= new Scheduler();
  return shared;
}
