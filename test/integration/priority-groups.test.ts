/**
 * What nats-server 2.11+ adds, read and reported by the library instead of misread: a pinned
 * priority-group consumer consumed through its group by `run` (and handed over to a second
 * worker when the first stops), a pull without the group refused before it goes out, and a
 * paused consumer that `forConsumer` binds to and says so. Runs on a 2.11+ server even inside
 * `npm test` when one is in the cache; on an older server the same tests assert what that
 * server does (it drops priority groups and does not answer a pause).
 */
import { describe, expect, it } from "vitest";
import { jetstream, jetstreamManager, type Consumer } from "@nats-io/jetstream";
import { nanos, type NatsConnection } from "@nats-io/transport-node";
import { CommitThenAck, ConsumerPolicyError, watchConsumer, type BatchResult, type ConsumerHealthSample } from "../../src/index.js";
import { consumerInfo, createFixture, eventually, publish, uniqueName } from "../helpers/jetstream.js";
import { natsServerVersion, serverAtLeast } from "../helpers/nats-server.js";
import { useServer } from "../helpers/server-fixture.js";
import { NEWEST_FEATURES_SINCE } from "../helpers/server-version.js";

const newest = serverAtLeast(NEWEST_FEATURES_SINCE);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const VERSION = newest?.version ?? natsServerVersion();

/**
 * Whether this client sends a pull through priority group "jobs": older 3.x clients refuse one
 * (they want min_pending) with an InvalidArgumentError before it goes out.
 */
async function clientPins(consumer: Consumer): Promise<boolean> {
  return await consumer.fetch({ max_messages: 1, expires: 1000, group: "jobs" } as never).then(
    async (iter) => {
      for await (const m of iter) m.nak();
      return true;
    },
    (e: unknown) => (e as Error).name !== "InvalidArgumentError",
  );
}

/** A pinned_client consumer, created through the API (the client refuses priority groups on an old server itself). */
async function createPinned(nc: NatsConnection, stream: string, priorityTimeoutMs: number, ackWaitMs = 30_000): Promise<string> {
  const name = uniqueName("PIN");
  const config = {
    durable_name: name,
    ack_policy: "explicit",
    ack_wait: nanos(ackWaitMs),
    priority_groups: ["jobs"],
    priority_policy: "pinned_client",
    priority_timeout: nanos(priorityTimeoutMs),
  };
  const reply = await nc.request(`$JS.API.CONSUMER.CREATE.${stream}.${name}`, JSON.stringify({ stream_name: stream, config }));
  const body = reply.json<{ error?: { description: string } }>();
  if (body.error) throw new Error(body.error.description);
  return name;
}

