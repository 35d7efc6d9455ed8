/**
 * The PostgreSQL example sink against a real PostgreSQL (DATABASE_URL, default the local one)
 * and a real nats-server. PostgreSQL is required: when it cannot be reached the suite fails
 * with one line saying how to start it.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";
import { DeadLetterHeaders, InMemoryMetrics, MetricNames, withInProgress } from "jetstream-inprogress";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DEFAULT_DATABASE_URL,
  ensurePostgresTable,
  postgresBatchWrite,
  runPostgresSink,
  type CommitEvent,
} from "../../examples/postgres-sink.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, eventually, fetchBatch, publish, type Fixture } from "../helpers/jetstream.js";
import { startServer, type NatsServer } from "../helpers/nats-server.js";

const root = join(import.meta.dirname, "..", "..");
const databaseUrl = process.env["DATABASE_URL"] ?? DEFAULT_DATABASE_URL;

/** The URL without its password, for messages. */
function redacted(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "(unparseable URL)";
  }
}

describe("PostgreSQL sink (real PostgreSQL, real nats-server)", () => {
  let srv: NatsServer;
  let pool: pg.Pool;
  const schema = `jsip_pg_${process.pid}_${Date.now().toString(36)}`;
  const table = `${schema}.events`;

  /** Set when PostgreSQL cannot be reached: every test then fails with this one line (never skips). */
  let unreachable: Error | undefined;

  beforeAll(async () => {
    pool = new pg.Pool({ connectionString: databaseUrl, max: 8, connectionTimeoutMillis: 5_000 });
    pool.on("error", () => undefined);
    try {
      await pool.query("SELECT 1");
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      // One line, no stack: the fix is starting a server, not a debug session.
      unreachable = new Error(
        `PostgreSQL is not reachable at DATABASE_URL=${redacted(databaseUrl)} (${reason}): start it ` +
          "(Debian: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start, as root; .ci/run does this) " +
          "or set DATABASE_URL to a running server",
      );
      unreachable.stack = unreachable.message;
      return;
    }
    await pool.query(`CREATE SCHEMA ${pg.escapeIdentifier(schema)}`);
    await ensurePostgresTable(pool, table);
    srv = await startServer();
  });

  /** Fails the calling test when PostgreSQL is unreachable. */
  function requirePostgres(): void {
    if (unreachable) throw unreachable;
  }

  afterAll(async () => {
    if (!unreachable) await pool?.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`).catch(() => undefined);
    await pool?.end().catch(() => undefined);
    await srv?.dispose();
  });

  /** Holds the uniqueness lock on (stream, seq) in an open transaction, so the sink's upsert of that row blocks. */
  async function lockRow(stream: string, seq: number): Promise<{ release(): Promise<void> }> {
    const client = await pool.connect();
    await client.query("BEGIN");
    await client.query(`INSERT INTO ${table} (stream, seq, subject, payload) VALUES ($1, $2, 'lock', '{}')`, [stream, seq]);
    return {
      async release() {
        await client.query("ROLLBACK");
        client.release();
      },
    };
  }

  async function rowsOf(stream: string): Promise<{ seq: number; writes: number; payload: unknown }[]> {
    const res = await pool.query<{ seq: string; writes: number; payload: unknown }>(
      `SELECT seq, writes, payload FROM ${table} WHERE stream = $1 ORDER BY seq`,
      [stream],
    );
    return res.rows.map((r) => ({ seq: Number(r.seq), writes: r.writes, payload: r.payload }));
  }

  it("writes every message exactly once, heartbeats slow transactions, dead-letters a rejected row, and acks only after COMMIT", async () => {
    requirePostgres();
    const nc = await srv.connect();
    const spyNc = await srv.connect();
    try {
      const f: Fixture = await createFixture(nc, { ackWaitMs: 3_000 });
      const dlqStream = `${f.stream}_DLQ`;
      const dlqSubject = `${f.stream.toLowerCase()}.dlq`;
      await f.jsm.streams.add({ name: dlqStream, subjects: [dlqSubject] });
      await using spy = await AckSpy.start(spyNc, f.stream);

      const N = 10;
      const POISON = 6; // not JSON: the ::jsonb cast fails with SQLSTATE 22P02
      const SLOW = [4, 8];
      const seqs = await publish(f, N, (i) => (i === POISON ? `{"n": ${i},` : JSON.stringify({ n: i })));
      expect(seqs).toEqual(Array.from({ length: N }, (_, i) => i + 1));

      const commits = new Map<number, number[]>();
      const onCommit = (e: CommitEvent): void => {
        for (const s of e.sequences) commits.set(s, [...(commits.get(s) ?? []), e.committedAt]);
      };

      // A worker that committed seq 1 and then lost it before its ACK: JetStream delivers it again.
      const [first] = await fetchBatch(f, 1);
      expect(first?.seq).toBe(1);
      const earlierCommits: CommitEvent[] = [];
      const write = postgresBatchWrite({ pool, table, onCommit: (e) => earlierCommits.push(e) });
      await withInProgress([first!], (ctx) => write([first!], ctx), { enabled: false });
      first!.nak();
      expect(earlierCommits.map((e) => e.sequences)).toEqual([[1]]);

      // Two slow transactions: their upserts wait for these locks.
      const locks = new Map<number, { release(): Promise<void> }>();
      for (const s of SLOW) locks.set(s, await lockRow(f.stream, s));

      const metrics = new InMemoryMetrics();
      const shutdown = new AbortController();
      const running = runPostgresSink({
        nc,
        pool,
        stream: f.stream,
        consumer: f.consumer,
        table,
        signal: shutdown.signal,
        deadLetterSubject: dlqSubject,
        batchSize: 3,
        heartbeatIntervalMs: 1_000,
        metrics,
        onCommit,
      });
      try {
        // Hold each lock until its transaction has been kept alive past AckWait (4 beats, 1 s apart).
        for (const s of SLOW) {
          await spy.waitFor((fr) => fr.filter((x) => x.kind === "+WPI" && x.streamSequence === s).length >= 4, 30_000, `4 heartbeats for seq ${s}`);
          await locks.get(s)!.release();
        }
        await spy.waitFor(
          (fr) => seqs.every((s) => fr.some((x) => x.kind === "+ACK" && x.streamSequence === s)),
          30_000,
          "an ACK for every message",
        );
      } finally {
        shutdown.abort();
        await running;
      }

      // Every message but the poison one is exactly one row; the redelivered one was upserted twice.
      const rows = await rowsOf(f.stream);
      expect(rows.map((r) => r.seq)).toEqual(seqs.filter((s) => s !== POISON));
      expect(rows.find((r) => r.seq === 1)?.writes).toBe(2);
      expect(rows.filter((r) => r.seq !== 1).every((r) => r.writes === 1)).toBe(true);
      expect(rows.find((r) => r.seq === 5)?.payload).toEqual({ n: 5 });

      // The poison message is in the dead-letter stream, not in the table.
      const dlqInfo = await f.jsm.streams.info(dlqStream);
      expect(dlqInfo.state.messages).toBe(1);
      const dead = await f.jsm.streams.getMessage(dlqStream, { seq: 1 });
      expect(dead?.header.get(DeadLetterHeaders.STREAM_SEQUENCE)).toBe(String(POISON));
      expect(dead?.string()).toBe(`{"n": ${POISON},`);
      expect(commits.has(POISON)).toBe(false);
      expect(metrics.snapshot().counters[MetricNames.MESSAGES_DEAD_LETTERED_TOTAL]).toBe(1);

      // Nothing pending, and the only redelivery is the one seq 1 asked for with its NAK.
      const info = await consumerInfo(f);
      expect(info.num_pending).toBe(0);
      expect(info.num_ack_pending).toBe(0);
      expect(info.num_redelivered).toBe(0);
      expect(info.delivered.consumer_seq).toBe(N + 1);
      for (const fr of spy.frames) {
        if (fr.streamSequence !== 1) expect(fr.deliveryCount, `seq ${fr.streamSequence} ${fr.kind}`).toBe(1);
      }

      // The slow transactions outlived AckWait under heartbeats and were never redelivered.
      for (const s of SLOW) {
        const frames = spy.forSequence(s);
        expect(frames.filter((x) => x.kind === "+WPI").length).toBeGreaterThanOrEqual(4);
        expect(frames.every((x) => x.deliveryCount === 1)).toBe(true);
        expect(frames.filter((x) => x.kind === "+ACK")).toHaveLength(1);
      }

      // No ACK preceded the sink's COMMIT of its row (each row committed once by the sink).
      for (const ackFrame of spy.of("+ACK")) {
        if (ackFrame.streamSequence === POISON) continue;
        const committed = commits.get(ackFrame.streamSequence) ?? [];
        expect(committed.length, `commits of seq ${ackFrame.streamSequence}`).toBe(1);
        expect(committed[0], `COMMIT before ACK of seq ${ackFrame.streamSequence}`).toBeLessThan(ackFrame.at);
      }
      expect(spy.of("+ACK")).toHaveLength(N);
    } finally {
      await spyNc.close();
      await nc.close();
    }
  });

  it("a shutdown during a blocked transaction cancels the statement, commits nothing and sends no ACK", async () => {
    requirePostgres();
    const nc = await srv.connect();
    const spyNc = await srv.connect();
    try {
      const f = await createFixture(nc, { ackWaitMs: 3_000 });
      await using spy = await AckSpy.start(spyNc, f.stream);
      const seqs = await publish(f, 2, (i) => JSON.stringify({ n: i }));
      const lock = await lockRow(f.stream, 1);
      const committed: CommitEvent[] = [];
      const shutdown = new AbortController();
      const running = runPostgresSink({
        nc,
        pool,
        stream: f.stream,
        consumer: f.consumer,
        table,
        signal: shutdown.signal,
        batchSize: 2,
        heartbeatIntervalMs: 1_000,
        onCommit: (e) => committed.push(e),
      });
      let stoppedInMs: number;
      try {
        await spy.waitFor((fr) => fr.some((x) => x.kind === "+WPI" && x.streamSequence === 1), 20_000, "a heartbeat for seq 1");
        const t0 = performance.now();
        shutdown.abort();
        await running;
        stoppedInMs = performance.now() - t0;
      } finally {
        shutdown.abort();
        await lock.release();
      }
      // The blocked statement was cancelled: the stop did not wait for the 5 s shutdown bound.
      expect(stoppedInMs).toBeLessThan(4_000);
      expect(committed).toEqual([]);
      expect(await rowsOf(f.stream)).toEqual([]);
      await spyNc.flush();
      expect(spy.frames.filter((x) => x.kind !== "+WPI")).toEqual([]);
      const info = await consumerInfo(f);
      expect(info.num_ack_pending).toBe(seqs.length); // left for redelivery
      // The pool is healthy afterwards.
      expect((await pool.query<{ one: number }>("SELECT 1 AS one")).rows[0]?.one).toBe(1);
    } finally {
      await spyNc.close();
      await nc.close();
    }
  });

  it("runs as a program from the environment and stops gracefully on SIGTERM", async () => {
    requirePostgres();
    const nc = await srv.connect();
    const spyNc = await srv.connect();
    try {
      const f = await createFixture(nc, { ackWaitMs: 3_000 });
      await using spy = await AckSpy.start(spyNc, f.stream);
      const seqs = await publish(f, 3, (i) => JSON.stringify({ n: i }));
      const child = spawn(process.execPath, ["--import", "tsx", join(root, "examples", "postgres-sink.ts")], {
        cwd: root,
        env: { ...process.env, NATS_URL: srv.url, DATABASE_URL: databaseUrl, STREAM: f.stream, CONSUMER: f.consumer, TABLE: table },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (b: Buffer) => (stdout += b.toString()));
      child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
      try {
        await spy.waitFor((fr) => seqs.every((s) => fr.some((x) => x.kind === "+ACK" && x.streamSequence === s)), 30_000, "3 ACKs");
        await eventually(() => stdout.includes("committed"), "a commit line");
      } finally {
        child.kill("SIGTERM");
      }
      const code = await exited;
      expect(stderr).toBe("");
      expect(code).toBe(0);
      expect(stdout).toContain("SIGTERM: finishing the batch in flight");
      expect(stdout).toContain("stopped: 3 acked");
      expect((await rowsOf(f.stream)).map((r) => r.seq)).toEqual(seqs);
    } finally {
      await spyNc.close();
      await nc.close();
    }
  });
});
