/**
 * Stuck or slow, against a real nats-server: `stalled` turns on for a crashed worker (fetched,
 * never acked, no beats) and never for a heartbeated write of 3× AckWait or for a delayed NAK,
 * though all three hold the ack floor flat for longer than AckWait with a message in flight
 * (which the samples show: that alone used to be called a stall).
 *
 * AckWait is 1 s; every wait is on an observed event (a sample, an ack frame, a delivery),
 * with timeouts many times the scenario's own timing, for two shared cores.
 */
import { afterEach, describe, expect, it } from "vitest";
import { jetstream } from "@nats-io/jetstream";
import {
  CommitThenAck,
  TemporarySinkError,
  verifyInProgressPolicy,
  watchConsumer,
  withInProgress,
  consumerTimingFromConfig,
  type ConsumerHealthSample,
  type ConsumerWatch,
  type VerifiedInProgressPolicy,
} from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, fetchBatch, publish, type Fixture } from "../helpers/jetstream.js";
import { startServer, type NatsServer } from "../helpers/nats-server.js";

const ACK_WAIT_MS = 1000;
const POLL_MS = 100;

/** Samples of one watch, and a way to wait for one that matches. */
class Samples {
  readonly all: ConsumerHealthSample[] = [];
  readonly #waiters = new Set<() => void>();

