/**
 * The heartbeat thread under CommitThenAck: the beats leave from the thread's own connection,
 * no `+WPI` follows a final frame of the same delivery (a NAK with a delay included: the loop
 * waits until the thread's beats reached the server before it sends one), a thread that cannot
 * connect leaves the beats to the main thread, and a finished host exits by itself.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { jetstream } from "@nats-io/jetstream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  CommitThenAck,
  DiagnosticsChannels,
  InMemoryMetrics,
  MetricNames,
  PermanentSinkError,
  TemporarySinkError,
  type BatchResult,
  type HeartbeatFailedEvent,
} from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { EventLog } from "../helpers/diagnostics.js";
import { startRival } from "../helpers/rival.js";
import { createFixture, eventually, publish } from "../helpers/jetstream.js";
import { freePort, startServer, type NatsServer } from "../helpers/nats-server.js";
import { TcpProxy } from "../reliability/tcp-proxy.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");

let srv: NatsServer;
let monitor: number;

beforeAll(async () => {
  monitor = await freePort();
  srv = await startServer({ args: ["-m", String(monitor)] });
});

afterAll(async () => {
  await srv.dispose();
});

/** The server's view of its client connections: what each one sent (its in_msgs). */
async function connz(): Promise<Array<{ name: string; in_msgs: number }>> {
  const res = await fetch(`http://127.0.0.1:${monitor}/connz?limit=1000`);
  const body = (await res.json()) as { connections?: Array<{ name?: string; in_msgs?: number }> };
  return (body.connections ?? []).map((c) => ({ name: c.name ?? "", in_msgs: c.in_msgs ?? 0 }));
}

/**
 * A server configuration with these users, and a user without rights for connections that give
 * none (the helpers' readiness probe).
 */
function authorization(users: readonly string[]): string {
  return [
    "authorization {",
    "  users: [",
    ...users.map((u) => `    ${u}`),
    '    { user: probe_nobody, password: probe_nobody_pw, permissions: { publish: { deny: [">"] }, subscribe: { deny: [">"] } } }',
    "  ]",
    "}",
    "no_auth_user: probe_nobody",
  ].join("\n");
}

