/**
 * A heartbeat thread the server will not serve while the host's connection is fine: it refuses
 * the thread a connection (max_connections reached), or the thread's own identity may not
 * publish ack frames. Either way its beats never reach the consumer, so the loop's batches beat
 * from the main thread instead: a second worker pulling the same durable during a write longer
 * than AckWait receives nothing.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { CommitThenAck, DiagnosticsChannels, type BatchResult, type HeartbeatFailedEvent } from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { EventLog } from "../helpers/diagnostics.js";
import { createFixture, eventually, publish } from "../helpers/jetstream.js";
import { startServer } from "../helpers/nats-server.js";
import { startRival, type Rival } from "../helpers/rival.js";

interface Timing {
  readonly ackWaitMs: number;
  readonly intervalMs: number;
  readonly writeMs: number;
}

/** One message through `run` with a write longer than AckWait; the rival pulls the durable while it runs. */
async function runOne(nc: NatsConnection, spyConn: NatsConnection, rivalConn: NatsConnection, thread: true | { servers: string; user: string; pass: string }, t: Timing) {
  const f = await createFixture(nc, { ackWaitMs: t.ackWaitMs });
  const [seq] = await publish(f, 1);
  const spy = await AckSpy.start(spyConn, f.stream);
  const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
    inProgress: { enabled: true, intervalMs: t.intervalMs, maxHeartbeats: 40 },
    heartbeat: { thread },
    connection: nc,
  });
  const results: BatchResult[] = [];
  const errors: Error[] = [];
  const stop = new AbortController();
  let rival: Rival | undefined;
  let writeStartedAt = 0;
  await ack.run(
    await jetstream(nc).consumers.get(f.stream, f.consumer),
    async () => {
      writeStartedAt = performance.now();
      rival = await startRival(jetstream(rivalConn), f.stream, f.consumer);
      await sleep(t.writeMs);
      stop.abort();
    },
    { batchSize: 1, signal: stop.signal, onBatch: (r) => void results.push(r), onError: (err) => void errors.push(err as Error) },
  );
  await rival!.stop();
  await eventually(() => spy.of("+ACK", seq!).length === 1, "the +ACK at the server");
  const wpi = spy.of("+WPI", seq!).length;
  await spy.dispose();
  await f.jsm.streams.delete(f.stream);
  return { results, errors, rival: rival!.received, wpi, writeStartedAt };
}

describe("a heartbeat thread the server will not serve", () => {
  it("the server refuses the thread a connection (max_connections): the loop reports it at its start and beats from the main thread; a second worker receives nothing", async () => {
    // Host, spy and rival take the three connections; the thread's would be the fourth.
    await using srv = await startServer({ config: "max_connections: 3" });
    const nc = await srv.connect({ name: "host" });
    const spyConn = await srv.connect({ name: "spy" });
    const rivalConn = await srv.connect({ name: "rival" });
    try {
      const started = performance.now();
      const r = await runOne(nc, spyConn, rivalConn, true, { ackWaitMs: 2000, intervalMs: 500, writeMs: 6000 });
      expect(r.errors.map((e) => [e.name, (e as { reason?: unknown }).reason])).toEqual([["HeartbeatThreadError", "not_ready"]]);
      expect(r.errors[0]!.message).toMatch(/not up within 5000 ms.*beat from the main thread/);
      // The loop waited for the thread before its first pull, then pulled without it.
      expect(r.writeStartedAt - started).toBeGreaterThan(4500);
      expect(r.results.map((x) => [x.outcome, x.leaseLost])).toEqual([["acked", false]]);
      expect(r.rival, "a second worker on the durable").toEqual([]);
      // 6 s of write at 500 ms: about 12 beats, from the main thread.
      expect(r.wpi).toBeGreaterThanOrEqual(8);
    } finally {
      await rivalConn.close();
      await spyConn.close();
      await nc.close();
    }
  }, 60_000);

  it("the thread's identity may not publish to $JS.ACK.>: the thread fails for good at its first refused +WPI and the batch beats from the main thread at once; a second worker receives nothing", async () => {
    await using srv = await startServer({
      config: [
        "authorization {",
        "  users: [",
        "    { user: svc, password: svc-pass }",
        '    { user: beat, password: beat-pass, permissions: { publish: { deny: ["$JS.ACK.>"] } } }',
        '    { user: probe_nobody, password: probe_nobody_pw, permissions: { publish: { deny: [">"] }, subscribe: { deny: [">"] } } }',
        "  ]",
        "}",
        "no_auth_user: probe_nobody",
      ].join("\n"),
    });
    const nc = await srv.connect({ user: "svc", pass: "svc-pass" });
    const spyConn = await srv.connect({ user: "svc", pass: "svc-pass" });
    const rivalConn = await srv.connect({ user: "svc", pass: "svc-pass" });
    using failed = new EventLog([DiagnosticsChannels.HEARTBEAT_FAILED]);
    try {
      // The interval near the 80 % limit: the first refused round leaves 800 ms of the lease, and
      // the next look an interval on (without the thread waking its watch) would be past it.
      const r = await runOne(nc, spyConn, rivalConn, { servers: srv.url, user: "beat", pass: "beat-pass" }, { ackWaitMs: 3000, intervalMs: 2200, writeMs: 7000 });
      expect(r.errors).toEqual([]);
      expect(r.results.map((x) => [x.outcome, x.leaseLost])).toEqual([["acked", false]]);
      expect(r.rival, "a second worker on the durable").toEqual([]);
      // Every +WPI that reached the server came from the main thread's connection: at the
      // refusal (about 2.2 s), then about 4.4 and 6.6 s.
      expect(r.wpi).toBeGreaterThanOrEqual(2);
      // The fallback is reported as a failed beat named for the thread.
      const events = failed.of(DiagnosticsChannels.HEARTBEAT_FAILED) as HeartbeatFailedEvent[];
      expect(events.map((e) => e.errorName)).toContain("HeartbeatThreadError");
    } finally {
      await rivalConn.close();
      await spyConn.close();
      await nc.close();
    }
  }, 60_000);
});
