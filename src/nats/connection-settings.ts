/**
 * What a host connection was made with, as plain data another thread can use to open its own
 * connection: the servers (the one it is connected to first, then the ones it was given and
 * the cluster's), its name, and user, password and token when they are plain strings.
 *
 * Reads client internals (`nc.options`, `nc.getServer()`, `nc.info`) structurally and guarded:
 * a client that keeps them elsewhere is "cannot derive", never a crash.
 */

/** Plain connection data: only strings and arrays of strings, so it can cross a thread. */
export interface PlainConnectionSettings {
  readonly servers: readonly string[];
  readonly name?: string;
  readonly user?: string;
  readonly pass?: string;
  readonly token?: string;
  readonly tls?: { readonly caFile?: string; readonly certFile?: string; readonly keyFile?: string };
}

/** Why a connection's settings cannot be copied. */
export type SettingsRefusal =
  /** Not a connection this reader understands (no options, no server). */
  | "unreadable"
  /** The connection is closed: there is no server to derive. */
  | "closed"
  /** It authenticates through a function (credentials, nkey, JWT or a host's own). */
  | "function_authenticator"
  /** User, password or token is a function rather than a string. */
  | "function_credential"
  /** TLS given as certificate text, not file paths, or with options a thread cannot copy. */
  | "tls_not_files"
  /** A WebSocket connection (`wsconnect`): the thread connects over TCP only. */
  | "websocket";

export type SettingsReading =
  | { readonly ok: true; readonly settings: PlainConnectionSettings }
  /** `servers`: what could be read of them, for the message that says what to pass instead. */
  | { readonly ok: false; readonly reason: SettingsRefusal; readonly detail: string; readonly servers?: readonly string[] };

const MAX_SERVERS = 64;

interface ConnectionLike {
  options?: {
    servers?: unknown;
    name?: unknown;
    user?: unknown;
    pass?: unknown;
    token?: unknown;
    tls?: unknown;
    authenticator?: unknown;
  };
  getServer?: () => unknown;
  info?: { connect_urls?: unknown };
  isClosed?: () => unknown;
}

function refuse(reason: SettingsRefusal, detail: string, servers?: readonly string[]): SettingsReading {
  return servers === undefined ? { ok: false, reason, detail } : { ok: false, reason, detail, servers };
}

/**
 * The plain settings of a `@nats-io/transport-node` 3.x connection, or why they cannot be
 * copied. The client folds user, password and token into an authenticator function; a host's
 * own authenticator is told apart by calling that function once without a nonce (as the
 * client does on each connect) and checking that it answers with nothing but those strings.
 */
export function hostConnectionSettings(connection: unknown): SettingsReading {
  let nc: ConnectionLike;
  let options: NonNullable<ConnectionLike["options"]>;
  try {
    nc = connection as ConnectionLike;
    const o = nc?.options;
    if (typeof o !== "object" || o === null) return refuse("unreadable", "it has no options this reader knows");
    options = o;
    if (typeof nc.isClosed === "function" && nc.isClosed() === true) return refuse("closed", "the connection is closed");
  } catch {
    return refuse("unreadable", "its options could not be read");
  }
  try {
    const servers = serversOf(nc, options.servers);
    if (servers.length === 0) return refuse("unreadable", "it names no server");
    if (servers.some((s) => /^wss?:\/\//i.test(s))) return refuse("websocket", "it is a WebSocket connection; the thread connects over TCP");

    const user = options.user;
    const pass = options.pass;
    const token = options.token;
    for (const [key, value] of [["user", user], ["pass", pass], ["token", token]] as const) {
      if (value !== undefined && typeof value !== "string") return refuse("function_credential", `its ${key} is a ${typeof value}, not a string`, servers);
    }
    const auth = options.authenticator;
    if (auth !== undefined && typeof auth !== "function") return refuse("unreadable", "its authenticator is not a function");
    if (typeof auth === "function") {
      const extra = foreignAuthentication(auth as (nonce?: string) => unknown, user as string | undefined, pass as string | undefined, token as string | undefined);
      if (extra !== undefined) return refuse("function_authenticator", extra, servers);
    }

    const tls = tlsFiles(options.tls);
    if (tls === "refused") return refuse("tls_not_files", "its TLS options hold certificate text or options other than caFile, certFile and keyFile", servers);

    const name = typeof options.name === "string" && options.name !== "" ? options.name : undefined;
    return {
      ok: true,
      settings: {
        servers,
        ...(name !== undefined ? { name } : {}),
        ...(typeof user === "string" && user !== "" ? { user } : {}),
        ...(typeof pass === "string" && pass !== "" ? { pass } : {}),
        ...(typeof token === "string" && token !== "" ? { token } : {}),
        ...(tls !== undefined ? { tls } : {}),
      },
    };
  } catch {
    return refuse("unreadable", "its options could not be read");
  }
}

/** The server it is connected to first, then the ones it was given, then the cluster's. */
function serversOf(nc: ConnectionLike, given: unknown): string[] {
  const out: string[] = [];
  const add = (s: unknown): void => {
    if (typeof s === "string" && s !== "" && !out.includes(s) && out.length < MAX_SERVERS) out.push(s);
  };
  try {
    if (typeof nc.getServer === "function") add(nc.getServer());
  } catch {
    // a client without getServer still has its list
  }
  if (typeof given === "string") add(given);
  else if (Array.isArray(given)) for (const s of given.slice(0, MAX_SERVERS)) add(s);
  const urls = nc.info?.connect_urls;
  if (Array.isArray(urls)) for (const s of urls.slice(0, MAX_SERVERS)) add(s);
  return out;
}

/**
 * What the authenticator adds beyond the plain user, password and token, described for a
 * person (without the values), or `undefined` when it adds nothing.
 */
function foreignAuthentication(auth: (nonce?: string) => unknown, user: string | undefined, pass: string | undefined, token: string | undefined): string | undefined {
  let answer: unknown;
  try {
    answer = auth(undefined);
  } catch {
    return "its authenticator function throws without a nonce";
  }
  if (answer === undefined || answer === null) return undefined;
  if (typeof answer !== "object") return "its authenticator answers with something other than an object";
  const plain: Record<string, string | undefined> = { user, pass, auth_token: token };
  const foreign: string[] = [];
  for (const [key, value] of Object.entries(answer as Record<string, unknown>)) {
    if (value === undefined || value === "") continue;
    if (key in plain && plain[key] === value) continue;
    foreign.push(key);
  }
  return foreign.length === 0 ? undefined : `it authenticates through a function (it sends ${foreign.sort().join(", ")})`;
}

function tlsFiles(tls: unknown): PlainConnectionSettings["tls"] | "refused" | undefined {
  if (tls === undefined || tls === null) return undefined;
  if (typeof tls !== "object" || Array.isArray(tls)) return "refused";
  const out: { caFile?: string; certFile?: string; keyFile?: string } = {};
  for (const [key, value] of Object.entries(tls as Record<string, unknown>)) {
    if (value === undefined) continue;
    if ((key === "caFile" || key === "certFile" || key === "keyFile") && typeof value === "string") out[key] = value;
    else return "refused";
  }
  return out;
}
