/**
 * A per-message consumer in front of a slow HTTP API. Every message becomes one POST to a
 * downstream service that takes 300–1500 ms per call, now and then answers 503 and refuses
 * bad orders with 400. `CommitThenAck.runEach` keeps up to CONCURRENCY calls in flight and
 * pulls only for free ones; a message is acknowledged only after a 2xx, retried after a 5xx, a
 * timeout or a network error (in place while its lease holds, then by a NAK with a delay
 * growing with the delivery count), and dead-lettered after any other 4xx. Heartbeats keep a
 * message alive while its call outlasts AckWait, and `ctx.signal` goes to `fetch()`, so a
 * shutdown or a lost lease cancels the call instead of letting it commit behind the library's
 * back.
 *
 * Run: NATS_URL=nats://127.0.0.1:4222 npx tsx examples/run-each-http.ts
 * Without STREAM it creates a demo stream, consumer and dead-letter stream, publishes
 * DEMO_ORDERS orders (default 40), stops once every one is settled and deletes what it made.
 * With STREAM and CONSUMER (optional DEAD_LETTER_SUBJECT) it consumes that durable consumer
 * until SIGINT or SIGTERM (or, with EXIT_WHEN_DRAINED=1, until nothing is left).
 * Without API_URL it starts its own stand-in for the slow API (node:http, a free port).
 * Optional: CONCURRENCY (default 8), CALL_TIMEOUT_MS (10000), SHUTDOWN_TIMEOUT_MS (5000).
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { pathToFileURL } from "node:url";
import { AckPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { connect, nanos, type NatsConnection } from "@nats-io/transport-node";
import {
  CommitThenAck,
  InMemoryMetrics,
  MetricNames,
  PermanentSinkError,
  TemporarySinkError,
  consumerTimingFromConfig,
  type BatchResult,
  type WorkContext,
} from "jetstream-inprogress";

// ---------------------------------------------------------------------------------------------
// The stand-in for the slow downstream API.

/** One call the API received. */
export interface ApiCall {
  /** The `Idempotency-Key` header: `<stream>:<stream sequence>`. */
  readonly key: string;
  /** The `X-Delivery` header: the message's delivery count. */
  readonly delivery: number;
  /** The status sent, or `undefined` when the client went away first. */
  status: number | undefined;
  readonly startedAt: number;
  endedAt: number | undefined;
}

/** Options of {@link startSlowApi}. */
export interface SlowApiOptions {
  /** Fastest answer, ms; default 300. */
  readonly minMs?: number;
  /** Slowest answer, ms; default 1500. */
  readonly maxMs?: number;
  /**
   * Whether this call gets a 503, asked before the order is looked at (a flaky gateway in
   * front of the service). Default: the first call for every fourth order.
   */
  readonly unavailable?: (key: string, attempt: number) => boolean;
  /** Port; default a free one. */
  readonly port?: number;
}

/** A running stand-in API and what it saw. */
export interface SlowApi {
  readonly url: string;
  /** Every call, in arrival order. */
  readonly calls: readonly ApiCall[];
  /** Calls being answered right now, and the most there ever were at once. */
  readonly inFlight: number;
  readonly maxInFlight: number;
  /** Keys whose order was accepted (2xx). */
  readonly accepted: ReadonlySet<string>;
  close(): Promise<void>;
}

/**
 * Starts the stand-in: `POST /orders` with a JSON order `{ id, sku, qty }`. It answers 201
 * after 300–1500 ms, 400 for an order without a `sku` or with a `qty` that is not a positive
 * integer, and 503 when `unavailable` says so. An `Idempotency-Key` it has accepted before is
 * answered 200 without a second effect: a retried call must never place an order twice.
 *
 * @example
 * ```ts
 * const api = await startSlowApi({ minMs: 50, maxMs: 200 });
 * console.log(api.url); // http://127.0.0.1:<port>
 * await api.close();
 * ```
 */
