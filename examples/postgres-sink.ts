/**
 * A real sink: every fetched batch is written to PostgreSQL in one transaction, with an
 * idempotent upsert keyed by (stream, stream sequence), and acknowledged only after COMMIT
 * returned. Heartbeats keep a slow transaction's messages from being redelivered; an abort
 * (shutdown) or a lost lease cancels the running statement and rolls back, so nothing is
 * committed that could be acknowledged by another worker. Rows PostgreSQL rejects (bad JSON,
 * a violated constraint) go to the dead-letter subject; connection trouble, serialization
 * failures and deadlocks are retried.
 *
 * The stream and its durable pull consumer (explicit acks) must exist; the table is created
 * if missing. Heartbeats default to a third of the consumer's AckWait.
 *
 * Run: NATS_URL=nats://127.0.0.1:4222 DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
 *      STREAM=ORDERS CONSUMER=pg-writer [TABLE=jetstream_messages] [DEAD_LETTER_SUBJECT=orders.dlq] \
 *      npx tsx examples/postgres-sink.ts
 * Stop it with Ctrl-C (SIGINT) or SIGTERM: the batch in flight finishes or rolls back first.
 */
import { pathToFileURL } from "node:url";
import { jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import pg from "pg";
import {
  CommitThenAck,
  InMemoryMetrics,
  LeaseExpiredError,
  MetricNames,
  PermanentSinkError,
  TemporarySinkError,
  consumerTimingFromConfig,
  type BatchWrite,
  type FailedMessage,
  type MetricsSink,
  type WorkContext,
} from "jetstream-inprogress";

/** The table used when none is given. */
export const DEFAULT_TABLE = "jetstream_messages";

/** The database used when `DATABASE_URL` is not set: the local PostgreSQL, trust auth. */
export const DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/postgres";

/**
 * Reported once per committed transaction, right after COMMIT returned.
 */
export interface CommitEvent {
  /** The table written to. */
  readonly table: string;
  /** Stream sequences of the rows committed (upserted) in this transaction. */
  readonly sequences: readonly number[];
  /** `performance.now()` just after COMMIT returned. */
  readonly committedAt: number;
}

/**
 * Options of {@link postgresBatchWrite}.
 */
export interface PostgresWriteOptions {
  /** A pool; one client per batch, plus a short second connection to cancel a statement on abort. */
  readonly pool: pg.Pool;
  /** Table name, optionally schema-qualified (`events` or `app.events`); default {@link DEFAULT_TABLE}. */
  readonly table?: string;
  /** Called after each COMMIT (logging, tests). Must not throw; if it does, it is ignored. */
  readonly onCommit?: (event: CommitEvent) => void;
}

/**
 * Options of {@link runPostgresSink}.
 */
export interface PostgresSinkOptions extends PostgresWriteOptions {
  /** The connection to consume from (and to dead-letter through). */
  readonly nc: NatsConnection;
  /** The stream name. */
  readonly stream: string;
  /** The durable pull consumer (explicit acks) of that stream. */
  readonly consumer: string;
  /** Stops the sink gracefully: no new fetch, the batch in flight commits or rolls back. */
  readonly signal?: AbortSignal;
  /** A subject captured by a dead-letter stream; without it, rejected rows are terminated. */
  readonly deadLetterSubject?: string;
  /** Messages per fetch (and per transaction); default 100. */
  readonly batchSize?: number;
  /** Heartbeat interval; default a third of the consumer's AckWait. */
  readonly heartbeatIntervalMs?: number;
  /** Heartbeats per batch at most; default 30. A write that outlives them loses its lease and rolls back. */
  readonly maxHeartbeats?: number;
  /** Where the library's metrics go. */
  readonly metrics?: MetricsSink;
  /** Called with fetch errors (the loop retries them). */
  readonly onError?: (error: unknown) => void;
}

/**
 * Consumes `stream` > `consumer` into PostgreSQL until `signal` aborts: one transaction per
 * fetched batch, ACK after COMMIT, heartbeats while the transaction runs. Fails closed before
 * the first fetch when the consumer is missing or its AckWait does not fit the heartbeat
 * interval.
 *
 * @param options - connections, names and tuning; see {@link PostgresSinkOptions}.
 * @returns a promise that resolves after a graceful stop.
 * @throws `ConsumerPolicyError` from `CommitThenAck.forConsumer` (before anything is fetched);
 *   `TypeError` for a table name that is not a plain identifier.
 *
 * @example
 * ```ts
 * const shutdown = new AbortController();
 * process.once("SIGTERM", () => shutdown.abort());
 * await runPostgresSink({ nc, pool, stream: "ORDERS", consumer: "pg-writer", signal: shutdown.signal });
 * ```
 */
export async function runPostgresSink(options: PostgresSinkOptions): Promise<void> {
  const { nc, pool, stream, consumer } = options;
  const table = options.table ?? DEFAULT_TABLE;
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);

  let intervalMs = options.heartbeatIntervalMs;
  if (intervalMs === undefined) {
    // A third of AckWait leaves two beats of slack before the redelivery deadline. If the
    // consumer cannot be read here, forConsumer below fails closed with the reason.
    const info = await jsm.consumers.info(stream, consumer).catch(() => undefined);
    const ackWaitMs = info ? consumerTimingFromConfig(info, "inspected").ackWaitMs : undefined;
    if (ackWaitMs !== undefined && ackWaitMs >= 3) intervalMs = Math.min(3_600_000, Math.floor(ackWaitMs / 3));
  }
  const ack = await CommitThenAck.forConsumer(jsm, stream, consumer, {
    inProgress: { enabled: true, maxHeartbeats: options.maxHeartbeats ?? 30, ...(intervalMs !== undefined ? { intervalMs } : {}) },
    connection: nc,
    onTemporaryFailure: { action: "nak", delayMs: 1_000 },
    ...(options.deadLetterSubject !== undefined ? { deadLetter: { js, subject: options.deadLetterSubject } } : {}),
    ...(options.metrics !== undefined ? { metrics: options.metrics } : {}),
  });

  await ensurePostgresTable(pool, table);
  const write = postgresBatchWrite({ pool, table, ...(options.onCommit !== undefined ? { onCommit: options.onCommit } : {}) });
  await ack.run(await js.consumers.get(stream, consumer), write, {
    batchSize: options.batchSize ?? 100,
    ...(options.signal !== undefined ? { signal: options.signal } : {}),
    ...(options.onError !== undefined ? { onError: options.onError } : {}),
  });
}