describe("the heartbeat thread under CommitThenAck", () => {
  it("frame order: beats every 100 ms from the thread over a slow link, and none follows an ACK, a Term or a delayed NAK of its delivery", async () => {
    const nc = await srv.connect();
    const name = `order-${process.pid}`;
    const worker = await srv.connect({ name });
    // The thread's link is 40 ms slower than the worker's: a +WPI sent just before a NAK would
    // reach the server after it, unless the loop waits for the thread's beats to arrive first.
    await using slow = await TcpProxy.start(srv.port, { latencyMs: 40 });
    const f = await createFixture(nc, { ackWaitMs: 1000, maxDeliver: 2 });
    const seqs = await publish(f, 36);
    const spy = await AckSpy.start(nc, f.stream);
    const metrics = new InMemoryMetrics();
    const NAK_DELAY_MS = 1500;
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
      inProgress: { enabled: true, intervalMs: 100, maxHeartbeats: 100 },
      heartbeat: { thread: { servers: slow.url, name: `${name}:heartbeats` } },
      onTemporaryFailure: { action: "nak", delayMs: NAK_DELAY_MS, retryInPlace: false },
      connection: worker,
      metrics,
    });
    const startedAt = new Map<string, number>();
    const results: BatchResult[] = [];
    const stop = new AbortController();
    const running = ack.run(
      await jetstream(worker).consumers.get(f.stream, f.consumer),
      async (msgs) => {
        const m = msgs[0]!;
        startedAt.set(`${m.seq}/${m.info.deliveryCount}`, performance.now());
        // 300–900 ms: three to nine beats each.
        await new Promise((r) => setTimeout(r, 300 + ((m.seq * 137) % 600)));
        // First deliveries: a third fail temporarily (NAK with a delay), a sixth permanently (Term).
        if (m.info.deliveryCount === 1 && m.seq % 3 === 0) throw new TemporarySinkError("busy");
        if (m.seq % 6 === 1) throw new PermanentSinkError("poison");
      },
      { batchSize: 1, concurrency: 6, signal: stop.signal, onBatch: (r) => void results.push(r) },
    );
    try {
      const naked = seqs.filter((s) => s % 3 === 0).length;
      await eventually(() => results.length === seqs.length + naked, "every delivery settled", 60_000);
      // The thread's connection sent the beats; the worker's did not.
      const conns = await connz();
      const threadConn = conns.find((c) => c.name === `${name}:heartbeats`);
      const workerConn = conns.find((c) => c.name === name);
      const wpi = spy.of("+WPI").length;
      expect(wpi).toBeGreaterThanOrEqual(seqs.length * 2);
      expect(threadConn?.in_msgs ?? 0).toBeGreaterThanOrEqual(wpi);
      expect(workerConn!.in_msgs).toBeLessThan(wpi);
      expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL] ?? 0).toBeGreaterThanOrEqual(seqs.length * 2);

      let finals = 0;
      for (const seq of seqs) {
        for (const dc of [1, 2]) {
          const frames = spy.forSequence(seq).filter((fr) => fr.deliveryCount === dc);
          const last = frames.findIndex((fr) => fr.kind === "+ACK" || fr.kind === "+TERM" || fr.kind === "-NAK");
          if (last < 0) continue;
          finals += 1;
          expect(frames.slice(last + 1).map((fr) => fr.kind), `seq ${seq} delivery ${dc}`).toEqual([]);
          const final = frames[last]!;
          if (final.kind === "-NAK") {
            // The delay held: no +WPI reset it to AckWait.
            const again = startedAt.get(`${seq}/2`);
            expect(again, `seq ${seq} redelivered`).toBeDefined();
            expect(again! - final.at, `seq ${seq}`).toBeGreaterThanOrEqual(NAK_DELAY_MS - 50);
          }
        }
      }
      expect(finals).toBe(seqs.length + naked);
      expect(results.every((r) => !r.leaseLost)).toBe(true);
    } finally {
      stop.abort();
      await running;
      await spy[Symbol.asyncDispose]();
      await f.jsm.streams.delete(f.stream);
      await worker.close();
      await nc.close();
    }
  });

  it("a delayed NAK keeps its delay when the thread's link is slower than the beat interval (a +WPI is still on its way when the write fails)", async () => {
    const nc = await srv.connect();
    const worker = await srv.connect();
    // 150 ms each way: with beats every 100 ms, the thread's last +WPI is still travelling when
    // a write fails. The loop must wait for it (a PING round trip of 300 ms) before the NAK, or it
    // lands after the NAK and cuts the delay to AckWait.
    await using slow = await TcpProxy.start(srv.port, { latencyMs: 150 });
    const f = await createFixture(nc, { ackWaitMs: 2000, maxDeliver: 2 });
    const seqs = await publish(f, 6);
    const spy = await AckSpy.start(nc, f.stream);
    const NAK_DELAY_MS = 4000;
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
      inProgress: { enabled: true, intervalMs: 100, maxHeartbeats: 100 },
      heartbeat: { thread: { servers: slow.url } },
      onTemporaryFailure: { action: "nak", delayMs: NAK_DELAY_MS, retryInPlace: false },
      connection: worker,
    });
    const startedAt = new Map<string, number>();
    const results: BatchResult[] = [];
    const stop = new AbortController();
    const running = ack.run(
      await jetstream(worker).consumers.get(f.stream, f.consumer),
      async (msgs) => {
        const m = msgs[0]!;
        startedAt.set(`${m.seq}/${m.info.deliveryCount}`, performance.now());
        // Long enough for the thread to start and beat each first delivery several times.
        await new Promise((r) => setTimeout(r, 900 + ((m.seq * 37) % 200)));
        if (m.info.deliveryCount === 1) throw new TemporarySinkError("busy");
      },
      { batchSize: 1, concurrency: 6, signal: stop.signal, onBatch: (r) => void results.push(r) },
    );
    try {
      await eventually(() => results.length === 2 * seqs.length, "every delivery settled", 30_000);
      for (const seq of seqs) {
        const first = spy.forSequence(seq).filter((fr) => fr.deliveryCount === 1);
        const nak = first.findIndex((fr) => fr.kind === "-NAK");
        expect(nak, `seq ${seq} NAK`).toBeGreaterThan(0);
        expect(first.slice(0, nak).filter((fr) => fr.kind === "+WPI").length, `seq ${seq} beats`).toBeGreaterThanOrEqual(2);
        expect(first.slice(nak + 1).map((fr) => fr.kind), `seq ${seq} after its NAK`).toEqual([]);
        // Redelivered after the delay, not after AckWait (2 s) as a late +WPI would make it.
        expect(startedAt.get(`${seq}/2`)! - first[nak]!.at, `seq ${seq}`).toBeGreaterThanOrEqual(NAK_DELAY_MS - 50);
      }
      expect(results.filter((r) => r.outcome === "acked").length).toBe(seqs.length);
    } finally {
      stop.abort();
      await running;
      await spy[Symbol.asyncDispose]();
      await f.jsm.streams.delete(f.stream);
      await worker.close();
      await nc.close();
    }
  });

  it("a thread that cannot log in leaves the beats to the main thread, and says so", async () => {
    await using auth = await startServer({ config: authorization(["{ user: svc, password: right-pass }"]) });
    const nc = await auth.connect({ user: "svc", pass: "right-pass" });
    // The refusal takes the thread's start and two login attempts 0.5 s apart: about a second
    // on an idle machine, more under load. AckWait leaves the first batch room for it.
    const f = await createFixture(nc, { ackWaitMs: 5000 });
    const [seq] = await publish(f, 1);
    const spy = await AckSpy.start(nc, f.stream);
    using failures = new EventLog([DiagnosticsChannels.HEARTBEAT_FAILED]);
    const failed = (): HeartbeatFailedEvent[] => failures.of(DiagnosticsChannels.HEARTBEAT_FAILED);
    try {
      const metrics = new InMemoryMetrics();
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
        inProgress: { enabled: true, intervalMs: 200, maxHeartbeats: 50 },
        heartbeat: { thread: { servers: auth.url, user: "svc", pass: "wrong-pass" } },
        connection: nc,
        metrics,
      });
      const batch = await (async () => {
        const out = [];
        for await (const m of await (await jetstream(nc).consumers.get(f.stream, f.consumer)).fetch({ max_messages: 1, expires: 1000 })) out.push(m);
        return out;
      })();
      // The first batch finds the thread starting: it is put on the thread, and once the login
      // was refused (however long that took) it goes on beating from the main thread.
      let wpiAtFallback = -1;
      const first = await ack.process(batch, async () => {
        await eventually(() => failed().some((e) => e.errorName === "HeartbeatThreadError"), "the fallback of the first batch", 20_000);
        wpiAtFallback = spy.of("+WPI", seq).length;
        await new Promise((r) => setTimeout(r, 700));
      });
      expect([first.outcome, first.leaseLost]).toEqual(["acked", false]);
      // The thread never connected: every +WPI came from the main thread, the first at once.
      expect(wpiAtFallback).toBeGreaterThanOrEqual(0);
      expect(spy.of("+WPI", seq).length - wpiAtFallback).toBeGreaterThanOrEqual(2);
      expect(failed().filter((e) => e.errorName === "HeartbeatThreadError")).toHaveLength(1);
      await publish(f, 1);
      const second = [];
      for await (const m of await (await jetstream(nc).consumers.get(f.stream, f.consumer)).fetch({ max_messages: 1, expires: 1000 })) second.push(m);
      const r = await ack.process(second, () => new Promise((res) => setTimeout(res, 1000)));
      expect([r.outcome, r.leaseLost]).toEqual(["acked", false]);
      expect(spy.of("+WPI", second[0]!.seq).length).toBeGreaterThanOrEqual(3);
      // The second batch was not put on the failed thread: it beat from the main thread at once.
      expect(failed().filter((e) => e.errorName === "HeartbeatThreadError")).toHaveLength(2);
      expect(failed().at(-1)).toMatchObject({ errorName: "HeartbeatThreadError", beat: 0 });
      expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_FAILURES_TOTAL] ?? 0).toBeGreaterThanOrEqual(1);
      expect(seq).toBe(1);
      await eventually(() => spy.of("+ACK").length === 2, "both ACKs");
    } finally {
      await spy[Symbol.asyncDispose]();
      await nc.close();
    }
  });

  it("a batch whose thread's connection closes for good beats on from the main thread: a second worker on the durable gets nothing", async () => {
    // The thread reaches the server through a proxy. Its connection is then dropped and its
    // reconnects meet another server, which refuses its user: it closes for good. (Not by a
    // reload of the server's users: on 2.9.10 and 2.10.27 that leaves the account's JetStream
    // silent — no API answer, no status to a pull — so a second worker could receive nothing
    // whatever the lease.)
    await using auth = await startServer({ config: authorization(["{ user: svc, password: svc-pass }", "{ user: beat, password: beat-pass }"]) });
    await using refusing = await startServer({ config: authorization(["{ user: svc, password: svc-pass }"]) });
    await using proxy = await TcpProxy.start(auth.port);
    const nc = await auth.connect({ user: "svc", pass: "svc-pass" });
    const rivalNc = await auth.connect({ user: "svc", pass: "svc-pass" });
    const f = await createFixture(nc, { ackWaitMs: 3000 });
    const [seq] = await publish(f, 1);
    const spy = await AckSpy.start(nc, f.stream);
    using failures = new EventLog([DiagnosticsChannels.HEARTBEAT_FAILED]);
    const failed = (): HeartbeatFailedEvent[] => failures.of(DiagnosticsChannels.HEARTBEAT_FAILED);
    try {
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
        inProgress: { enabled: true, intervalMs: 500, maxHeartbeats: 50 },
        heartbeat: { thread: { servers: proxy.url, user: "beat", pass: "beat-pass" } },
        connection: nc,
      });
      const batch = [];
      for await (const m of await (await jetstream(nc).consumers.get(f.stream, f.consumer)).fetch({ max_messages: 1, expires: 1000 })) batch.push(m);
      const rival = await startRival(jetstream(rivalNc), f.stream, f.consumer);
      let mainBeats = -1;
      const r = await ack.process(batch, async () => {
        // The thread is up and beating the batch ...
        await eventually(() => spy.of("+WPI", seq).length >= 1, "the thread's first round", 20_000);
        // ... until its connection drops and every reconnect is refused.
        proxy.retarget(refusing.port);
        await eventually(() => failed().some((e) => e.errorName === "HeartbeatThreadError"), "the fallback to the main thread", 20_000);
        const at = spy.of("+WPI", seq).length;
        // Longer than AckWait: only the main thread's beats keep the lease now.
        await new Promise((res) => setTimeout(res, 4000));
        mainBeats = spy.of("+WPI", seq).length - at;
      });
      // Throws when the rival never completed a pull: then it proved nothing.
      await rival.stop();
      expect([r.outcome, r.leaseLost]).toEqual(["acked", false]);
      expect(mainBeats).toBeGreaterThanOrEqual(6);
      expect(rival.received).toEqual([]);
      expect(failed().filter((e) => e.errorName === "HeartbeatThreadError")).toHaveLength(1);
      await eventually(() => spy.of("+ACK", seq).length === 1, "the ACK");
      // The server took the ACK: nothing pending, nothing redelivered.
      const info = await f.jsm.consumers.info(f.stream, f.consumer);
      expect([info.num_ack_pending, info.num_redelivered]).toEqual([0, 0]);
    } finally {
      await spy[Symbol.asyncDispose]();
      await rivalNc.close();
      await nc.close();
    }
  });

  it("a service that used the thread exits by itself once its work is done", async () => {
    const { stdout } = await run(process.execPath, ["--import", "tsx", join(root, "test", "helpers", "thread-host-child.ts"), srv.url], { cwd: root, timeout: 30_000 });
    const exitedAt = Date.now();
    const out = JSON.parse(stdout.trim().split("\n").at(-1)!) as { outcome: string; heartbeats: number; doneAt: number };
    expect(out.outcome).toBe("acked");
    // The loop waited for the thread before its batch: the 1.5 s write is beaten every 200 ms.
    expect(out.heartbeats).toBeGreaterThanOrEqual(3);
    expect(exitedAt - out.doneAt).toBeLessThan(1500);
  });
});