export async function startSlowApi(options: SlowApiOptions = {}): Promise<SlowApi> {
  const minMs = options.minMs ?? 300;
  const maxMs = options.maxMs ?? 1500;
  const unavailable = options.unavailable ?? ((key: string, attempt: number) => attempt === 1 && sequenceOf(key) % 4 === 0);
  const calls: ApiCall[] = [];
  const attempts = new Map<string, number>();
  const accepted = new Set<string>();
  let inFlight = 0;
  let maxInFlight = 0;

  const handle = (req: IncomingMessage, res: ServerResponse, body: string): void => {
    const key = String(req.headers["idempotency-key"] ?? "");
    const call: ApiCall = { key, delivery: Number(req.headers["x-delivery"] ?? 0), status: undefined, startedAt: performance.now(), endedAt: undefined };
    calls.push(call);
    const attempt = (attempts.get(key) ?? 0) + 1;
    attempts.set(key, attempt);
    inFlight += 1;
    maxInFlight = Math.max(maxInFlight, inFlight);
    let done = false;
    const finish = (status: number | undefined): void => {
      if (done) return;
      done = true;
      inFlight -= 1;
      call.status = status;
      call.endedAt = performance.now();
    };
    const timer = setTimeout(() => {
      const answer = (status: number, payload: object): void => {
        finish(status);
        res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(payload));
      };
      if (unavailable(key, attempt)) return answer(503, { error: "upstream unavailable, try again" });
      const order = parseOrder(body);
      if (order === undefined) return answer(400, { error: "invalid order" });
      if (accepted.has(key)) return answer(200, { id: order.id, duplicate: true });
      accepted.add(key);
      answer(201, { id: order.id });
    }, minMs + Math.random() * (maxMs - minMs));
    // The client gave up (its signal aborted): no answer, and no effect.
    res.on("close", () => {
      clearTimeout(timer);
      finish(undefined);
    });
  };

  const server = createServer((req, res) => {
    if (req.method !== "POST" || req.url !== "/orders") {
      res.writeHead(404).end();
      return;
    }
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => handle(req, res, Buffer.concat(chunks).toString("utf8")));
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    get inFlight() {
      return inFlight;
    },
    get maxInFlight() {
      return maxInFlight;
    },
    accepted,
    close: () =>
      new Promise<void>((resolve) => {
        // fetch() keeps connections alive; close them instead of waiting for their timeout.
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

function parseOrder(body: string): { id: unknown } | undefined {
  try {
    const o = JSON.parse(body) as { id?: unknown; sku?: unknown; qty?: unknown };
    return typeof o.sku === "string" && o.sku !== "" && Number.isInteger(o.qty) && (o.qty as number) > 0 ? { id: o.id } : undefined;
  } catch {
    return undefined;
  }
}

/** The stream sequence in an idempotency key `<stream>:<seq>`. */
export function sequenceOf(key: string): number {
  return Number(key.slice(key.lastIndexOf(":") + 1));
}

// ---------------------------------------------------------------------------------------------
// The consumer side: one HTTP call per message.

/**
 * What an HTTP failure means for the message: 5xx, 408 and 429 are the server's trouble or
 * its request to slow down (retry later); any other 4xx says the request itself is wrong, so
 * a retry would fail the same way (dead-letter). Timeouts and network errors are temporary.
 *
 * @param failure - a response status, or what `fetch()` threw.
 * @returns the error to throw from the handler.
 *
 * @example
 * ```ts
 * classifyHttpFailure(503); // TemporarySinkError
 * classifyHttpFailure(422); // PermanentSinkError
 * ```
 */
export function classifyHttpFailure(failure: number | unknown): TemporarySinkError | PermanentSinkError {
  if (typeof failure === "number") {
    if (failure >= 500 || failure === 408 || failure === 429) return new TemporarySinkError(`the API answered ${failure}`);
    return new PermanentSinkError(`the API refused the message (${failure})`);
  }
  const name = failure instanceof Error ? failure.name : "";
  if (name === "TimeoutError") return new TemporarySinkError("the API call timed out", { cause: failure });
  return new TemporarySinkError("the API could not be reached", { cause: failure });
}

/**
 * The handler for `runEach`: POSTs the message to `${apiUrl}/orders` with its stream and
 * sequence as the idempotency key (a redelivered message is the same order), resolves on a
 * 2xx and throws what {@link classifyHttpFailure} says otherwise.
 *
 * @param apiUrl - the API's base URL.
 * @param timeoutMs - the longest a call may take.
 * @returns a handler `(msg, ctx) => Promise<void>`.
 *
 * @example
 * ```ts
 * await ack.runEach(consumer, httpHandler("http://orders.internal", 10_000), { concurrency: 16, signal });
 * ```
 */
export function httpHandler(apiUrl: string, timeoutMs: number): (msg: JsMsg, ctx: WorkContext) => Promise<void> {
  const url = new URL("/orders", apiUrl);
  return async (msg, ctx) => {
    let res: Response;
    try {
      res = await fetch(url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "idempotency-key": `${msg.info.stream}:${msg.seq}`,
          "x-delivery": String(msg.info.deliveryCount),
        },
        body: msg.data,
        // A shutdown or a lost lease aborts ctx.signal: the call stops, nothing is acked.
        signal: AbortSignal.any([ctx.signal, AbortSignal.timeout(timeoutMs)]),
      });
    } catch (err) {
      // Aborted by the library: its own reason is what settles the message (left for redelivery).
      if (ctx.signal.aborted) throw err;
      throw classifyHttpFailure(err);
    }
    // Read the body either way, so the connection goes back to the pool.
    await res.arrayBuffer().catch(() => undefined);
    if (!res.ok) throw classifyHttpFailure(res.status);
  };
}

/** What a run did. */
export interface HttpSinkSummary {
  acked: number;
  deadLettered: number;
  retried: number;
  /** Left for redelivery: calls cancelled by the shutdown. */
  left: number;
  /** Failed on their last allowed delivery without a dead-letter copy. */
  exhausted: number;
  /** Heartbeats the server accepted. */
  heartbeats: number;
  /** Why the loop stopped. */
  stoppedBy: string;
  durationMs: number;
}

/** Options of {@link runHttpSink}. */
export interface HttpSinkOptions {
  readonly nc: NatsConnection;
  readonly stream: string;
  readonly consumer: string;
  readonly apiUrl: string;
  /** Calls in flight at most; default 8. */
  readonly concurrency?: number;
  /** A subject captured by a stream; without it, refused messages are terminated. */
  readonly deadLetterSubject?: string;
  /** The longest one call may take; default 10,000 ms. */
  readonly timeoutMs?: number;
  /** How long calls that already started may go on after a stop; default 5,000 ms. */
  readonly shutdownTimeoutMs?: number;
  /** Stops the loop gracefully. */
  readonly signal: AbortSignal;
  /** Every settled message (a batch of one). */
  readonly onResult?: (result: BatchResult) => void;
}

/**
 * Consumes `stream` > `consumer` into the API until `signal` aborts. Fails closed before the
 * first pull when the consumer is missing or its AckWait does not fit the heartbeat interval
 * (a third of AckWait).
 *
 * @param options - connection, names, API and limits.
 * @returns what happened, once the loop has stopped and no call is running.
 *
 * @example
 * ```ts
 * const summary = await runHttpSink({ nc, stream: "ORDERS", consumer: "api-writer", apiUrl, signal });
 * ```
 */
export async function runHttpSink(options: HttpSinkOptions): Promise<HttpSinkSummary> {
  const { nc, stream, consumer } = options;
  const started = performance.now();
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  // A third of AckWait leaves two beats of slack; forConsumer checks it against the server.
  const info = await jsm.consumers.info(stream, consumer).catch(() => undefined);
  const ackWaitMs = info ? consumerTimingFromConfig(info, "inspected").ackWaitMs : undefined;
  const intervalMs = ackWaitMs !== undefined && ackWaitMs >= 3 ? Math.min(3_600_000, Math.floor(ackWaitMs / 3)) : undefined;
  const concurrency = options.concurrency ?? 8;
  const metrics = new InMemoryMetrics();
  const ack = await CommitThenAck.forConsumer(jsm, stream, consumer, {
    inProgress: {
      enabled: true,
      // Enough beats for a message that waits behind a full set of slow calls, then makes its own.
      maxHeartbeats: 60,
      shutdownTimeoutMs: options.shutdownTimeoutMs ?? 5_000,
      ...(intervalMs !== undefined ? { intervalMs } : {}),
    },
    connection: nc,
    metrics,
    ...(options.deadLetterSubject !== undefined ? { deadLetter: { js, subject: options.deadLetterSubject } } : {}),
  });
  const summary: HttpSinkSummary = { acked: 0, deadLettered: 0, retried: 0, left: 0, exhausted: 0, heartbeats: 0, stoppedBy: "", durationMs: 0 };
  await ack.runEach(await js.consumers.get(stream, consumer), httpHandler(options.apiUrl, options.timeoutMs ?? 10_000), {
    concurrency,
    signal: options.signal,
    onResult: (r) => {
      summary.acked += r.acked;
      summary.deadLettered += r.deadLettered;
      summary.retried += r.nacked;
      summary.left += r.left;
      summary.exhausted += r.exhausted;
      options.onResult?.(r);
    },
    onError: (err, ctx) => console.error(`run-each-http: ${ctx.during}: ${err instanceof Error ? err.message : String(err)}`),
  });
  summary.heartbeats = metrics.snapshot().counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL] ?? 0;
  summary.stoppedBy = String(options.signal.reason instanceof Error ? options.signal.reason.message : (options.signal.reason ?? "stopped"));
  summary.durationMs = Math.round(performance.now() - started);
  return summary;
}

