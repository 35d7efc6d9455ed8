/**
 * The JetStream facts the library rests on (docs/server-versions.md, DESIGN.md), measured on
 * the server this run uses: `npm test` on the default binary, `npm run test:servers` on every
 * version of the matrix. Frames are sent raw (`nc.publish(msg.reply, "+WPI")`), so what is
 * measured is the server, not a client's ack methods. Times come from the ack-frame spy (when
 * a frame reached the server's subscribers) and from when a pull handed a delivery over.
 * Margins are wide (the machine's cores are shared); every test says which side of a rule it
 * expects on this version, and a rule that changed between versions is in the test's name.
 */
import { describe, expect, it } from "vitest";
import { jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { CommitThenAck, ConsumerPolicyError } from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, eventually, fetchBatch, publish, uniqueName, type Fixture } from "../helpers/jetstream.js";
import { natsServerVersion } from "../helpers/nats-server.js";
import { useServer } from "../helpers/server-fixture.js";
import { NEWEST_FEATURES_SINCE, versionAtLeast } from "../helpers/server-version.js";

const VERSION = process.env["JSIP_NATS_SERVER_VERSION"] ?? natsServerVersion();
const since = (v: string) => versionAtLeast(VERSION, v);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

interface Delivery {
  readonly msg: JsMsg;
  /** performance.now() when the pull handed it over. */
  readonly at: number;
}

/** Up to `n` deliveries within `windowMs`, in one pull (no pull expires while a redelivery is due). */
async function deliveries(f: Fixture, n: number, windowMs: number): Promise<Delivery[]> {
  const consumer = await f.js.consumers.get(f.stream, f.consumer);
  const out: Delivery[] = [];
  for await (const msg of await consumer.fetch({ max_messages: n, expires: Math.max(1000, windowMs) })) out.push({ msg, at: performance.now() });
  return out;
}

/** The ack subject of a delivery (`$JS.ACK.…`): nats.js keeps it as the message's reply subject. */
function ackSubject(m: JsMsg): string {
  const reply = (m as unknown as { reply?: unknown }).reply;
  if (typeof reply !== "string") throw new Error("the client's JsMsg has no reply subject");
  return reply;
}

async function nextDelivery(f: Fixture, windowMs: number): Promise<Delivery | undefined> {
  return (await deliveries(f, 1, windowMs))[0];
}

/** A raw consumer create (the client may not know the field, or may check values itself). */
async function rawCreate(f: Fixture, config: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  const name = uniqueName("RAW");
  const reply = await f.nc.request(`$JS.API.CONSUMER.CREATE.${f.stream}.${name}`, JSON.stringify({ stream_name: f.stream, config: { durable_name: name, ack_policy: "explicit", ...config }, ...extra }));
  const body = reply.json<{ error?: { err_code: number; description: string }; config?: Record<string, unknown> }>();
  return { name, ...body };
}

