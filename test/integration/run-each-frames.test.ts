/**
 * `runEach`'s final frames on a real nats-server: handlers that end in one turn of the event
 * loop settle together, so their ACKs and Terms leave in a socket write or two (each used to take
 * a write of its own), and every message still gets exactly one final frame — also when the loop
 * is stopped in the turn they end. A second worker pulling the same durable receives nothing.
 */
import { describe, expect, it } from "vitest";
import { jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { CommitThenAck, PermanentSinkError, type BatchResult } from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, eventually, publish } from "../helpers/jetstream.js";
import { startRival } from "../helpers/rival.js";
import { useServer } from "../helpers/server-fixture.js";

const fx = useServer();

/** Counts the client's socket writes by wrapping its transport's `send` (client internals). */
function countWrites(nc: NatsConnection): { readonly writes: number; readonly ackWrites: readonly number[]; restore(): void } {
  const transport = (nc as unknown as { protocol?: { transport?: { send?: (data: Uint8Array) => void } } }).protocol?.transport;
  const send = transport?.send;
  // Not a skip: a client whose transport moved fails here, and the test is updated with it.
  expect(typeof send, "the client's transport.send, wrapped to count socket writes").toBe("function");
  let writes = 0;
  const ackWrites: number[] = [];
  const decoder = new TextDecoder();
  transport!.send = (data: Uint8Array): void => {
    writes += 1;
    if (decoder.decode(data).includes("$JS.ACK.")) ackWrites.push(performance.now());
    send!.call(transport, data);
  };
  return {
    get writes() {
      return writes;
    },
    ackWrites,
    restore: () => void (transport!.send = send!),
  };
}

/**
 * Starts `runEach` over `n` messages with every handler held until `release()`; odd sequences
 * fail when `failOdd`. `deliveredAt`: when every handler was running (monotonic ms).
 */
async function heldLoop(n: number, failOdd: boolean, ackWaitMs = 30_000) {
  const f = await createFixture(fx.nc, { ackWaitMs, maxAckPending: 1000 });
  const seqs = await publish(f, n);
  const spy = await AckSpy.start(fx.spyConn, f.stream);
  const worker = await fx.srv.connect();
  const ack = new CommitThenAck();
  const stop = new AbortController();
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let started = 0;
  const results: BatchResult[] = [];
  const running = ack.runEach(
    await jetstream(worker).consumers.get(f.stream, f.consumer),
    async (m) => {
      started += 1;
      await gate;
      // Timers of one delay set in one turn fire in one phase of the loop, each callback with
      // its own run of microtasks: the handlers end in one turn, one by one (a sink's replies).
      await new Promise((r) => setTimeout(r, 20));
      if (failOdd && m.seq % 2 === 1) throw new PermanentSinkError("the sink refused it");
    },
    { concurrency: n, expiresMs: 1000, signal: stop.signal, onResult: (r) => void results.push(r) },
  );
  await eventually(() => started === n, `all ${n} handlers running`);
  return { f, seqs, spy, worker, stop, release, running, results, deliveredAt: performance.now() };
}

