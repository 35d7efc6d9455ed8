/**
 * Facts that need nats-server 2.11 or newer (consumer pause, priority groups), measured on a
 * server of at least that version even inside plain `npm test`: the default binary when it is
 * new enough, else the newest in .cache/nats-server (scripts/fetch-nats-servers.sh). Without
 * one, the same tests assert what the old server does instead, and the run says so in one line
 * (test/helpers/global-setup.ts).
 */
import { describe, expect, it } from "vitest";
import { jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { createInbox, nanos, type NatsConnection } from "@nats-io/transport-node";
import { consumerInfo, createFixture, eventually, fetchBatch, publish, uniqueName } from "../helpers/jetstream.js";
import { natsServerVersion, serverAtLeast } from "../helpers/nats-server.js";
import { useServer } from "../helpers/server-fixture.js";
import { NEWEST_FEATURES_SINCE } from "../helpers/server-version.js";

const newest = serverAtLeast(NEWEST_FEATURES_SINCE);
const VERSION = newest?.version ?? natsServerVersion();

/**
 * A raw pull request (`$JS.API.CONSUMER.MSG.NEXT`), so the server's answer is seen as sent. A
 * plain subscription, not nc.request: a delivered message arrives under its own subject, which
 * the client's request muxer would not match.
 */
async function rawPull(nc: NatsConnection, stream: string, consumer: string, body: Record<string, unknown>) {
  const inbox = createInbox();
  const sub = nc.subscribe(inbox, { max: 1, timeout: 5000 });
  nc.publish(`$JS.API.CONSUMER.MSG.NEXT.${stream}.${consumer}`, JSON.stringify({ batch: 1, expires: nanos(1000), ...body }), { reply: inbox });
  for await (const m of sub) {
    return { code: m.headers?.code ?? 0, description: m.headers?.description ?? "", pin: m.headers?.get("Nats-Pin-Id") ?? "", data: m.string() };
  }
  throw new Error("no answer to the pull request");
}

/** A consumer created through the API directly (the client refuses priority groups on an old server itself). */
async function createPinned(nc: NatsConnection, stream: string): Promise<{ name: string; config: Record<string, unknown> }> {
  const name = uniqueName("PIN");
  const config = { durable_name: name, ack_policy: "explicit", ack_wait: nanos(30_000), priority_groups: ["jobs"], priority_policy: "pinned_client", priority_timeout: nanos(5000) };
  const reply = await nc.request(`$JS.API.CONSUMER.CREATE.${stream}.${name}`, JSON.stringify({ stream_name: stream, config }));
  const body = reply.json<{ error?: { description: string }; config: Record<string, unknown> }>();
  if (body.error) throw new Error(body.error.description);
  return { name, config: body.config };
}

describe(
  newest ? `nats-server ${VERSION} (${NEWEST_FEATURES_SINCE}+): priority groups and consumer pause` : `no nats-server ${NEWEST_FEATURES_SINCE}+ here: what ${VERSION} does with priority groups and consumer pause`,
  () => {
    const fx = useServer(newest ? { minVersion: NEWEST_FEATURES_SINCE } : {});

    it("the server runs the version chosen for this file", () => {
      expect(fx.srv.version).toBe(VERSION);
      expect(fx.nc.info?.version).toBe(VERSION);
    });

    it(
      newest
        ? "a consumer with priority groups and pinned_client is accepted; a pull without a group fails with the server's priority group error; a pull with the group is pinned"
        : "priority groups are dropped from the consumer config and a pull without a group is served",
      async () => {
        const base = await createFixture(fx.nc);
        const { name, config } = await createPinned(fx.nc, base.stream);
        const f = { ...base, consumer: name };
        await publish(f, 1);
        const noGroup = await rawPull(fx.nc, f.stream, name, {});
        if (newest) {
          expect(config["priority_groups"]).toEqual(["jobs"]);
          expect(config["priority_policy"]).toBe("pinned_client");
          expect(noGroup.code).toBe(400);
          expect(noGroup.description).toMatch(/priority group/i);
          // The client relays the same refusal.
          const viaClient = await fetchBatch(f, 1, 1000).then(() => "served", (e: unknown) => (e as Error).message);
          expect(viaClient).toMatch(/priority group/i);
          const withGroup = await rawPull(fx.nc, f.stream, name, { group: "jobs" });
          expect(withGroup.data).toBe("msg-1");
          expect(withGroup.pin).not.toBe("");
        } else {
          expect(config["priority_groups"]).toBeUndefined();
          expect(noGroup.data).toBe("msg-1");
        }
      },
    );

    it(
      newest
        ? "consumers.pause() reports paused in consumer info; while paused acks are still processed and nothing is delivered; resume delivers"
        : "the pause request goes unanswered and the consumer keeps delivering",
      async () => {
        const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
        await publish(f, 2);
        const [first] = await fetchBatch(f, 1);
        const until = new Date(Date.now() + 60_000);
        // Old servers never answer the pause request: a short timeout keeps the test quick.
        const jsm = newest ? f.jsm : await jetstreamManager(fx.nc, { timeout: 1500 });
        const paused = await jsm.consumers.pause(f.stream, f.consumer, until).then((r) => r, (e: unknown) => e as Error);
        if (!newest) {
          expect((paused as Error).name).toBe("TimeoutError");
          expect((await consumerInfo(f)).paused).toBeUndefined();
          expect(await fetchBatch(f, 1)).toHaveLength(1);
          return;
        }
        expect(paused).toMatchObject({ paused: true });
        const info = await consumerInfo(f);
        expect(info.paused).toBe(true);
        expect(new Date(info.config.pause_until!).getTime()).toBe(until.getTime());
        // A beat and the ACK of the message delivered before the pause are still processed.
        const beat = await fx.nc.request((first as JsMsg & { reply: string }).reply, "+WPI", { timeout: 3000 });
        expect(beat.data).toHaveLength(0);
        expect(await first!.ackAck()).toBe(true);
        await eventually(async () => (await consumerInfo(f)).num_ack_pending === 0, "the ACK while paused");
        // The second message waits.
        expect(await fetchBatch(f, 1, 1500)).toHaveLength(0);
        expect((await consumerInfo(f)).num_pending).toBe(1);
        const resumed = await f.jsm.consumers.resume(f.stream, f.consumer);
        expect(resumed.paused).toBe(false);
        const [second] = await fetchBatch(f, 1, 3000);
        expect(second?.string()).toBe("msg-2");
        second!.ack();
      },
    );
  },
);
