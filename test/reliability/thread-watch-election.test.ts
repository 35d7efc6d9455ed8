/**
 * A consumer leader election under batches watched on the heartbeat thread (no metrics, no
 * trace, plain beats), in a 3-node cluster with an R3 stream and consumer: the thread's beats
 * carry on against the new leader and the leases are kept through the election. A second
 * worker pulling the same durable all along is the proof: it receives nothing.
 */
import { jetstream } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { DiagnosticsChannels, verifyInProgressPolicy, withInProgress } from "../../src/index.js";
import { ThreadWatch } from "../../src/lease/thread-watch.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { EventLog } from "../helpers/diagnostics.js";
import { createFixture, fetchBatch, publish } from "../helpers/jetstream.js";
import { startCluster, type NatsCluster } from "../helpers/nats-server.js";
import { startRival } from "../helpers/rival.js";
import { RECONNECT, consumerInfoWhen, sleep } from "./support.js";

const ACK_WAIT_MS = 3000;
const INTERVAL_MS = 500;

describe("reliability (short): a consumer leader step-down under batches watched on the heartbeat thread", () => {
  let cluster: NatsCluster;
  const conns: NatsConnection[] = [];
  beforeAll(async () => {
    cluster = await startCluster();
  });
  afterEach(() => {
    vi.restoreAllMocks();
  });
  afterAll(async () => {
    await Promise.all(conns.map((c) => c.close().catch(() => undefined)));
    await cluster?.dispose();
  });

  it("beats carry on against the new leader; the leases are kept through the election and a second worker receives nothing", async () => {
    const admin = await cluster.connect(RECONNECT);
    conns.push(admin);
    const f = await createFixture(admin, { ackWaitMs: ACK_WAIT_MS, replicas: 3 });
    const seqs = await publish(f, 2);
    const initial = await consumerInfoWhen(admin, f.stream, f.consumer, (c) => Boolean(c.cluster?.leader), "a consumer leader");
    // Worker, spy and rival on the other nodes first: the election is the only fault.
    const oldLeader = initial.cluster!.leader!;
    const servers = [...cluster.servers.filter((s) => s.options.name !== oldLeader), ...cluster.servers.filter((s) => s.options.name === oldLeader)].map((s) => s.url);
    const open = async (): Promise<NatsConnection> => {
      const c = await connect({ servers, noRandomize: true, ...RECONNECT });
      conns.push(c);
      return c;
    };
    const [worker, spyConn, rivalConn] = await Promise.all([open(), open(), open()]);
    await using spy = await AckSpy.start(spyConn, f.stream);
    const msgs = await fetchBatch({ ...f, nc: worker, js: jetstream(worker, { timeout: 10_000 }) }, 2, 5000);
    expect(msgs.map((m) => m.seq)).toEqual(seqs);
    const rival = await startRival(jetstream(rivalConn, { timeout: 10_000 }), f.stream, f.consumer);
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: INTERVAL_MS, maxHeartbeats: 200 }, { ackWaitMs: ACK_WAIT_MS, source: "configured" });
    const joins = vi.spyOn(ThreadWatch.prototype, "join");
    const beatsSince = (at: number, n: number) => () => seqs.every((s) => spy.of("+WPI", s).filter((x) => x.at > at).length >= n);
    let answeredAt = 0;
    let newLeader = "";
    try {
      // Only lease:expired: a heartbeat:sent subscriber would make the watch look at the batch every interval.
      using events = new EventLog([DiagnosticsChannels.LEASE_EXPIRED]);
      const aborted = await withInProgress(msgs, async (ctx) => {
        await spy.waitFor(beatsSince(0, 2), 10_000, "two rounds per message before the election");
        const reply = await admin.request(`$JS.API.CONSUMER.LEADER.STEPDOWN.${f.stream}.${f.consumer}`, "", { timeout: 5000 });
        expect(reply.json<{ success?: boolean }>().success, "step-down accepted").toBe(true);
        const after = await consumerInfoWhen(admin, f.stream, f.consumer, (c) => Boolean(c.cluster?.leader) && c.cluster!.leader !== oldLeader, "a new consumer leader", 60_000);
        answeredAt = performance.now();
        newLeader = after.cluster!.leader!;
        // Beats against the new leader for longer than one AckWait after it answered.
        await spy.waitFor(beatsSince(answeredAt, 2), 10_000, "two rounds per message after the election");
        await sleep(Math.max(0, ACK_WAIT_MS + 1000 - (performance.now() - answeredAt)));
        return ctx.signal.aborted;
      }, policy, { thread: true, connection: worker });
      expect(aborted).toBe(false);
      for (const m of msgs) await m.ackAck({ timeout: 10_000 });
      await rival.stop();
      expect(newLeader).not.toBe(oldLeader);
      expect(rival.received, spy.summary()).toEqual([]);
      expect(events.of(DiagnosticsChannels.LEASE_EXPIRED)).toEqual([]);
      expect(joins).toHaveBeenCalled();
      for (const s of seqs) expect(spy.of("+WPI", s).filter((x) => x.at > answeredAt).length, spy.summary()).toBeGreaterThanOrEqual(6);
    } finally {
      await rival.stop().catch(() => undefined);
    }
  });
});