/**
 * Creates the sink's table if it does not exist: one row per stream message, keyed by
 * (stream, seq); `writes` counts how often the row was upserted (a redelivered message that had
 * already been committed bumps it instead of adding a row).
 *
 * @param pool - the pool to use.
 * @param table - table name, optionally schema-qualified; the schema must exist.
 * @returns once the table exists.
 * @throws `TypeError` for a name that is not a plain identifier; the database's error otherwise.
 *
 * @example
 * ```ts
 * await ensurePostgresTable(pool, "app.events");
 * ```
 */
export async function ensurePostgresTable(pool: pg.Pool, table: string = DEFAULT_TABLE): Promise<void> {
  const name = quoteTable(table);
  try {
    await pool.query(
      `CREATE TABLE IF NOT EXISTS ${name} (
         stream     text        NOT NULL,
         seq        bigint      NOT NULL,
         subject    text        NOT NULL,
         payload    jsonb       NOT NULL,
         writes     integer     NOT NULL DEFAULT 1,
         updated_at timestamptz NOT NULL DEFAULT now(),
         PRIMARY KEY (stream, seq)
       )`,
    );
  } catch (err) {
    // Two workers creating the table at once: the loser sees a duplicate type or table.
    const code = sqlState(err);
    if (code !== "42P07" && code !== "23505") throw err;
  }
}

