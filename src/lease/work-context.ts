/**
 * What the host's work sees while it runs under supervision, and the options of
 * `withInProgress`. Types only.
 */
import type { JsMsgLike, NatsConnectionLike } from "../nats/client-types.js";
import type { MetricsSink } from "../telemetry/metrics-sink.js";
import type { HeartbeatThreadOption } from "./heartbeat-thread-options.js";

/**
 * The batch's redelivery deadline, as the library knows it: the last accepted heartbeat (or
 * the delivery) plus the effective window, for the message closest to its deadline.
 *
 * @example
 * ```ts
 * await withInProgress(msgs, async (ctx) => {
 *   // Throw, never return: under CommitThenAck a write that resolves counts as committed and is acknowledged.
 *   if (ctx.lease && ctx.lease.remainingMs() < 2_000) throw new TemporarySinkError("too close to the deadline to commit safely");
 *   await sink.commit();
 * }, policy);
 * ```
 */
export interface Lease {
  /**
   * The earliest redelivery deadline of the batch, as epoch milliseconds (`Date.now()` scale);
   * `Infinity` once the work has settled every message itself (nothing left to redeliver).
   */
  readonly deadline: number;
  /** Milliseconds until the deadline; negative once it has passed, `Infinity` as above. */
  remainingMs(): number;
  /** True once the deadline passed without an accepted heartbeat. */
  readonly expired: boolean;
}

/**
 * What `work` receives.
 *
 * @example
 * ```ts
 * await withInProgress(msgs, async (ctx) => {
 *   for (const chunk of chunks) {
 *     ctx.signal.throwIfAborted();
 *     await sink.write(chunk, { signal: ctx.signal });
 *     ctx.progress();
 *   }
 * }, policy, { requireProgress: true });
 * ```
 */
export interface WorkContext {
  /**
   * Aborted when the host's `options.signal` aborts (with its reason), when the lease expires
   * or a beat finds the connection closed ({@link LeaseExpiredError}), or when `maxHeartbeats` is reached with `onLimit: "abort"`
   * ({@link HeartbeatLimitError}).
   */
  readonly signal: AbortSignal;
  /** Heartbeat rounds sent so far. */
  readonly heartbeats: number;
  /** The batch lease; `undefined` when heartbeats are disabled (no AckWait is known then). */
  readonly lease: Lease | undefined;
  /** Reports progress; with `requireProgress`, a beat is sent only if this was called since the previous one. */
  progress(): void;
}

/**
 * Server-confirmed heartbeats: each `+WPI` is a request the server answers, so success means
 * "the server received it", and its latency is measured.
 *
 * @example
 * ```ts
 * await withInProgress(msgs, work, policy, { confirm: { connection: nc, timeoutMs: 2_000 } });
 * ```
 */
export interface HeartbeatConfirmation {
  /** The connection the messages arrived on (or any connection to the same account). */
  readonly connection: Pick<NatsConnectionLike, "request">;
  /** Reply timeout per beat; default half the interval, at most 5000 ms. */
  readonly timeoutMs?: number;
}

/**
 * Options of {@link withInProgress}.
 *
 * @typeParam M - the messages' type, as passed to `withInProgress` (`receivedAt` gets them).
 *
 * @example
 * ```ts
 * const options: WithInProgressOptions = { signal: shutdown.signal, metrics, receivedAt: Date.now() };
 * ```
 */
export interface WithInProgressOptions<M extends JsMsgLike = JsMsgLike> {
  /**
   * Cancels the work (a shutdown): `ctx.signal` aborts with the same reason, and the lease is
   * kept while the work drains — beats go on, never past `maxHeartbeats` — until it settles or
   * `shutdownTimeoutMs` passes; then the call rejects with the reason and beats stop.
   */
  readonly signal?: AbortSignal;
  /** Where the heartbeat metrics go (`in_progress_*`); a sink that throws never breaks the work. Default: none recorded. */
  readonly metrics?: MetricsSink;
  /**
   * When the messages were received (epoch ms or a Date), or a function giving it per message.
   * JetStream counts the deadline from delivery, so time spent in a buffer brings the first
   * beat forward. Default: now.
   */
  readonly receivedAt?: number | Date | ((msg: M, index: number) => number | Date | undefined);
  /** What to do when `maxHeartbeats` is reached: let the work go on (default) or abort `ctx.signal`. */
  readonly onLimit?: "continue" | "abort";
  /** Opt-in server-confirmed heartbeats. Without it, success means "handed to the client". */
  readonly confirm?: HeartbeatConfirmation;
  /** The messages' connection, so a closed connection ends supervision at once. */
  readonly connection?: Pick<NatsConnectionLike, "isClosed">;
  /** Send a beat only if the work called `ctx.progress()` since the previous one (stuck is not slow). */
  readonly requireProgress?: boolean;
  /**
   * Send the beats from the heartbeat thread: a worker thread with its own NATS connection,
   * driven through shared memory, so they go on while this thread's event loop is blocked (a
   * synchronous driver, a CPU-bound transform, a long GC pause). Still bounded by
   * `maxHeartbeats`, still only while the work runs; the call resolves only once every beat the
   * thread sent reached the server, so a NAK with a delay sent next cannot be overtaken.
   *
   * `true` copies the servers, name and user/password or token of `connection` (else of the
   * connection the messages arrived on); a connection that authenticates through a function
   * (credentials, nkey) is refused with a `TypeError` — pass its plain data instead:
   * `{ servers, creds: readFileSync(file, "utf8") }`. One thread per process and connection,
   * shared, closed when unused; about 20 MB of memory. Messages the work settles itself are
   * noticed between rounds, so settle them after the call returns.
   *
   * @example
   * ```ts
   * await withInProgress(msgs, () => db.transaction(() => insertAll(msgs))(), policy, { thread: true, connection: nc });
   * ```
   */
  readonly thread?: HeartbeatThreadOption;
}

