/**
 * Nothing sensitive leaves the process through the library. The scenarios below run against a
 * real nats-server that requires a password, with distinctive subjects, payload bytes, header
 * names and values, message ids and credentials. Afterwards everything the library emitted is
 * scanned for each of them: the Prometheus exposition, an OpenTelemetry export, every
 * diagnostics payload, every error the library created (with its cause chain), and anything
 * written to stdout, stderr or the console. Stream sequences are small integers, so they are
 * checked by meaning: no label, event field or error property is a sequence, and no text holds
 * an ack reply subject (`$JS.ACK.…`, which encodes the sequences).
 *
 * Stream and consumer names are allowed in exactly two places: `ConsumerPolicyError` (message,
 * properties and cause chain) and the `stream`/`consumer` labels of `watchConsumer({ labels: true })`.
 * Errors of the NATS client that the library passes through unchanged (to `onError`, or a failed
 * dead-letter publish) are the client's: they are checked for everything except those names.
 * Host-created errors (`BatchResult.error`, `MessageResult.error`) are the host's and not scanned.
 */
import { randomBytes } from "node:crypto";
import { inspect } from "node:util";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { AckPolicy, jetstream, jetstreamManager, type ConsumerConfig, type JsMsg } from "@nats-io/jetstream";
import { connect, headers, nanos, type NatsConnection } from "@nats-io/transport-node";
import { MeterProvider, MetricReader } from "@opentelemetry/sdk-metrics";
import { Registry } from "prom-client";
import {
  CommitThenAck,
  ConsumerPolicyError,
  DiagnosticsChannels,
  HeartbeatLimitError,
  InProgressPolicyError,
  LeaseExpiredError,
  MetricNames,
  PermanentSinkError,
  TemporarySinkError,
  verifyInProgressPolicy,
  watchConsumer,
  withInProgress,
  type ConsumerHealthSample,
  type MetricLabels,
  type MetricName,
  type MetricsSink,
  type WorkContext,
} from "../../src/index.js";
import { openTelemetryMetrics } from "../../src/adapters/opentelemetry.js";
import { prometheusMetrics } from "../../src/adapters/prometheus.js";
import { withLateAcks } from "../helpers/late-acks.js";
import { ALL_EVENT_FIELDS, EventLog, expectShape } from "../helpers/diagnostics.js";
import { eventually, fetchBatch, type Fixture } from "../helpers/jetstream.js";
import { startServer, type NatsServer } from "../helpers/nats-server.js";
import { TcpProxy } from "../reliability/tcp-proxy.js";

const ACK_WAIT_MS = 2000;
const RUN = randomBytes(3).toString("hex").toUpperCase();

// ---- the distinctive values -------------------------------------------------------------
const SUBJECT_ROOT = "zq7.subjtok_h4x9";
const SUBJECT_LEAF = "tenant_w2p8";
const DLQ_SUBJECT = "zq7dlq.deadtok_m3n5";
const PAYLOAD = "payload-bytes-Ux93LmQ";
const HEADER_KEY = "X-Hdrkey-Jq5Wt";
const HEADER_VALUE = "hdrval-Zr81Kp";
const MSG_ID = "msgid-Vb27Qc";
const USER = "u_secret";
const PASS = "p_secret_123";
const READER_USER = "r_reader_k2";
const READER_PASS = "p_reader_456";

/** Found in no output at all (compared case-insensitively). */
const SECRETS = [
  "subjtok_h4x9",
  SUBJECT_LEAF,
  "deadtok_m3n5",
  PAYLOAD,
  HEADER_KEY,
  HEADER_VALUE,
  MSG_ID,
  USER,
  PASS,
  READER_USER,
  READER_PASS,
  // An ack reply subject encodes the stream, the consumer and the message's sequences.
  "$JS.ACK.",
];

// Names known when the server starts (the restricted identity's permissions name them).
const WATCH_STREAM = `NMWATCH_${RUN}`;
const READABLE = `NMREADABLE_${RUN}`;
const DENIED = `NMDENIED_${RUN}`;

/** Every stream and consumer name the scenarios create. */
const NAMES = new Set<string>([WATCH_STREAM, READABLE, DENIED]);
/** Every stream sequence of a message the scenarios used. */
const SEQUENCES = new Set<number>();
let published = 0;

// ---- what the library emitted ------------------------------------------------------------
interface RecordedCall {
  readonly kind: keyof MetricsSink;
  readonly name: MetricName;
  readonly value: number;
  readonly labels: MetricLabels | undefined;
}

/** A pull reader: the test decides when to collect. */
class TestReader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

