/**
 * `heartbeat: { thread }`: plain connection data is checked at the call (unknown keys, limits,
 * no secret echoed), and `true` copies what it can from the host's connection and refuses, with
 * what to pass instead, what cannot cross a thread.
 */
import { buildAuthenticator, credsAuthenticator, nkeyAuthenticator, nkeys } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import {
  checkHeartbeatThreadOption,
  resolveThreadConnection,
  threadConnectionFrom,
  threadConnectionKey,
} from "../../../src/lease/heartbeat-thread-options.js";
import { CommitThenAck, verifyInProgressPolicy, withInProgress } from "../../../src/index.js";
import { fakeMsg } from "../../helpers/fakes.js";

const SEED = new TextDecoder().decode(nkeys.createUser().getSeed());
const SECRET = "hunter2-do-not-print-me";
const CREDS = [
  "-----BEGIN NATS USER JWT-----",
  "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.sig",
  "------END NATS USER JWT------",
  "",
  "-----BEGIN USER NKEY SEED-----",
  SEED,
  "------END USER NKEY SEED------",
  "",
].join("\n");

function message(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(TypeError);
    return (err as Error).message;
  }
  throw new Error("expected a TypeError");
}

/** A host connection as transport-node 3.x keeps it after parsing its options. */
function hostConnection(options: Record<string, unknown>, extra: Record<string, unknown> = {}): unknown {
  const parsed = { servers: ["nats://seed-1:4222"], ...options };
  return {
    options: { ...parsed, authenticator: buildAuthenticator(parsed as never) },
    getServer: () => "10.0.0.7:4222",
    info: { connect_urls: ["10.0.0.7:4222", "10.0.0.8:4222"] },
    isClosed: () => false,
    ...extra,
  };
}

describe("checkHeartbeatThreadOption", () => {
  it("passes undefined and true, and freezes connection data with servers as a list", () => {
    expect(checkHeartbeatThreadOption(undefined)).toBeUndefined();
    expect(checkHeartbeatThreadOption(true)).toBe(true);
    const c = checkHeartbeatThreadOption({ servers: "nats://127.0.0.1:4222", user: "u", pass: "p", tls: { caFile: "/ca.pem" } });
    expect(c).toEqual({ servers: ["nats://127.0.0.1:4222"], user: "u", pass: "p", tls: { caFile: "/ca.pem" } });
    expect(Object.isFrozen(c)).toBe(true);
    expect(checkHeartbeatThreadOption({ servers: ["a:4222"], creds: CREDS })).toMatchObject({ creds: CREDS });
    expect(checkHeartbeatThreadOption({ servers: ["a:4222"], nkeySeed: SEED })).toMatchObject({ nkeySeed: SEED });
  });

  it("refuses false, a function, and an authenticator, saying what to pass instead", () => {
    expect(message(() => checkHeartbeatThreadOption(false))).toMatch(/must be true or connection data .*Leave it out/);
    expect(message(() => checkHeartbeatThreadOption(() => ({})))).toMatch(/function authenticator cannot cross a thread.*creds: readFileSync/);
    const m = message(() => checkHeartbeatThreadOption({ servers: "a:4222", authenticator: nkeyAuthenticator(new TextEncoder().encode(SEED)) }));
    expect(m).toContain("heartbeat.thread.authenticator: a function authenticator cannot cross a thread");
    expect(m).toContain("{ servers, nkeySeed }");
    expect(m).not.toContain(SEED);
  });

  it("refuses unknown keys with the nearest known one", () => {
    expect(message(() => checkHeartbeatThreadOption({ server: "a:4222" }, "options.heartbeat.thread"))).toMatch(/options\.heartbeat\.thread: unknown option "server" — did you mean "servers"\?/);
    expect(message(() => checkHeartbeatThreadOption({ servers: "a:4222", tls: { ca: "-----BEGIN CERTIFICATE-----" } }))).toMatch(/heartbeat\.thread\.tls: unknown option "ca"/);
  });

  it("never echoes a secret: only its type or length", () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ servers: "a:4222", user: "u", pass: SECRET.repeat(300) }, /pass must be a non-empty string of at most 4096 characters, got a string of 6900 characters/],
      [{ servers: "a:4222", token: 42 }, /token must be .* got a number/],
      [{ servers: "a:4222", creds: `/etc/nats/${SECRET}.creds` }, /creds must be the text of a credentials file .* got a string of \d+ characters that looks like a file path: pass the file's text/],
      [{ servers: "a:4222", creds: SECRET }, /creds must be the text of a credentials file/],
      [{ servers: "a:4222", nkeySeed: `U${SECRET}` }, /nkeySeed must be a user nkey seed \(58 characters starting with SU\), got a string of 24 characters/],
      [{ servers: "a:4222", user: () => SECRET }, /user must be .* got a function \(a function cannot cross a thread\)/],
    ];
    for (const [value, expected] of cases) {
      const m = message(() => checkHeartbeatThreadOption(value));
      expect(m).toMatch(expected);
      expect(m).not.toContain(SECRET);
    }
  });

  it("checks servers, pairs and conflicts", () => {
    expect(message(() => checkHeartbeatThreadOption({ user: "u" }))).toMatch(/servers is required: for example "nats:\/\/127\.0\.0\.1:4222"/);
    expect(message(() => checkHeartbeatThreadOption({ servers: [] }))).toMatch(/servers is empty/);
    expect(message(() => checkHeartbeatThreadOption({ servers: ["a:4222", 7] }))).toMatch(/servers\[1\] must be a server URL .* got a number/);
    expect(message(() => checkHeartbeatThreadOption({ servers: Array.from({ length: 65 }, (_, i) => `n${i}:4222`) }))).toMatch(/more than 64 entries/);
    expect(message(() => checkHeartbeatThreadOption({ servers: "wss://n1:443" }))).toMatch(/WebSocket URL .* the thread connects over TCP/);
    expect(message(() => checkHeartbeatThreadOption({ servers: "a:4222", pass: "p" }))).toMatch(/pass needs heartbeat\.thread\.user/);
    expect(message(() => checkHeartbeatThreadOption({ servers: "a:4222", creds: CREDS, nkeySeed: SEED }))).toMatch(/creds and nkeySeed are two identities/);
    expect(message(() => checkHeartbeatThreadOption({ servers: "a:4222", tls: { certFile: "/c.pem" } }))).toMatch(/certFile and keyFile go together/);
  });
});