  readonly onSample = (s: ConsumerHealthSample): void => {
    this.all.push(s);
    for (const w of this.#waiters) w();
  };

  async waitFor(predicate: (s: ConsumerHealthSample) => boolean, what: string, timeoutMs = 30_000): Promise<ConsumerHealthSample> {
    const found = this.all.find(predicate);
    if (found) return found;
    return await new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; samples: ${this.summary()}`));
      }, timeoutMs);
      const check = (): void => {
        const s = this.all.find(predicate);
        if (!s) return;
        clearTimeout(timer);
        this.#waiters.delete(check);
        resolve(s);
      };
      this.#waiters.add(check);
    });
  }

  /** Waits for `n` more samples than there are now. */
  async more(n: number): Promise<void> {
    const target = this.all.length + n;
    await this.waitFor(() => this.all.length >= target, `${n} more samples`);
  }

  /** Samples the old rule called stalled: in flight with the floor flat for longer than AckWait. */
  oldRule(): ConsumerHealthSample[] {
    return this.all.filter((s) => s.ackPending > 0 && s.ackWaitMs !== undefined && s.ackFloorFlatMs > s.ackWaitMs);
  }

  summary(): string {
    return this.all
      .map((s) => `a${s.ackPending}/d${s.delivered}/f${s.ackFloor}/flat${s.ackFloorFlatMs}${s.stalled ? `/STALL:${s.stallEvidence}` : ""}`)
      .join(" ");
  }
}

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function setup(): Promise<{ srv: NatsServer; f: Fixture; policy: VerifiedInProgressPolicy }> {
  const srv = await startServer();
  cleanups.push(() => srv.dispose());
  const nc = await srv.connect();
  cleanups.push(() => nc.close());
  const f = await createFixture(nc, { ackWaitMs: ACK_WAIT_MS });
  // The workers' policy, verified against the consumer's real AckWait: 20 beats of 300 ms.
  const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 300, maxHeartbeats: 20 }, consumerTimingFromConfig(await consumerInfo(f)));
  return { srv, f, policy };
}

function watch(f: Fixture, options: Omit<Parameters<typeof watchConsumer>[3], "intervalMs" | "onSample">): Samples {
  const samples = new Samples();
  const w: ConsumerWatch = watchConsumer(f.jsm, f.stream, f.consumer, { intervalMs: POLL_MS, ...options, onSample: samples.onSample });
  cleanups.push(() => w.stop());
  return samples;
}

describe("stalled tells a stopped worker from a slow one (real nats-server)", () => {
  it("a crashed worker (fetched, never acked, no beats) turns stalled on; the message is taken over and it turns off", async () => {
    const { srv, f } = await setup();
    const declared = watch(f, { maxLeaseMs: 2 * ACK_WAIT_MS });
    const undeclared = watch(f, {});
    await declared.more(1);
    await undeclared.more(1);
    await publish(f, 1);

    // Worker 1 fetches the message and dies: its connection closes without an ack or a beat.
    const crashed1 = await srv.connect();
    const [first] = await fetchBatch({ ...f, js: jetstream(crashed1) }, 1);
    expect(first?.info.deliveryCount).toBe(1);
    await crashed1.close();
    const crashedAt = Date.now();

    // Nobody else pulls, so nothing is redelivered: only the declared lease can tell.
    const byLease = await declared.waitFor((s) => s.stalled, "stalled past the declared lease");
    expect(byLease).toMatchObject({ stallEvidence: "lease", leaseMs: 2 * ACK_WAIT_MS, ackPending: 1, ackFloor: 0 });
    expect(byLease.ackFloorFlatMs).toBeGreaterThan(2 * ACK_WAIT_MS);
    expect(byLease.at - crashedAt).toBeGreaterThan(2 * ACK_WAIT_MS - 2 * POLL_MS);
    expect(undeclared.all.some((s) => s.stalled), undeclared.summary()).toBe(false);

    // Worker 2 takes the expired message over and dies too (a crash loop): now the watch with
    // no declaration sees a redelivery that does not move the floor.
    const crashed2 = await srv.connect();
    const [second] = await fetchBatch({ ...f, js: jetstream(crashed2) }, 1);
    expect(second?.info.deliveryCount).toBe(2);
    await crashed2.close();
    const takenAt = Date.now();
    const byRedelivery = await undeclared.waitFor((s) => s.stalled, "stalled after a redelivery that did not move the floor");
    expect(byRedelivery).toMatchObject({ stallEvidence: "redelivery", leaseMs: undefined, ackFloor: 0 });
    expect(byRedelivery.at - takenAt).toBeGreaterThan(ACK_WAIT_MS - 2 * POLL_MS);
    expect(undeclared.all.reduce((n, s) => n + s.redeliveriesSinceLastSample, 0)).toBeGreaterThanOrEqual(1);

    // A healthy worker finally takes it and acks: the floor moves, both stalls end.
    const [third] = await fetchBatch(f, 1, 5000);
    expect(third?.info.deliveryCount).toBe(3);
    await third!.ackAck();
    for (const s of [declared, undeclared]) {
      const cleared = await s.waitFor((x) => x.ackPending === 0 && x.ackFloor === 3, "the floor past the message");
      expect(cleared.stalled).toBe(false);
    }
  });

  it("a heartbeated write of 3× AckWait (withInProgress, a verified policy) is never stalled, and never redelivered", async () => {
    const { f, policy } = await setup();
    const undeclared = watch(f, {});
    const declared = watch(f, { inProgress: policy });
    await declared.more(1);
    await undeclared.more(1);
    const spy = await AckSpy.start(f.nc, f.stream);
    cleanups.push(() => spy.dispose());
    await publish(f, 3);

    const batch = await fetchBatch(f, 3);
    const receivedAt = Date.now();
    expect(batch).toHaveLength(3);
    const beats = await withInProgress(
      batch,
      async (ctx) => {
        // Hold the write for 3× AckWait, measured by samples that saw the floor flat that long.
        await declared.waitFor((s) => s.ackPending === 3 && s.ackFloorFlatMs > 3 * ACK_WAIT_MS, "the floor flat for 3× AckWait");
        await undeclared.more(2);
        return ctx.heartbeats;
      },
      policy,
      { receivedAt, connection: f.nc },
    );
    for (const m of batch) await m.ackAck();
    const writeMs = Date.now() - receivedAt;
    for (const s of [declared, undeclared]) await s.waitFor((x) => x.ackPending === 0 && x.ackFloor === 3, "the acks");

    expect(beats).toBeGreaterThanOrEqual(5);
    expect(writeMs).toBeGreaterThan(3 * ACK_WAIT_MS);
    expect(spy.of("+WPI").length).toBeGreaterThanOrEqual(3 * 5);
    const info = await consumerInfo(f);
    expect(info).toMatchObject({ num_redelivered: 0, delivered: { consumer_seq: 3, stream_seq: 3 } });
    for (const s of [declared, undeclared]) {
      expect(s.all.some((x) => x.stalled), s.summary()).toBe(false);
      expect(s.all.reduce((n, x) => n + x.redeliveriesSinceLastSample, 0)).toBe(0);
      // What the old rule would have said about the same samples.
      expect(s.oldRule().length).toBeGreaterThan(5);
    }
    expect(declared.all[0]?.leaseMs).toBe(300 * 20 + ACK_WAIT_MS);
  });

  it("a delayed NAK of 3× AckWait (CommitThenAck) is never stalled; its retry is redelivered and acked", async () => {
    const { f, policy } = await setup();
    const undeclared = watch(f, {});
    const declared = watch(f, { inProgress: policy });
    await declared.more(1);
    await undeclared.more(1);
    const spy = await AckSpy.start(f.nc, f.stream);
    cleanups.push(() => spy.dispose());
    const [seq] = await publish(f, 1);

    const ack = new CommitThenAck({ inProgress: policy, onTemporaryFailure: { action: "nak", delayMs: 3 * ACK_WAIT_MS, retryInPlace: false }, connection: f.nc });
    let attempts = 0;
    const write = async (): Promise<void> => {
      attempts += 1;
      if (attempts === 1) throw new TemporarySinkError("sink busy, retry later");
    };
    const failed = await ack.process(await fetchBatch(f, 1), write);
    expect(failed).toMatchObject({ outcome: "nacked", nacked: 1 });
    await spy.waitFor((frames) => frames.some((x) => x.kind === "-NAK"), 10_000, "the delayed NAK");
    expect(spy.of("-NAK", seq)[0]?.payload).toMatch(/^-NAK \{"delay":\d+\}$/);

    // The retry comes after the delay, not before: pull until it arrives.
    const nakAt = Date.now();
    let retry = await fetchBatch(f, 1, 2500);
    while (retry.length === 0) retry = await fetchBatch(f, 1, 2500);
    const retryAt = Date.now();
    expect(retry[0]?.info.deliveryCount).toBe(2);
    expect(retryAt - nakAt).toBeGreaterThan(3 * ACK_WAIT_MS - 500);
    const done = await ack.process(retry, write);
    expect(done).toMatchObject({ outcome: "acked", acked: 1 });

    for (const s of [declared, undeclared]) {
      await s.waitFor((x) => x.ackPending === 0 && x.ackFloor === 2, "the floor past the retried message");
      await s.more(3);
      expect(s.all.some((x) => x.stalled), s.summary()).toBe(false);
      expect(s.all.reduce((n, x) => n + x.redeliveriesSinceLastSample, 0), s.summary()).toBe(1);
      expect(s.oldRule().length, s.summary()).toBeGreaterThan(5);
    }
  });
});