describe(`JetStream facts on nats-server ${VERSION}`, { concurrent: true }, () => {
  const fx = useServer();

  it("+WPI resets the deadline to when the server processed it: the message comes back AckWait after the beat, not after its delivery", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const [first] = await deliveries(f, 1, 2000);
    await sleep(1200);
    fx.nc.publish(ackSubject(first!.msg), "+WPI");
    await spy.waitFor((fr) => fr.some((x) => x.kind === "+WPI" && x.streamSequence === seq), 5000, "the beat");
    const beat = spy.of("+WPI", seq)[0]!.at;
    const back = await nextDelivery(f, 6000);
    expect(back?.msg.info.deliveryCount).toBe(2);
    expect(back!.at - beat).toBeGreaterThan(2000 - 100);
    expect(back!.at - beat).toBeLessThan(2000 + 1500);
    expect(back!.at - first!.at).toBeGreaterThan(2000 + 900);
    back!.msg.ack();
  });

  it("+WPI is keyed by stream sequence: a beat sent for an expired delivery extends the current one", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const [old] = await deliveries(f, 1, 2000);
    const second = await nextDelivery(f, 5000);
    expect(second?.msg.info.deliveryCount).toBe(2);
    await sleep(1000);
    fx.nc.publish(ackSubject(old!.msg), "+WPI"); // delivery 1's ack subject
    await spy.waitFor((fr) => fr.some((x) => x.kind === "+WPI" && x.deliveryCount === 1), 5000, "the stale beat");
    const beat = spy.of("+WPI", seq)[0]!.at;
    const third = await nextDelivery(f, 6000);
    expect(third?.msg.info.deliveryCount).toBe(3);
    expect(third!.at - beat).toBeGreaterThan(2000 - 100);
    expect(third!.at - second!.at).toBeGreaterThan(2000 + 700);
    third!.msg.ack();
  });

  it("a +WPI sent as a request is answered whether or not the message is still pending; the ack subject has 9 tokens", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    await publish(f, 1);
    const [m] = await fetchBatch(f, 1);
    expect(ackSubject(m!).split(".")).toHaveLength(9);
    const pending = await fx.nc.request(ackSubject(m!), "+WPI", { timeout: 3000 });
    expect(pending.data).toHaveLength(0);
    expect(await m!.ackAck()).toBe(true);
    await eventually(async () => (await consumerInfo(f)).num_ack_pending === 0, "the ACK to settle");
    // Acknowledged and gone from the pending set, yet the beat is still confirmed.
    const settled = await fx.nc.request(ackSubject(m!), "+WPI", { timeout: 3000 });
    expect(settled.data).toHaveLength(0);
    expect((await consumerInfo(f)).num_ack_pending).toBe(0);
  });

  it("BackOff: delivery n waits B(n) from its delivery or its last beat, and the last step repeats past the end", async () => {
    const f = await createFixture(fx.nc, { backOffMs: [1000, 2500], maxDeliver: 5 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const [d1] = await deliveries(f, 1, 2000);
    const d2 = await nextDelivery(f, 5000);
    expect(d2?.msg.info.deliveryCount).toBe(2);
    expect(d2!.at - d1!.at).toBeGreaterThan(1000 - 100);
    expect(d2!.at - d1!.at).toBeLessThan(1000 + 1200);
    await sleep(500);
    fx.nc.publish(ackSubject(d2!.msg), "+WPI");
    await spy.waitFor((fr) => fr.some((x) => x.kind === "+WPI"), 5000, "the beat on delivery 2");
    const beat = spy.of("+WPI", seq)[0]!.at;
    // Delivery 2 is governed by BackOff[1], also after a beat (not by AckWait = BackOff[0]).
    const d3 = await nextDelivery(f, 7000);
    expect(d3?.msg.info.deliveryCount).toBe(3);
    expect(d3!.at - beat).toBeGreaterThan(2500 - 100);
    expect(d3!.at - beat).toBeLessThan(2500 + 1500);
    // Delivery 3 is past the last step: BackOff[1] again.
    const d4 = await nextDelivery(f, 7000);
    expect(d4?.msg.info.deliveryCount).toBe(4);
    expect(d4!.at - d3!.at).toBeGreaterThan(2500 - 100);
    expect(d4!.at - d3!.at).toBeLessThan(2500 + 1500);
    d4!.msg.ack();
  });

  it("NAK: bare -NAK and an unparseable delay come back at once; -NAK {\"delay\":ns} and -NAK <Go duration> wait the delay", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 15_000 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const seqs = await publish(f, 4);
    const msgs = await fetchBatch(f, 4);
    const frames = ["-NAK", `-NAK {"delay":${nanos(1500)}}`, "-NAK 1500ms", `-NAK {"delay":"5s"}`];
    msgs.forEach((m, i) => fx.nc.publish(ackSubject(m), frames[i]!));
    await spy.waitFor((fr) => fr.filter((x) => x.kind === "-NAK").length === 4, 5000, "4 NAKs");
    const sent = new Map(spy.of("-NAK").map((x) => [x.streamSequence, x.at]));
    const back = await deliveries(f, 4, 6000);
    const after = (seq: number) => {
      const d = back.find((x) => x.msg.seq === seq);
      expect(d, `seq ${seq} redelivered`).toBeDefined();
      expect(d!.msg.info.deliveryCount).toBe(2);
      return d!.at - sent.get(seq)!;
    };
    expect(after(seqs[0]!)).toBeLessThan(800);
    expect(after(seqs[1]!)).toBeGreaterThan(1500 - 100);
    expect(after(seqs[1]!)).toBeLessThan(1500 + 2000);
    expect(after(seqs[2]!)).toBeGreaterThan(1500 - 100);
    expect(after(seqs[2]!)).toBeLessThan(1500 + 2000);
    expect(after(seqs[3]!)).toBeLessThan(800);
    for (const d of back) d.msg.ack();
  });

  it("NAK with a delay under BackOff: back after delay + B(n) - BackOff[0], n the delivery NAKed", async () => {
    const f = await createFixture(fx.nc, { backOffMs: [1000, 3000], maxDeliver: 5 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const [d1] = await deliveries(f, 1, 2000);
    fx.nc.publish(ackSubject(d1!.msg), `-NAK {"delay":${nanos(500)}}`);
    await spy.waitFor((fr) => fr.some((x) => x.kind === "-NAK"), 5000, "the NAK of delivery 1");
    const d2 = await nextDelivery(f, 5000);
    expect(d2?.msg.info.deliveryCount).toBe(2);
    const nak1 = spy.of("-NAK", seq)[0]!.at;
    expect(d2!.at - nak1).toBeGreaterThan(500 - 100);
    expect(d2!.at - nak1).toBeLessThan(500 + 1200);
    fx.nc.publish(ackSubject(d2!.msg), `-NAK {"delay":${nanos(500)}}`);
    await spy.waitFor((fr) => fr.filter((x) => x.kind === "-NAK").length === 2, 5000, "the NAK of delivery 2");
    const d3 = await nextDelivery(f, 7000);
    expect(d3?.msg.info.deliveryCount).toBe(3);
    const nak2 = spy.of("-NAK", seq)[1]!.at;
    // 500 + 3000 - 1000: the step of delivery 2 stretches the delay.
    expect(d3!.at - nak2).toBeGreaterThan(2500 - 100);
    expect(d3!.at - nak2).toBeLessThan(2500 + 1500);
    d3!.msg.ack();
  });

  it("a +WPI after a delayed NAK wipes the delay: back AckWait after the beat", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const [m] = await fetchBatch(f, 1);
    fx.nc.publish(ackSubject(m!), `-NAK {"delay":${nanos(10_000)}}`);
    await sleep(200);
    fx.nc.publish(ackSubject(m!), "+WPI");
    await spy.waitFor((fr) => fr.some((x) => x.kind === "+WPI"), 5000, "the beat");
    const beat = spy.of("+WPI", seq)[0]!.at;
    const back = await nextDelivery(f, 8000);
    expect(back?.msg.info.deliveryCount).toBe(2);
    expect(back!.at - beat).toBeGreaterThan(2000 - 100);
    expect(back!.at - beat).toBeLessThan(2000 + 2000);
    back!.msg.ack();
  });

  it("a late +ACK from an expired delivery settles the message: no further delivery", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1500 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const [old] = await deliveries(f, 1, 2000);
    const second = await nextDelivery(f, 5000);
    expect(second?.msg.info.deliveryCount).toBe(2);
    fx.nc.publish(ackSubject(old!.msg), "+ACK");
    await spy.waitFor((fr) => fr.some((x) => x.kind === "+ACK" && x.deliveryCount === 1), 5000, "the late ACK");
    await eventually(async () => (await consumerInfo(f)).num_ack_pending === 0, "the late ACK to settle the message");
    // Past delivery 2's deadline: nothing comes back.
    expect(await nextDelivery(f, 3000)).toBeUndefined();
    expect(spy.forSequence(seq!).map((x) => `${x.kind}@${x.deliveryCount}`)).toEqual(["+ACK@1"]);
  });

  it("MaxDeliver: a message NAKed or left on its last allowed delivery is never delivered again; the server says MAX_DELIVERIES and drops it from the pending count at the next pull", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1000, maxDeliver: 2 });
    const advisories: number[] = [];
    const sub = fx.spyConn.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${f.stream}.${f.consumer}`, {
      callback: (err, msg) => {
        if (!err) advisories.push(msg.json<{ stream_seq: number }>().stream_seq);
      },
    });
    await fx.spyConn.flush();
    try {
      const [a, b] = await publish(f, 2);
      expect(await deliveries(f, 2, 2000)).toHaveLength(2);
      const last = await deliveries(f, 2, 5000);
      expect(last.map((d) => d.msg.info.deliveryCount)).toEqual([2, 2]);
      // a: NAKed on its last delivery (a retry that never comes); b: left to expire.
      fx.nc.publish(ackSubject(last.find((d) => d.msg.seq === a)!.msg), "-NAK");
      await sleep(1500);
      // Without a waiting pull both still count as pending.
      expect((await consumerInfo(f)).num_ack_pending).toBe(2);
      expect(await deliveries(f, 2, 3000)).toEqual([]);
      const info = await consumerInfo(f);
      expect(info.num_ack_pending).toBe(0);
      expect(info.num_redelivered).toBe(2);
      await eventually(() => advisories.length === 2, "two MAX_DELIVERIES advisories", 5000);
      expect([...advisories].sort((x, y) => x - y)).toEqual([a, b]);
    } finally {
      sub.unsubscribe();
    }
  });

  it(`+TERM <reason> is honoured with the reason in the advisory from 2.10.4, ignored (yet answered) before: on ${VERSION} ${since("2.10.4") ? "honoured" : "ignored"}`, async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1500 });
    const reasons: (string | undefined)[] = [];
    const sub = fx.spyConn.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.${f.stream}.${f.consumer}`, {
      callback: (err, msg) => {
        if (!err) reasons.push(msg.json<{ reason?: string }>().reason);
      },
    });
    await fx.spyConn.flush();
    try {
      await publish(f, 1);
      const [m] = await fetchBatch(f, 1);
      // Answered on every version: a confirmed +TERM <reason> looks successful even where it is dropped.
      const reply = await fx.nc.request(ackSubject(m!), "+TERM bad row", { timeout: 3000 });
      expect(reply.data).toHaveLength(0);
      const again = await nextDelivery(f, 3500);
      if (since("2.10.4")) {
        expect(again).toBeUndefined();
        await eventually(() => reasons.length === 1, "the terminated advisory", 5000);
        expect(reasons).toEqual(["bad row"]);
        expect((await consumerInfo(f)).num_ack_pending).toBe(0);
      } else {
        expect(again?.msg.info.deliveryCount).toBe(2);
        expect(reasons).toEqual([]);
        // What the library sends there instead: a bare +TERM, which works.
        fx.nc.publish(ackSubject(again!.msg), "+TERM");
        await eventually(() => reasons.length === 1, "the terminated advisory", 5000);
        expect(reasons).toEqual([undefined]);
        expect(await nextDelivery(f, 2500)).toBeUndefined();
      }
    } finally {
      sub.unsubscribe();
    }
  });

  it(`MaxDeliver with BackOff [1 s, 2 s]: must be > 2 before 2.10.14, may be unlimited from 2.10.14, may be 2 from 2.10.23 — on ${VERSION} the server and CommitThenAck.forConsumer agree`, async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1000 });
    const expected = {
      unlimited: since("2.10.14"),
      equal: since("2.10.23"),
      greater: true,
    };
    const cases = { unlimited: -1, equal: 2, greater: 3 } as const;
    for (const [label, max_deliver] of Object.entries(cases) as [keyof typeof cases, number][]) {
      const created = await rawCreate(f, { backoff: [nanos(1000), nanos(2000)], max_deliver });
      expect(created.error === undefined, `${label}: ${created.error?.description ?? "created"}`).toBe(expected[label]);
      if (created.error) {
        expect(created.error.err_code).toBe(10116);
        continue;
      }
      // The library binds to exactly what the server accepts.
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, created.name, { backOff: "aware", connection: fx.nc });
      expect(ack).toBeInstanceOf(CommitThenAck);
    }
    // What the library decides for a consumer it is shown but this server would refuse, from a
    // consumer info read on a server with the laxest rule (an upgrade in a mixed cluster).
    const info = await f.jsm.consumers.info(f.stream, (await rawCreate(f, { backoff: [nanos(1000), nanos(2000)], max_deliver: 3 })).name);
    for (const [label, max_deliver] of Object.entries(cases) as [keyof typeof cases, number][]) {
      const shown = { ...info, config: { ...info.config, max_deliver } };
      const jsm = { consumers: { info: async () => shown } } as unknown as typeof f.jsm;
      const result = await CommitThenAck.forConsumer(jsm, f.stream, info.name, { backOff: "aware", connection: fx.nc }).then(
        () => "accepted",
        (e: unknown) => (e instanceof ConsumerPolicyError ? e.reason : String(e)),
      );
      expect(result, label).toBe(expected[label] ? "accepted" : "max_deliver_backoff");
    }
  });

  it(`pedantic create with ack_wait ≠ BackOff[0]: refused from 2.11.0, accepted with AckWait overwritten before — on ${VERSION} ${since("2.11.0") ? "refused" : "overwritten"}`, async () => {
    const f = await createFixture(fx.nc);
    const config = { ack_wait: nanos(30_000), backoff: [nanos(1000), nanos(2000)], max_deliver: 5 };
    const pedantic = await rawCreate(f, config, { pedantic: true });
    if (since("2.11.0")) {
      expect(pedantic.error?.err_code).toBe(10157);
      expect(pedantic.error?.description).toContain("pedantic");
    } else {
      expect(pedantic.error).toBeUndefined();
      expect(pedantic.config?.["ack_wait"]).toBe(nanos(1000));
    }
    // Without pedantic, every version overwrites AckWait with BackOff[0].
    const plain = await rawCreate(f, config);
    expect(plain.config?.["ack_wait"]).toBe(nanos(1000));
  });

  it(`negative AckWait and BackOff steps: refused from 2.12.0, accepted before — on ${VERSION} ${since("2.12.0") ? "refused" : "accepted"}`, async () => {
    const f = await createFixture(fx.nc);
    const ackWait = await rawCreate(f, { ack_wait: -nanos(1000) });
    const backoff = await rawCreate(f, { backoff: [-nanos(1000), nanos(2000)], max_deliver: 5 });
    if (since("2.12.0")) {
      expect(ackWait.error?.description).toMatch(/ack wait needs to be positive/);
      expect(backoff.error?.description).toMatch(/backoff needs to be positive/);
    } else {
      expect(ackWait.error).toBeUndefined();
      expect(backoff.error).toBeUndefined();
      expect(backoff.config?.["ack_wait"]).toBe(-nanos(1000));
    }
  });

  it(`consumer pause and priority groups exist from ${NEWEST_FEATURES_SINCE}: on ${VERSION} ${since(NEWEST_FEATURES_SINCE) ? "understood" : "priority groups dropped from the config, the pause request unanswered"}`, async () => {
    const f = await createFixture(fx.nc);
    const created = await rawCreate(f, { priority_groups: ["g"], priority_policy: "pinned_client", priority_timeout: nanos(5000) });
    expect(created.error).toBeUndefined();
    const jsm = await jetstreamManager(fx.nc, { timeout: 1500 });
    const pause = await jsm.consumers.pause(f.stream, f.consumer, new Date(Date.now() + 60_000)).then(
      (r) => r.paused,
      (e: unknown) => (e as Error).name,
    );
    if (since(NEWEST_FEATURES_SINCE)) {
      expect(created.config?.["priority_groups"]).toEqual(["g"]);
      expect(created.config?.["priority_policy"]).toBe("pinned_client");
      expect(pause).toBe(true);
      expect((await consumerInfo(f)).paused).toBe(true);
    } else {
      expect(created.config?.["priority_groups"]).toBeUndefined();
      expect(pause).toBe("TimeoutError");
      expect((await consumerInfo(f)).paused).toBeUndefined();
    }
  });

  it("pull requests end by themselves: a sub-second expiry ends with 408 after about that long (the server takes any expiry; nats.js refuses under 1 s); no_wait answers at once, 404 when nothing is pending", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    const seen: Array<{ code: number | undefined; description: string | undefined; at: number; data: string }> = [];
    const inbox = `_INBOX.PULLFACTS.${uniqueName("I")}`;
    const sub = fx.nc.subscribe(inbox, {
      callback: (_e, m) => void seen.push({ code: m.headers?.code, description: m.headers?.description, at: performance.now(), data: m.string() }),
    });
    try {
      const next = `$JS.API.CONSUMER.MSG.NEXT.${f.stream}.${f.consumer}`;
      let t0 = performance.now();
      fx.nc.publish(next, JSON.stringify({ batch: 5, expires: nanos(300) }), { reply: inbox });
      await eventually(() => seen.length === 1, "the pull to end");
      expect(seen[0]).toMatchObject({ code: 408 });
      expect(seen[0]!.at - t0).toBeGreaterThanOrEqual(250);
      expect(seen[0]!.at - t0).toBeLessThan(1500);

      seen.length = 0;
      t0 = performance.now();
      fx.nc.publish(next, JSON.stringify({ batch: 5, no_wait: true }), { reply: inbox });
      await eventually(() => seen.length === 1, "the no_wait answer");
      expect(seen[0]).toMatchObject({ code: 404 });
      expect(seen[0]!.at - t0).toBeLessThan(250);

      // With two messages pending, a no_wait pull for five hands over both and ends at once.
      await publish(f, 2);
      seen.length = 0;
      fx.nc.publish(next, JSON.stringify({ batch: 5, no_wait: true }), { reply: inbox });
      await eventually(() => seen.length === 3, "two messages and the end of the pull");
      expect(seen.slice(0, 2).map((x) => x.code)).toEqual([undefined, undefined]);
      expect([404, 408]).toContain(seen[2]!.code);
    } finally {
      sub.unsubscribe();
    }
    // The client keeps its own floor (nats 2.x throws at once, 3.x rejects).
    const consumer = await f.js.consumers.get(f.stream, f.consumer);
    await expect(Promise.resolve().then(() => consumer.fetch({ max_messages: 1, expires: 500 }))).rejects.toThrow(/expires/);
  });
});
