/**
 * The host drains the worker's connection (`nc.drain()`, as a SIGTERM handler does) while a
 * loop's writes run, and the drain stays open for a while: the host's own subscription has to be
 * drained first, and the server is stalled (frozen), so that round trip is not answered yet. The
 * connection is draining, not closed: frames may still be published, but every new subscription,
 * so every pull, is refused, and the subscriptions the connection had are gone (a confirmed
 * ACK's reply cannot come back). The writes end in that window. Their ACKs must still leave,
 * plain, confirmed by the loop's default, or confirmed as the host asked (nothing is
 * redelivered: a second worker on the durable receives nothing), nothing may be thrown out of
 * the library (no unhandled rejection), the refused pull must end the loop without announcing a
 * retry it will never make, and the loop must end with the drain.
 */
import { describe, expect, it } from "vitest";
import { jetstream } from "@nats-io/jetstream";
import { CommitThenAck, verifyInProgressPolicy, type BatchResult, type ConfirmAckOptions, type RunErrorContext } from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { createFixture, eventually, publish } from "../helpers/jetstream.js";
import { startServer } from "../helpers/nats-server.js";
import { startRival } from "../helpers/rival.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const ACK_WAIT_MS = 3000;
const INTERVAL_MS = 1000;
/** How long the server stays frozen with the drain open: several retry delays of a failed pull (100 ms, doubling). */
const FROZEN_MS = 600;

const ACKS = {
  plain: false,
  "the loop's confirmed": undefined,
  "the host's confirmed": { timeoutMs: 500, retries: 1 },
} as const satisfies Record<string, ConfirmAckOptions | false | undefined>;

