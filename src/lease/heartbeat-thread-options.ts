/**
 * The `heartbeat: { thread }` option: `true` (derive the connection from the host's), or plain
 * connection data for the heartbeat thread's own connection. Only strings cross a thread, so a
 * function authenticator is refused here, at the call, with what to pass instead.
 */
import { hostConnectionSettings } from "../nats/connection-settings.js";
import { readOptionKeys } from "../policy/option-keys.js";
import { truncate } from "../policy/untrusted.js";

/**
 * The heartbeat thread's own connection, as plain data (it is copied to a worker thread, so
 * nothing in it may be a function). Give the same servers and identity the host's connection
 * uses; the thread publishes `+WPI` to the messages' reply subjects and, for confirmed beats,
 * subscribes to an inbox.
 *
 * @example
 * ```ts
 * const thread: HeartbeatThreadConnection = {
 *   servers: ["nats://n1:4222", "nats://n2:4222"],
 *   creds: readFileSync("/etc/nats/worker.creds", "utf8"),
 * };
 * ```
 */
export interface HeartbeatThreadConnection {
  /**
   * The servers to connect to: one URL or `host:port`, or a list (at most 64).
   *
   * @example
   * ```ts
   * const servers = ["nats://n1:4222", "nats://n2:4222"];
   * ```
   */
  readonly servers: string | readonly string[];
  /**
   * The connection's name, as the server's monitoring shows it (default: the host
   * connection's name with `:heartbeats` appended, or `jetstream-inprogress:heartbeats`).
   *
   * @example
   * ```ts
   * const name = "orders-worker:heartbeats";
   * ```
   */
  readonly name?: string;
  /**
   * User name, with {@link pass}.
   *
   * @example
   * ```ts
   * const user = "orders";
   * ```
   */
  readonly user?: string;
  /**
   * Password of {@link user}.
   *
   * @example
   * ```ts
   * const pass = process.env.NATS_PASS!;
   * ```
   */
  readonly pass?: string;
  /**
   * An authentication token.
   *
   * @example
   * ```ts
   * const token = process.env.NATS_TOKEN!;
   * ```
   */
  readonly token?: string;
  /**
   * The TEXT of a credentials (`.creds`) file: the user JWT and its nkey seed. Not its path.
   *
   * @example
   * ```ts
   * const creds = readFileSync("/etc/nats/worker.creds", "utf8");
   * ```
   */
  readonly creds?: string;
  /**
   * A user nkey seed (58 characters, starting with `SU`).
   *
   * @example
   * ```ts
   * const nkeySeed = readFileSync("/etc/nats/worker.nk", "utf8").trim();
   * ```
   */
  readonly nkeySeed?: string;
  /**
   * TLS from files (paths the thread reads itself). `{}` asks for TLS with the system's
   * certificate authorities.
   *
   * @example
   * ```ts
   * const tls = { caFile: "/etc/nats/ca.pem", certFile: "/etc/nats/client.pem", keyFile: "/etc/nats/client.key" };
   * ```
   */
  readonly tls?: {
    /** Certificate authorities, PEM file path. @example `"/etc/nats/ca.pem"` */
    readonly caFile?: string;
    /** Client certificate, PEM file path (with `keyFile`). @example `"/etc/nats/client.pem"` */
    readonly certFile?: string;
    /** Client key, PEM file path (with `certFile`). @example `"/etc/nats/client.key"` */
    readonly keyFile?: string;
  };
}

/**
 * `heartbeat: { thread }`: `true` derives the thread's connection from the host's (servers, name,
 * user and password or token when they are plain strings); otherwise plain connection data.
 *
 * @example
 * ```ts
 * const fromHost: HeartbeatThreadOption = true;
 * const own: HeartbeatThreadOption = { servers: "nats://127.0.0.1:4222", token: process.env.NATS_TOKEN! };
 * ```
 */
export type HeartbeatThreadOption = true | HeartbeatThreadConnection;

/**
 * A checked connection: frozen, servers always a list.
 *
 * @example
 * ```ts
 * const c: CheckedThreadConnection = checkHeartbeatThreadOption({ servers: "n1:4222" }) as CheckedThreadConnection;
 * ```
 */
export interface CheckedThreadConnection extends HeartbeatThreadConnection {
  readonly servers: readonly string[];
}

const KNOWN = ["servers", "name", "user", "pass", "token", "creds", "nkeySeed", "tls"] as const;
const TLS_KNOWN = ["caFile", "certFile", "keyFile"] as const;
const MAX_SERVERS = 64;
const MAX_URL = 1024;
const MAX_NAME = 256;
const MAX_SECRET = 4096;
const MAX_CREDS = 65_536;
const MAX_PATH = 4096;
const SEED_LENGTH = 58;