/**
 * The write for `CommitThenAck`: upserts the batch in one transaction and resolves only after
 * COMMIT returned. Rows PostgreSQL rejects for their data are isolated with savepoints and
 * reported as permanent failures (the rest of the batch still commits); any other error fails
 * the whole batch, classified by {@link classifyPostgresError}. When `ctx.signal` aborts
 * (shutdown, lost lease) the running statement is cancelled and the transaction rolled back.
 *
 * @param options - the pool, the table and an optional commit callback.
 * @returns a `BatchWrite` for `CommitThenAck.process` or `run`.
 * @throws `TypeError` for a table name that is not a plain identifier.
 *
 * @example
 * ```ts
 * const ack = await CommitThenAck.forConsumer(jsm, "ORDERS", "pg-writer", { inProgress: { enabled: true, intervalMs: 10_000 } });
 * await ack.run(consumer, postgresBatchWrite({ pool, table: "orders_in" }), { signal });
 * ```
 */
export function postgresBatchWrite(options: PostgresWriteOptions): BatchWrite {
  const table = options.table ?? DEFAULT_TABLE;
  const name = quoteTable(table);
  const upsertHead = `INSERT INTO ${name} AS t (stream, seq, subject, payload) VALUES `;
  const upsertTail =
    " ON CONFLICT (stream, seq) DO UPDATE SET subject = EXCLUDED.subject, payload = EXCLUDED.payload, writes = t.writes + 1, updated_at = now()";
  const upsert = (client: pg.PoolClient, rows: readonly JsMsg[]): Promise<unknown> => {
    const values: unknown[] = [];
    const tuples = rows.map((m, i) => {
      values.push(m.info.stream, m.seq, m.subject, m.string());
      return `($${i * 4 + 1}, $${i * 4 + 2}, $${i * 4 + 3}, $${i * 4 + 4}::jsonb)`;
    });
    return client.query(upsertHead + tuples.join(", ") + upsertTail, values);
  };

  return async (msgs: readonly JsMsg[], ctx: WorkContext) => {
    ctx.signal.throwIfAborted();
    // One row per stream sequence: a single statement may not upsert the same key twice.
    const rows = [...new Map(msgs.map((m) => [rowKey(m), m])).values()];
    let client: pg.PoolClient;
    try {
      client = await options.pool.connect();
    } catch (err) {
      throw classifyPostgresError(err);
    }
    const canceller = new StatementCanceller(options.pool, client, ctx.signal);
    let broken = false;
    try {
      await canceller.start();
      await client.query("BEGIN");
      const rejected = new Map<string, PermanentSinkError>();
      await client.query("SAVEPOINT batch");
      try {
        await upsert(client, rows);
      } catch (err) {
        const error = classifyPostgresError(err);
        if (!(error instanceof PermanentSinkError) || ctx.signal.aborted) throw error;
        // Some row is bad: find it, one savepoint per row, and keep the others.
        await client.query("ROLLBACK TO SAVEPOINT batch");
        for (const m of rows) {
          await client.query("SAVEPOINT row");
          try {
            await upsert(client, [m]);
            await client.query("RELEASE SAVEPOINT row");
          } catch (rowErr) {
            const rowError = classifyPostgresError(rowErr);
            if (!(rowError instanceof PermanentSinkError) || ctx.signal.aborted) throw rowError;
            await client.query("ROLLBACK TO SAVEPOINT row");
            rejected.set(rowKey(m), rowError);
          }
        }
      }
      // The last point of no return: after an abort or a lost lease another worker may own
      // these messages, so nothing is committed.
      if (ctx.signal.aborted) throw abortError(ctx.signal);
      await client.query("COMMIT");
      const committedAt = performance.now();
      const sequences = rows.filter((m) => !rejected.has(rowKey(m))).map((m) => m.seq);
      report(options.onCommit, { table, sequences, committedAt });
      const failed: FailedMessage[] = [];
      for (const m of msgs) {
        const error = rejected.get(rowKey(m));
        if (error) failed.push({ msg: m, error });
      }
      return { failed };
    } catch (err) {
      broken = !(await rollback(client));
      if (ctx.signal.aborted) throw abortError(ctx.signal, err);
      throw classifyPostgresError(err);
    } finally {
      const cancelled = await canceller.stop();
      // A connection a cancel was sent to, or that failed to roll back, is not reused.
      client.release(broken || cancelled);
    }
  };
}