/** A sink feeding Prometheus, OpenTelemetry and a call log at once. */
function teeSink() {
  const registry = new Registry();
  const prom = prometheusMetrics({ registry, prefix: "myapp_" });
  const reader = new TestReader();
  const provider = new MeterProvider({ readers: [reader] });
  const otel = openTelemetryMetrics({ meter: provider.getMeter("redaction") });
  const calls: RecordedCall[] = [];
  const sinks = [prom, otel];
  const sink: MetricsSink = {
    addCounter(name, value, labels) {
      calls.push({ kind: "addCounter", name, value, labels });
      for (const s of sinks) s.addCounter(name, value, labels);
    },
    setGauge(name, value, labels) {
      calls.push({ kind: "setGauge", name, value, labels });
      for (const s of sinks) s.setGauge(name, value, labels);
    },
    recordObservation(name, value, labels) {
      calls.push({ kind: "recordObservation", name, value, labels });
      for (const s of sinks) s.recordObservation(name, value, labels);
    },
  };
  return {
    sink,
    calls,
    prometheusText: () => registry.metrics(),
    openTelemetryExport: async () => {
      const { resourceMetrics, errors } = await reader.collect();
      expect(errors).toEqual([]);
      return resourceMetrics.scopeMetrics;
    },
    shutdown: () => provider.shutdown(),
  };
}

/** Errors the library created (thrown, rejected, returned, or set as an abort reason). */
const libraryErrors: Array<{ where: string; error: unknown }> = [];
/** Errors of the NATS client the library handed on unchanged. */
const clientErrors: Array<{ where: string; error: unknown }> = [];

function keep(list: typeof libraryErrors, where: string, error: unknown): void {
  expect(error, where).toBeDefined();
  list.push({ where, error });
}

/** An error, its own properties and its cause chain as text. */
function errorText(error: unknown): string {
  const parts: string[] = [];
  let e: unknown = error;
  for (let depth = 0; e !== undefined && e !== null && depth < 10; depth++) {
    if (e instanceof Error) {
      const own: Record<string, unknown> = {};
      for (const k of Object.keys(e)) if (k !== "cause") own[k] = (e as unknown as Record<string, unknown>)[k];
      parts.push(e.name, e.message, safeJson(own));
      e = e.cause;
    } else {
      parts.push(typeof e === "object" ? safeJson(e) : String(e));
      e = undefined;
    }
  }
  return parts.join("\n");
}

function safeJson(value: unknown): string {
  try {
    return JSON.stringify(value, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v)) ?? "";
  } catch {
    return inspect(value, { depth: 10 });
  }
}

interface Finding {
  readonly where: string;
  readonly token: string;
}

function scan(where: string, text: string, tokens: Iterable<string>): Finding[] {
  const haystack = text.toLowerCase();
  const found: Finding[] = [];
  for (const token of tokens) if (haystack.includes(token.toLowerCase())) found.push({ where, token });
  return found;
}