const WHAT_TO_PASS =
  '{ servers, creds: readFileSync("worker.creds", "utf8") } for a credentials file, { servers, nkeySeed } for an nkey, ' +
  "{ servers, user, pass } or { servers, token }";

/** A server URL for a message: credentials in it (`nats://user:pass@host`) are masked. */
function safeUrl(url: string): string {
  return truncate(url.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^@/]*@/i, "$1***@"));
}

/** A value described without echoing it (for fields that may hold secrets). */
function describe(value: unknown): string {
  if (typeof value === "string") return `a string of ${value.length} characters`;
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "function" ? "a function (a function cannot cross a thread)" : `a ${typeof value}`;
}

function text(where: string, key: string, value: unknown, max: number, secret: boolean, fix: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value === "string" && value !== "" && value.length <= max) return value;
  const got = secret || typeof value !== "string" ? describe(value) : JSON.stringify(truncate(value));
  throw new TypeError(`${where}.${key} must be a non-empty string of at most ${max} characters, got ${got}: ${fix}`);
}

/**
 * Checks a `heartbeat: { thread }` value: `undefined` (no thread), `true`, or plain connection
 * data. Unknown keys are refused with the nearest known one; secrets (password, token,
 * credentials, seed) are never echoed, only their length.
 *
 * @param where - how the caller names the option, for example `options.heartbeat.thread`.
 * @returns `undefined`, `true`, or a frozen copy with `servers` as a list.
 * @throws TypeError naming the field, what it got, the limit and the fix.
 *
 * @example
 * ```ts
 * const thread = checkHeartbeatThreadOption(options.heartbeat?.thread, "options.heartbeat.thread");
 * ```
 */
