/**
 * The heartbeat thread's entry (a worker thread, its own tsup entry): one NATS connection that
 * sends `+WPI` for the slots the main thread registers, reading everything else from shared
 * memory, so beats go on while the main thread's event loop is blocked.
 *
 * Idle, it costs nothing: the library's scheduler (a heap, one timer armed for the earliest due
 * slot) and one pending `Atomics.waitAsync` on the wake counter (the main thread bumps it when
 * progress arrives for a slot that waits for it). Slots due within the scheduler's coalescing
 * window are sent in one tick, so a round of many batches leaves in one socket write, and the
 * work per tick is proportional to the slots due, not to all slots.
 */
import { parentPort, workerData } from "node:worker_threads";
import { connect, credsAuthenticator, nkeyAuthenticator, type ConnectionOptions, type NatsConnection } from "@nats-io/transport-node";
import type { CheckedThreadConnection } from "./heartbeat-thread-options.js";
import {
  beginRound,
  CONTROL,
  controlBlock,
  dueNow,
  endRound,
  fromTime,
  isReleased,
  nowEpochMs,
  planBeat,
  publishHeadDue,
  recordConfirmed,
  recordFailedRound,
  recordFailure,
  SLOT,
  slotView,
  STATE_LIMIT,
  TIME,
  type FromWorker,
  type Slot,
  type ToWorker,
  type WorkerInput,
} from "./heartbeat-thread-protocol.js";
import { joinWindowMs, Scheduler, timerDelay, type ScheduledTask, type SchedulerEntry } from "./scheduler.js";

// Encoded once: a string payload is encoded again for every frame, which was about half of
// what a publish cost the client.
const WPI = new TextEncoder().encode("+WPI");

/** A registered slot, as a task of the worker's scheduler. */
class Batch implements ScheduledTask {
  schedulerEntry: SchedulerEntry | undefined = undefined;
  /** The last due round found the connection down: send it as soon as it is back (see {@link setFailed}). */
  failedLast = false;
  /** Its reaching the limit was counted in CONTROL.LIMITS. */
  limitCounted = false;
  /** A round due this soon joins a tick that runs anyway, as on the main thread. */
  readonly earlyMs: number;

  constructor(
    readonly id: number,
    readonly slot: Slot,
    readonly subjects: readonly string[],
    readonly confirmTimeoutMs: number,
  ) {
    this.earlyMs = joinWindowMs(Atomics.load(slot.ints, SLOT.INTERVAL_MS));
  }

  run(now: number): void {
    runBatch(this, now);
  }
}

const port = parentPort;
if (port === null) throw new Error("the heartbeat thread's entry runs in a worker thread only");
const input = workerData as WorkerInput;
const control = controlBlock(input.control);
const ints = control.ints;
const batches = new Map<number, Batch>();
/** Due slots waiting for progress: not scheduled; a wake from the main thread looks at them. */
const waiting = new Set<Batch>();
// Epoch milliseconds: the scale the slots' times are on. After each tick the earliest due time
// left is published: the main thread bounds every beating slot's last beat by it.
const scheduler: Scheduler = new Scheduler({
  now: nowEpochMs,
  setTimer: (fn, ms) =>
    setTimeout(() => {
      fn();
      publishHeadDue(control, scheduler.nextDue ?? Number.POSITIVE_INFINITY);
    }, timerDelay(ms)),
  clearTimer: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
});
let nc: NatsConnection | undefined;
let connected = false;
let closing = false;
let flushQueued = false;
const flushIds: number[] = [];

function post(message: FromWorker): void {
  try {
    port!.postMessage(message);
  } catch {
    // The main thread is gone: nothing to tell.
  }
}

/** The client options for the thread's connection: plain data in, authenticators built here. */
function connectOptions(c: CheckedThreadConnection): ConnectionOptions {
  const te = new TextEncoder();
  return {
    servers: [...c.servers],
    name: c.name ?? "jetstream-inprogress:heartbeats",
    // Keep trying: the thread is unref'd, so retrying never keeps a finished host alive.
    waitOnFirstConnect: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    // A dead link is found within about 20 s, not the client's default 4 minutes.
    pingInterval: 10_000,
    maxPingOut: 2,
    ...(c.user !== undefined ? { user: c.user } : {}),
    ...(c.pass !== undefined ? { pass: c.pass } : {}),
    ...(c.token !== undefined ? { token: c.token } : {}),
    ...(c.creds !== undefined ? { authenticator: credsAuthenticator(te.encode(c.creds)) } : {}),
    ...(c.nkeySeed !== undefined ? { authenticator: nkeyAuthenticator(te.encode(c.nkeySeed)) } : {}),
    ...(c.tls !== undefined ? { tls: { ...c.tls } } : {}),
  };
}

function setConnected(up: boolean): void {
  connected = up;
  Atomics.store(ints, CONTROL.CONNECTED, up ? 1 : 0);
}

