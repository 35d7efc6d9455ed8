/**
 * Confirmed ACKs through a connection of least privilege: its user may publish to the ack
 * subjects and subscribe to `_INBOX.*` only, so the reply inbox's wildcard subscription
 * (`_INBOX.<token>.>`) is refused by the server with a permissions violation, and the client
 * closes it: no answer can ever come. That must be reported as what it is, not taken for slow
 * answers batch after batch, and the `+ACK`s must still land.
 */
import { describe, expect, it } from "vitest";
import { jetstream, type JsMsg } from "@nats-io/jetstream";
import { AckNotConfirmedError, CommitThenAck, type BatchResult, type RunErrorContext } from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { createFixture, eventually, publish } from "../helpers/jetstream.js";
import { startServer } from "../helpers/nats-server.js";
import { startRival } from "../helpers/rival.js";

const ACK_WAIT_MS = 2000;
const CONFIG = [
  "authorization {",
  "  users: [",
  "    { user: admin, password: admin_pw }",
  '    { user: acker, password: acker_pw, permissions: { publish: { allow: ["$JS.ACK.>"] }, subscribe: { allow: ["_INBOX.*"] } } }',
  // The harness checks the server is up without credentials.
  "    { user: probe_nobody, password: probe_nobody_pw }",
  "  ]",
  "}",
  "no_auth_user: probe_nobody",
].join("\n");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("confirmed ACKs when the server refuses the reply inbox's subscription", { concurrent: true }, () => {
  it("the first batch reports the refusal (not a timeout), later batches send plain +ACKs at once and report it; every +ACK lands: a second worker receives nothing", async () => {
    await using srv = await startServer({ config: CONFIG });
    const admin = await srv.connect({ user: "admin", pass: "admin_pw" });
    const rivalConn = await srv.connect({ user: "admin", pass: "admin_pw" });
    const worker = await srv.connect({ user: "admin", pass: "admin_pw" });
    const acker = await srv.connect({ user: "acker", pass: "acker_pw" });
    try {
      const f = await createFixture(admin, { ackWaitMs: ACK_WAIT_MS });
      await using spy = await AckSpy.start(admin, f.stream);
      const seqs = await publish(f, 4);
      const consumer = await jetstream(worker).consumers.get(f.stream, f.consumer);
      const fetch = async (n: number): Promise<JsMsg[]> => {
        const out: JsMsg[] = [];
        for await (const m of await consumer.fetch({ max_messages: n, expires: 2000 })) out.push(m);
        return out;
      };
      // A window of 1 s × 5: slow answers would be waited for that long.
      const ack = new CommitThenAck({ connection: acker, confirmAck: { timeoutMs: 1000, retries: 4 } });

      const first = await ack.process(await fetch(2), async () => undefined);
      expect(first.messages.map((m) => [m.action, m.confirmed])).toEqual([["acked", false], ["acked", false]]);
      for (const m of first.messages) {
        expect(m.settleError).toBeInstanceOf(AckNotConfirmedError);
        // The refusal, not "no answer in time".
        expect((m.settleError as AckNotConfirmedError).lastFailure).toBe("error");
      }

      const second = await ack.process(await fetch(2), async () => undefined);
      expect(second.messages.map((m) => [m.action, m.confirmed])).toEqual([["acked", false], ["acked", false]]);
      const refusal = second.messages[0]!.settleError as { name?: string; code?: string };
      expect(second.messages.every((m) => m.settleError === refusal)).toBe(true);
      // The client's own permissions error: its 3.x class, or the 2.x code.
      expect(refusal.name === "PermissionViolationError" || refusal.code === "PERMISSIONS_VIOLATION", `${refusal.name} ${refusal.code}`).toBe(true);

      await acker.flush();
      await admin.flush();
      const acks = spy.of("+ACK");
      expect(acks.map((x) => x.streamSequence).sort((a, b) => a - b)).toEqual(seqs);
      // The second batch asked for no answer: none could come.
      const secondSeqs = second.messages.map((m) => m.msg.seq);
      expect(acks.filter((x) => secondSeqs.includes(x.streamSequence)).some((x) => x.withReply)).toBe(false);
      // Every +ACK landed: a second worker pulling past AckWait receives nothing.
      const rival = await startRival(jetstream(rivalConn), f.stream, f.consumer);
      await sleep(ACK_WAIT_MS + 1500);
      await rival.stop();
      expect(rival.received).toEqual([]);
    } finally {
      await worker.close();
      await acker.close();
      await rivalConn.close();
      await admin.close();
    }
  });

  it("run, the loop's own confirmation through that connection: the batch that met the refusal reports it once, later batches' +ACKs go out plain and unconfirmed with no error each; every message acked once, a second worker receives nothing", async () => {
    await using srv = await startServer({ config: CONFIG });
    const admin = await srv.connect({ user: "admin", pass: "admin_pw" });
    const rivalConn = await srv.connect({ user: "admin", pass: "admin_pw" });
    const acker = await srv.connect({ user: "acker", pass: "acker_pw" });
    try {
      const f = await createFixture(admin, { ackWaitMs: ACK_WAIT_MS });
      await using spy = await AckSpy.start(rivalConn, f.stream);
      const seqs = await publish(f, 6);
      const ack = new CommitThenAck({ connection: acker });
      const results: BatchResult[] = [];
      const errors: Array<{ err: unknown; context: RunErrorContext }> = [];
      const stop = new AbortController();
      // Writes of 300 ms: the server's refusal (one round trip after the first batch's ACKs)
      // arrives before the next batch settles.
      const running = ack.run(await jetstream(admin).consumers.get(f.stream, f.consumer), () => sleep(300), {
        batchSize: 2,
        expiresMs: 1000,
        signal: stop.signal,
        onBatch: (r) => results.push(r),
        onError: (err, context) => errors.push({ err, context }),
      });
      await eventually(() => results.flatMap((r) => r.messages).length === 6, "six messages settled", 30_000);
      stop.abort();
      await running;
      const settled = results.flatMap((r) => r.messages);
      expect(settled.map((m) => m.action)).toEqual(seqs.map(() => "acked"));
      expect(settled.every((m) => m.confirmed === false)).toBe(true);
      // Reported with the batch that met it, not with every later one.
      const reported = settled.filter((m) => m.settleError !== undefined);
      expect(reported.map((m) => m.msg.seq)).toEqual(results[0]!.messages.map((m) => m.msg.seq));
      for (const m of reported) expect((m.settleError as AckNotConfirmedError).lastFailure).toBe("error");
      expect(errors.filter((e) => e.context.during === "settle")).toHaveLength(reported.length);
      await rivalConn.flush();
      const acks = spy.of("+ACK");
      expect(acks.map((x) => x.streamSequence).sort((a, b) => a - b)).toEqual(seqs);
      const rival = await startRival(jetstream(rivalConn), f.stream, f.consumer);
      await sleep(ACK_WAIT_MS + 1500);
      await rival.stop();
      expect(rival.received).toEqual([]);
    } finally {
      await acker.close();
      await rivalConn.close();
      await admin.close();
    }
  });
});
