/**
 * The heartbeat thread, main side: one worker thread per process and connection, shared by
 * every instance that asks for the same connection, started on first use, `unref`'d (it never
 * keeps a finished host alive), and closed (its connection closed, the worker ended) once
 * nothing has used it for a short grace, so back-to-back batches do not restart it.
 */
import type { Worker } from "node:worker_threads";
import { HeartbeatThreadError } from "../errors.js";
import { ThreadLease, type ThreadLink } from "./heartbeat-thread-lease.js";
import { checkHeartbeatThreadOption, threadConnectionKey, type CheckedThreadConnection, type HeartbeatThreadConnection } from "./heartbeat-thread-options.js";
import { CONTROL, createControl, createSlot, nowEpochMs, PROTOCOL_VERSION, wakeWorker, type ControlBlock, type FromWorker } from "./heartbeat-thread-protocol.js";
import { startHeartbeatWorker } from "./heartbeat-thread-worker.js";
import { lookNow } from "./thread-watch.js";

/** How long an unused thread stays open (back-to-back batches reuse it). */
export const DEFAULT_IDLE_CLOSE_MS = 2000;
/** How long a closing worker may take to close its connection before it is terminated. */
const CLOSE_BOUND_MS = 4000;
/** How long a worker that reported its connection closed may take to end by itself. */
const CLOSED_LINGER_MS = 250;
const MAX_DELIVERIES = 100_000;

/**
 * `starting` until the thread's connection is first up; `connected` / `disconnected` after;
 * `closed` once the thread is gone (released and closed, or its connection failed for good).
 *
 * @example
 * ```ts
 * const beatHere = (s: HeartbeatThreadState): boolean => s === "closed"; // fall back to main-thread beats
 * ```
 */
export type HeartbeatThreadState = "starting" | "connected" | "disconnected" | "closed";

/**
 * One batch's schedule on the thread.
 *
 * @example
 * ```ts
 * const options: ThreadLeaseOptions = { intervalMs: 5000, maxHeartbeats: 12, requireProgress: false };
 * ```
 */
export interface ThreadLeaseOptions {
  /** Milliseconds between rounds (integer, 1 ..= 3,600,000). */
  readonly intervalMs: number;
  /** At most this many rounds (integer, 1 ..= 10,000). */
  readonly maxHeartbeats: number;
  /** Epoch ms (`performance.timeOrigin + performance.now()`) of the first round; default one interval from now. */
  readonly firstDueAt?: number;
  /** Epoch ms; no round at or after it (default: none). Moved later with `lease.beatUntil`. */
  readonly until?: number;
  /** A round goes only if `lease.progress()` was called since the last one. */
  readonly requireProgress?: boolean;
  /** Send each `+WPI` as a request and count the replies (they prove receipt, not that the delivery is still ours). */
  readonly confirm?: { readonly timeoutMs?: number };
}

interface Registry {
  readonly threads: Map<string, ThreadCore>;
  /** Connections whose thread failed (a refused login): not started again for a while. */
  readonly failures?: Map<string, { readonly at: number; readonly message: string }>;
}

/**
 * How long a connection whose thread failed is not tried again: every batch would otherwise
 * start a thread that fails the same way (a wrong password), costing a worker each time.
 */
export const FAILED_RETRY_MS = 10_000;

// On globalThis: the ESM and CommonJS builds loaded side by side share one thread per connection.
const REGISTRY_KEY = Symbol.for(`jetstream-inprogress.heartbeat-threads.v${PROTOCOL_VERSION}`);
const registry: Registry = ((globalThis as Record<symbol, unknown>)[REGISTRY_KEY] as Registry | undefined) ?? { threads: new Map(), failures: new Map() };
(globalThis as Record<symbol, unknown>)[REGISTRY_KEY] = registry;

interface PendingFlush {
  readonly resolve: () => void;
  readonly reject: (err: Error) => void;
  readonly timer: ReturnType<typeof setTimeout>;
}

/** The shared part: one worker, its control block, and who uses it. */
class ThreadCore implements ThreadLink {
  readonly key: string;
  readonly control: ControlBlock = createControl();
  readonly worker: Worker;
  readonly exited: Promise<void>;
  readonly idleCloseMs: number;
  refs = 0;
  leases = 0;
  #nextId = 1;
  #idleTimer: ReturnType<typeof setTimeout> | undefined;
  #closing = false;
  #gone = false;
  #failure: string | undefined;
  readonly #flushes = new Map<number, PendingFlush>();
  readonly #readyWaiters = new Set<() => void>();