describe(newest ? `priority groups and pause on nats-server ${VERSION}` : `no nats-server ${NEWEST_FEATURES_SINCE}+ here: priority groups and pause on ${VERSION}`, () => {
  const fx = useServer(newest ? { minVersion: NEWEST_FEATURES_SINCE } : {});

  it(
    newest
      ? "a pinned consumer: a pull without its group is refused before it goes out; run consumes through the group; a second worker takes over when the first stops"
      : "the server drops priority groups: the binding has none, and a pull naming one is refused before it goes out",
    async () => {
      const base = await createFixture(fx.nc);
      const name = await createPinned(fx.nc, base.stream, 1500);
      const f = { ...base, consumer: name };
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, name, {});
      const consumer = await f.js.consumers.get(f.stream, name);
      if (!newest) {
        expect(ack.consumer?.priorityGroups).toEqual([]);
        const err = await ack.run(consumer, () => undefined, { pull: { group: "jobs" } }).catch((e: unknown) => e);
        expect((err as ConsumerPolicyError).reason).toBe("priority_group_required");
        // Without the binding the client itself refuses the group on this server: run stops
        // with a TypeError instead of retrying a pull that can never go out.
        const errors: unknown[] = [];
        const unbound = await new CommitThenAck().run(consumer, () => undefined, { pull: { group: "jobs" }, onError: (e) => void errors.push(e) }).catch((e: unknown) => e);
        expect(unbound).toBeInstanceOf(TypeError);
        expect((unbound as Error).message).toMatch(/priority_groups require server/);
        expect(errors).toEqual([]);
        expect((await consumerInfo(f)).num_waiting).toBe(0);
        return;
      }
      expect(ack.consumer).toMatchObject({ priorityPolicy: "pinned_client", priorityGroups: ["jobs"] });
      const refused = await ack.run(consumer, () => undefined, { batchSize: 1 }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(ConsumerPolicyError);
      expect((refused as ConsumerPolicyError).reason).toBe("priority_group_required");
      expect((refused as Error).message).toContain('"jobs"');
      expect((await consumerInfo(f)).num_waiting).toBe(0);

      // Older 3.x clients refuse a pinned pull (they want min_pending): run says so and stops
      // instead of retrying a pull that can never go out.
      if (!(await clientPins(consumer))) {
        const err = await ack.run(consumer, () => undefined, { pull: { group: "jobs" } }).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(TypeError);
        expect((err as Error).message).toMatch(/the NATS client refused the pull options/);
        return;
      }

      await publish(f, 10);
      const seen: string[] = [];
      const start = async (conn: NatsConnection, worker: string) => {
        const own = await CommitThenAck.forConsumer(await jetstreamManager(conn), f.stream, name, {});
        const stop = new AbortController();
        const done = own.run(await jetstream(conn).consumers.get(f.stream, name), (msgs) => {
          for (const m of msgs) seen.push(`${worker}:${m.seq}`);
        }, { batchSize: 2, concurrency: 2, signal: stop.signal, pull: { group: "jobs" } });
        return { stop, done };
      };
      const other = await fx.srv.connect();
      try {
        const w1 = await start(fx.nc, "w1");
        await eventually(() => seen.length === 10, "the first ten messages");
        const w2 = await start(other, "w2");
        // The pin holds: every message so far went to one worker.
        expect(new Set(seen.map((s) => s.split(":")[0])).size).toBe(1);
        const pinned = seen[0]!.split(":")[0];
        const [first, second] = pinned === "w1" ? [w1, w2] : [w2, w1];
        first.stop.abort();
        await first.done;
        await publish(f, 5);
        await eventually(() => seen.length === 15, "the next five after a handover", 15_000);
        const handedOver = seen.slice(10).map((s) => s.split(":")[0]);
        expect(new Set(handedOver)).toEqual(new Set([pinned === "w1" ? "w2" : "w1"]));
        second.stop.abort();
        await second.done;
      } finally {
        await other.close();
      }
      expect(new Set(seen.map((s) => s.split(":")[1])).size).toBe(15);
      expect((await consumerInfo(f)).num_ack_pending).toBe(0);
    },
  );

  it(
    newest
      ? "a paused consumer: forConsumer binds and says so; watchConsumer samples say paused and never stalled"
      : "the pause request goes unanswered: the binding says not paused",
    async () => {
      const f = await createFixture(fx.nc, { ackWaitMs: 1000 });
      const until = new Date(Date.now() + 60_000);
      const jsm = newest ? f.jsm : await jetstreamManager(fx.nc, { timeout: 1500 });
      await jsm.consumers.pause(f.stream, f.consumer, until).catch(() => undefined);
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 500 } });
      if (!newest) {
        expect(ack.consumer?.paused).toBe(false);
        return;
      }
      expect(ack.consumer?.paused).toBe(true);
      expect(Math.abs((ack.consumer?.pauseUntil ?? 0) - until.getTime())).toBeLessThan(2000);
      await publish(f, 3);
      const samples: ConsumerHealthSample[] = [];
      const watch = watchConsumer(f.jsm, f.stream, f.consumer, { intervalMs: 200, onSample: (s) => samples.push(s) });
      try {
        await eventually(() => samples.length >= 6, "six samples");
      } finally {
        watch.stop();
      }
      expect(samples.every((s) => s.paused && !s.stalled && !s.backlogGrowing)).toBe(true);
      // A loop on the paused consumer says so to onError, and waits.
      const errors: unknown[] = [];
      await ack.run(await f.js.consumers.get(f.stream, f.consumer), () => undefined, { signal: AbortSignal.timeout(300), onError: (e) => void errors.push(e) });
      expect(errors.some((e) => e instanceof ConsumerPolicyError && e.reason === "consumer_paused")).toBe(true);
      await f.jsm.consumers.resume(f.stream, f.consumer);
    },
  );

  it(
    newest
      ? "a pinned consumer with heartbeated writes longer than AckWait: nothing prefetched beyond the loop's capacity, every message written once (run and runEach)"
      : "no pinned consumers before 2.11: the loops read an ordinary consumer as before",
    async () => {
      const base = await createFixture(fx.nc);
      if (!newest) {
        // Nothing pinned to test here; the intake on this server is covered in intake.test.ts.
        expect(VERSION).toMatch(/^2\.(9|10)\./);
        return;
      }
      const name = await createPinned(fx.nc, base.stream, 1500, 2000);
      const f = { ...base, consumer: name };
      const consumer = await f.js.consumers.get(f.stream, name);
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, name, { inProgress: { enabled: true, intervalMs: 500, maxHeartbeats: 20 } });
      // Older 3.x clients refuse a pinned pull (they want min_pending): the loop says so and stops.
      const refused = await ack.run(consumer, () => undefined, { pull: { group: "jobs" }, signal: AbortSignal.timeout(200) }).then(() => undefined, (e: unknown) => e);
      if (refused !== undefined) {
        expect(refused).toBeInstanceOf(TypeError);
        return;
      }
      const seqs = await publish(f, 6);
      const written = new Map<number, number[]>();
      // Read halfway through each write: the ACK before it was processed long ago, and a
      // message prefetched beyond the loop's capacity would be delivered by then. (A sample
      // right at a hand-over may count the previous message too: the server takes an ACK and
      // the next pull on separate queues.)
      const midWrite: Array<{ pending: number; held: number }> = [];
      const sampleMidWrite = async (held: number): Promise<void> => {
        midWrite.push({ pending: (await consumerInfo(f)).num_ack_pending, held });
      };
      {
        // run: batches of 2, one at a time, each written for 2.5 s (longer than AckWait).
        const stop = new AbortController();
        const running = ack.run(consumer, async (msgs) => {
          for (const m of msgs) written.set(m.seq, [...(written.get(m.seq) ?? []), m.info.deliveryCount]);
          await sleep(1250);
          await sampleMidWrite(msgs.length);
          await sleep(1250);
        }, { batchSize: 2, concurrency: 1, signal: stop.signal, pull: { group: "jobs" } });
        await eventually(() => written.size === 6, "six messages written", 20_000);
        await eventually(async () => (await consumerInfo(f)).num_ack_pending === 0, "all acked", 10_000);
        stop.abort();
        await running;
        expect([...written.keys()].sort((a, b) => a - b)).toEqual(seqs);
        expect([...written.values()].every((d) => d.length === 1 && d[0] === 1)).toBe(true);
        expect(midWrite.length).toBeGreaterThanOrEqual(3);
        expect(midWrite.every((s) => s.pending === s.held && s.held <= 2)).toBe(true);
      }
      {
        // runEach: one handler, 1.2 s each.
        const more = await publish(f, 4);
        const handled = new Map<number, number[]>();
        const results: BatchResult[] = [];
        midWrite.length = 0;
        const stopEach = new AbortController();
        const each = ack.runEach(consumer, async (m) => {
          handled.set(m.seq, [...(handled.get(m.seq) ?? []), m.info.deliveryCount]);
          await sleep(600);
          await sampleMidWrite(1);
          await sleep(600);
        }, { concurrency: 1, batchSize: 4, signal: stopEach.signal, pull: { group: "jobs" }, onResult: (r) => results.push(r) });
        await eventually(() => results.length === 4, "four results", 20_000);
        stopEach.abort();
        await each;
        expect([...handled.keys()].sort((a, b) => a - b)).toEqual(more);
        expect([...handled.values()].every((d) => d.length === 1 && d[0] === 1)).toBe(true);
        expect(results.every((r) => r.outcome === "acked")).toBe(true);
        expect(midWrite.length).toBe(4);
        expect(midWrite.every((s) => s.pending === 1)).toBe(true);
      }
    },
  );

  it(
    newest ? "a pinned consumer deleted under a running loop: onError hears of it" : "a deleted consumer under a running loop: onError hears of it",
    async () => {
      const base = await createFixture(fx.nc);
      const name = newest ? await createPinned(fx.nc, base.stream, 1500) : base.consumer;
      const f = { ...base, consumer: name };
      const consumer = await f.js.consumers.get(f.stream, name);
      const errors: unknown[] = [];
      const stop = new AbortController();
      if (newest) {
        // Older 3.x clients refuse a pinned pull: run says so at once, there is nothing to delete under it.
        if (!(await clientPins(consumer))) {
          const err = await new CommitThenAck().run(consumer, () => undefined, { signal: stop.signal, pull: { group: "jobs" }, onError: (e) => void errors.push(e) }).catch((e: unknown) => e);
          expect(err).toBeInstanceOf(TypeError);
          expect((err as Error).message).toMatch(/the NATS client refused the pull options/);
          expect(errors).toEqual([]);
          return;
        }
      }
      const running = new CommitThenAck().run(consumer, () => undefined, {
        signal: stop.signal,
        ...(newest ? { pull: { group: "jobs" } } : {}),
        onError: (e) => void errors.push(e),
      });
      await sleep(500);
      await f.jsm.consumers.delete(f.stream, name);
      await eventually(() => errors.length > 0, "an error reported", 10_000);
      stop.abort();
      await running;
      expect(errors.length).toBeGreaterThan(0);
    },
  );
});
