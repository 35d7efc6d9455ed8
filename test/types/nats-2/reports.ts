// What TypeScript accepts as a write's value, and the inline write's parameter types (client
// nats 2.x). Every @ts-expect-error marks a report in a wrong shape: test/unit/consumer-types.test.ts
// also compiles this file without the directives and checks that each of those lines, and
// only those, fails with WriteReportExpected.
import type { Consumer, JsMsg } from "nats";
import { CommitThenAck, TemporarySinkError, type BatchResult, type FailedMessage, type WorkContext, type WriteReport } from "jetstream-inprogress";

declare const ack: CommitThenAck;
declare const msgs: JsMsg[];
declare const consumer: Consumer;

/** `true` only when A and B are the same type. */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const same = <A, B>(ok: Equal<A, B>): boolean => ok;

// An inline write's parameters are typed from the call: the client's messages and the work context.
await ack.process(msgs, (batch, ctx) => void [same<typeof batch, readonly JsMsg[]>(true), same<typeof ctx, WorkContext>(true)]);
await ack.run(consumer, (batch, ctx) => void [same<typeof batch, readonly JsMsg[]>(true), same<typeof ctx, WorkContext>(true)]);
await ack.runEach(consumer, (msg, ctx) => void [same<typeof msg, JsMsg>(true), same<typeof ctx, WorkContext>(true)]);
const result = await ack.process(msgs, async () => undefined);
same<typeof result, BatchResult<JsMsg>>(true);

// Values without a `failed` key mean the batch committed.
await ack.process(msgs, () => undefined);
await ack.process(msgs, async () => {});
await ack.process(msgs, async () => ({ rowCount: 3, rows: [] }));
await ack.process(msgs, async () => 42);
await ack.process(msgs, async () => [1, 2]);
await ack.process(msgs, async (batch) => new Map(batch.map((m) => [m.seq, m.json<unknown>()])));
await ack.process(msgs, async (): Promise<Record<string, unknown>> => ({ inserted: 2 }));
await ack.process(msgs, async (): Promise<unknown> => ({ failed: [] })); // typed unknown: not checked
await ack.run(consumer, async (batch) => ({ inserted: batch.length }));

// Reports in the right shape.
await ack.process(msgs, async (batch) => ({ failed: batch.map((msg) => ({ msg, error: new TemporarySinkError("row locked") })) }));
await ack.process(msgs, async (): Promise<WriteReport<JsMsg>> => ({ failed: [] }));
await ack.process(msgs, async (batch) => (batch.length > 1 ? { failed: [{ msg: batch[1]!, error: new Error("x") }] } : undefined));
await ack.process(msgs, async (batch) => {
  const failed: FailedMessage[] = [];
  for (const msg of batch) if (msg.redelivered) failed.push({ msg, error: new TemporarySinkError("again") });
  return { failed };
});
await ack.run(consumer, async (batch) => ({ failed: batch.slice(1).map((msg) => ({ msg, error: 1 })) }));

// The five shapes a migrating service wrote by mistake: each fails to compile.
// @ts-expect-error a message instead of { msg, error }
await ack.process(msgs, async (batch) => ({ failed: [batch[0]!] }));
// @ts-expect-error `message` instead of `msg`
await ack.process(msgs, async (batch) => ({ failed: [{ message: batch[0]!, error: new Error("x") }] }));
// @ts-expect-error a sequence instead of the message
await ack.process(msgs, async (batch) => ({ failed: [{ msg: batch[0]!.seq, error: new Error("x") }] }));
// @ts-expect-error one entry instead of an array
await ack.process(msgs, async (batch) => ({ failed: { msg: batch[0]!, error: new Error("x") } }));
// @ts-expect-error a Set instead of an array
await ack.process(msgs, async (batch) => ({ failed: new Set([batch[0]!]) }));

// The same under run, a driver's count under `failed`, and a wrong report on one path only.
// @ts-expect-error a message instead of { msg, error }
await ack.run(consumer, async (batch) => ({ failed: [batch[0]!] }));
// @ts-expect-error a count
await ack.run(consumer, async () => ({ failed: 0 }));
// @ts-expect-error wrong on one path
await ack.process(msgs, async (batch) => (batch.length > 1 ? { failed: [batch[1]!] } : undefined));

// A runEach handler's value is never a report: anything compiles (only throwing fails it).
await ack.runEach(consumer, async (msg) => ({ failed: [msg] }));