describe("the host drains the worker's connection and the drain stays open", { concurrent: true }, () => {
  // Warm: a message was acked (confirmed) before, so the reply subscription existed and the
  // drain removes it; cold: the first confirmed ACK comes during the drain, which refuses it.
  const cases = [
    ["run", "plain", false],
    ["run", "the loop's confirmed", false],
    ["runEach", "the loop's confirmed", false],
    ["run", "the loop's confirmed", true],
    ["runEach", "the loop's confirmed", true],
    ["runEach", "the host's confirmed", true],
  ] as const;
  for (const [loop, acks, warm] of cases) {
    it(`${loop}, ${acks} ACKs${warm ? ", after a confirmed batch" : ""}: the writes' ACKs still leave, the pull the draining connection refuses ends the loop with no retry announced, a second worker receives nothing`, async () => {
      await using srv = await startServer();
      const worker = await srv.connect();
      const spyConn = await srv.connect();
      const rivalConn = await srv.connect();
      try {
        const f = await createFixture(worker, { ackWaitMs: ACK_WAIT_MS });
        await using spy = await AckSpy.start(spyConn, f.stream);
        const warmSeqs = warm ? await publish(f, 1) : [];
        // A host's own subscription: draining it takes a round trip the frozen server holds.
        worker.subscribe(`host.events.${f.stream}`);
        const policy = verifyInProgressPolicy({ enabled: true, intervalMs: INTERVAL_MS, shutdownTimeoutMs: 1000 }, { ackWaitMs: ACK_WAIT_MS, source: "configured" });
        const confirmAck = ACKS[acks];
        const ack = new CommitThenAck({ inProgress: policy, ...(confirmAck !== undefined ? { confirmAck } : {}) });
        const results: BatchResult[] = [];
        const errors: Array<{ err: unknown; context: RunErrorContext }> = [];
        let writes = 0;
        let release!: () => void;
        const released = new Promise<void>((r) => (release = r));
        const write = async (): Promise<void> => {
          writes += 1;
          if (writes > warmSeqs.length) await released;
        };
        const onError = (err: unknown, context: RunErrorContext) => errors.push({ err, context });
        const consumer = await f.js.consumers.get(f.stream, f.consumer);
        const running =
          loop === "run"
            ? ack.run(consumer, () => write(), { batchSize: 3, concurrency: 1, expiresMs: 1000, onError, onBatch: (r) => results.push(r) })
            : ack.runEach(consumer, () => write(), { batchSize: 3, concurrency: 3, expiresMs: 1000, onError, onResult: (r) => results.push(r) });
        let ended: "resolved" | "rejected" | undefined;
        let reason: unknown;
        void running.then(
          () => (ended = "resolved"),
          (err: unknown) => ((ended = "rejected"), (reason = err)),
        );
        if (warm) {
          await eventually(() => results.length === 1, "the first message settled");
          // Confirmed: the reply subscription is there when the drain begins.
          expect(results[0]!.messages.map((m) => [m.action, m.confirmed])).toEqual([["acked", true]]);
        }
        const seqs = await publish(f, 3);
        const expectedWrites = warmSeqs.length + (loop === "run" ? 1 : 3);
        await eventually(() => writes === expectedWrites, "the writes started");
        // Past the first beat, well inside the lease.
        await sleep(INTERVAL_MS + 200);
        await srv.freeze();
        let drained = false;
        const draining = worker.drain().then(() => (drained = true));
        try {
          release();
          // The writes end and are settled inside the drain; the loop waits with it.
          await sleep(FROZEN_MS);
          expect(drained).toBe(false);
          expect(worker.isDraining()).toBe(true);
        } finally {
          srv.thaw();
        }
        await draining;
        await eventually(() => ended, "the loop ended with the drain", 10_000);
        // The pull the drain refused (or, later, the closed connection refused) is reported once,
        // with no retry announced: a draining connection refuses every pull until it closes.
        const fetchErrors = errors.filter((e) => e.context.during === "fetch");
        expect(fetchErrors).toHaveLength(1);
        const refused = fetchErrors[0]!.err as { name?: string; code?: string };
        const drainingOrClosed = ["DrainingConnectionError", "ClosedConnectionError"].includes(refused.name ?? "") || ["CONNECTION_DRAINING", "CONNECTION_CLOSED"].includes(refused.code ?? "");
        expect(drainingOrClosed, `${refused.name} ${refused.code}`).toBe(true);
        expect(fetchErrors[0]!.context).toEqual({ during: "fetch", consecutiveFailures: 1 });
        expect(ended).toBe("rejected");
        expect(reason).toBe(fetchErrors[0]!.err);
        // Every message acked, never left with a frame that did leave. With replies asked for, an
        // ACK is unconfirmed: no answer comes back through a draining connection. The loop's own
        // confirmation knows it and says only that; a host's explicit confirmAck reports it, as
        // any ACK it could not confirm.
        const settled = results.slice(warmSeqs.length).flatMap((r) => r.messages.map((m) => ({ seq: m.msg.seq, action: m.action, confirmed: m.confirmed, settleError: (m.settleError as Error | undefined)?.name })));
        const expected = { plain: {}, "the loop's confirmed": { confirmed: false }, "the host's confirmed": { confirmed: false, settleError: "AckNotConfirmedError" } }[acks];
        expect(settled.sort((a, b) => a.seq - b.seq)).toEqual(seqs.map((seq) => ({ seq, action: "acked", confirmed: undefined, settleError: undefined, ...expected })));
        const settleReports = errors.filter((e) => e.context.during !== "fetch").map((e) => [(e.err as Error).name, e.context.during, e.context.action]);
        expect(settleReports).toEqual(acks === "the host's confirmed" ? seqs.map(() => ["AckNotConfirmedError", "settle", "acked"]) : []);
        // Every ACK left while the connection drained.
        await spyConn.flush();
        for (const seq of seqs) expect(spy.forSequence(seq).map((x) => x.kind).at(-1)).toBe("+ACK");
        // Was the lease kept and the message settled? A second worker pulling the durable past
        // AckWait receives nothing.
        const rival = await startRival(jetstream(rivalConn), f.stream, f.consumer);
        await sleep(ACK_WAIT_MS + 1500);
        await rival.stop();
        expect(rival.received).toEqual([]);
        await ack.drain();
      } finally {
        if (!worker.isClosed()) await worker.close();
        await spyConn.close();
        await rivalConn.close();
      }
    }, 30_000);
  }
});