/** Why a connection failed, for the main thread: the error's class and message, bounded. */
function describeError(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`.slice(0, 300);
  return String(err).slice(0, 300);
}

async function start(): Promise<void> {
  let conn: NatsConnection;
  try {
    conn = await connect(connectOptions(input.connection));
  } catch (err) {
    Atomics.add(ints, CONTROL.ERRORS, 1);
    Atomics.store(ints, CONTROL.CLOSED, 1);
    post({ type: "failed", message: describeError(err) });
    end();
    return;
  }
  if (closing) {
    await conn.close().catch(() => undefined);
    return;
  }
  nc = conn;
  setConnected(true);
  // Batches handed over while it connected, whose round found no connection: their round goes
  // out now, not an interval later (near the 80 % limit, that interval outlasts the lease).
  sendFailedRoundsNow();
  Atomics.store(ints, CONTROL.READY, 1);
  post({ type: "ready" });
  void conn.closed().then((err) => {
    setConnected(false);
    Atomics.store(ints, CONTROL.CLOSED, 1);
    if (!closing) {
      Atomics.add(ints, CONTROL.ERRORS, 1);
      post({ type: "failed", message: err ? describeError(err) : "the connection closed" });
      end();
    }
  });
  void watchStatus(conn);
}

async function watchStatus(conn: NatsConnection): Promise<void> {
  for await (const s of conn.status()) {
    if (s.type === "disconnect") {
      if (connected) Atomics.add(ints, CONTROL.DISCONNECTS, 1);
      setConnected(false);
    } else if (s.type === "reconnect") {
      setConnected(true);
      sendFailedRoundsNow();
    } else if (s.type === "error") {
      Atomics.add(ints, CONTROL.ERRORS, 1);
      if (refusesBeats((s as { error?: unknown }).error)) failForGood(conn);
    }
  }
}

/**
 * The server refused to take an ack frame from this connection (its user may not publish to
 * `$JS.ACK.>`): the refused `+WPI` never reached the consumer, though the client sent it.
 */
function refusesBeats(err: unknown): boolean {
  const e = err as { name?: unknown; operation?: unknown; subject?: unknown } | null | undefined;
  return e?.name === "PermissionViolationError" && e.operation === "publish" && typeof e.subject === "string" && e.subject.startsWith("$JS.ACK.");
}

/**
 * Every beat this connection sends is dropped: the thread fails for good, as for a refused
 * login, so the batches on it beat from the main thread, whose connection acks them.
 */
function failForGood(conn: NatsConnection): void {
  if (closing) return;
  setConnected(false);
  Atomics.store(ints, CONTROL.CLOSED, 1);
  // The client's error names the refused subject; the message for the host names none.
  post({ type: "failed", message: "the server refuses its +WPI frames (a permissions violation on publish to $JS.ACK): allow its user to publish to $JS.ACK.>" });
  end();
  void conn.close().catch(() => undefined);
}

/** Rounds that found the connection down go out now rather than an interval later. */
function sendFailedRoundsNow(): void {
  const now = nowEpochMs();
  for (const b of batches.values()) {
    if (!b.failedLast) continue;
    dueNow(b.slot, now);
    scheduler.schedule(b, now, now);
  }
}

/** Keeps CONTROL.FAILING equal to the number of slots whose last due round did not go out. */
function setFailed(b: Batch, failed: boolean): void {
  if (b.failedLast === failed) return;
  b.failedLast = failed;
  Atomics.add(ints, CONTROL.FAILING, failed ? 1 : -1);
}

/** Counts a slot that reached its limit, once: the main thread then looks at every batch. */
function countLimit(b: Batch): void {
  if (b.limitCounted || Atomics.load(b.slot.ints, SLOT.STATE) !== STATE_LIMIT) return;
  b.limitCounted = true;
  Atomics.add(ints, CONTROL.LIMITS, 1);
}

function forget(b: Batch): void {
  countLimit(b);
  setFailed(b, false);
  batches.delete(b.id);
  waiting.delete(b);
  scheduler.cancel(b);
}

/** What a slot's due time brings: a round, a wait, or the end of it. */
function runBatch(b: Batch, now: number): void {
  if (closing) return;
  const plan = planBeat(b.slot, now, b.earlyMs);
  if (plan.kind === "drop") {
    forget(b);
    return;
  }
  if (plan.kind === "idle") {
    waiting.add(b);
    return;
  }
  if (plan.kind === "wait") {
    scheduler.schedule(b, plan.at, now);
    return;
  }
  const interval = Atomics.load(b.slot.ints, SLOT.INTERVAL_MS);
  const conn = nc;
  if (!connected || conn === undefined) {
    // The client would drop the frames: a failure, not a beat.
    recordFailure(b.slot, now, interval);
    setFailed(b, true);
    scheduler.schedule(b, now + interval, now);
    return;
  }
  if (!beginRound(b.slot)) {
    forget(b);
    return;
  }
  let sent = true;
  try {
    if (b.confirmTimeoutMs > 0) sendConfirmed(conn, b, now);
    else sendPlain(conn, b);
  } catch {
    sent = false;
  }
  endRound(b.slot, now, plan.progress, sent && b.confirmTimeoutMs === 0);
  // A publish that threw on a connection that went down meanwhile failed for the outage.
  if (!sent) recordFailedRound(b.slot, !connected);
  setFailed(b, !sent);
  countLimit(b);
  scheduler.schedule(b, now + interval, now);
}

/** Progress came for slots that wait for it: look at them now. */
function wakeWaiting(): void {
  if (closing || waiting.size === 0) return;
  const now = nowEpochMs();
  for (const b of waiting) scheduler.schedule(b, now, now);
  waiting.clear();
}

function sendPlain(conn: NatsConnection, b: Batch): void {
  const { subjects, slot } = b;
  for (let i = 0; i < subjects.length; i++) {
    if (!isReleased(slot, i)) conn.publish(subjects[i]!, WPI);
  }
}

/**
 * Each `+WPI` as a request: the server answers whether or not the message is still pending,
 * so a full set of replies proves the beats arrived, not that the deliveries are still ours.
 */
function sendConfirmed(conn: NatsConnection, b: Batch, sentAt: number): void {
  const { subjects, slot } = b;
  const replies: Promise<unknown>[] = [];
  for (let i = 0; i < subjects.length; i++) {
    if (!isReleased(slot, i)) replies.push(conn.request(subjects[i]!, WPI, { timeout: b.confirmTimeoutMs }));
  }
  const lostBefore = Atomics.load(ints, CONTROL.DISCONNECTS);
  void Promise.allSettled(replies).then((results) => {
    if (results.every((r) => r.status === "fulfilled")) recordConfirmed(slot, sentAt);
    // Replies that did not come because the connection was lost meanwhile: an outage, not a timeout.
    else recordFailedRound(slot, !connected || Atomics.load(ints, CONTROL.DISCONNECTS) !== lostBefore);
  });
}

type WaitAsync = (view: Int32Array, index: number, value: number) => { async: boolean; value: Promise<unknown> | unknown };

/** Waits for the main thread's wake-ups (progress for a slot that waits for it). */
function armWake(): void {
  if (closing) return;
  const seen = Atomics.load(ints, CONTROL.WAKE);
  const r = (Atomics as unknown as { waitAsync: WaitAsync }).waitAsync(ints, CONTROL.WAKE, seen);
  const woke = (): void => {
    armWake();
    wakeWaiting();
  };
  if (r.async) void (r.value as Promise<unknown>).then(woke);
  else queueMicrotask(woke);
}

/** Answers flush requests once the server answered a PING sent after every earlier publish. */
async function flush(): Promise<void> {
  flushQueued = false;
  const ids = flushIds.splice(0);
  const conn = nc;
  if (conn === undefined || !connected) {
    post({ type: "flushed", ids, ok: false, why: "the heartbeat connection is down" });
    return;
  }
  try {
    await conn.flush();
    post({ type: "flushed", ids, ok: true });
  } catch (err) {
    post({ type: "flushed", ids, ok: false, why: describeError(err) });
  }
}

function end(): void {
  closing = true;
  for (const b of batches.values()) scheduler.cancel(b);
  batches.clear();
  waiting.clear();
  // Settles the pending waitAsync, so nothing is left to keep this thread alive.
  Atomics.add(ints, CONTROL.WAKE, 1);
  Atomics.notify(ints, CONTROL.WAKE);
  port!.close();
}

async function close(): Promise<void> {
  if (closing) return;
  closing = true;
  const conn = nc;
  if (conn !== undefined) await conn.close().catch(() => undefined);
  setConnected(false);
  Atomics.store(ints, CONTROL.CLOSED, 1);
  post({ type: "closed" });
  end();
}

port.on("message", (m: ToWorker) => {
  if (m.type === "register") {
    if (closing) return;
    const slot = slotView(m.buffer, m.subjects.length);
    const b = new Batch(m.id, slot, m.subjects, Atomics.load(slot.ints, SLOT.CONFIRM_TIMEOUT_MS));
    batches.set(m.id, b);
    scheduler.schedule(b, fromTime(Atomics.load(slot.times, TIME.NEXT_DUE)));
    // The head now bounds this slot too; REGISTERED tells the main thread so, after the head.
    publishHeadDue(control, scheduler.nextDue ?? Number.POSITIVE_INFINITY);
    Atomics.add(ints, CONTROL.REGISTERED, 1);
  } else if (m.type === "flush") {
    flushIds.push(m.id);
    // Requests that arrive together share one PING.
    if (!flushQueued) {
      flushQueued = true;
      setImmediate(() => void flush());
    }
  } else if (m.type === "close") {
    void close();
  }
});

armWake();
void start();