describe("threadConnectionFrom (heartbeat: { thread: true })", () => {
  it("takes the server in use first, then the given ones and the cluster's; the name gets :heartbeats", () => {
    const c = threadConnectionFrom(hostConnection({ name: "orders", user: "svc", pass: SECRET }));
    expect(c).toEqual({ servers: ["10.0.0.7:4222", "nats://seed-1:4222", "10.0.0.8:4222"], name: "orders:heartbeats", user: "svc", pass: SECRET });
    expect(threadConnectionFrom(hostConnection({ token: SECRET }))).toEqual({
      servers: ["10.0.0.7:4222", "nats://seed-1:4222", "10.0.0.8:4222"],
      name: "jetstream-inprogress:heartbeats",
      token: SECRET,
    });
    expect(threadConnectionFrom(hostConnection({ tls: { caFile: "/ca.pem", keyFile: "/k.pem", certFile: "/c.pem" } })).tls).toEqual({ caFile: "/ca.pem", keyFile: "/k.pem", certFile: "/c.pem" });
  });

  it("refuses a function authenticator with what to pass instead, and without the secret", () => {
    for (const authenticator of [nkeyAuthenticator(new TextEncoder().encode(SEED)), credsAuthenticator(new TextEncoder().encode(CREDS)), () => ({ user: "rotating", pass: SECRET })]) {
      const m = message(() => threadConnectionFrom(hostConnection({ authenticator })));
      expect(m).toMatch(/^heartbeat\.thread: true cannot copy the host's connection: it authenticates through a function \(it sends [a-z_, ]+\), and a function cannot cross a thread\. Pass the connection data instead: /);
      expect(m).toContain('heartbeat.thread: { servers: ["10.0.0.7:4222","nats://seed-1:4222","10.0.0.8:4222"], creds: readFileSync("worker.creds", "utf8") } (or nkeySeed, user and pass, or token in place of creds)');
      expect(m).not.toContain(SECRET);
      expect(m).not.toContain(SEED);
    }
  });

  it("masks credentials written into a server URL", () => {
    const host = hostConnection({ servers: [`nats://svc:${SECRET}@n1:4222`], authenticator: () => ({ nkey: "UABC" }) }, { getServer: () => "" });
    const m = message(() => threadConnectionFrom(host));
    expect(m).toContain('servers: ["nats://***@n1:4222",');
    expect(m).not.toContain(SECRET);
    expect(message(() => checkHeartbeatThreadOption({ servers: `wss://svc:${SECRET}@n1:443` }))).not.toContain(SECRET);
  });

  it("refuses credentials given as functions, TLS as certificate text, a closed connection, and an unknown object", () => {
    expect(message(() => threadConnectionFrom(hostConnection({ user: () => "u", pass: () => SECRET })))).toMatch(/its user is a function, not a string, and a function cannot cross a thread/);
    expect(message(() => threadConnectionFrom(hostConnection({ tls: { ca: "-----BEGIN CERTIFICATE-----" } })))).toMatch(/TLS options hold certificate text .*tls: \{ caFile, certFile, keyFile \} \} \(file paths\)/);
    expect(message(() => threadConnectionFrom(hostConnection({}, { isClosed: () => true })))).toMatch(/the connection is closed/);
    expect(message(() => threadConnectionFrom({}))).toMatch(/it has no options this reader knows\. Pass the connection data instead: heartbeat\.thread: \{ servers: \["nats:\/\/host:4222"\]/);
  });

  it("resolveThreadConnection: true needs the host's connection; data is checked as it is", () => {
    expect(message(() => resolveThreadConnection(true, undefined, "options.heartbeat.thread"))).toMatch(/options\.heartbeat\.thread: true derives the thread's servers from the host's connection, and none was given/);
    expect(resolveThreadConnection(undefined, undefined)).toBeUndefined();
    expect(resolveThreadConnection({ servers: "a:4222" }, undefined)).toEqual({ servers: ["a:4222"] });
    expect(resolveThreadConnection(true, hostConnection({}))?.servers[0]).toBe("10.0.0.7:4222");
  });
});

describe("threadConnectionKey", () => {
  it("is the same for the same connection in any server order, and differs for another identity", () => {
    const a = checkHeartbeatThreadOption({ servers: ["n1:4222", "n2:4222"], token: "t" }) as never;
    const b = checkHeartbeatThreadOption({ servers: ["n2:4222", "n1:4222"], token: "t" }) as never;
    const c = checkHeartbeatThreadOption({ servers: ["n2:4222", "n1:4222"], token: "u" }) as never;
    expect(threadConnectionKey(a)).toBe(threadConnectionKey(b));
    expect(threadConnectionKey(a)).not.toBe(threadConnectionKey(c));
  });
});

describe("the thread option where users write it", () => {
  const verified = verifyInProgressPolicy({ enabled: true, intervalMs: 500 }, { ackWaitMs: 2000, source: "configured" });

  it("CommitThenAck: a bad heartbeat.thread is a TypeError at construction naming the field and the fix", () => {
    expect(message(() => new CommitThenAck({ inProgress: verified, heartbeat: { thread: () => ({}) } as never }))).toMatch(/^options\.heartbeat\.thread cannot be a function: a function authenticator cannot cross a thread\. Pass true/);
    expect(message(() => new CommitThenAck({ inProgress: verified, heartbeat: { thread: { servers: "n1:4222", authenticator: () => ({}) } } as never }))).toMatch(/^options\.heartbeat\.thread\.authenticator: a function authenticator cannot cross a thread/);
    expect(message(() => new CommitThenAck({ inProgress: verified, heartbeat: { thred: true } as never }))).toMatch(/options\.heartbeat.*thred.*thread/s);
    expect(message(() => new CommitThenAck({ inProgress: verified, heartbeat: { thread: { servers: "n1:4222", pass: SECRET } } }))).toMatch(/options\.heartbeat\.thread\.pass needs options\.heartbeat\.thread\.user/);
  });

  it("CommitThenAck: true with a connection that authenticates through a function is refused at construction", () => {
    const connection = hostConnection({ authenticator: nkeyAuthenticator(new TextEncoder().encode(SEED)) }) as never;
    const m = message(() => new CommitThenAck({ inProgress: verified, heartbeat: { thread: true }, connection }));
    expect(m).toMatch(/^options\.heartbeat\.thread: true cannot copy the host's connection: it authenticates through a function/);
    expect(m).not.toContain(SEED);
    // Heartbeats off: no beat to send from any thread, nothing to copy.
    expect(() => new CommitThenAck({ heartbeat: { thread: true }, connection })).not.toThrow();
  });

  it("withInProgress: a bad thread rejects before the work starts, naming options.thread", async () => {
    let ran = false;
    const work = (): void => void (ran = true);
    await expect(withInProgress(fakeMsg(), work, verified, { thread: { servers: [] } as never })).rejects.toThrow(/^options\.thread\.servers is empty/);
    await expect(withInProgress(fakeMsg(), work, verified, { thread: "nats://n1:4222" as never })).rejects.toThrow(/^options\.thread must be true or connection data/);
    // true with nothing to copy (a fake message has no connection): what to pass instead.
    await expect(withInProgress(fakeMsg(), work, verified, { thread: true })).rejects.toThrow(/^options\.thread: true cannot copy the host's connection/);
    expect(ran).toBe(false);
    // Heartbeats off: the option is checked, and nothing else happens.
    await expect(withInProgress(fakeMsg(), () => "done", { enabled: false }, { thread: true })).resolves.toBe("done");
  });
});
