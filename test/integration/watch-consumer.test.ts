/**
 * watchConsumer against a real nats-server: the field report's scenario with real workers on
 * one durable pull consumer, a growing backlog against a burst, poll failures while the
 * server is down, and a least-privilege identity that may only read consumer info.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import { AckPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { nanos, type NatsConnection } from "@nats-io/transport-node";
import {
  InMemoryMetrics,
  MetricNames,
  watchConsumer,
  type ConsumerHealthSample,
  type ConsumerPollFailure,
  type ConsumerWatch,
} from "../../src/index.js";
import { createFixture, eventually, fetchBatch, publish, type Fixture } from "../helpers/jetstream.js";
import { startServer } from "../helpers/nats-server.js";

const ACK_WAIT_MS = 2000;

interface Delivery {
  readonly worker: string;
  readonly seq: number;
  readonly deliverySequence: number;
  readonly redelivered: boolean;
  readonly at: number;
  ackedAt?: number;
}

interface WorkerOptions {
  readonly name: string;
  /** Time spent on a first delivery before the ack. */
  readonly processMs: number;
  /** Time spent on a redelivered message before the ack (default processMs). */
  readonly redeliveredMs?: number;
  /** Stop without acking on the n-th message (a crash). */
  readonly crashOn?: number;
}

/** A worker on the shared durable consumer: pull one, work, ack; stops when `stop()` is called. */
class Worker {
  readonly deliveries: Delivery[] = [];
  crashed: Delivery | undefined;
  readonly #done: Promise<void>;
  #stopping = false;

  constructor(nc: NatsConnection, f: Fixture, readonly options: WorkerOptions, log: Delivery[]) {
    this.#done = this.#loop(nc, f, log);
  }

  async #loop(nc: NatsConnection, f: Fixture, log: Delivery[]): Promise<void> {
    const consumer = await jetstream(nc).consumers.get(f.stream, f.consumer);
    while (!this.#stopping) {
      let m: JsMsg | null;
      try {
        m = await consumer.next({ expires: 1000 });
      } catch {
        if (this.#stopping) return;
        await sleep(50);
        continue;
      }
      if (!m) continue;
      const d: Delivery = {
        worker: this.options.name,
        seq: m.seq,
        deliverySequence: m.info.deliverySequence,
        redelivered: m.redelivered,
        at: Date.now(),
      };
      this.deliveries.push(d);
      log.push(d);
      if (this.options.crashOn === this.deliveries.length) {
        // Crash: hold the message without an ack and never pull again.
        this.crashed = d;
        return;
      }
      await sleep(m.redelivered ? (this.options.redeliveredMs ?? this.options.processMs) : this.options.processMs);
      m.ack();
      d.ackedAt = Date.now();
    }
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    await this.#done;
  }
}

/** Collects samples and lets a test wait for one that matches. */
class SampleLog {
  readonly samples: ConsumerHealthSample[] = [];
  readonly #waiters = new Set<() => void>();