export function checkHeartbeatThreadOption(value: unknown, where = "heartbeat.thread"): true | CheckedThreadConnection | undefined {
  if (value === undefined || value === true) return value;
  // Checked before (a derived connection handed on per batch): frozen, nothing to read again.
  if (CHECKED.has(value as object)) return value as CheckedThreadConnection;
  if (typeof value === "function") {
    throw new TypeError(`${where} cannot be a function: a function authenticator cannot cross a thread. Pass true (derive from the host's connection) or plain connection data: ${WHAT_TO_PASS}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError(`${where} must be true or connection data such as ${WHAT_TO_PASS}; got ${describe(value)}. Leave it out for beats from the main thread`);
  }
  let hasAuthenticator = false;
  try {
    hasAuthenticator = Object.prototype.hasOwnProperty.call(value, "authenticator");
  } catch {
    // readOptionKeys reports an unreadable object
  }
  if (hasAuthenticator) {
    throw new TypeError(`${where}.authenticator: a function authenticator cannot cross a thread. Pass the plain data it is built from instead: ${WHAT_TO_PASS}`);
  }
  const o = readOptionKeys(where, value, KNOWN);

  const servers = checkServers(where, o["servers"]);
  const name = text(where, "name", o["name"], MAX_NAME, false, 'use a short label such as "orders-worker:heartbeats"');
  const user = text(where, "user", o["user"], MAX_SECRET, true, "pass the user name itself");
  const pass = text(where, "pass", o["pass"], MAX_SECRET, true, "pass the password itself");
  const token = text(where, "token", o["token"], MAX_SECRET, true, "pass the token itself");
  if (pass !== undefined && user === undefined) throw new TypeError(`${where}.pass needs ${where}.user: pass both, or use token`);
  const creds = checkCreds(where, o["creds"]);
  const nkeySeed = checkSeed(where, o["nkeySeed"]);
  if (creds !== undefined && nkeySeed !== undefined) {
    throw new TypeError(`${where}: creds and nkeySeed are two identities; pass one (a credentials file already holds its seed)`);
  }
  const tls = checkTls(where, o["tls"]);
  return remember({
    servers,
    ...(name !== undefined ? { name } : {}),
    ...(user !== undefined ? { user } : {}),
    ...(pass !== undefined ? { pass } : {}),
    ...(token !== undefined ? { token } : {}),
    ...(creds !== undefined ? { creds } : {}),
    ...(nkeySeed !== undefined ? { nkeySeed } : {}),
    ...(tls !== undefined ? { tls } : {}),
  });
}

/** Connection data this module produced (frozen): passed again, it needs no second check. */
const CHECKED = new WeakSet<object>();

function remember(c: CheckedThreadConnection): CheckedThreadConnection {
  const frozen = Object.freeze(c);
  CHECKED.add(frozen);
  return frozen;
}

function checkServers(where: string, value: unknown): readonly string[] {
  const fix = 'for example "nats://127.0.0.1:4222" or ["nats://n1:4222", "nats://n2:4222"]';
  if (value === undefined) throw new TypeError(`${where}.servers is required: ${fix}`);
  const list: unknown[] = typeof value === "string" ? [value] : Array.isArray(value) ? [...(value as unknown[]).slice(0, MAX_SERVERS + 1)] : [];
  if (typeof value !== "string" && !Array.isArray(value)) throw new TypeError(`${where}.servers must be a string or a list of strings, got ${describe(value)}: ${fix}`);
  if (list.length === 0) throw new TypeError(`${where}.servers is empty: ${fix}`);
  if (list.length > MAX_SERVERS) throw new TypeError(`${where}.servers has more than ${MAX_SERVERS} entries: list the cluster's seed servers only`);
  list.forEach((s, i) => {
    const at = typeof value === "string" ? "servers" : `servers[${i}]`;
    if (typeof s !== "string" || s === "" || s.length > MAX_URL) {
      const got = typeof s === "string" ? `a string of ${s.length} characters` : describe(s);
      throw new TypeError(`${where}.${at} must be a server URL of at most ${MAX_URL} characters, got ${got}: ${fix}`);
    }
    if (/^wss?:\/\//i.test(s)) throw new TypeError(`${where}.${at} is a WebSocket URL (${JSON.stringify(safeUrl(s))}): the thread connects over TCP; use the server's client port (nats://host:4222)`);
  });
  return Object.freeze(list as string[]);
}

function checkCreds(where: string, value: unknown): string | undefined {
  const fix = 'pass the file\'s text: readFileSync("worker.creds", "utf8")';
  const creds = text(where, "creds", value, MAX_CREDS, true, fix);
  if (creds === undefined) return undefined;
  // A credentials file is two dash-delimited blocks (the JWT, then the seed).
  const markers = creds.match(/-{3,}[^\n]*-{3,}/g)?.length ?? 0;
  if (markers < 4) {
    const looksLikePath = !creds.includes("\n") && (/\.creds\s*$/i.test(creds) || creds.startsWith("/") || creds.startsWith("."));
    throw new TypeError(
      `${where}.creds must be the text of a credentials file (a JWT block and a seed block), got ${describe(creds)}` +
        `${looksLikePath ? " that looks like a file path" : ""}: ${fix}`,
    );
  }
  return creds;
}

function checkSeed(where: string, value: unknown): string | undefined {
  const seed = text(where, "nkeySeed", value, MAX_SECRET, true, "pass a user nkey seed (58 characters starting with SU)");
  if (seed === undefined) return undefined;
  if (seed.length !== SEED_LENGTH || !seed.startsWith("SU")) {
    throw new TypeError(`${where}.nkeySeed must be a user nkey seed (${SEED_LENGTH} characters starting with SU), got ${describe(seed)}: pass the seed, not the public key (U…) or a file path`);
  }
  return seed;
}

function checkTls(where: string, value: unknown): CheckedThreadConnection["tls"] {
  if (value === undefined) return undefined;
  const o = readOptionKeys(`${where}.tls`, value, TLS_KNOWN);
  const out: { caFile?: string; certFile?: string; keyFile?: string } = {};
  for (const key of TLS_KNOWN) {
    const path = text(`${where}.tls`, key, o[key], MAX_PATH, false, "pass a PEM file path the thread can read");
    if (path !== undefined) out[key] = path;
  }
  if ((out.certFile === undefined) !== (out.keyFile === undefined)) {
    throw new TypeError(`${where}.tls: certFile and keyFile go together (a client certificate and its key); pass both or neither`);
  }
  return Object.freeze(out);
}

/**
 * The thread's connection for `heartbeat: { thread: true }`: the host connection's servers
 * (the one it is connected to first, then the ones it was given, then its cluster's), its name
 * with `:heartbeats` appended, and user and password or token when they are plain strings.
 *
 * @throws TypeError when the host connection cannot be copied (a function authenticator,
 *   credentials given as functions, TLS as certificate text, a WebSocket connection), saying
 *   what to pass instead.
 *
 * @example
 * ```ts
 * const nc = await connect({ servers: "nats://n1:4222", user: "svc", pass });
 * const thread = HeartbeatThread.acquire(threadConnectionFrom(nc)); // { servers, name: "…:heartbeats", user, pass }
 * ```
 */
export function threadConnectionFrom(nc: unknown, where = "heartbeat.thread"): CheckedThreadConnection {
  const reading = hostConnectionSettings(nc);
  if (!reading.ok) {
    const servers = JSON.stringify((reading.servers ?? ["nats://host:4222"]).map(safeUrl));
    const fix =
      reading.reason === "tls_not_files" ? `${where}: { servers: ${servers}, tls: { caFile, certFile, keyFile } } (file paths), with its credentials`
      : reading.reason === "websocket" ? `${where}: { servers: ["nats://host:4222"] } with the servers' client (TCP) port, and its credentials`
      : reading.reason === "closed" ? "connection data, or acquire the thread while the host's connection is open"
      : `${where}: { servers: ${servers}, creds: readFileSync("worker.creds", "utf8") } (or nkeySeed, user and pass, or token in place of creds)`;
    const cannotCross = reading.reason === "function_authenticator" || reading.reason === "function_credential" ? ", and a function cannot cross a thread" : "";
    throw new TypeError(`${where}: true cannot copy the host's connection: ${reading.detail}${cannotCross}. Pass the connection data instead: ${fix}`);
  }
  const s = reading.settings;
  return checkHeartbeatThreadOption(
    {
      servers: [...s.servers],
      name: `${s.name ?? "jetstream-inprogress"}:heartbeats`.slice(0, MAX_NAME),
      ...(s.user !== undefined ? { user: s.user } : {}),
      ...(s.pass !== undefined && s.user !== undefined ? { pass: s.pass } : {}),
      ...(s.token !== undefined ? { token: s.token } : {}),
      ...(s.tls !== undefined ? { tls: { ...s.tls } } : {}),
    },
    where,
  ) as CheckedThreadConnection;
}

/**
 * The thread's connection for an option value: `true` derives it from `nc` (the host's
 * connection), anything else is checked as connection data.
 *
 * @throws TypeError for a bad value, or `true` without a connection to derive from.
 *
 * @example
 * ```ts
 * const connection = resolveThreadConnection(options.heartbeat?.thread, options.connection, "options.heartbeat.thread");
 * ```
 */
export function resolveThreadConnection(option: unknown, nc: unknown, where = "heartbeat.thread"): CheckedThreadConnection | undefined {
  const checked = checkHeartbeatThreadOption(option, where);
  if (checked !== true) return checked;
  if (nc === undefined || nc === null) {
    throw new TypeError(`${where}: true derives the thread's servers from the host's connection, and none was given: pass the connection, or connection data such as ${WHAT_TO_PASS}`);
  }
  return threadConnectionFrom(nc, where);
}

/** Derived connections by the host connection they came from (or why it cannot be copied). */
const derived = new WeakMap<object, CheckedThreadConnection | TypeError>();

/**
 * The thread's connection for a checked option: connection data as it is; `true` derived from
 * the first of `sources` that is an object (the host's connection, or the connection a message
 * arrived on), once per source.
 *
 * @throws TypeError when `true` finds no source, or the source cannot be copied.
 */
export function threadConnectionFor(option: true | CheckedThreadConnection | undefined, sources: readonly unknown[], where: string): CheckedThreadConnection | undefined {
  if (option !== true) return option;
  const source = sources.find((x): x is object => typeof x === "object" && x !== null);
  if (source === undefined) {
    throw new TypeError(`${where}: true derives the thread's servers from the host's connection, and none was given: pass the connection, or connection data such as ${WHAT_TO_PASS}`);
  }
  let c = derived.get(source);
  if (c === undefined) {
    try {
      c = threadConnectionFrom(source, where);
    } catch (err) {
      c = err instanceof TypeError ? err : new TypeError(`${where}: true cannot copy the host's connection`, { cause: err });
    }
    derived.set(source, c);
  }
  if (c instanceof TypeError) throw c;
  return c;
}

/**
 * One key per distinct connection (servers in any order): instances asking for the same
 * connection share one thread. Holds secrets: keep it in memory, never print it.
 */
export function threadConnectionKey(c: CheckedThreadConnection): string {
  return JSON.stringify([[...c.servers].sort(), c.name ?? "", c.user ?? "", c.pass ?? "", c.token ?? "", c.creds ?? "", c.nkeySeed ?? "", c.tls?.caFile ?? "", c.tls?.certFile ?? "", c.tls?.keyFile ?? "", c.tls !== undefined]);
}