  constructor(key: string, connection: CheckedThreadConnection, idleCloseMs: number) {
    this.key = key;
    this.idleCloseMs = idleCloseMs;
    this.worker = startHeartbeatWorker({ control: this.control.buffer, connection });
    this.worker.on("message", (m: FromWorker) => this.#onMessage(m));
    this.worker.on("error", (err) => {
      this.#failure ??= `the heartbeat thread failed: ${err instanceof Error ? err.message : String(err)}`.slice(0, 300);
    });
    this.exited = new Promise((resolve) => {
      this.worker.once("exit", () => {
        this.#gone = true;
        this.#forget();
        this.#failAll(new HeartbeatThreadError("closed", this.#failure ?? "the heartbeat thread ended"));
        // A thread that ended without a word (a crash, an outside terminate) set no flag: its
        // batches go back to main-thread beats now, not at the watch's horizon, a lease's end.
        Atomics.store(this.control.ints, CONTROL.CLOSED, 1);
        lookNow(this.control);
        resolve();
      });
    });
    // The thread never keeps the host alive; a bounded wait (ready, flush) holds its own timer.
    // After the listeners: adding a message listener refs the worker again.
    this.worker.unref();
  }

  get gone(): boolean {
    return this.#gone || this.#closing || this.#failure !== undefined;
  }

  get failure(): string | undefined {
    return this.#failure;
  }

  #onMessage(m: FromWorker): void {
    if (m.type === "ready") {
      for (const w of this.#readyWaiters) w();
    } else if (m.type === "failed") {
      this.#failure = `the heartbeat thread's connection failed: ${m.message}`;
      registry.failures?.set(this.key, { at: performance.now(), message: this.#failure });
      this.#forget();
      this.#failAll(new HeartbeatThreadError("closed", this.#failure));
      lookNow(this.control);
    } else if (m.type === "flushed") {
      for (const id of m.ids) {
        const p = this.#flushes.get(id);
        if (p === undefined) continue;
        this.#flushes.delete(id);
        clearTimeout(p.timer);
        if (m.ok) p.resolve();
        else p.reject(new HeartbeatThreadError("not_flushed", `the server did not confirm the heartbeats: ${m.why ?? "no answer"}`));
      }
    } else if (m.type === "closed") {
      // Its connection is closed: it ends by itself, unless a connect still pending holds it.
      setTimeout(() => void this.worker.terminate(), CLOSED_LINGER_MS).unref();
    }
  }

  /** Drops this core from the registry: the next acquire starts a fresh thread. */
  #forget(): void {
    if (registry.threads.get(this.key) === this) registry.threads.delete(this.key);
  }

  #failAll(err: HeartbeatThreadError): void {
    for (const [id, p] of this.#flushes) {
      this.#flushes.delete(id);
      clearTimeout(p.timer);
      p.reject(err);
    }
    for (const w of this.#readyWaiters) w();
  }

  acquire(): void {
    this.refs += 1;
    if (this.#idleTimer !== undefined) clearTimeout(this.#idleTimer);
    this.#idleTimer = undefined;
  }

  release(): void {
    this.refs -= 1;
    this.#maybeIdle();
  }

  done(): void {
    this.leases -= 1;
    this.#maybeIdle();
  }

  #maybeIdle(): void {
    if (this.refs > 0 || this.leases > 0 || this.#closing || this.#gone) return;
    this.#idleTimer = setTimeout(() => this.close(), this.idleCloseMs);
    this.#idleTimer.unref();
  }

  close(): void {
    if (this.#closing || this.#gone) return;
    this.#closing = true;
    this.#forget();
    this.worker.postMessage({ type: "close" });
    setTimeout(() => void this.worker.terminate(), CLOSE_BOUND_MS).unref();
  }

  wake(): void {
    wakeWorker(this.control);
  }

  register(subjects: readonly string[], o: Required<Omit<ThreadLeaseOptions, "confirm">> & { confirmTimeoutMs: number | undefined }): ThreadLease {
    if (this.gone) throw new HeartbeatThreadError("closed", this.#failure ?? "the heartbeat thread is closed: acquire it again");
    const slot = createSlot(subjects.length, {
      intervalMs: o.intervalMs,
      maxHeartbeats: o.maxHeartbeats,
      firstDueAt: o.firstDueAt,
      until: o.until,
      requireProgress: o.requireProgress,
      confirmTimeoutMs: o.confirmTimeoutMs,
    });
    const id = this.#nextId++;
    this.leases += 1;
    Atomics.add(this.control.ints, CONTROL.POSTED, 1);
    this.worker.postMessage({ type: "register", id, buffer: slot.buffer, subjects: [...subjects] });
    return new ThreadLease(slot, this);
  }

  flush(timeoutMs: number): Promise<void> {
    if (this.gone) return Promise.reject(new HeartbeatThreadError("closed", this.#failure ?? "the heartbeat thread is closed"));
    const id = this.#nextId++;
    return new Promise<void>((resolve, reject) => {
      // Ref'd on purpose: the host waits for this answer, and the wait is bounded.
      const timer = setTimeout(() => {
        this.#flushes.delete(id);
        reject(new HeartbeatThreadError("not_flushed", `the server did not confirm the heartbeats within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#flushes.set(id, { resolve, reject, timer });
      this.worker.postMessage({ type: "flush", id });
    });
  }

  ready(timeoutMs: number): Promise<void> {
    const check = (): "yes" | "no" | "wait" => (Atomics.load(this.control.ints, CONTROL.READY) === 1 ? "yes" : this.gone ? "no" : "wait");
    const first = check();
    if (first === "yes") return Promise.resolve();
    if (first === "no") return Promise.reject(new HeartbeatThreadError("closed", this.#failure ?? "the heartbeat thread is closed"));
    return new Promise<void>((resolve, reject) => {
      const settle = (): void => {
        const now = check();
        if (now === "wait") return;
        clearTimeout(timer);
        this.#readyWaiters.delete(settle);
        if (now === "yes") resolve();
        else reject(new HeartbeatThreadError("closed", this.#failure ?? "the heartbeat thread is closed"));
      };
      const timer = setTimeout(() => {
        this.#readyWaiters.delete(settle);
        reject(new HeartbeatThreadError("not_ready", `the heartbeat thread's connection was not up within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#readyWaiters.add(settle);
    });
  }
}

function integer(where: string, value: unknown, min: number, max: number, example: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new TypeError(`${where} must be an integer in ${min} ..= ${max}, got ${String(value)}: use for example ${example}`);
  }
  return value;
}

function epoch(where: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || Number.isNaN(value)) throw new TypeError(`${where} must be epoch milliseconds (performance.timeOrigin + performance.now()), got ${String(value)}`);
  return value;
}

/** The shared memory of a handle's thread: the same block for every handle on one thread (not public). */
export let threadControl: (handle: HeartbeatThread) => ControlBlock;

/**
 * A process-wide heartbeat thread: a worker thread with its own NATS connection that sends the
 * `+WPI` beats of registered batches, driven through shared memory, so beats go on while the
 * main thread's event loop is blocked (a synchronous sink, a CPU-bound transform, a long GC).
 *
 * `acquire` returns a handle on the one thread for that connection (started on first use);
 * `release` gives the handle back. The thread closes once no handle and no lease uses it for
 * `idleCloseMs`.
 *
 * @example
 * ```ts
 * const thread = HeartbeatThread.acquire(threadConnectionFrom(nc));
 * const lease = thread.register(msgs.map((m) => m.reply), { intervalMs: 5000, maxHeartbeats: 12 });
 * try {
 *   writeSynchronously(msgs); // the event loop is blocked; the thread keeps beating
 *   lease.stop();
 *   for (const m of msgs) m.ack();
 * } catch {
 *   await lease.stopAndFlush(); // before a NAK with a delay
 *   for (const m of msgs) m.nak(30_000);
 * } finally {
 *   lease.stop();
 *   thread.release();
 * }
 * ```
 */
export class HeartbeatThread {
  readonly #core: ThreadCore;
  #released = false;

  static {
    threadControl = (h) => h.#core.control;
  }

  private constructor(core: ThreadCore) {
    this.#core = core;
  }

  /**
   * A handle on the thread for `connection` (plain data; for `heartbeat: { thread: true }` derive
   * it first with `threadConnectionFrom(nc)`). Synchronous: the worker starts now and connects
   * in the background (see {@link HeartbeatThread.state} and {@link HeartbeatThread.ready}).
   * A connection whose thread failed (a refused login) is not started again for 10 s: within
   * that time this throws `HeartbeatThreadError` `closed`.
   *
   * @param options.idleCloseMs - how long the thread stays open unused (first acquirer's value; default 2000).
   */
  static acquire(connection: HeartbeatThreadConnection, options: { readonly idleCloseMs?: number } = {}): HeartbeatThread {
    const checked = checkHeartbeatThreadOption(connection, "connection");
    if (checked === undefined || checked === true) throw new TypeError("connection must be connection data ({ servers, ... }): derive it from the host's connection with threadConnectionFrom(nc)");
    const idleCloseMs = options.idleCloseMs === undefined ? DEFAULT_IDLE_CLOSE_MS : integer("options.idleCloseMs", options.idleCloseMs, 0, 600_000, DEFAULT_IDLE_CLOSE_MS);
    const key = threadConnectionKey(checked);
    const failed = registry.failures?.get(key);
    if (failed !== undefined) {
      if (performance.now() - failed.at < FAILED_RETRY_MS) throw new HeartbeatThreadError("closed", `${failed.message} (not tried again for ${FAILED_RETRY_MS / 1000} s)`);
      registry.failures?.delete(key);
    }
    let core = registry.threads.get(key);
    if (core === undefined || core.gone) {
      core = new ThreadCore(key, checked, idleCloseMs);
      registry.threads.set(key, core);
    }
    core.acquire();
    return new HeartbeatThread(core);
  }

  /** Where the thread's connection is (read from shared memory: no message, no await). */
  get state(): HeartbeatThreadState {
    const ints = this.#core.control.ints;
    if (this.#core.gone || Atomics.load(ints, CONTROL.CLOSED) === 1) return "closed";
    if (Atomics.load(ints, CONTROL.CONNECTED) === 1) return "connected";
    return Atomics.load(ints, CONTROL.READY) === 1 ? "disconnected" : "starting";
  }

  /** Times the thread's connection was lost. */
  get disconnects(): number {
    return Atomics.load(this.#core.control.ints, CONTROL.DISCONNECTS);
  }

  /**
   * Errors the thread's connection reported: a connect that failed for good (a refused login),
   * and errors once connected (a refused `+WPI`). Attempts while a first connection is still
   * being retried (no server answering, a server refusing more connections) are not counted:
   * `state` stays `starting`.
   */
  get errors(): number {
    return Atomics.load(this.#core.control.ints, CONTROL.ERRORS);
  }

  /** Resolves when the worker thread has ended (after the last release and the idle grace). */
  get exited(): Promise<void> {
    return this.#core.exited;
  }

  /** The worker's thread id (the same for every handle on one thread). */
  get threadId(): number {
    return this.#core.worker.threadId;
  }

  /**
   * Resolves once the thread's connection was up (at once if it already was).
   *
   * @throws HeartbeatThreadError `not_ready` after `timeoutMs`, `closed` if the thread failed.
   */
  ready(timeoutMs = 10_000): Promise<void> {
    return this.#core.ready(integer("timeoutMs", timeoutMs, 1, 600_000, 10_000));
  }

  /**
   * Resolves once the server answered a PING on the thread's connection, sent after everything
   * the thread published so far (the loops time it: the round trip of the thread's own link).
   *
   * @throws HeartbeatThreadError `not_flushed` after `timeoutMs`, `closed` if the thread is gone.
   */
  flush(timeoutMs: number): Promise<void> {
    return this.#core.flush(timeoutMs);
  }

  /**
   * Puts a batch under the thread's heartbeat: from `firstDueAt`, every `intervalMs`, one `+WPI`
   * to each reply subject still unreleased, at most `maxHeartbeats` rounds. The thread need not
   * be connected yet: rounds due before it is count as failures.
   *
   * @param replySubjects - each delivery's reply subject (`$JS.ACK....`), in batch order.
   * @throws HeartbeatThreadError `closed` when the thread is gone (beat from the main thread instead).
   */
  register(replySubjects: readonly string[], options: ThreadLeaseOptions): ThreadLease {
    if (this.#released) throw new TypeError("this HeartbeatThread handle was released: acquire another");
    if (!Array.isArray(replySubjects) || replySubjects.length === 0 || replySubjects.length > MAX_DELIVERIES) {
      throw new TypeError(`replySubjects must be a list of 1 ..= ${MAX_DELIVERIES} reply subjects (one per delivery)`);
    }
    replySubjects.forEach((s, i) => {
      if (typeof s !== "string" || s === "" || /\s/.test(s)) throw new TypeError(`replySubjects[${i}] must be a reply subject (msg.info's $JS.ACK... subject), got ${typeof s === "string" ? `a string of ${s.length} characters` : typeof s}`);
    });
    const intervalMs = integer("options.intervalMs", options.intervalMs, 1, 3_600_000, 5000);
    const maxHeartbeats = integer("options.maxHeartbeats", options.maxHeartbeats, 1, 10_000, 12);
    const now = nowEpochMs();
    const requireProgress = options.requireProgress ?? false;
    if (typeof requireProgress !== "boolean") throw new TypeError("options.requireProgress must be a boolean");
    const confirm = options.confirm;
    const confirmTimeoutMs = confirm === undefined ? undefined
      : confirm.timeoutMs === undefined ? Math.min(5000, Math.max(1, Math.floor(intervalMs / 2)))
      : integer("options.confirm.timeoutMs", confirm.timeoutMs, 1, 60_000, 2000);
    return this.#core.register(replySubjects, {
      intervalMs,
      maxHeartbeats,
      firstDueAt: epoch("options.firstDueAt", options.firstDueAt, now + intervalMs),
      until: epoch("options.until", options.until, Number.POSITIVE_INFINITY),
      requireProgress,
      confirmTimeoutMs,
    });
  }

  /** Gives this handle back (idempotent). The thread closes once nothing uses it for the idle grace. */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#core.release();
  }
}
