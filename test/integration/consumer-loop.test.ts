/**
 * The consumer loops (`run` with concurrency, `runEach`) on a real nats-server: bounds on
 * concurrent writes, a result for every message, a shutdown with writes in flight, lease-safe
 * fetching of a trickle, and per-message settling. The ack-frame spy and consumer info are the
 * oracles.
 */
import { describe, expect, it } from "vitest";
import { jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import {
  CommitThenAck,
  ConsumerPolicyError,
  TemporarySinkError,
  verifyInProgressPolicy,
  type BatchResult,
  type RunErrorContext,
} from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, eventually, publish } from "../helpers/jetstream.js";
import { startRival } from "../helpers/rival.js";
import { useServer } from "../helpers/server-fixture.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Counts concurrent calls; `most` is the highest level seen. */
class Gauge {
  level = 0;
  most = 0;
  enter(): void {
    this.level += 1;
    this.most = Math.max(this.most, this.level);
  }
  leave(): void {
    this.level -= 1;
  }
}

describe("consumer loops on a real nats-server", () => {
  const fx = useServer();

  it("run with concurrency 3: never more than 3 writes at once, reaches 3, every message acked once with a result", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const seqs = await publish(f, 60);
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {});
    const gauge = new Gauge();
    const results: BatchResult[] = [];
    const shutdown = new AbortController();
    const running = ack.run(await f.js.consumers.get(f.stream, f.consumer), async (msgs) => {
      gauge.enter();
      await sleep(150);
      gauge.leave();
      return msgs.length;
    }, { batchSize: 5, concurrency: 3, signal: shutdown.signal, onBatch: (r) => results.push(r) });
    await eventually(() => results.reduce((n, r) => n + r.acked, 0) === 60, "every message acked");
    shutdown.abort();
    await running;
    expect(gauge.most).toBe(3);
    expect(results.every((r) => r.outcome === "acked")).toBe(true);
    expect(results.flatMap((r) => r.messages.map((m) => m.msg.seq)).sort((a, b) => a - b)).toEqual(seqs);
    await fx.drain();
    for (const seq of seqs) expect(spy.forSequence(seq).map((x) => x.kind)).toEqual(["+ACK"]);
  });

  it("run with concurrency 4 on a backlog: every batch is full, none waits for its pull's expiry", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    await publish(f, 800);
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {});
    const sizes: number[] = [];
    const shutdown = new AbortController();
    let acked = 0;
    const started = performance.now();
    let took = 0;
    // A partial batch would wait out this expiry: the loop asks for four batches' worth at once,
    // and one window filling must not start the next batch's first messages as a batch of their own.
    const running = ack.run(await f.js.consumers.get(f.stream, f.consumer), async (msgs) => {
      sizes.push(msgs.length);
      await sleep(20);
    }, {
      batchSize: 100,
      concurrency: 4,
      expiresMs: 10_000,
      signal: shutdown.signal,
      onBatch: (r) => {
        acked += r.acked;
        if (acked === 800) took = performance.now() - started;
      },
    });
    await eventually(() => acked === 800, "every message acked", 20_000);
    shutdown.abort();
    await running;
    expect(sizes).toEqual(Array.from({ length: 8 }, () => 100));
    // A batch that waited for its pull's expiry (7.5 s here, a quarter of AckWait) would show.
    expect(took).toBeLessThan(4000);
  }, 40_000);

  it("a shutdown with four writes in flight: run returns at the bound; the committed ones acked, the one that outlived it acked when it commits, nothing else sent", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    await publish(f, 4);
    const policy = verifyInProgressPolicy({ enabled: false, shutdownTimeoutMs: 1000 }, undefined);
    const ack = new CommitThenAck({ inProgress: policy });
    const gauge = new Gauge();
    const committed: number[] = [];
    const shutdown = new AbortController();
    const results: BatchResult[] = [];
    const running = ack.run(await f.js.consumers.get(f.stream, f.consumer), async (msgs, ctx) => {
      gauge.enter();
      try {
        const seq = msgs[0]!.seq;
        await new Promise<void>((r) => ctx.signal.addEventListener("abort", () => r(), { once: true }));
        if (seq === 2) throw ctx.signal.reason; // stops at once, commits nothing
        // 1 and 3 finish their commit within the 1 s bound; 4 only after it.
        await sleep(seq === 4 ? 1800 : 200);
        committed.push(seq);
      } finally {
        gauge.leave();
      }
    }, { batchSize: 1, concurrency: 4, signal: shutdown.signal, onBatch: (r) => results.push(r) });
    await eventually(() => gauge.level === 4, "four writes in flight");
    const t0 = performance.now();
    shutdown.abort();
    await running;
    // Returned at the bound: 4 is still writing, abandoned (its outcome unknown, so no frame yet).
    const took = performance.now() - t0;
    expect(took).toBeGreaterThan(900);
    expect(took).toBeLessThan(1700);
    expect(gauge.level).toBe(1);
    expect(ack.abandoned).toBe(1);
    await fx.drain();
    const frames = (seq: number) => spy.forSequence(seq).map((x) => x.kind);
    expect(frames(4)).toEqual([]);
    await ack.drain();
    expect(gauge.level).toBe(0);
    expect(committed.sort()).toEqual([1, 3, 4]);
    await fx.drain();
    expect(frames(1)).toEqual(["+ACK"]);
    expect(frames(3)).toEqual(["+ACK"]);
    // 2 failed on the shutdown: no frame, it comes back. 4 committed late: acked then.
    expect(frames(2)).toEqual([]);
    expect(frames(4)).toEqual(["+ACK"]);
    expect(results.map((r) => r.outcome).sort()).toEqual(["abandoned", "acked", "acked", "cancelled"]);
    expect((await consumerInfo(f)).num_ack_pending).toBe(1);
  });

  it("pulls stopped while messages stream in (partial batches, then a shutdown): everything the server delivered is written and acked, none left hanging", async () => {
    for (let round = 0; round < 3; round++) {
      const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
      // Heartbeats every 50 ms: a partial batch starts 50 ms after its first message, so pulls
      // are cut short again and again while the messages keep coming.
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 50, maxHeartbeats: 100 } });
      const shutdown = new AbortController();
      let written = 0;
      const running = ack.run(await f.js.consumers.get(f.stream, f.consumer), (msgs) => {
        written += msgs.length;
        if (written >= 2000) shutdown.abort();
      }, { batchSize: 1000, expiresMs: 5000, signal: shutdown.signal });
      // Publish without waiting for each ack, so messages keep arriving while the loop stops.
      const publishing = Promise.all(Array.from({ length: 3000 }, (_, i) => f.js.publish(f.subject, `m-${i}`)));
      await running;
      await publishing;
      await fx.nc.flush();
      // A message the server delivered into the pull as it was stopped would stay unacked (for
      // the 30 s AckWait); the ACKs of what was written land within moments.
      const info = await eventually(async () => {
        const i = await consumerInfo(f);
        return i.num_ack_pending === 0 ? i : undefined;
      }, `round ${round}: nothing left unacked`, 5000);
      expect(info.delivered.consumer_seq).toBe(written);
    }
  });

  for (const source of ["a subscription", "fetch pulls"] as const) {
    it.concurrent(`runEach through ${source}: a message the server delivers into the open pull well after shutdownTimeoutMs of the shutdown is still handled, with a live signal, and acked; a second worker receives nothing`, async () => {
      const ACK_WAIT_MS = 5000;
      const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
      await using spy = await AckSpy.start(fx.spyConn, f.stream);
      const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 3000, shutdownTimeoutMs: 400 }, { ackWaitMs: ACK_WAIT_MS, source: "configured" });
      const ack = new CommitThenAck({ inProgress: policy });
      const real = await f.js.consumers.get(f.stream, f.consumer);
      // Without consume(), the loop reads the consumer through fetch pulls.
      const consumer = source === "fetch pulls" ? { fetch: (o: { max_messages: number; expires: number }) => real.fetch(o), info: (cached?: boolean) => real.info(cached) } : real;
      const handled: Array<{ seq: number; abortedAtStart: boolean }> = [];
      const shutdown = new AbortController();
      const running = ack.runEach(consumer as typeof real, (m, ctx) => void handled.push({ seq: m.seq, abortedAtStart: ctx.signal.aborted }), {
        concurrency: 4,
        expiresMs: 3000,
        signal: shutdown.signal,
      });
      // The shutdown comes while a pull (3 s) waits on the server.
      await eventually(async () => (await consumerInfo(f)).num_waiting >= 1, "a pull open", 5000, 20);
      shutdown.abort();
      const [first] = await publish(f, 1);
      // Three times the shutdown bound after the first write of the shutdown started.
      await sleep(1200);
      const [late] = await publish(f, 1);
      await running;
      expect(handled).toEqual([
        { seq: first, abortedAtStart: false },
        { seq: late, abortedAtStart: false },
      ]);
      await fx.drain();
      expect(spy.forSequence(first!).map((x) => x.kind)).toEqual(["+ACK"]);
      expect(spy.forSequence(late!).map((x) => x.kind)).toEqual(["+ACK"]);
      const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
      await sleep(ACK_WAIT_MS + 1500);
      await rival.stop();
      expect(rival.received).toEqual([]);
    });
  }

  it("a trickle into a long pull (AckWait 2 s, expiresMs 6000): no message waits for its batch until redelivered", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 1000, maxHeartbeats: 20 } });
    const written: string[] = [];
    const shutdown = new AbortController();
    const running = ack.run(await f.js.consumers.get(f.stream, f.consumer), (msgs) => {
      for (const m of msgs) written.push(`${m.seq}#${m.info.deliveryCount}`);
    }, { batchSize: 10, expiresMs: 6000, signal: shutdown.signal });
    for (let i = 0; i < 5; i++) {
      await publish(f, 1);
      await sleep(700);
    }
    await eventually(() => written.length >= 5, "five writes");
    await sleep(2500); // long enough for any redelivery to show
    shutdown.abort();
    await running;
    expect(written).toEqual(["1#1", "2#1", "3#1", "4#1", "5#1"]);
    expect((await consumerInfo(f)).num_redelivered).toBe(0);
  });

  it("runEach: one handler per message in order at concurrency 1, each message acked as soon as its own handler settles", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const seqs = await publish(f, 5);
    const ack = new CommitThenAck();
    const order: number[] = [];
    const endedAt = new Map<number, number>();
    const shutdown = new AbortController();
    const results: BatchResult[] = [];
    const running = ack.runEach(await f.js.consumers.get(f.stream, f.consumer), async (msg) => {
      order.push(msg.seq);
      await sleep(200);
      endedAt.set(msg.seq, performance.now());
    }, { concurrency: 1, signal: shutdown.signal, onResult: (r) => results.push(r) });
    await eventually(() => results.length === 5, "five results");
    shutdown.abort();
    await running;
    expect(order).toEqual(seqs);
    await fx.drain();
    for (let i = 0; i < seqs.length - 1; i++) {
      const ackAt = spy.of("+ACK", seqs[i]).at(0)!.at;
      // Acked before the next handler's work was done: settled one by one, not per batch.
      expect(ackAt).toBeLessThan(endedAt.get(seqs[i + 1]!)!);
    }
    expect(results.every((r) => r.messages.length === 1 && r.outcome === "acked")).toBe(true);
  });

  it("runEach with concurrency 4: at most 4 handlers, messages waiting for one are heartbeated, none redelivered", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1000 });
    await publish(f, 12);
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 400, maxHeartbeats: 30 } });
    const gauge = new Gauge();
    const deliveries: number[] = [];
    const shutdown = new AbortController();
    let settled = 0;
    const running = ack.runEach(await f.js.consumers.get(f.stream, f.consumer), async (msg) => {
      gauge.enter();
      deliveries.push(msg.info.deliveryCount);
      await sleep(700);
      gauge.leave();
    }, { concurrency: 4, batchSize: 8, signal: shutdown.signal, onResult: () => void (settled += 1) });
    await eventually(() => settled === 12, "every message settled", 20_000);
    shutdown.abort();
    await running;
    expect(gauge.most).toBe(4);
    expect(deliveries.every((d) => d === 1)).toBe(true);
    expect((await consumerInfo(f)).num_redelivered).toBe(0);
  });

  it("onError sees library errors with what the loop was doing; a throwing onBatch never stops the loop", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000, maxAckPending: 3 });
    await publish(f, 4);
    const ack = await CommitThenAck.forConsumer(await jetstreamManager(fx.nc), f.stream, f.consumer, { onTemporaryFailure: { action: "nak", delayMs: 60_000 } });
    const errors: Array<[string, RunErrorContext]> = [];
    let batches = 0;
    const shutdown = new AbortController();
    const running = ack.run(await f.js.consumers.get(f.stream, f.consumer), (msgs) => {
      if (msgs[0]!.seq === 2) return { failed: [{ error: new TemporarySinkError() }] } as never;
      return undefined;
    }, {
      batchSize: 1,
      concurrency: 4,
      signal: shutdown.signal,
      onBatch: () => {
        batches += 1;
        throw new Error("host bug");
      },
      onError: (err, ctx) => errors.push([(err as Error).name, ctx]),
    });
    await eventually(() => batches === 4, "four batches");
    shutdown.abort();
    await running;
    const during = errors.map(([name, ctx]) => `${ctx.during}:${name}`);
    expect(during[0]).toBe("start:ConsumerPolicyError");
    expect(during).toContain("report:TypeError");
    expect(during.filter((d) => d === "callback:Error")).toHaveLength(4);
    expect(errors[0]?.[1]).toEqual({ during: "start" });
  });

  for (const loop of ["run", "runEach"] as const) {
    it(`${loop} under an untyped wrapper whose messages lack working() (heartbeats on): the loop rejects with the TypeError, nothing is left unhandled or sent, and a second worker receives every message after AckWait`, async () => {
      const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
      await using spy = await AckSpy.start(fx.spyConn, f.stream);
      const seqs = await publish(f, 3);
      const unhandled: unknown[] = [];
      const onUnhandled = (e: unknown): void => void unhandled.push(e);
      process.on("unhandledRejection", onUnhandled);
      try {
        const real = await f.js.consumers.get(f.stream, f.consumer);
        // A host's own wrapper, untyped: it copies what it uses and drops the rest.
        const wrapper = {
          fetch: async (o: { max_messages: number; expires: number }) => {
            const it = await real.fetch(o);
            return (async function* () {
              for await (const m of it) yield { subject: m.subject, data: m.data, seq: m.seq, info: m.info, ack: () => m.ack() };
            })();
          },
          info: (cached?: boolean) => real.info(cached),
        };
        const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 700 }, { ackWaitMs: 2000, source: "configured" });
        const ack = new CommitThenAck({ inProgress: policy });
        let written = 0;
        const write = (): void => void (written += 1);
        const running = loop === "run" ? ack.run(wrapper as never, write, { batchSize: 3, expiresMs: 1000 }) : ack.runEach(wrapper as never, write, { expiresMs: 1000 });
        const err = await running.then(() => undefined, (e: unknown) => e);
        expect(err).toBeInstanceOf(TypeError);
        expect(String(err)).toMatch(/working\(\)/);
        expect(written).toBe(0);
        // Let a rejection nobody handled surface.
        await sleep(50);
        expect(unhandled).toEqual([]);
        await fx.drain();
        expect(spy.frames).toEqual([]);
        // Nothing lost: left for redelivery, a second worker receives each message after AckWait.
        const other = await jetstream(fx.rivalConn).consumers.get(f.stream, f.consumer);
        const got: number[] = [];
        await eventually(async () => {
          for await (const m of await other.fetch({ max_messages: 3, expires: 1000 })) {
            got.push(m.seq);
            m.ack();
          }
          return got.length >= 3;
        }, "a second worker received every message", 10_000);
        expect(got.sort((a, b) => a - b)).toEqual(seqs);
      } finally {
        process.off("unhandledRejection", onUnhandled);
      }
    });
  }

  it("run refuses pull options that are not pull options, before the first pull", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {});
    const consumer = await f.js.consumers.get(f.stream, f.consumer);
    await expect(ack.run(consumer, () => undefined, { pull: { grup: "x" } } as never)).rejects.toThrow(/did you mean "group"/);
    await expect(ack.run(consumer, () => undefined, { concurrency: 0 })).rejects.toThrow(/concurrency must be an integer in 1 \.\.= 256, got 0: use one in that range, or leave it out for 1$/);
    // An untyped caller's string: the message says it is one, and what to pass instead.
    await expect(ack.run(consumer, () => undefined, { batchSize: "10" } as never)).rejects.toThrow(/batchSize must be an integer in 1 \.\.= 10000, got the string "10": use a number, or leave it out for \d+$/);
    await expect(ack.run(consumer, () => undefined, { expiresMs: "2000" } as never)).rejects.toThrow(/expiresMs must be an integer in 1000 \.\.= 3600000 .*, got the string "2000": use a number of milliseconds in that range$/);
    await expect(ack.run(consumer, () => undefined, { signal: { aborted: false } } as never)).rejects.toThrow(/options\.signal must be an AbortSignal, got an object: pass controller\.signal of an AbortController$/);
    // This consumer has no priority groups: a pull naming one would fail on every fetch.
    const err = await ack.run(consumer, () => undefined, { pull: { group: "g" } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConsumerPolicyError);
    expect((err as ConsumerPolicyError).reason).toBe("priority_group_required");
    expect((await consumerInfo(f)).num_waiting).toBe(0);
  });
});

export type { JsMsg };