// ---------------------------------------------------------------------------------------------
// The program.

/** Options of {@link main}: the environment it reads, and where it prints. */
export interface MainOptions {
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly log?: (line: string) => void;
  /** Every settled message (tests). */
  readonly onResult?: (result: BatchResult) => void;
}

/**
 * The example program: reads its settings from `env`, starts the stand-in API unless
 * `API_URL` is set, creates a demo stream unless `STREAM` is set, consumes until SIGINT,
 * SIGTERM or (in demo mode, or with `EXIT_WHEN_DRAINED=1`) until nothing is left, prints a
 * summary and cleans up what it created.
 *
 * @param options - environment, log and result callback.
 * @returns the summary it printed.
 *
 * @example
 * ```ts
 * const summary = await main({ env: { NATS_URL: "nats://127.0.0.1:4222", DEMO_ORDERS: "10" } });
 * ```
 */
export async function main(options: MainOptions = {}): Promise<HttpSinkSummary> {
  const env = options.env ?? process.env;
  const log = options.log ?? ((line: string) => console.log(line));
  const number = (name: string, fallback: number): number => {
    const v = env[name];
    const n = v === undefined || v === "" ? fallback : Number(v);
    if (!Number.isInteger(n) || n < 0) throw new TypeError(`${name} must be a non-negative integer, got ${JSON.stringify(v)}`);
    return n;
  };
  const concurrency = number("CONCURRENCY", 8);
  const shutdown = new AbortController();
  // A signal stops the loop; calls running now are cancelled through ctx.signal.
  const onSignal = (sig: NodeJS.Signals): void => {
    log(`${sig}: stopping, cancelling the calls in flight`);
    shutdown.abort(new Error(sig));
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);

  const cleanups: Array<() => Promise<unknown>> = [];
  try {
    let apiUrl = env["API_URL"];
    if (!apiUrl) {
      const api = await startSlowApi();
      cleanups.push(() => api.close());
      apiUrl = api.url;
      log(`slow API stand-in on ${api.url} (300–1500 ms per call, some 503s, 400 for bad orders)`);
    }
    const nc = await connect({ servers: env["NATS_URL"] ?? "nats://127.0.0.1:4222" });
    cleanups.push(() => nc.drain());
    let stream = env["STREAM"];
    let consumer = env["CONSUMER"];
    let deadLetterSubject = env["DEAD_LETTER_SUBJECT"];
    const demo = !stream;
    if (!stream) {
      const made = await createDemo(nc, number("DEMO_ORDERS", 40));
      cleanups.push(made.remove);
      ({ stream, consumer, deadLetterSubject } = made);
      log(`demo stream ${stream}: ${made.orders} orders published, every fifth one invalid`);
    }
    if (!consumer) throw new TypeError("set CONSUMER (the durable pull consumer of STREAM)");
    if (demo || env["EXIT_WHEN_DRAINED"] === "1") stopWhenDrained(nc, stream, consumer, shutdown);

    log(`consuming ${stream} > ${consumer}, ${concurrency} calls at once`);
    const summary = await runHttpSink({
      nc,
      stream,
      consumer,
      apiUrl,
      concurrency,
      timeoutMs: number("CALL_TIMEOUT_MS", 10_000),
      shutdownTimeoutMs: number("SHUTDOWN_TIMEOUT_MS", 5_000),
      signal: shutdown.signal,
      ...(deadLetterSubject ? { deadLetterSubject } : {}),
      ...(options.onResult ? { onResult: options.onResult } : {}),
    });
    log(
      `stopped (${summary.stoppedBy}) after ${(summary.durationMs / 1000).toFixed(1)} s: ${summary.acked} acked, ` +
        `${summary.deadLettered} dead-lettered, ${summary.retried} retried, ${summary.left} left for redelivery, ` +
        `${summary.exhausted} exhausted, ${summary.heartbeats} heartbeats`,
    );
    return summary;
  } finally {
    shutdown.abort(new Error("done"));
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  }
}

