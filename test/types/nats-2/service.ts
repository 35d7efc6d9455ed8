// A strict TypeScript service on the legacy `nats` 2.x client (with the 3.x peers installed
// beside it, as the README says), written as a user would: test/unit/consumer-types.test.ts
// compiles it (strict, exactOptionalPropertyTypes, noUncheckedIndexedAccess) against the
// library's sources and, in check:package, its packed types. It imports nothing of 3.x.
import { connect, type Consumer, type JsMsg } from "nats";
import {
  CommitThenAck,
  PermanentSinkError,
  TemporarySinkError,
  consumerTimingFromConfig,
  verifyInProgressPolicy,
  watchConsumer,
  withInProgress,
  type BatchResult,
  type BatchWrite,
  type FailedMessage,
  type MessageResult,
  type RunOptions,
  type WriteReport,
} from "jetstream-inprogress";
import { insertOrders, type Order } from "./sink.js";

const nc = await connect({ servers: process.env["NATS_URL"] ?? "nats://127.0.0.1:4222" });
const jsm = await nc.jetstreamManager({ checkAPI: false });
const js = nc.jetstream();
const shutdown = new AbortController();
process.once("SIGTERM", () => shutdown.abort());

const ack = await CommitThenAck.forConsumer(jsm, "ORDERS", "writer", {
  inProgress: { enabled: true, intervalMs: 10_000, maxHeartbeats: 30 },
  deadLetter: {
    js,
    subject: "dlq.orders",
    headers: (msg, err) => ({ "Reject-Reason": err instanceof PermanentSinkError ? err.message : "unknown", "Order-Subject": msg.subject }),
  },
  connection: nc,
  confirmAck: { timeoutMs: 2_000, retries: 2 },
  heartbeat: { confirm: { connection: nc, timeoutMs: 2_000 } },
  tracing: { startBatch: (batch) => (batch.messages[0]?.headers?.get("traceparent") ? undefined : undefined) },
  signal: shutdown.signal,
});

const consumer: Consumer = await js.consumers.get("ORDERS", "writer");

// run: an inline write sees the client's own JsMsg, and so does onBatch.
await ack.run(
  consumer,
  async (msgs, ctx) => {
    const orders = msgs.map((m) => m.json<Order>());
    const rows = await insertOrders(orders, ctx.signal);
    if (rows < orders.length) throw new TemporarySinkError("some rows were locked");
    return { rowCount: rows }; // a driver's result: the batch committed
  },
  {
    batchSize: 100,
    concurrency: 4,
    signal: shutdown.signal,
    onBatch: (r) => console.log(r.outcome, new Date(r.messages[0]?.msg.info.timestampNanos ?? 0 / 1e6).toISOString()),
    onError: (err, context) => console.warn(context.during, err),
  },
);

// A partial report: the rest of the batch is acknowledged.
await ack.run(consumer, async (msgs) => {
  const failed: FailedMessage<JsMsg>[] = [];
  for (const m of msgs) {
    if (m.info.deliveryCount > 3 && m.string() === "") failed.push({ msg: m, error: new PermanentSinkError("empty order") });
  }
  return { failed };
});

// runEach: one handler per message; what it returns is not a report.
await ack.runEach(
  consumer,
  async (msg, ctx) => {
    const order = msg.json<Order>();
    if (order.id === "") throw new PermanentSinkError("order without id");
    await insertOrders([order], ctx.signal);
    return { failed: 0 }; // an HTTP client's result, say: not read
  },
  { concurrency: 32, signal: shutdown.signal, onResult: (r) => console.log(r.messages[0]?.msg.seq) },
);

// process: the host's own fetch loop, and the result read with the client's JsMsg.
const batch: JsMsg[] = [];
for await (const m of await consumer.fetch({ max_messages: 100, expires: 1_000 })) batch.push(m);
const result: BatchResult<JsMsg> = await ack.process(batch, (msgs) => insertOrders(msgs.map((m) => m.json<Order>())), { receivedAt: (m) => m.info.timestampNanos / 1e6 });
const first: MessageResult<JsMsg> | undefined = result.messages[0];
console.log(first?.msg.json<Order>().id, first?.msg.sid, result.acked);

// A write declared apart, typed with the bare BatchWrite, and one written for this client's JsMsg.
const write: BatchWrite = async (msgs, ctx) => insertOrders(msgs.map((m) => m.json<Order>()), ctx.signal);
const reporting = (msgs: readonly JsMsg[]): WriteReport<JsMsg> => ({ failed: msgs.filter((m) => m.redelivered).map((msg) => ({ msg, error: new Error("retry") })) });
const sinkFor = (table: string): BatchWrite => async (msgs: readonly JsMsg[]) => insertOrders(msgs.map((m) => ({ id: `${table}:${m.seq}` })));
await ack.process(batch, write);
await ack.process(batch, reporting);
await ack.process(batch, sinkFor("orders"));
const runOptions: RunOptions = { batchSize: 10, onBatch: (r) => console.log(r.messages.map((x) => x.msg.seq)) };
await ack.run(consumer, write, runOptions);

// withInProgress on its own.
const info = await jsm.consumers.info("ORDERS", "writer");
const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 10_000 }, consumerTimingFromConfig(info));
const n = await withInProgress(batch, (ctx) => insertOrders(batch.map((m) => m.json<Order>()), ctx.signal), policy, {
  receivedAt: (m, i) => (i === 0 ? new Date(m.info.timestampNanos / 1e6) : undefined),
  connection: nc,
  confirm: { connection: nc },
});
console.log(n + 1);
await withInProgress(batch[0]!, async () => batch[0]!.ack(), { enabled: false });

// Consumer health.
const watch = watchConsumer(jsm, "ORDERS", "writer", { intervalMs: 5_000, signal: shutdown.signal });
console.log(watch.latest()?.pending);

await ack.drain(AbortSignal.timeout(10_000));
await nc.drain();