  readonly onSample = (s: ConsumerHealthSample): void => {
    this.samples.push(s);
    for (const w of this.#waiters) w();
  };

  async waitFor(predicate: (s: ConsumerHealthSample, all: readonly ConsumerHealthSample[]) => boolean, what: string, timeoutMs = 20_000): Promise<ConsumerHealthSample> {
    const found = (): ConsumerHealthSample | undefined => this.samples.find((s) => predicate(s, this.samples));
    const now = found();
    if (now) return now;
    return await new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; samples: ${this.summary()}`));
      }, timeoutMs);
      const check = (): void => {
        const s = found();
        if (s) {
          clearTimeout(timer);
          this.#waiters.delete(check);
          resolve(s);
        }
      };
      this.#waiters.add(check);
    });
  }

  summary(): string {
    return this.samples
      .map((s) => `p${s.pending}/a${s.ackPending}/r${s.redelivered}/d${s.delivered}/f${s.ackFloor}${s.stalled ? "/STALL" : ""}${s.backlogGrowing ? "/GROW" : ""}`)
      .join(" ");
  }
}

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("watchConsumer on a real nats-server", () => {
  it("two slow workers, a burst of 40, one worker crashes holding a message: lag, stall, redelivery", async () => {
    const srv = await startServer();
    cleanups.push(() => srv.dispose());
    const nc = await srv.connect();
    cleanups.push(() => nc.close());
    const f = await createFixture(nc, { ackWaitMs: ACK_WAIT_MS });
    const jsm = await jetstreamManager(nc, { checkAPI: false });

    const fast = new SampleLog();
    const fastMetrics = new InMemoryMetrics();
    const slow = new SampleLog();
    const slowMetrics = new InMemoryMetrics();
    const watches: ConsumerWatch[] = [
      // These workers send no heartbeats: their longest lease is one AckWait, and saying so
      // ({ enabled: false }) lets the watch call a floor flat for longer a stall.
      watchConsumer(jsm, f.stream, f.consumer, { intervalMs: 100, metrics: fastMetrics, inProgress: { enabled: false }, onSample: fast.onSample }),
      // Longer than the moment num_redelivered shows (the redelivered message is acked in
      // 1.2 s), so this watch can only count the redelivery from the sequences.
      watchConsumer(jsm, f.stream, f.consumer, { intervalMs: 7000, metrics: slowMetrics, labels: true, onSample: slow.onSample }),
    ];
    cleanups.push(() => watches.forEach((w) => w.stop()));
    await fast.waitFor(() => true, "the first sample");
    await slow.waitFor(() => true, "the slow watch's first sample");

    const log: Delivery[] = [];
    const nc1 = await srv.connect();
    const nc2 = await srv.connect();
    cleanups.push(() => nc1.close());
    cleanups.push(() => nc2.close());
    const w1 = new Worker(nc1, f, { name: "w1", processMs: 150, redeliveredMs: 1200 }, log);
    const w2 = new Worker(nc2, f, { name: "w2", processMs: 150, crashOn: 3 }, log);
    cleanups.push(() => w1.stop());
    cleanups.push(() => w2.stop());

    await Promise.all(Array.from({ length: 40 }, (_, i) => f.js.publish(f.subject, `job-${i + 1}`)));
    await eventually(() => w2.crashed, "w2 to crash holding a message");
    await nc2.close(); // the crashed worker's connection goes away too
    const stuck = w2.crashed!;

    const drained = await fast.waitFor(
      (s) => s.pending === 0 && s.ackPending === 0 && s.delivered === 41,
      "the backlog to drain, the stuck message included",
    );
    await w1.stop();
    const slowSecond = await slow.waitFor((s, all) => s === all[1], "the slow watch's second sample");

    // Ground truth from the workers: 41 deliveries of 40 jobs, the stuck one twice.
    const redelivery = log.find((d) => d.redelivered);
    expect(log).toHaveLength(41);
    expect(new Set(log.map((d) => d.seq)).size).toBe(40);
    expect(redelivery).toMatchObject({ worker: "w1", seq: stuck.seq });
    expect(redelivery!.at - stuck.at).toBeGreaterThanOrEqual(ACK_WAIT_MS - 50);

    const samples = fast.samples;
    const baseline = samples[0]!;
    expect(baseline).toMatchObject({ pending: 0, ackPending: 0, baseline: true, ackWaitMs: ACK_WAIT_MS });

    // Pending jumps with the burst, then only drains.
    const peakIndex = samples.reduce((best, s, i) => (s.pending > samples[best]!.pending ? i : best), 0);
    expect(samples[peakIndex]!.pending).toBeGreaterThanOrEqual(30);
    const afterPeak = samples.slice(peakIndex).map((s) => s.pending);
    expect(afterPeak.every((p, i) => i === 0 || p <= afterPeak[i - 1]!)).toBe(true);
    expect(drained).toMatchObject({ pending: 0, ackPending: 0, delivered: 41, deliveredStreamSeq: 40, stalled: false });

    // The ack floor freezes just below the stuck delivery while it waits, and stalled turns
    // on only after the declared lease (one AckWait).
    const stalled = samples.filter((s) => s.stalled);
    expect(stalled.length, fast.summary()).toBeGreaterThan(0);
    for (const s of stalled) {
      expect(s).toMatchObject({ stallEvidence: "lease", leaseMs: ACK_WAIT_MS });
      expect(s.ackFloor).toBe(stuck.deliverySequence - 1);
      expect(s.ackPending).toBeGreaterThanOrEqual(1);
      expect(s.ackFloorFlatMs).toBeGreaterThan(ACK_WAIT_MS);
      expect(s.at - stuck.at).toBeGreaterThan(ACK_WAIT_MS - 300);
    }
    const frozen = samples.filter((s) => s.at >= stuck.at + 300 && s.at <= stalled[0]!.at);
    expect(new Set(frozen.map((s) => s.ackFloor)).size).toBe(1);
    expect(samples.filter((s) => s.at < stuck.at + ACK_WAIT_MS - 300).some((s) => s.stalled)).toBe(false);

    // ... and off once the message was redelivered and acked: the floor jumps past it.
    const lastStalled = stalled[stalled.length - 1]!;
    expect(lastStalled.at).toBeLessThan(redelivery!.ackedAt! + 500);
    const released = samples.find((s) => s.at > lastStalled.at)!;
    expect(released.stalled).toBe(false);
    expect(released.ackFloor).toBeGreaterThanOrEqual(redelivery!.deliverySequence);

    // One redelivery, counted by both watches; the slow one never saw num_redelivered > 0.
    expect(samples.reduce((n, s) => n + s.redeliveriesSinceLastSample, 0)).toBe(1);
    expect(fastMetrics.snapshot().counters[MetricNames.CONSUMER_REDELIVERED_MESSAGES_TOTAL]).toBe(1);
    expect(slow.samples.every((s) => s.redelivered === 0), slow.summary()).toBe(true);
    expect(slowSecond).toMatchObject({ redeliveriesSinceLastSample: 1, delivered: 41, baseline: false });
    const labels = `{consumer=${JSON.stringify(f.consumer)},stream=${JSON.stringify(f.stream)}}`;
    expect(slowMetrics.snapshot().counters[`${MetricNames.CONSUMER_REDELIVERED_MESSAGES_TOTAL}${labels}`]).toBe(1);
    // The slow watch declared no lease and the redelivered message was acked within AckWait:
    // a crash a healthy worker recovers from is a redelivery, not a stall.
    expect(slow.samples.some((s) => s.stalled), slow.summary()).toBe(false);
    expect(fastMetrics.snapshot().gauges).toMatchObject({
      [MetricNames.CONSUMER_PENDING_MESSAGES]: 0,
      [MetricNames.CONSUMER_ACK_PENDING_MESSAGES]: 0,
      [MetricNames.CONSUMER_STALLED]: 0,
    });
  });

  it("a backlog that keeps growing sets backlogGrowing; a burst that drains does not", async () => {
    const srv = await startServer();
    cleanups.push(() => srv.dispose());
    const nc = await srv.connect();
    cleanups.push(() => nc.close());
    const jsm = await jetstreamManager(nc, { checkAPI: false });

    // Continuous publishing, no worker.
    const growing = await createFixture(nc);
    const g = new SampleLog();
    const gMetrics = new InMemoryMetrics();
    const gw = watchConsumer(jsm, growing.stream, growing.consumer, { intervalMs: 150, metrics: gMetrics, onSample: g.onSample });
    cleanups.push(() => gw.stop());
    let publishing = true;
    const publisher = (async () => {
      while (publishing) {
        await growing.js.publish(growing.subject, "tick");
        await sleep(30);
      }
    })();
    cleanups.push(async () => {
      publishing = false;
      await publisher;
    });
    const grown = await g.waitFor((s) => s.backlogGrowing, "backlogGrowing while publishing continuously");
    expect(gMetrics.snapshot().gauges[MetricNames.CONSUMER_BACKLOG_GROWING]).toBe(1);
    const window = g.samples.slice(g.samples.indexOf(grown) - 5, g.samples.indexOf(grown) + 1).map((s) => s.pending);
    expect(window).toHaveLength(6);
    expect(window[5]!).toBeGreaterThan(window[0]!);
    // Once publishing stops the line is flat: no longer growing.
    publishing = false;
    await publisher;
    const flatFrom = g.samples.length;
    await g.waitFor((s, all) => all.indexOf(s) > flatFrom + 6 && !s.backlogGrowing, "backlogGrowing to clear on a flat line");
    expect(gMetrics.snapshot().gauges[MetricNames.CONSUMER_BACKLOG_GROWING]).toBe(0);

    // A single burst with a worker draining it.
    const burst = await createFixture(nc);
    const b = new SampleLog();
    const bw = watchConsumer(jsm, burst.stream, burst.consumer, { intervalMs: 150, onSample: b.onSample });
    cleanups.push(() => bw.stop());
    await b.waitFor(() => true, "the first sample");
    const log: Delivery[] = [];
    const worker = new Worker(nc, burst, { name: "w", processMs: 25 }, log);
    cleanups.push(() => worker.stop());
    await Promise.all(Array.from({ length: 40 }, (_, i) => burst.js.publish(burst.subject, `job-${i + 1}`)));
    const done = await b.waitFor((s) => s.pending === 0 && s.ackPending === 0 && s.delivered === 40, "the burst to drain");
    await b.waitFor((s, all) => all.indexOf(s) >= all.indexOf(done) + 6, "six more samples after the drain");
    expect(Math.max(...b.samples.map((s) => s.pending)), b.summary()).toBeGreaterThanOrEqual(20);
    expect(b.samples.some((s) => s.backlogGrowing), b.summary()).toBe(false);
    expect(log).toHaveLength(40);
  });

  it("poll failures while the server is down are counted and reported, never thrown, and polling resumes after a restart", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => {
      unhandled.push(reason);
    };
    process.on("unhandledRejection", onUnhandled);
    cleanups.push(() => {
      process.off("unhandledRejection", onUnhandled);
    });

    const srv = await startServer();
    cleanups.push(() => srv.dispose());
    const nc = await srv.connect({ maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    cleanups.push(() => nc.close());
    const f = await createFixture(nc);
    await publish(f, 3);
    const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: 1000 });

    const s = new SampleLog();
    const metrics = new InMemoryMetrics();
    const failures: Array<{ error: unknown; failure: ConsumerPollFailure }> = [];
    const watch = watchConsumer(jsm, f.stream, f.consumer, {
      intervalMs: 200,
      maxBackoffMs: 1000,
      metrics,
      onSample: s.onSample,
      onError: (error, failure) => {
        failures.push({ error, failure });
        throw new Error("a throwing onError is swallowed");
      },
    });
    cleanups.push(() => watch.stop());
    await s.waitFor((x) => x.pending === 3, "a sample before the outage");

    await srv.stop();
    const downAt = Date.now();
    await eventually(() => failures.length >= 3, "three failed polls while the server is down", 20_000);
    expect(failures.map((x) => x.failure.consecutiveFailures)).toEqual(failures.map((_, i) => i + 1));
    expect(failures.slice(0, 3).map((x) => x.failure.retryInMs)).toEqual([400, 800, 1000]);
    expect(failures.every((x) => x.error instanceof Error)).toBe(true);
    expect(s.samples.filter((x) => x.at > downAt + 100)).toEqual([]);

    await srv.restart();
    const upAt = Date.now();
    const back = await s.waitFor((x) => x.at > upAt, "a sample after the restart", 20_000);
    expect(back).toMatchObject({ pending: 3, baseline: false });
    expect(metrics.snapshot().counters[MetricNames.CONSUMER_POLL_FAILURES_TOTAL]).toBe(failures.length);
    // Back to the normal interval after a success.
    const next = await s.waitFor((x, all) => all.indexOf(x) === all.indexOf(back) + 2, "two more samples");
    expect(next.at - back.at).toBeLessThan(2 * 1000);
    expect(watch.latest()).toBe(s.samples[s.samples.length - 1]);
    expect(unhandled).toEqual([]);
  });

  it("a deleted consumer is a failed poll; a recreated one starts a new baseline", async () => {
    const srv = await startServer();
    cleanups.push(() => srv.dispose());
    const nc = await srv.connect();
    cleanups.push(() => nc.close());
    const f = await createFixture(nc);
    await publish(f, 3);
    const [first] = await fetchBatch(f, 1);
    first!.ack();
    const s = new SampleLog();
    const errors: unknown[] = [];
    const watch = watchConsumer(f.jsm, f.stream, f.consumer, { intervalMs: 100, maxBackoffMs: 200, onSample: s.onSample, onError: (e) => errors.push(e) });
    cleanups.push(() => watch.stop());
    await s.waitFor((x) => x.pending === 2 && x.ackFloor === 1, "a sample after one delivery");

    await f.jsm.consumers.delete(f.stream, f.consumer);
    await eventually(() => errors.length > 0, "a failed poll after the delete");
    expect(String(errors[0])).toMatch(/consumer not found/i);

    await f.jsm.consumers.add(f.stream, { durable_name: f.consumer, ack_policy: AckPolicy.Explicit, ack_wait: nanos(5000) });
    const recreated = await s.waitFor((x) => x.ackWaitMs === 5000, "a sample of the recreated consumer");
    // Its delivered sequence starts again at 0: a new baseline, nothing compared with the old one.
    expect(recreated).toMatchObject({ baseline: true, redeliveriesSinceLastSample: 0, pending: 3, delivered: 0 });
  });

  it("a least-privilege identity that may only read this consumer's info is enough; others are denied and counted", async () => {
    const stream = "HEALTH";
    const consumer = "reader";
    const srv = await startServer({
      config: [
        "authorization {",
        "  users: [",
        "    { user: admin, password: admin }",
        "    { user: watch, password: watch, permissions: {",
        `        publish: { allow: ["$JS.API.CONSUMER.INFO.${stream}.${consumer}"] }`,
        '        subscribe: { allow: ["_INBOX.>"] }',
        "    } }",
        "  ]",
        "}",
        "no_auth_user: admin",
      ].join("\n"),
    });
    cleanups.push(() => srv.dispose());
    const admin = await srv.connect();
    cleanups.push(() => admin.close());
    const adm = await jetstreamManager(admin);
    await adm.streams.add({ name: stream, subjects: ["health.>"] });
    await adm.consumers.add(stream, { durable_name: consumer, ack_policy: AckPolicy.Explicit, ack_wait: nanos(3000) });
    await adm.consumers.add(stream, { durable_name: "other", ack_policy: AckPolicy.Explicit });
    const js = jetstream(admin);
    for (let i = 0; i < 4; i++) await js.publish("health.x", "x");

    const watcher = await srv.connect({ user: "watch", pass: "watch" });
    cleanups.push(() => watcher.close());
    const jsm = await jetstreamManager(watcher, { checkAPI: false, timeout: 1000 });

    const ok = new SampleLog();
    const okErrors: unknown[] = [];
    const w1 = watchConsumer(jsm, stream, consumer, { intervalMs: 100, onSample: ok.onSample, onError: (e) => okErrors.push(e) });
    cleanups.push(() => w1.stop());
    const sample = await ok.waitFor((x, all) => all.length >= 2 && x === all[1], "two samples with the watch identity");
    expect(sample).toMatchObject({ pending: 4, ackWaitMs: 3000 });
    expect(okErrors).toEqual([]);

    const metrics = new InMemoryMetrics();
    const denied: unknown[] = [];
    const w2 = watchConsumer(jsm, stream, "other", { intervalMs: 100, maxBackoffMs: 200, metrics, onError: (e) => denied.push(e) });
    cleanups.push(() => w2.stop());
    await eventually(() => denied.length >= 2, "denied polls to be reported");
    expect(w2.latest()).toBeUndefined();
    expect(metrics.snapshot().counters[MetricNames.CONSUMER_POLL_FAILURES_TOTAL]).toBeGreaterThanOrEqual(2);
    expect(String(denied[0])).toMatch(/permission|timeout/i);
  });
});
