/**
 * Scenario: worker processes die with SIGKILL in the middle of a write.
 *
 * Each victim is a child process running `CommitThenAck.run` with heartbeats; its sink is this
 * process (IPC). A victim's first batch commits normally; its second batch is held until it
 * has had two beats, then the victim is killed — half of them before the sink committed that
 * batch, half right after (a crash between a durable write and its ACK). In-process survivor
 * workers then drain the consumer.
 *
 * Proves: the dead worker's messages come back only after their AckWait ran out (its beats
 * were honoured while it lived), another worker commits them, nothing is lost, and the only
 * duplicates are the batches that were committed but never acked.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { expect } from "vitest";
import { CommitThenAck } from "../../../src/index.js";
import { AckSpy } from "../../helpers/ack-spy.js";
import { createFixture, eventually, publish } from "../../helpers/jetstream.js";
import { startServer } from "../../helpers/nats-server.js";
import { assertInvariants, checkInvariants, printSummary, type InvariantReport } from "../invariants.js";
import { IdempotentSink, keyOf, type DeliveryKey } from "../sink.js";
import { RECONNECT, consumerInfoWhen, deferred, sleep, watchUnhandledRejections } from "../support.js";

export interface WorkerKillOptions {
  /** Child processes killed mid-write (even-numbered before the commit, odd-numbered after it). */
  readonly victims: number;
  readonly batchSize: number;
  /** Messages beyond the victims' two batches each, left for the survivors. */
  readonly extraMessages: number;
  readonly survivors: number;
  readonly ackWaitMs: number;
  readonly intervalMs: number;
}

export interface WorkerKillResult {
  readonly report: InvariantReport;
  /** Sequences the victims held when they died. */
  readonly held: readonly number[];
  /** Of those, the ones the sink had committed before the kill. */
  readonly committedBeforeKill: readonly number[];
  /** Per held sequence: time from the victim's last beat the server received to the redelivery. */
  readonly redeliveredAfterMs: readonly number[];
}

const root = join(import.meta.dirname, "..", "..", "..");
const childFile = join(root, "test", "reliability", "worker-child.ts");

interface Victim {
  readonly name: string;
  readonly child: ChildProcess;
  readonly exited: Promise<void>;
  readonly held: Promise<readonly DeliveryKey[]>;
  stderr: string;
}