/** A stream of orders (every fifth one invalid), its dead-letter stream and a durable consumer. */
async function createDemo(nc: NatsConnection, orders: number) {
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  const stream = `HTTP_DEMO_${Date.now().toString(36).toUpperCase()}`;
  const subject = `${stream.toLowerCase()}.orders`;
  const deadLetterSubject = `${stream.toLowerCase()}.dlq`;
  await jsm.streams.add({ name: stream, subjects: [subject] });
  await jsm.streams.add({ name: `${stream}_DLQ`, subjects: [deadLetterSubject] });
  // AckWait 2 s: shorter than a slow call plus its wait for a slot, so heartbeats matter.
  await jsm.consumers.add(stream, { durable_name: "api-writer", ack_policy: AckPolicy.Explicit, ack_wait: nanos(2_000), max_deliver: 10 });
  for (let id = 1; id <= orders; id++) {
    await js.publish(subject, JSON.stringify({ id, sku: `sku-${id % 7}`, qty: id % 5 === 0 ? 0 : 1 + (id % 3) }));
  }
  const remove = async (): Promise<void> => {
    await jsm.streams.delete(stream).catch(() => undefined);
    await jsm.streams.delete(`${stream}_DLQ`).catch(() => undefined);
  };
  return { stream, consumer: "api-writer", deadLetterSubject, orders, remove };
}

/** Aborts `shutdown` once the consumer has nothing left to deliver and nothing awaiting an ACK. */
function stopWhenDrained(nc: NatsConnection, stream: string, consumer: string, shutdown: AbortController): void {
  void (async () => {
    const jsm = await jetstreamManager(nc);
    while (!shutdown.signal.aborted) {
      await new Promise((r) => setTimeout(r, 500));
      const info = await jsm.consumers.info(stream, consumer).catch(() => undefined);
      if (info && info.num_pending === 0 && info.num_ack_pending === 0) shutdown.abort(new Error("drained"));
    }
  })();
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    console.error(`run-each-http: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  });
}