function rowKey(m: JsMsg): string {
  return `${m.info.stream}\u0000${m.seq}`;
}

/**
 * Turns a PostgreSQL (or connection) error into the library's error classes by its SQLSTATE:
 *
 * - permanent ({@link PermanentSinkError}, the row is dead-lettered): class 22 data exception
 *   (invalid input syntax, out of range, bad JSON) and class 23 integrity constraint violation
 *   (check, not-null, foreign key);
 * - temporary ({@link TemporarySinkError}, retried later): class 08 connection exception,
 *   class 40 transaction rollback (serialization failure, deadlock), class 53 insufficient
 *   resources, class 57 operator intervention (admin shutdown, cancelled statement), lock
 *   timeouts, network errors without a SQLSTATE — and anything else, since a retry is safer
 *   than losing a message to a bug in the sink.
 *
 * The message names the SQLSTATE, never the row's values; the original error is the `cause`.
 *
 * @param err - what the `pg` client threw.
 * @returns the classified error (returned, not thrown).
 *
 * @example
 * ```ts
 * try { await client.query(sql, values); } catch (err) { throw classifyPostgresError(err); }
 * ```
 */
export function classifyPostgresError(err: unknown): TemporarySinkError | PermanentSinkError {
  if (err instanceof TemporarySinkError || err instanceof PermanentSinkError) return err;
  const code = sqlState(err);
  if (code !== undefined && (code.startsWith("22") || code.startsWith("23"))) {
    return new PermanentSinkError(`PostgreSQL rejected the row (SQLSTATE ${code})`, { cause: err });
  }
  if (code !== undefined) {
    const kind = code.startsWith("08") ? "connection exception"
      : code.startsWith("40") ? "transaction rolled back"
      : code.startsWith("53") ? "insufficient resources"
      : code.startsWith("57") ? "operator intervention"
      : "error";
    return new TemporarySinkError(`PostgreSQL ${kind} (SQLSTATE ${code})`, { cause: err });
  }
  const sys = (err as { code?: unknown } | null)?.code;
  return new TemporarySinkError(`PostgreSQL unreachable or connection lost${typeof sys === "string" ? ` (${sys})` : ""}`, { cause: err });
}

/** A SQLSTATE is five characters of digits and upper-case letters; Node's own codes (ECONNREFUSED) are not. */
function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

function quoteTable(table: string): string {
  const parts = typeof table === "string" ? table.split(".") : [];
  if (parts.length < 1 || parts.length > 2 || !parts.every((p) => IDENTIFIER.test(p))) {
    throw new TypeError(`table must be a plain identifier, optionally schema-qualified (letters, digits, _), got ${JSON.stringify(table)}`);
  }
  return parts.map((p) => pg.escapeIdentifier(p)).join(".");
}

/** The abort reason as a sink error: a lost lease or a shutdown, never a commit. */
function abortError(signal: AbortSignal, cause?: unknown): TemporarySinkError {
  const why = signal.reason instanceof LeaseExpiredError ? "lease lost" : "aborted";
  return new TemporarySinkError(`transaction rolled back: ${why}`, { cause: cause ?? signal.reason });
}

async function rollback(client: pg.PoolClient): Promise<boolean> {
  try {
    await client.query("ROLLBACK");
    return true;
  } catch {
    return false;
  }
}

function report(onCommit: PostgresWriteOptions["onCommit"], event: CommitEvent): void {
  try {
    onCommit?.(event);
  } catch {
    // A callback must not turn a committed batch into a failure.
  }
}

/** The server process of each pooled connection (it does not change while the connection lives). */
const backendPids = new WeakMap<pg.PoolClient, number>();