// ---- the scenarios -----------------------------------------------------------------------
describe("nothing sensitive leaves the process", () => {
  let srv: NatsServer;
  let url: string;
  let readerUrl: string;
  let nc: NatsConnection;
  let log: EventLog;
  const main = teeSink();
  const labelled = teeSink();
  const output: string[] = [];
  let fixtureCount = 0;

  const onWarning = (w: Error): void => void output.push(`warning: ${w.name}: ${w.message}`);

  beforeAll(async () => {
    srv = await startServer({
      config: [
        "authorization {",
        "  users: [",
        `    { user: ${USER}, password: ${PASS} }`,
        `    { user: ${READER_USER}, password: ${READER_PASS}, permissions: {`,
        `        publish: { allow: ["$JS.API.CONSUMER.INFO.${WATCH_STREAM}.${READABLE}"] }`,
        '        subscribe: { allow: ["_INBOX.>"] }',
        "    } }",
        // The harness checks the server is up without credentials: that identity may do nothing.
        '    { user: probe_nobody, password: probe_nobody_pw, permissions: { publish: { deny: [">"] }, subscribe: { deny: [">"] } } }',
        "  ]",
        "}",
        "no_auth_user: probe_nobody",
      ].join("\n"),
    });
    url = `nats://${USER}:${PASS}@127.0.0.1:${srv.port}`;
    readerUrl = `nats://${READER_USER}:${READER_PASS}@127.0.0.1:${srv.port}`;
    nc = await connectAs(url, USER, PASS);
    log = new EventLog();

    for (const stream of [process.stdout, process.stderr]) {
      const original = stream.write.bind(stream) as (...args: unknown[]) => boolean;
      vi.spyOn(stream, "write").mockImplementation(((chunk: unknown, ...rest: unknown[]) => {
        output.push(typeof chunk === "string" ? chunk : Buffer.from(chunk as Uint8Array).toString("utf8"));
        return original(chunk, ...rest);
      }) as typeof stream.write);
    }
    for (const method of ["log", "info", "warn", "error", "debug", "trace"] as const) {
      vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
        output.push(args.map((a) => (typeof a === "string" ? a : inspect(a, { depth: 10 }))).join(" "));
      });
    }
    process.on("warning", onWarning);
  });

  afterAll(async () => {
    process.off("warning", onWarning);
    vi.restoreAllMocks();
    log?.dispose();
    await nc?.close();
    await srv?.dispose();
    await main.shutdown();
    await labelled.shutdown();
  });

  /**
   * Connects with the credentials in the URL and, since the client authenticates from its
   * options, in `user`/`pass` too: both sit in the connection's options for the whole run.
   */
  async function connectAs(server: string, user: string, pass: string): Promise<NatsConnection> {
    return await connect({ servers: server, user, pass });
  }

  /** A stream and a durable consumer of its own, with distinctive subjects. */
  async function fixture(conn: NatsConnection = nc, config: Partial<ConsumerConfig> = {}): Promise<Fixture> {
    fixtureCount += 1;
    const jsm = await jetstreamManager(conn);
    const stream = `NMSTREAM${fixtureCount}_${RUN}`;
    const consumer = `NMWRITER${fixtureCount}_${RUN}`;
    NAMES.add(stream);
    NAMES.add(consumer);
    const subject = `${SUBJECT_ROOT}.s${fixtureCount}.${SUBJECT_LEAF}`;
    await jsm.streams.add({ name: stream, subjects: [`${SUBJECT_ROOT}.s${fixtureCount}.>`] });
    await jsm.consumers.add(stream, { durable_name: consumer, ack_policy: AckPolicy.Explicit, ack_wait: nanos(ACK_WAIT_MS), ...config });
    return { nc: conn, js: jetstream(conn), jsm, stream, consumer, subject };
  }

  /** Publishes `n` messages with distinctive payloads, a header and a message id; fetches them. */
  async function messages(f: Fixture, n: number): Promise<JsMsg[]> {
    for (let i = 0; i < n; i++) {
      const h = headers();
      h.set(HEADER_KEY, `${HEADER_VALUE}-${i}`);
      const ack = await f.js.publish(f.subject, new TextEncoder().encode(`${PAYLOAD}-${i}`), { headers: h, msgID: `${MSG_ID}-${++published}` });
      SEQUENCES.add(ack.seq);
    }
    const msgs = await fetchBatch(f, n);
    expect(msgs).toHaveLength(n);
    return msgs;
  }

  const policy = (over: Record<string, unknown> = {}) =>
    verifyInProgressPolicy({ enabled: true, intervalMs: 700, maxHeartbeats: 20, shutdownTimeoutMs: 60_000, ...over }, {
      ackWaitMs: ACK_WAIT_MS,
      source: "configured",
    });

  const aborted = (ctx: WorkContext): Promise<unknown> =>
    new Promise((resolve) => {
      if (ctx.signal.aborted) resolve(ctx.signal.reason);
      else ctx.signal.addEventListener("abort", () => resolve(ctx.signal.reason), { once: true });
    });

  /** Resolves once `n` more heartbeat events were published (the log is never cleared: it is scanned at the end). */
  const beats = (n: number): Promise<void> => {
    const base = log.of(DiagnosticsChannels.HEARTBEAT_SENT).length;
    return log.waitFor((l) => l.of(DiagnosticsChannels.HEARTBEAT_SENT).length >= base + n, `${n} more heartbeat events`);
  };

  it("the server refuses a wrong password (the credentials in the URL are in force)", async () => {
    const err = await connect({ servers: url, user: USER, pass: "wrong", reconnect: false }).catch((e: unknown) => e);
    // The 3.x client's class, or nats 2.x's NatsError with its code (the legacy-client row).
    const { name, code } = err as { name?: unknown; code?: unknown };
    expect(name === "AuthorizationError" || (name === "NatsError" && code === "AUTHORIZATION_VIOLATION"), `${String(name)} ${String(code)}`).toBe(true);
    expect(nc.isClosed()).toBe(false);
  });

  it("withInProgress: client-accepted and server-confirmed beats", async () => {
    const f = await fixture();
    const msgs = await messages(f, 2);
    await withInProgress(msgs, () => beats(2), policy(), { metrics: main.sink });
    await withInProgress(msgs, () => beats(2), policy(), { metrics: main.sink, confirm: { connection: nc, timeoutMs: 1000 } });
    expect(log.of(DiagnosticsChannels.HEARTBEAT_SENT).map((e) => e.confirmed)).toEqual([false, false, true, true]);
    for (const m of msgs) m.ack();
  });

  it("withInProgress: a failed beat on a closed connection, then the lease expires", async () => {
    const own = await connectAs(url, USER, PASS);
    const f = await fixture(own);
    const msgs = await messages(f, 1);
    const reason = await withInProgress(
      msgs,
      async (ctx) => {
        await beats(1);
        await own.close();
        return await aborted(ctx);
      },
      policy(),
      { metrics: main.sink },
    );
    expect(reason).toBeInstanceOf(LeaseExpiredError);
    expect(log.of(DiagnosticsChannels.HEARTBEAT_FAILED)).toHaveLength(1);
    keep(libraryErrors, "LeaseExpiredError after a closed connection", reason);
  });

  it("withInProgress: the heartbeat limit, skipped beats, a stall, a refused policy and malformed arguments", async () => {
    const f = await fixture();
    const msgs = await messages(f, 2);
    const limit = await withInProgress(msgs, async (ctx) => {
      throw await aborted(ctx);
    }, policy({ maxHeartbeats: 1 }), { metrics: main.sink, onLimit: "abort" }).catch((e: unknown) => e);
    expect(limit).toBeInstanceOf(HeartbeatLimitError);
    keep(libraryErrors, "HeartbeatLimitError", limit);

    // requireProgress and no progress: beats are withheld, and the lease runs out.
    const stuck = await withInProgress(msgs, aborted, policy(), { metrics: main.sink, requireProgress: true });
    expect(stuck).toBeInstanceOf(LeaseExpiredError);
    keep(libraryErrors, "LeaseExpiredError without progress", stuck);

    // A write that blocks the event loop well past its first beat's due time: a stall, counted and published.
    await withInProgress(msgs, () => void Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ACK_WAIT_MS * 0.75), policy(), { metrics: main.sink });

    const unverified = await withInProgress(msgs, () => undefined, { enabled: true, intervalMs: 700 } as never).catch((e: unknown) => e);
    expect(unverified).toBeInstanceOf(InProgressPolicyError);
    keep(libraryErrors, "InProgressPolicyError (not verified)", unverified);
    let unsafe: unknown;
    try {
      verifyInProgressPolicy({ enabled: true, intervalMs: 1900, maxHeartbeats: 0, typo: 1 }, { ackWaitMs: ACK_WAIT_MS, backOffMs: [1000], source: "configured" });
    } catch (err) {
      unsafe = err;
    }
    expect(unsafe).toBeInstanceOf(InProgressPolicyError);
    keep(libraryErrors, "InProgressPolicyError (unsafe)", unsafe);

    const typeErrors = await Promise.all([
      withInProgress([...msgs, {} as JsMsg], () => undefined, policy()).catch((e: unknown) => e),
      withInProgress(msgs, () => undefined, policy(), { receivedAt: -1 }).catch((e: unknown) => e),
      withInProgress(msgs, "write" as never, policy()).catch((e: unknown) => e),
    ]);
    for (const [i, e] of typeErrors.entries()) {
      expect(e).toBeInstanceOf(TypeError);
      keep(libraryErrors, `withInProgress TypeError ${i}`, e);
    }
    for (const m of msgs) m.ack();
  });

  it("CommitThenAck: success with beats, temporary (NAK and leave), permanent (dead-letter and Term), partial, malformed report", async () => {
    const f = await fixture();
    await f.jsm.streams.add({ name: `NMDLQ_${RUN}`, subjects: [DLQ_SUBJECT] });
    NAMES.add(`NMDLQ_${RUN}`);
    const results = [];

    const withBeats = new CommitThenAck({ inProgress: policy(), metrics: main.sink, connection: nc });
    results.push(await withBeats.process(await messages(f, 2), () => beats(1)));
    expect(results.at(-1)?.outcome).toBe("acked");

    // The sink down for one try: the write is tried again in place, no delivery spent.
    let down = true;
    results.push(await withBeats.process(await messages(f, 1), () => {
      if (!down) return;
      down = false;
      throw new TemporarySinkError(`connect to ${PAYLOAD} refused`);
    }));
    expect(results.at(-1)?.outcome).toBe("acked");

    const nak = new CommitThenAck({ metrics: main.sink, onTemporaryFailure: { action: "nak", delayMs: 60_000 } });
    results.push(await nak.process(await messages(f, 1), () => {
      throw new TemporarySinkError(`insert of ${PAYLOAD} failed`);
    }));
    expect(results.at(-1)?.outcome).toBe("nacked");

    const leave = new CommitThenAck({ metrics: main.sink, onTemporaryFailure: { action: "leave" } });
    results.push(await leave.process(await messages(f, 1), () => {
      throw new Error(`unclassified ${HEADER_VALUE}`);
    }));
    expect(results.at(-1)?.outcome).toBe("left");

    const dlq = new CommitThenAck({ metrics: main.sink, deadLetter: { js: f.js, subject: DLQ_SUBJECT } });
    results.push(await dlq.process(await messages(f, 1), () => {
      throw new PermanentSinkError(`poison ${MSG_ID}`);
    }));
    expect(results.at(-1)?.outcome).toBe("dead_lettered");

    const term = new CommitThenAck({ metrics: main.sink, connection: nc });
    results.push(await term.process(await messages(f, 1), () => {
      throw new PermanentSinkError("poison");
    }));
    expect(results.at(-1)?.outcome).toBe("termed");

    const partial = new CommitThenAck({ metrics: main.sink, onTemporaryFailure: { action: "nak", delayMs: 60_000 } });
    results.push(await partial.process(await messages(f, 3), (batch) => ({
      failed: [
        { msg: batch[0]!, error: new TemporarySinkError("row locked") },
        { msg: batch[1]!, error: new PermanentSinkError("bad row") },
      ],
    })));
    expect(results.at(-1)?.outcome).toBe("partial");

    // A report the library cannot fully read fails closed; its TypeError is the library's own.
    const malformed = await leave.process(await messages(f, 1), () => ({ failed: [{ error: new Error(PAYLOAD) }] }) as never);
    expect(malformed.outcome).toBe("left");
    expect(malformed.reportError).toBeInstanceOf(TypeError);
    keep(libraryErrors, "report TypeError", malformed.reportError);

    for (const r of results) for (const m of r.messages) expect(m.settleError).toBeUndefined();
    const typeErrors = await Promise.all([
      Promise.resolve().then(() => new CommitThenAck({ onTemporaryFailure: { action: "retry" } as never })).catch((e: unknown) => e),
      withBeats.process("msgs" as never, () => undefined).catch((e: unknown) => e),
      withBeats.process([], "write" as never).catch((e: unknown) => e),
    ]);
    for (const [i, e] of typeErrors.entries()) {
      expect(e).toBeInstanceOf(TypeError);
      keep(libraryErrors, `CommitThenAck TypeError ${i}`, e);
    }
  });

  it("CommitThenAck: cancelled, a closed connection at settle, an unconfirmed ACK", async () => {
    const f = await fixture();
    const shutdown = new AbortController();
    const cancelled = await new CommitThenAck({ inProgress: policy(), metrics: main.sink, signal: shutdown.signal }).process(
      await messages(f, 2),
      async (_batch, ctx) => {
        await beats(1);
        shutdown.abort(new Error(`shutdown while writing ${PAYLOAD}`));
        throw await aborted(ctx);
      },
    );
    expect(cancelled.outcome).toBe("cancelled");

    // A write that ignores its signal outlives the bound: abandoned, then its late commit acked.
    const late = new AbortController();
    const lateAck = new CommitThenAck({ inProgress: policy({ shutdownTimeoutMs: 100 }), metrics: main.sink, signal: late.signal });
    let commit!: () => void;
    const abandoned = lateAck.process(await messages(f, 1), () => new Promise<void>((r) => (commit = r)));
    late.abort(new Error(`shutdown while writing ${PAYLOAD}`));
    expect((await abandoned).outcome).toBe("abandoned");
    commit();
    await lateAck.drain();

    const own = await connectAs(url, USER, PASS);
    const g = await fixture(own);
    const closed = await new CommitThenAck({ metrics: main.sink, connection: own }).process(await messages(g, 2), async () => {
      await own.close();
    });
    expect(closed.outcome).toBe("left");
    for (const m of closed.messages) {
      expect((m.settleError as Error).name).toBe("ConnectionClosedError");
      keep(libraryErrors, "settleError on a closed connection", m.settleError);
    }

    // The consumer is deleted while the write runs: the confirmed ACK gets no responder.
    const h = await fixture();
    const unconfirmed = await new CommitThenAck({ metrics: main.sink, connection: nc, confirmAck: { timeoutMs: 1000, retries: 1 } }).process(
      await messages(h, 2),
      async () => {
        await h.jsm.consumers.delete(h.stream, h.consumer);
      },
    );
    expect(unconfirmed.outcome).toBe("acked");
    for (const m of unconfirmed.messages) {
      expect(m.confirmed).toBe(false);
      // Refused all along: asked again every 100 ms for its whole window (1 s × 2).
      expect(m.settleError).toMatchObject({ name: "AckNotConfirmedError", lastFailure: "no_responders" });
      expect((m.settleError as { attempts: number }).attempts).toBeGreaterThanOrEqual(2);
      keep(libraryErrors, "settleError of an unconfirmed ACK", m.settleError);
    }
  });

  it("CommitThenAck: exhausted on the last delivery, a dead-letter copy not confirmed, ACKs held over a cut and unsent", async () => {
    const f = await fixture(nc, { max_deliver: 1 });
    const exhausted = await new CommitThenAck({ metrics: main.sink, maxDeliver: 1 }).process(await messages(f, 1), () => {
      throw new TemporarySinkError(`insert of ${PAYLOAD} failed`);
    });
    expect(exhausted.outcome).toBe("exhausted");

    // No stream captures this subject: the publish fails, and only its class name is kept.
    const g = await fixture();
    const nowhere = new CommitThenAck({ metrics: main.sink, deadLetter: { js: g.js, subject: `${DLQ_SUBJECT}x`, timeoutMs: 1000 } });
    const lost = await nowhere.process(await messages(g, 1), () => {
      throw new PermanentSinkError("poison");
    });
    expect(lost.outcome).toBe("left");
    expect(lost.messages[0]?.settleError).toMatchObject({ name: "DeadLetterError", reason: "publish_failed" });
    keep(libraryErrors, "settleError of a dead-letter copy not confirmed", lost.messages[0]?.settleError);

    await using proxy = await TcpProxy.start(srv.port);
    const own = await connect({ servers: `nats://127.0.0.1:${proxy.port}`, user: USER, pass: PASS, reconnectTimeWait: 50, maxReconnectAttempts: -1 });
    try {
      const h = await fixture(own);
      const connected = (): boolean => (own as unknown as { protocol?: { connected?: boolean } }).protocol?.connected === true;
      // The write returns once the client noticed the cut: its ACK would be dropped if sent now.
      const cutFor = async (ms: number): Promise<void> => {
        proxy.cut();
        await eventually(() => !connected(), "the client to notice the cut", 5000, 5);
        setTimeout(() => proxy.restore(), ms);
      };
      const held = await new CommitThenAck({ metrics: main.sink, timing: { ackWaitMs: 10_000, source: "configured" } }).process(await messages(h, 1), () => cutFor(300));
      expect(held.messages[0]).toMatchObject({ action: "acked" });
      expect(held.messages[0]?.settleError).toBeUndefined();
      await eventually(connected, "the reconnect");
      // A shutdown while the ACK is held: given up at the shutdown bound, not sent, not counted as acked.
      const shutdown = new AbortController();
      const unsent = await new CommitThenAck({
        metrics: main.sink,
        signal: shutdown.signal,
        inProgress: verifyInProgressPolicy({ enabled: false, shutdownTimeoutMs: 200 }, undefined),
      }).process(await messages(h, 1), async () => {
        await cutFor(1500);
        shutdown.abort();
      });
      expect(unsent.messages[0]).toMatchObject({ action: "left" });
      expect(unsent.messages[0]?.settleError).toMatchObject({ name: "DisconnectedError" });
      keep(libraryErrors, "settleError of an ACK that could not be sent", unsent.messages[0]?.settleError);
    } finally {
      await own.close();
    }
  });

  it("CommitThenAck.run: fetch failures go to onError and the metric", async () => {
    const f = await fixture();
    const consumer = await f.js.consumers.get(f.stream, f.consumer);
    await f.jsm.consumers.delete(f.stream, f.consumer);
    const stop = new AbortController();
    const errors: unknown[] = [];
    await new CommitThenAck({ metrics: main.sink }).run(consumer, () => undefined, {
      signal: stop.signal,
      onError: (e, c) => {
        errors.push(e);
        // The subscription's notices come first; the loop stops after a failed pull.
        if (c.during === "fetch" && c.consecutiveFailures !== undefined) stop.abort();
      },
    });
    expect(errors.length).toBeGreaterThanOrEqual(1);
    for (const e of errors) keep(clientErrors, "run onError", e);

    // A message that waits in an open pull longer than the interval is beaten while it waits.
    const g = await fixture();
    const held = new AbortController();
    let written = 0;
    const loop = new CommitThenAck({ inProgress: policy({ intervalMs: 300 }), metrics: main.sink }).run(await g.js.consumers.get(g.stream, g.consumer), () => {
      written += 1;
      held.abort();
    }, { batchSize: 10, expiresMs: 1000, signal: held.signal });
    SEQUENCES.add((await g.js.publish(g.subject, new TextEncoder().encode(`${PAYLOAD}-held`))).seq);
    await loop;
    expect(written).toBe(1);
  });

  it("CommitThenAck.runEach: another delivery of a committed message whose ACK is late is acked, not written again", async () => {
    const f = await fixture(nc, { ack_wait: nanos(1000) });
    // ACK frames through this connection arrive 2.5 s late: the message comes back meanwhile.
    const late = withLateAcks(nc, 2500);
    const stop = new AbortController();
    let written = 0;
    const loop = new CommitThenAck({ connection: late, confirmAck: { timeoutMs: 4000, retries: 0 }, metrics: main.sink }).runEach(
      await f.js.consumers.get(f.stream, f.consumer),
      () => void (written += 1),
      { concurrency: 1, expiresMs: 1000, signal: stop.signal },
    );
    SEQUENCES.add((await f.js.publish(f.subject, new TextEncoder().encode(`${PAYLOAD}-late-ack`))).seq);
    await eventually(() => main.calls.some((c) => c.name === MetricNames.REDELIVERIES_OF_COMMITTED_TOTAL), "the redelivery acked", 10_000);
    stop.abort();
    await loop;
    expect(written).toBe(1);
  });

  it("CommitThenAck.forConsumer: every refusal", async () => {
    const jsm = await jetstreamManager(nc);
    const backoff = await fixture(nc, { backoff: [nanos(1000), nanos(4000)], max_deliver: 5 });
    const small = await fixture(nc, { ack_wait: nanos(4000) });
    const noAck = `NMNOACK_${RUN}`;
    NAMES.add(noAck);
    await jsm.consumers.add(small.stream, { durable_name: noAck, ack_policy: AckPolicy.None });
    const readerNc = await connectAs(readerUrl, READER_USER, READER_PASS);
    const readerJsm = await jetstreamManager(readerNc, { checkAPI: false, timeout: 1000 });
    const refusals: Array<[() => Promise<unknown>, string]> = [
      [() => CommitThenAck.forConsumer(jsm, backoff.stream, backoff.consumer, { inProgress: { enabled: true, intervalMs: 500 } }), "policy_violation"],
      [() => CommitThenAck.forConsumer(jsm, small.stream, small.consumer, { inProgress: { enabled: true, intervalMs: 5000 } }), "policy_violation"],
      [() => CommitThenAck.forConsumer(jsm, small.stream, small.consumer, { ackWaitMs: 30_000 }), "ack_wait_drift"],
      [() => CommitThenAck.forConsumer(jsm, small.stream, `NMMISSING_${RUN}`), "consumer_not_found"],
      [() => CommitThenAck.forConsumer(jsm, small.stream, noAck), "ack_policy_not_explicit"],
      [() => CommitThenAck.forConsumer(readerJsm, WATCH_STREAM, DENIED), "consumer_unreadable"],
    ];
    NAMES.add(`NMMISSING_${RUN}`);
    for (const [refuse, reason] of refusals) {
      const err = await refuse().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConsumerPolicyError);
      expect((err as ConsumerPolicyError).reason).toBe(reason);
      keep(libraryErrors, `ConsumerPolicyError ${reason}`, err);
    }
    const typeError = await CommitThenAck.forConsumer(jsm, "", "x").catch((e: unknown) => e);
    expect(typeError).toBeInstanceOf(TypeError);
    keep(libraryErrors, "forConsumer TypeError", typeError);
    await readerNc.close();
  });

  it("watchConsumer: samples with a redelivery and poll failures, unlabelled and labelled", async () => {
    const admin = await jetstreamManager(nc);
    await admin.streams.add({ name: WATCH_STREAM, subjects: [`${SUBJECT_ROOT}.watch.>`] });
    for (const name of [READABLE, DENIED]) {
      await admin.consumers.add(WATCH_STREAM, { durable_name: name, ack_policy: AckPolicy.Explicit, ack_wait: nanos(ACK_WAIT_MS) });
    }
    const f: Fixture = { nc, js: jetstream(nc), jsm: admin, stream: WATCH_STREAM, consumer: READABLE, subject: `${SUBJECT_ROOT}.watch.${SUBJECT_LEAF}` };

    const readerNc = await connectAs(readerUrl, READER_USER, READER_PASS);
    const readerJsm = await jetstreamManager(readerNc, { checkAPI: false, timeout: 1000 });
    const samples: ConsumerHealthSample[] = [];
    const pollErrors: unknown[] = [];
    const watches = [
      watchConsumer(admin, WATCH_STREAM, READABLE, { intervalMs: 200, metrics: main.sink, onSample: (s) => void samples.push(s) }),
      watchConsumer(readerJsm, WATCH_STREAM, DENIED, { intervalMs: 200, maxBackoffMs: 400, metrics: main.sink, onError: (e) => void pollErrors.push(e) }),
      watchConsumer(readerJsm, WATCH_STREAM, READABLE, { intervalMs: 200, metrics: labelled.sink, labels: true }),
      watchConsumer(readerJsm, WATCH_STREAM, DENIED, { intervalMs: 200, maxBackoffMs: 400, metrics: labelled.sink, labels: true }),
    ];
    try {
      // A message delivered, not acknowledged, and redelivered after AckWait.
      const [first] = await messages(f, 1);
      await eventually(() => samples.some((s) => s.ackPending === 1), "a sample with the message in flight");
      const again = await fetchBatch(f, 1, 6000);
      expect(again[0]?.seq).toBe(first?.seq);
      expect(again[0]?.info.deliveryCount).toBe(2);
      await eventually(() => main.calls.some((c) => c.name === MetricNames.CONSUMER_REDELIVERED_MESSAGES), "a counted redelivery");
      again[0]?.ack();
      await eventually(() => pollErrors.length >= 2, "two failed polls");
      await eventually(
        () => labelled.calls.some((c) => c.name === MetricNames.CONSUMER_POLL_FAILURES_TOTAL) && labelled.calls.some((c) => c.name === MetricNames.CONSUMER_REDELIVERED_MESSAGES),
        "labelled samples and failures",
      );
    } finally {
      for (const w of watches) w.stop();
      await readerNc.close();
    }
    for (const e of pollErrors) keep(clientErrors, "watchConsumer onError", e);
  });

  // ---- the scan ----------------------------------------------------------------------------
  it("every metric the library has was emitted by the scenarios above (so the scan covers them all)", () => {
    const emitted = new Set(main.calls.map((c) => c.name));
    expect([...emitted].sort()).toEqual(Object.values(MetricNames).sort());
    const channels = new Set(log.events.map((e) => e.channel));
    expect([...channels].sort()).toEqual(Object.values(DiagnosticsChannels).sort());
  });

  it("metrics: no secret and no name in the Prometheus and OpenTelemetry output; no labels unless asked for", async () => {
    const findings: Finding[] = [];
    const promText = await main.prometheusText();
    const otelText = safeJson(await main.openTelemetryExport());
    expect(promText).toContain("myapp_messages_acked_total");
    findings.push(...scan("prometheus", promText, [...SECRETS, ...NAMES]));
    findings.push(...scan("opentelemetry", otelText, [...SECRETS, ...NAMES]));
    expect(findings).toEqual([]);

    // Without labels: true the library sets no label at all (Prometheus adds only `le`).
    expect(main.calls.filter((c) => c.labels !== undefined && Object.keys(c.labels).length > 0)).toEqual([]);
    const promLabels = new Set([...promText.matchAll(/[{,]([a-zA-Z_][a-zA-Z0-9_]*)="/g)].map((m) => m[1]));
    expect([...promLabels]).toEqual(["le"]);
    for (const scope of await main.openTelemetryExport()) {
      for (const metric of scope.metrics) for (const dp of metric.dataPoints) expect(Object.keys(dp.attributes)).toEqual([]);
    }
  });

  it("metrics with labels: true: the stream and consumer names appear only as those two label values", async () => {
    const promText = await labelled.prometheusText();
    const otel = await labelled.openTelemetryExport();
    const findings: Finding[] = [];
    findings.push(...scan("prometheus (labels)", promText, SECRETS));
    findings.push(...scan("opentelemetry (labels)", safeJson(otel), SECRETS));
    // Take the two label values out: no name is left anywhere else.
    const withoutValues = promText.replace(/(stream|consumer)="[^"]*"/g, "$1=\"\"");
    findings.push(...scan("prometheus (labels) outside the label values", withoutValues, NAMES));
    expect(findings).toEqual([]);

    const values = new Set<string>();
    for (const c of labelled.calls) {
      expect(Object.keys(c.labels ?? {}).sort()).toEqual(["consumer", "stream"]);
      for (const v of Object.values(c.labels ?? {})) values.add(v);
    }
    expect([...values].sort()).toEqual([DENIED, READABLE, WATCH_STREAM].sort());
    expect(promText).toContain(`stream="${WATCH_STREAM}"`);
    for (const scope of otel) {
      for (const metric of scope.metrics) {
        for (const dp of metric.dataPoints) {
          expect(Object.keys(dp.attributes).sort()).toEqual(["consumer", "stream"]);
          expect([...values]).toContain(dp.attributes["stream"]);
          expect([...values]).toContain(dp.attributes["consumer"]);
        }
      }
    }
  });

  it("no label value, event field or library error property is a stream sequence", () => {
    expect(SEQUENCES.size).toBeGreaterThan(0);
    const sequenceLike = /seq|sequence/i;
    for (const c of [...main.calls, ...labelled.calls]) {
      for (const [k, v] of Object.entries(c.labels ?? {})) {
        expect(k).not.toMatch(sequenceLike);
        expect(/^\d+$/.test(v), `label ${k}=${v}`).toBe(false);
        expect(SEQUENCES.has(Number(v)), `label ${k}=${v}`).toBe(false);
      }
    }
    for (const e of log.events) {
      for (const k of Object.keys(e.payload as object)) {
        expect(ALL_EVENT_FIELDS.has(k), `${e.channel}.${k} is a documented field`).toBe(true);
        expect(k).not.toMatch(sequenceLike);
      }
    }
    // The library's own properties (a cause is the client's, see the error scan below).
    for (const { where, error } of libraryErrors) {
      for (const k of Object.keys(error as object)) expect(k, where).not.toMatch(/seq|sequence|subject|header|payload|data|msgid/i);
    }
  });

  it("events: every payload has its documented shape and carries no secret and no name", () => {
    expect(log.events.length).toBeGreaterThan(20);
    for (const e of log.events) expectShape(e.channel, e.payload);
    const findings = scan("events", safeJson(log.events), [...SECRETS, ...NAMES]);
    expect(findings).toEqual([]);
    for (const e of log.events) {
      for (const v of Object.values(e.payload as object)) {
        if (typeof v === "string") expect(v).toMatch(/^[A-Za-z0-9_$.]{1,64}$/);
      }
    }
  });

  it("errors: library-created errors carry no secret; names only in ConsumerPolicyError; client errors passed on carry no secret", () => {
    expect(libraryErrors.length).toBeGreaterThan(20);
    const findings: Finding[] = [];
    for (const { where, error } of libraryErrors) {
      const text = errorText(error);
      findings.push(...scan(where, text, SECRETS));
      if (!(error instanceof ConsumerPolicyError)) findings.push(...scan(where, text, NAMES));
    }
    for (const { where, error } of clientErrors) findings.push(...scan(where, errorText(error), SECRETS));
    expect(findings).toEqual([]);
    // The ConsumerPolicyErrors do name what they refused, as documented.
    const refused = libraryErrors.map((x) => x.error).filter((e): e is ConsumerPolicyError => e instanceof ConsumerPolicyError);
    expect(refused.length).toBe(6);
    for (const e of refused) expect(e.message).toContain(`consumer ${e.stream} > ${e.consumer}`);
  });

  it("logs: the library wrote nothing to stdout, stderr or the console", () => {
    expect(scan("output", output.join("\n"), [...SECRETS, ...NAMES])).toEqual([]);
    expect(output).toEqual([]);
  });
});
