/**
 * The host ends the worker's connection (`nc.drain()` or `nc.close()`, as a SIGTERM handler
 * does) while `run` is in the middle of a beaten write, without stopping the loop first. Nothing
 * can be sent any more, so nothing may be claimed: no ACK, no NAK, the batch reported `left`,
 * the write's signal aborted at the first beat after the close (its lease cannot be kept, so the
 * write is told before the deadline), `run` ending with the connection (not hanging on a pull the
 * drain ended), and every message redelivered to a second worker on the durable. Beats from the
 * main thread and from the heartbeat thread (whose own connection stays up).
 */
import { describe, expect, it } from "vitest";
import { jetstream } from "@nats-io/jetstream";
import { CommitThenAck, LeaseExpiredError, verifyInProgressPolicy, type BatchResult, type RunErrorContext } from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { createFixture, eventually, publish } from "../helpers/jetstream.js";
import { startRival } from "../helpers/rival.js";
import { useServer } from "../helpers/server-fixture.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const ACK_WAIT_MS = 2000;
const INTERVAL_MS = 700;
/** Longer than the lease can last once the beats stop (one interval + AckWait). */
const WRITE_MS = 4000;

describe("the host ends the worker's connection under a running loop", { concurrent: true }, () => {
  const fx = useServer();

  const cases = [
    ["run", "drain", false, false],
    ["run", "close", true, false],
    ["runEach", "drain", true, false],
    ["runEach", "close", false, false],
    ["run", "close", false, true],
    ["runEach", "drain", true, true],
  ] as const;
  for (const [loop, how, honours, thread] of cases) {
    it(`${loop}${thread ? ", beats from the heartbeat thread" : ""}: nc.${how}() in the middle of beaten writes that ${honours ? "honour" : "ignore"} their signal: told at the next beat, nothing acked or NAKed, every message left, the loop ends, a second worker receives every message`, async () => {
      const worker = await fx.srv.connect();
      try {
        const f = await createFixture(worker, { ackWaitMs: ACK_WAIT_MS });
        await using spy = await AckSpy.start(fx.spyConn, f.stream);
        const seqs = await publish(f, 3);
        const policy = verifyInProgressPolicy({ enabled: true, intervalMs: INTERVAL_MS, shutdownTimeoutMs: 1000 }, { ackWaitMs: ACK_WAIT_MS, source: "configured" });
        const ack = new CommitThenAck({ inProgress: policy, ...(thread ? { heartbeat: { thread: true } } : {}) });
        const results: BatchResult[] = [];
        const errors: Array<{ name: string; context: RunErrorContext }> = [];
        let writes = 0;
        const abortReasons: unknown[] = [];
        const abortedAt: number[] = [];
        let writeEnded = false;
        const write = async (ctx: { readonly signal: AbortSignal }): Promise<void> => {
          writes += 1;
          ctx.signal.addEventListener("abort", () => (abortReasons.push(ctx.signal.reason), abortedAt.push(performance.now())), { once: true });
          const end = performance.now() + WRITE_MS;
          while (performance.now() < end) {
            if (honours && ctx.signal.aborted) throw ctx.signal.reason;
            await sleep(50);
          }
          writeEnded = true;
        };
        const onError = (err: unknown, context: RunErrorContext) => errors.push({ name: (err as Error).name, context });
        const consumer = await f.js.consumers.get(f.stream, f.consumer);
        const running =
          loop === "run"
            ? ack.run(consumer, (_msgs, ctx) => write(ctx), { batchSize: 3, concurrency: 1, expiresMs: 1000, onBatch: (r) => results.push(r), onError })
            : ack.runEach(consumer, (_msg, ctx) => write(ctx), { batchSize: 3, concurrency: 3, expiresMs: 1000, onResult: (r) => results.push(r), onError });
        const expectedWrites = loop === "run" ? 1 : 3;
        const ended = running.then(
          () => "resolved",
          () => "rejected",
        );
        await eventually(() => writes === expectedWrites, "the writes started");
        // Past the first beat, well inside the lease.
        await sleep(1000);
        await (how === "drain" ? worker.drain() : worker.close());
        const closedAt = performance.now();
        // The host's own call is not held by the write.
        expect(writeEnded).toBe(false);
        const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
        try {
          const outcome = await Promise.race([ended, sleep(WRITE_MS + 6000).then(() => "still running")]);
          expect(outcome).toBe("rejected");
          // Nothing lost: the durable hands every message to the second worker.
          await eventually(() => seqs.every((s) => rival.received.some((r) => r.seq === s && r.deliveryCount === 2)), "every message redelivered to the second worker", 10_000);
        } finally {
          await rival.stop();
        }
        expect(writes).toBe(expectedWrites);
        // Told at the next beat, not when the lease's deadline passes (the last beat + AckWait):
        // the cause names the closed connection (a deadline passing has none), and the abort
        // comes within about one interval of the close (the deadline path takes over 1.6 s).
        expect(abortReasons).toHaveLength(expectedWrites);
        for (const r of abortReasons) {
          expect(r).toBeInstanceOf(LeaseExpiredError);
          expect((r as LeaseExpiredError).cause).toMatchObject({ name: "ConnectionClosedError" });
          expect((r as LeaseExpiredError).overdueMs).toBe(0);
        }
        for (const t of abortedAt) expect(t - closedAt).toBeLessThan(INTERVAL_MS + 700);
        expect(results).toHaveLength(expectedWrites);
        for (const r of results) expect(r).toMatchObject({ outcome: "left", left: 3 / expectedWrites, acked: 0, nacked: 0, termed: 0, leaseLost: true });
        // The pull that failed on the closed (or still draining) connection announces no retry:
        // the loop ends instead.
        const fetchErrors = errors.filter((e) => e.context.during === "fetch");
        expect(fetchErrors.length).toBeGreaterThanOrEqual(1);
        for (const e of fetchErrors) expect(e.context).not.toHaveProperty("retryInMs");
        expect(fetchErrors.at(-1)?.context).toEqual({ during: "fetch", consecutiveFailures: fetchErrors.length });
        const settleErrors = errors.filter((e) => e.context.during === "settle");
        expect(settleErrors.map((e) => [e.name, e.context.action])).toEqual(seqs.map(() => ["ConnectionClosedError", "left"]));
        await fx.spyConn.flush();
        for (const seq of seqs) {
          const kinds = spy.forSequence(seq).map((x) => x.kind);
          expect(kinds.length).toBeGreaterThanOrEqual(1);
          expect(kinds.every((k) => k === "+WPI")).toBe(true);
        }
        await ack.drain();
      } finally {
        if (!worker.isClosed()) await worker.close();
      }
    }, 30_000);
  }
});
