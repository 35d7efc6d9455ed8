import { describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { AckSpy } from "../helpers/ack-spy.js";
import { againWhileUnanswered, consumerInfo, createFixture, eventually, fetchBatch, publish, uniqueName } from "../helpers/jetstream.js";
import { startCluster, startServer } from "../helpers/nats-server.js";

describe("test harness on a real nats-server", () => {
  it("starts a JetStream server on a free port; publish, fetch and ack are seen by the spy and consumer info", async () => {
    await using srv = await startServer();
    expect(srv.port).toBeGreaterThan(0);
    const nc = await srv.connect();
    try {
      const f = await createFixture(nc);
      await using spy = await AckSpy.start(nc, f.stream);
      const [seq] = await publish(f, 1);
      const [m] = await fetchBatch(f, 1);
      expect(m?.seq).toBe(seq);
      m!.ack();
      await spy.waitFor((fr) => fr.some((x) => x.kind === "+ACK"), 5000, "the +ACK");
      expect(spy.of("+ACK", seq)).toHaveLength(1);
      expect(spy.frames[0]).toMatchObject({ stream: f.stream, consumer: f.consumer, deliveryCount: 1, streamSequence: seq });
      // A plain ACK has no reply: the consumer can record it a moment after the spy saw it (one
      // CI run read ack_floor 0 here on 2.10.27), so consumer info is read until it has.
      const info = await eventually(async () => {
        const i = await consumerInfo(f);
        return i.ack_floor.stream_seq === seq ? i : undefined;
      }, "the ack floor to reach the acked message", 5000);
      expect(info.ack_floor.stream_seq).toBe(seq);
      expect(info.num_ack_pending).toBe(0);
    } finally {
      await nc.close();
    }
  });

  it("restarts on the same port and keeps the store", async () => {
    await using srv = await startServer();
    const port = srv.port;
    let nc = await srv.connect();
    const f = await createFixture(nc);
    await publish(f, 3);
    await nc.close();
    await srv.restart();
    expect(srv.port).toBe(port);
    nc = await srv.connect();
    try {
      const jsm = await jetstreamManager(nc);
      const info = await jsm.streams.info(f.stream);
      expect(info.state.messages).toBe(3);
    } finally {
      await nc.close();
    }
  });

  it("starts a 3-node JetStream cluster that holds a stream with 3 replicas", async () => {
    await using cluster = await startCluster();
    expect(new Set(cluster.urls).size).toBe(3);
    const nc = await cluster.connect();
    try {
      const jsm = await jetstreamManager(nc);
      const name = uniqueName("R3");
      await jsm.streams.add({ name, subjects: [`${name.toLowerCase()}.>`], num_replicas: 3 });
      const js = jsm.jetstream();
      // The stream's subject interest can reach the node this client is on a moment after the
      // create returned (no responders): asked again under a message id.
      const ack = await againWhileUnanswered(() => js.publish(`${name.toLowerCase()}.x`, "hello", { msgID: `${name}-1` }), 20_000);
      expect(ack.seq).toBe(1);
      const info = await jsm.streams.info(name);
      expect(info.cluster?.leader).toBeTruthy();
      expect(info.cluster?.replicas ?? []).toHaveLength(2);
      expect(info.state.messages).toBe(1);
    } finally {
      await nc.close();
    }
  });
});