describe("runEach: final frames of handlers that end together", () => {
  it("leave in a socket write or two (ACKs, then Terms), not one each; one frame per message; confirmed ACKs answered", async () => {
    const n = 24;
    const { f, seqs, spy, worker, stop, release, running, results } = await heldLoop(n, true);
    const counter = countWrites(worker);
    try {
      release();
      await eventually(() => results.length === n, `all ${n} settled`);
      const frameWrites = counter.ackWrites.length;
      await spy.waitFor((fr) => fr.filter((x) => x.kind === "+ACK" || x.kind === "+TERM").length >= n, 15_000, "every final frame");
      // The writes that carried final frames: the ACKs in one, the Terms (settled a step later in
      // the same run of microtasks) in the next. Each frame took a write of its own before: 24.
      // (Pull requests and consumer-info reads go out in writes of their own too; not counted.)
      expect(frameWrites).toBeGreaterThanOrEqual(1);
      expect(frameWrites).toBeLessThanOrEqual(4);
      for (const seq of seqs) {
        const frames = spy.forSequence(seq).filter((x) => x.kind !== "+WPI");
        expect(frames.map((x) => x.kind), `seq ${seq}`).toEqual([seq % 2 === 1 ? "+TERM" : "+ACK"]);
      }
      expect(results.filter((r) => r.acked === 1)).toHaveLength(n / 2);
      expect(results.filter((r) => r.termed === 1)).toHaveLength(n / 2);
      // The loop's default confirms its ACKs: every one was answered.
      expect(results.filter((r) => r.acked === 1).every((r) => r.messages[0]?.confirmed === true)).toBe(true);
    } finally {
      counter.restore();
      stop.abort();
      await running;
      await worker.close();
      await spy[Symbol.asyncDispose]();
    }
    const info = await consumerInfo(f);
    expect(info.num_ack_pending).toBe(0);
  });

  it("a loop stopped in the turn its handlers end still sends every final frame once; a second worker pulling past AckWait receives nothing", async () => {
    const n = 16;
    // A short AckWait: a message whose ACK never left would reach the rival within the test.
    const ackWaitMs = 4000;
    const { f, seqs, spy, worker, stop, release, running, results, deliveredAt } = await heldLoop(n, false, ackWaitMs);
    // Pulling the same durable from before the frames leave until well past AckWait.
    const rival = await startRival(f.js, f.stream, f.consumer);
    try {
      // Both in one turn: the handlers' frames wait for the next turn, the shutdown starts now.
      release();
      stop.abort();
      await running;
      expect(results).toHaveLength(n);
      expect(results.every((r) => r.acked === 1)).toBe(true);
      await spy.waitFor((fr) => fr.filter((x) => x.kind === "+ACK").length >= n, 15_000, "every ACK");
      for (const seq of seqs) expect(spy.forSequence(seq).map((x) => x.kind), `seq ${seq}`).toEqual(["+ACK"]);
      const until = deliveredAt + ackWaitMs + 2000;
      await new Promise((r) => setTimeout(r, Math.max(0, until - performance.now())));
      await rival.stop();
      expect(rival.received).toEqual([]);
      const info = await consumerInfo(f);
      expect(info.num_ack_pending).toBe(0);
      expect(info.num_pending).toBe(0);
      expect(info.num_redelivered).toBe(0);
    } finally {
      await rival.stop().catch(() => undefined);
      await worker.close();
      await spy[Symbol.asyncDispose]();
    }
  });

  it("with beats from the heartbeat thread, a handler's frames leave at once: a synchronous block later in the same turn does not hold them", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    await publish(f, 2);
    const worker = await fx.srv.connect();
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
      inProgress: { enabled: true, intervalMs: 10_000, maxHeartbeats: 10 },
      heartbeat: { thread: { servers: fx.srv.url } },
      connection: worker,
    });
    const stop = new AbortController();
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let started = 0;
    let ended = 0;
    let blockedAt = Number.NaN;
    const results: BatchResult[] = [];
    const counter = countWrites(worker);
    const running = ack.runEach(
      await jetstream(worker).consumers.get(f.stream, f.consumer),
      async () => {
        started += 1;
        await gate;
        await new Promise((r) => setTimeout(r, 20));
        ended += 1;
        if (ended === 2) {
          // The second handler's sink blocks the event loop, in the turn the first one ended.
          blockedAt = performance.now();
          const until = blockedAt + 300;
          while (performance.now() < until);
        }
      },
      { concurrency: 2, expiresMs: 1000, signal: stop.signal, onResult: (r) => void results.push(r) },
    );
    try {
      await eventually(() => started === 2, "both handlers running");
      release();
      await eventually(() => results.length === 2, "both settled");
      expect(results.every((r) => r.acked === 1)).toBe(true);
      expect(Number.isFinite(blockedAt)).toBe(true);
      // The first handler's ACK was written before the block began.
      expect(counter.ackWrites.length).toBeGreaterThanOrEqual(1);
      expect(counter.ackWrites[0]!).toBeLessThan(blockedAt);
    } finally {
      counter.restore();
      stop.abort();
      await running;
      await worker.close();
    }
  });
});