/**
 * Cancels the client's running statement when the signal aborts, through a second connection
 * (`pg_cancel_backend`), so a shutdown or a lost lease does not wait for a blocked statement.
 */
class StatementCanceller {
  readonly #pool: pg.Pool;
  readonly #client: pg.PoolClient;
  readonly #signal: AbortSignal;
  #pid: number | undefined;
  #cancel: Promise<unknown> | undefined;
  readonly #onAbort = (): void => {
    if (this.#pid === undefined || this.#cancel) return;
    this.#cancel = this.#pool.query("SELECT pg_cancel_backend($1)", [this.#pid]).catch(() => undefined);
  };

  constructor(pool: pg.Pool, client: pg.PoolClient, signal: AbortSignal) {
    this.#pool = pool;
    this.#client = client;
    this.#signal = signal;
  }

  async start(): Promise<void> {
    let pid = backendPids.get(this.#client);
    if (pid === undefined) {
      const res = await this.#client.query<{ pid: number }>("SELECT pg_backend_pid() AS pid");
      pid = res.rows[0]?.pid;
      if (pid !== undefined) backendPids.set(this.#client, pid);
    }
    this.#pid = pid;
    this.#signal.addEventListener("abort", this.#onAbort, { once: true });
    if (this.#signal.aborted) this.#onAbort();
  }

  /** Stops listening; waits for a cancel in flight. Returns whether one was sent. */
  async stop(): Promise<boolean> {
    this.#signal.removeEventListener("abort", this.#onAbort);
    if (!this.#cancel) return false;
    await this.#cancel;
    return true;
  }
}

/** Runs the sink from the environment until SIGINT or SIGTERM. */
async function main(): Promise<void> {
  const env = (name: string): string => {
    const v = process.env[name];
    if (!v) {
      console.error(`postgres-sink: set ${name} (NATS_URL, DATABASE_URL, STREAM, CONSUMER; optional TABLE, DEAD_LETTER_SUBJECT)`);
      process.exit(2);
    }
    return v;
  };
  const stream = env("STREAM");
  const consumer = env("CONSUMER");
  const nc = await connect({ servers: process.env["NATS_URL"] ?? "nats://127.0.0.1:4222" });
  const pool = new pg.Pool({ connectionString: process.env["DATABASE_URL"] ?? DEFAULT_DATABASE_URL, max: 4 });
  pool.on("error", () => undefined); // an idle client's connection dropped; the next query reconnects
  const shutdown = new AbortController();
  const stop = (sig: string): void => {
    console.log(`${sig}: finishing the batch in flight`);
    shutdown.abort();
  };
  process.once("SIGINT", () => stop("SIGINT"));
  process.once("SIGTERM", () => stop("SIGTERM"));
  const metrics = new InMemoryMetrics();
  const table = process.env["TABLE"] ?? DEFAULT_TABLE;
  const deadLetterSubject = process.env["DEAD_LETTER_SUBJECT"];
  try {
    console.log(`starting: ${stream} > ${consumer} into table ${table}`);
    await runPostgresSink({
      nc,
      pool,
      stream,
      consumer,
      table,
      signal: shutdown.signal,
      metrics,
      ...(deadLetterSubject ? { deadLetterSubject } : {}),
      onCommit: (e) => console.log(`committed ${e.sequences.length} row(s), last seq ${e.sequences.at(-1) ?? "-"}`),
      onError: (err) => console.error(`fetch failed, retrying: ${String(err)}`),
    });
    const c = metrics.snapshot().counters;
    console.log(
      `stopped: ${c[MetricNames.MESSAGES_ACKED_TOTAL] ?? 0} acked, ${c[MetricNames.MESSAGES_DEAD_LETTERED_TOTAL] ?? 0} dead-lettered, ` +
        `${c[MetricNames.MESSAGES_NACKED_TOTAL] ?? 0} retried, ${c[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL] ?? 0} heartbeats`,
    );
  } finally {
    await pool.end();
    await nc.drain();
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    console.error(`postgres-sink: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  });
}