export async function workerKillScenario(o: WorkerKillOptions): Promise<WorkerKillResult> {
  const name = `worker kill x${o.victims}`;
  await using srv = await startServer();
  const nc = await srv.connect(RECONNECT);
  const spyConn = await srv.connect(RECONNECT);
  const survivorConns = await Promise.all(Array.from({ length: o.survivors }, () => srv.connect(RECONNECT)));
  const unhandled = watchUnhandledRejections();
  const victims: Victim[] = [];
  const stop = new AbortController();
  const giveUp = new AbortController();
  const runs: Promise<void>[] = [];
  try {
    const f = await createFixture(nc, { ackWaitMs: o.ackWaitMs });
    await using spy = await AckSpy.start(spyConn, f.stream);
    const published = await publish(f, o.victims * 2 * o.batchSize + o.extraMessages);
    const sink = new IdempotentSink();

    for (let i = 0; i < o.victims; i++) {
      const vname = `victim-${i + 1}`;
      const child = spawn(process.execPath, ["--import", "tsx", childFile], {
        cwd: root,
        env: {
          ...process.env,
          NATS_URL: srv.url,
          STREAM: f.stream,
          CONSUMER: f.consumer,
          INTERVAL_MS: String(o.intervalMs),
          BATCH_SIZE: String(o.batchSize),
        },
        stdio: ["ignore", "ignore", "pipe", "ipc"],
      });
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      const held = deferred<readonly DeliveryKey[]>();
      const victim: Victim = { name: vname, child, exited, held: held.promise, stderr: "" };
      child.stderr?.on("data", (b: Buffer) => (victim.stderr += b.toString()));
      let writes = 0;
      child.on("message", (m: { type?: string; id?: number; keys?: DeliveryKey[] }) => {
        if (m?.type !== "write" || !m.keys) return;
        writes += 1;
        for (const k of m.keys) sink.deliver(k, vname);
        if (writes === 1) {
          // The first batch is written and acknowledged normally.
          setTimeout(() => {
            for (const k of m.keys!) sink.commit(k, vname);
            child.send({ type: "done", id: m.id });
          }, 100);
        } else {
          // Any later batch is held: the victim dies with it.
          held.resolve(m.keys);
        }
      });
      victims.push(victim);
    }

    const heldKeys: DeliveryKey[] = [];
    const committedBeforeKill: number[] = [];
    const killedAt = new Map<number, number>();
    await Promise.all(
      victims.map(async (v, i) => {
        const keys = await Promise.race([
          v.held,
          v.exited.then(() => {
            throw new Error(`${v.name} exited before its second batch:\n${v.stderr}`);
          }),
          sleep(90_000, undefined, { signal: giveUp.signal }).then(() => {
            throw new Error(`${v.name} did not reach its second batch within 90 s:\n${v.stderr}`);
          }),
        ]);
        const seqs = keys.map((k) => k.seq);
        await spy.waitFor(
          (fr) => seqs.every((s) => fr.filter((x) => x.kind === "+WPI" && x.streamSequence === s).length >= 2),
          10 * o.intervalMs + 10_000,
          `two beats from ${v.name}`,
        );
        if (i % 2 === 1) {
          // Durable in the sink, never acknowledged.
          for (const k of keys) sink.commit(k, v.name);
          committedBeforeKill.push(...seqs);
        }
        for (const k of keys) sink.fail(k, v.name, "killed", i % 2 === 1 ? "after the commit, before the ack" : "before the commit");
        v.child.kill("SIGKILL");
        await v.exited;
        for (const s of seqs) killedAt.set(s, performance.now());
        heldKeys.push(...keys);
      }),
    );
    giveUp.abort();
    const held = heldKeys.map((k) => k.seq).sort((a, b) => a - b);

    // The survivors: ordinary in-process workers on their own connections.
    for (const [i, conn] of survivorConns.entries()) {
      const wname = `survivor-${i + 1}`;
      const ack = await CommitThenAck.forConsumer(await jetstreamManager(conn), f.stream, f.consumer, {
        inProgress: { enabled: true, intervalMs: o.intervalMs, maxHeartbeats: 1000 },
        connection: conn,
      });
      const consumer = await jetstream(conn).consumers.get(f.stream, f.consumer);
      runs.push(
        ack.run(consumer, async (msgs) => {
          for (const m of msgs) sink.deliver(keyOf(m), wname);
          await sleep(50);
          for (const m of msgs) sink.commit(keyOf(m), wname);
        }, { batchSize: o.batchSize, signal: stop.signal }),
      );
    }
    await eventually(() => published.every((s) => sink.committed(f.stream, s)), "every message committed", 60_000, 50);
    const info = await consumerInfoWhen(spyConn, f.stream, f.consumer, (c) => c.num_ack_pending === 0 && c.num_pending === 0, "the consumer drained");
    stop.abort();
    await Promise.all(runs);
    await spyConn.flush();

    const heldSet = new Set(held);
    const report = checkInvariants({
      stream: f.stream,
      published,
      sink,
      frames: spy.frames,
      consumer: info,
      unhandled: unhandled.seen,
      explainRedelivery: (seq, dc) => (dc === 2 && heldSet.has(seq) ? "its worker was killed mid-write" : undefined),
    });
    assertInvariants(report, name);

    // Exactly the held messages came back, once each, and only after their lease ran out.
    expect(report.redeliveries.map((r) => r.seq)).toEqual(held);
    const redeliveredAfterMs: number[] = [];
    for (const seq of held) {
      const lastBeat = Math.max(...spy.of("+WPI", seq).filter((x) => x.deliveryCount === 1).map((x) => x.at));
      const again = sink.deliveries.find((d) => d.seq === seq && d.dc === 2);
      expect(again, `seq ${seq} redelivered`).toBeDefined();
      expect(again!.worker).toMatch(/^survivor-/);
      // Not before AckWait after the last beat the server received (a little slack for the
      // spy seeing that beat after the server did).
      expect(again!.at - lastBeat).toBeGreaterThanOrEqual(o.ackWaitMs - 250);
      expect(again!.at).toBeGreaterThan(killedAt.get(seq)!);
      redeliveredAfterMs.push(again!.at - lastBeat);
      expect(spy.of("+ACK", seq).map((x) => x.deliveryCount)).toEqual([2]);
    }
    // The only duplicates: batches committed and then killed before their ACK.
    expect(report.duplicates.map((d) => d.seq).sort((a, b) => a - b)).toEqual([...committedBeforeKill].sort((a, b) => a - b));
    printSummary(name, report, {
      held: held.length,
      committedBeforeKill: committedBeforeKill.length,
      minRedeliveredAfterMs: Math.round(Math.min(...redeliveredAfterMs)),
    });
    return { report, held, committedBeforeKill, redeliveredAfterMs };
  } finally {
    stop.abort();
    giveUp.abort();
    await Promise.allSettled(runs);
    for (const v of victims) v.child.kill("SIGKILL");
    await Promise.all(victims.map((v) => v.exited));
    unhandled.stop();
    await Promise.allSettled([nc.close(), spyConn.close(), ...survivorConns.map((c) => c.close())]);
  }
}
