/**
 * Starts real nats-server processes for the tests: a single JetStream server on a free
 * loopback port, or a 3-node JetStream cluster. Each server gets its own temp store.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { byVersion, versionAtLeast } from "./server-version.js";

const ROOT = join(import.meta.dirname, "..", "..");
/** The project-local cache that scripts/fetch-nats-servers.sh fills (git-ignored). */
export const SERVER_CACHE = join(ROOT, ".cache", "nats-server");
const FETCH_SCRIPT = join(ROOT, "scripts", "fetch-nats-servers.sh");

const INSTALL_HINT =
  "nats-server not found: install it (Debian: apt-get install -y nats-server) or set NATS_SERVER_BIN to its path";

/**
 * Finds the nats-server binary: NATS_SERVER_BIN, then PATH, then /usr/sbin/nats-server, then
 * the cache (the distribution's own package if it was fetched, else the newest version there).
 */
export function natsServerBinary(): string {
  const fromEnv = process.env["NATS_SERVER_BIN"];
  if (fromEnv) {
    if (!existsSync(fromEnv)) throw new Error(`${INSTALL_HINT} (NATS_SERVER_BIN=${fromEnv} does not exist)`);
    return fromEnv;
  }
  for (const dir of (process.env["PATH"] ?? "").split(delimiter)) {
    if (dir && existsSync(join(dir, "nats-server"))) return join(dir, "nats-server");
  }
  if (existsSync("/usr/sbin/nats-server")) return "/usr/sbin/nats-server";
  const cached = cachedServers();
  const marker = join(SERVER_CACHE, "distribution");
  const distribution = existsSync(marker) ? readFileSync(marker, "utf8").trim() : undefined;
  const pick = cached.find((c) => c.version === distribution) ?? cached.at(-1);
  if (pick) return pick.bin;
  throw new Error(INSTALL_HINT);
}

/**
 * Like natsServerBinary, but on a machine without any nats-server (and no NATS_SERVER_BIN) it
 * first fetches the distribution's own package into the cache with apt, without root. Throws
 * one line saying how to install one when that fails too.
 */
export function ensureNatsServerBinary(): string {
  try {
    return natsServerBinary();
  } catch (err) {
    if (process.env["NATS_SERVER_BIN"] || !existsSync(FETCH_SCRIPT)) throw err;
  }
  process.stderr.write("nats-server not installed: fetching the distribution's package into .cache/nats-server\n");
  const out = spawnSync("bash", [FETCH_SCRIPT, "--system"], { encoding: "utf8" });
  if (out.status !== 0) {
    const why = `${out.stderr ?? ""}`.trim().split("\n").at(-1) ?? "";
    throw new Error(`${INSTALL_HINT}${why ? ` (${why})` : ""}`);
  }
  return natsServerBinary();
}

const versions = new Map<string, string>();

/** The version a binary reports, for example `2.9.10` (default: the binary natsServerBinary finds). */
export function natsServerVersion(bin = natsServerBinary()): string {
  const known = versions.get(bin);
  if (known) return known;
  const out = spawnSync(bin, ["--version"], { encoding: "utf8" });
  const match = /v?(\d+\.\d+\.\d+)/.exec(`${out.stdout}${out.stderr}`);
  if (!match?.[1]) throw new Error(`cannot read the nats-server version: ${out.stdout}${out.stderr}`);
  versions.set(bin, match[1]);
  return match[1];
}

/** A nats-server binary and the version it reports. */
export interface ServerBinary {
  readonly bin: string;
  readonly version: string;
}

/** The binaries in the cache, oldest version first. */
export function cachedServers(): ServerBinary[] {
  if (!existsSync(SERVER_CACHE)) return [];
  return readdirSync(SERVER_CACHE)
    .map((dir) => join(SERVER_CACHE, dir, "nats-server"))
    .filter((bin) => existsSync(bin))
    .map((bin) => ({ bin, version: natsServerVersion(bin) }))
    .sort((a, b) => byVersion(a.version, b.version));
}

/** The cached binary of exactly `version`, or undefined. */
export function cachedServer(version: string): ServerBinary | undefined {
  return cachedServers().find((c) => c.version === version);
}

/**
 * A binary of at least `minVersion`: the one natsServerBinary finds when it is new enough,
 * else the newest in the cache; undefined when there is none.
 */
export function serverAtLeast(minVersion: string): ServerBinary | undefined {
  let bin: string | undefined;
  try {
    bin = natsServerBinary();
  } catch {
    bin = undefined;
  }
  if (bin && versionAtLeast(natsServerVersion(bin), minVersion)) return { bin, version: natsServerVersion(bin) };
  const newest = cachedServers().at(-1);
  return newest && versionAtLeast(newest.version, minVersion) ? newest : undefined;
}

/**
 * Where outgoing connections take their local ports (Linux; elsewhere the common default). A
 * server's port inside it can be taken, while the server is stopped for a restart, by any client
 * socket on the machine (a node's route port was, in a CI run: "address already in use").
 */
function ephemeralPortsFrom(): number {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > 12_000) return low;
  } catch {
    // Not Linux: below 32768 is outside every common default.
  }
  return 32_768;
}

async function canListen(port: number): Promise<boolean> {
  return await new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once("error", () => resolve(false));
    srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)));
  });
}

/**
 * A free TCP port on loopback, below the ephemeral range so no client socket takes it while a
 * server on it is stopped (a tiny race with another process picking the same one remains).
 */
export async function freePort(): Promise<number> {
  const low = 10_000;
  const high = Math.min(ephemeralPortsFrom(), 32_768) - 1;
  for (let i = 0; i < 200; i++) {
    const port = low + Math.floor(Math.random() * (high - low + 1));
    if (await canListen(port)) return port;
  }
  throw new Error(`no free port found between ${low} and ${high}`);
}

export interface ServerOptions {
  /** Fixed client port; default: a free one below the ephemeral range (see {@link freePort}), kept over restarts. */
  readonly port?: number;
  /** Store directory; default: a new temp dir (removed on dispose). */
  readonly storeDir?: string;
  /** Extra config-file text (for a cluster block and the like). */
  readonly config?: string;
  /** Server name (clusters need distinct names). */
  readonly name?: string;
  /** Extra command-line arguments. */
  readonly args?: readonly string[];
  /** The binary to run; default: natsServerBinary(). */
  readonly bin?: string;
  /**
   * The oldest server version this server may be, for example `"2.11.0"`: the default binary
   * when it is new enough, else the newest cached one (see serverAtLeast). Throws when there is
   * none: check serverAtLeast first.
   */
  readonly minVersion?: string;
}

/** A running nats-server. `await using srv = await startServer()` disposes of it. */
export class NatsServer implements AsyncDisposable {
  #child: ChildProcess | undefined;
  #port: number;
  readonly #workDir: string;
  readonly #ownsStore: boolean;
  readonly storeDir: string;
  readonly options: ServerOptions;
  /** The binary this server runs. */
  readonly bin: string;
  #log: string[] = [];

  private constructor(options: ServerOptions, bin: string, workDir: string, storeDir: string, ownsStore: boolean) {
    this.options = options;
    this.bin = bin;
    this.#workDir = workDir;
    this.storeDir = storeDir;
    this.#ownsStore = ownsStore;
    this.#port = options.port ?? -1;
  }

  /** Starts a server and waits until it accepts connections with JetStream enabled. */
  static async start(options: ServerOptions = {}): Promise<NatsServer> {
    const bin = options.bin ?? (options.minVersion === undefined ? natsServerBinary() : minVersionBinary(options.minVersion));
    const workDir = mkdtempSync(join(tmpdir(), "jsip-nats-"));
    const storeDir = options.storeDir ?? join(workDir, "store");
    const srv = new NatsServer(options, bin, workDir, storeDir, options.storeDir === undefined);
    // A port of our choosing (see freePort) rather than the server's, which would come from the
    // ephemeral range; picked again if another process took it first.
    for (let attempt = 1; ; attempt++) {
      if (options.port === undefined) srv.#port = await freePort();
      try {
        await srv.#launch();
        return srv;
      } catch (err) {
        if (options.port !== undefined || attempt >= 3 || !srv.log.includes("address already in use")) throw err;
        // The next attempt's failure is judged by its own log.
        srv.#log = [];
      }
    }
  }

  get port(): number {
    return this.#port;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.#port}`;
  }

  /** The version the binary reports, for example `2.15.1`. */
  get version(): string {
    return natsServerVersion(this.bin);
  }

  get running(): boolean {
    return this.#child !== undefined && this.#child.exitCode === null && this.#child.signalCode === null;
  }

  /** The last lines the server printed (for failure messages). */
  get log(): string {
    return this.#log.slice(-40).join("");
  }

  async #launch(): Promise<void> {
    const bin = this.bin;
    const args = ["-a", "127.0.0.1", "-p", String(this.#port), "-js", "-sd", this.storeDir, "--ports_file_dir", this.#workDir];
    if (this.options.name) args.push("-n", this.options.name);
    const config = this.options.config;
    if (config) {
      const file = join(this.#workDir, "server.conf");
      writeFileSync(file, config);
      args.push("-c", file);
    }
    args.push(...(this.options.args ?? []));
    for (const f of readdirSync(this.#workDir)) if (f.endsWith(".ports")) rmSync(join(this.#workDir, f));

    const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
    this.#child = child;
    const keep = (chunk: Buffer): void => {
      const text = chunk.toString();
      this.#log.push(text);
      if (this.#log.length > 200) this.#log.splice(0, 100);
    };
    child.stdout?.on("data", keep);
    child.stderr?.on("data", keep);

    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      if (!this.running) throw new Error(`nats-server exited during start (code ${child.exitCode}):\n${this.log}`);
      const portsFile = readdirSync(this.#workDir).find((f) => f.endsWith(".ports"));
      if (portsFile) {
        try {
          const ports = JSON.parse(readFileSync(join(this.#workDir, portsFile), "utf8")) as { nats?: string[] };
          const url = ports.nats?.[0];
          if (url) {
            this.#port = Number(new URL(url).port);
            break;
          }
        } catch {
          // The file may be half written; read it again.
        }
      }
      await sleep(20);
    }
    if (this.#port <= 0) throw new Error(`nats-server did not report its port within 20 s:\n${this.log}`);
    await this.#waitForClients(deadline);
  }

  async #waitForClients(deadline: number): Promise<void> {
    let last: unknown;
    while (Date.now() < deadline) {
      try {
        const nc = await connect({ servers: this.url, reconnect: false, timeout: 1000 });
        await nc.close();
        return;
      } catch (err) {
        last = err;
        await sleep(50);
      }
    }
    throw new Error(`nats-server at ${this.url} did not accept connections: ${String(last)}\n${this.log}`);
  }

  /** Connects a client to this server. */
  async connect(options: Parameters<typeof connect>[0] = {}): Promise<NatsConnection> {
    return await connect({ servers: this.url, ...options });
  }

  /** Stops the process (SIGTERM, then SIGKILL after 5 s); the store is kept for a restart. */
  async stop(): Promise<void> {
    const child = this.#child;
    if (!child || !this.running) return;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    // A frozen process takes no SIGTERM until it runs again.
    child.kill("SIGCONT");
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(timer);
  }

  /**
   * Freezes the process (SIGSTOP): its connections stay open and nothing is answered, as a
   * server stalled by its host; {@link thaw} lets it go on. Resolves once every thread of the
   * process has stopped (a thread still running could answer one more frame). A frozen server
   * is thawed before it is stopped.
   */
  async freeze(): Promise<void> {
    const child = this.#child;
    if (!child?.pid || !this.running) throw new Error("freeze: the server is not running");
    child.kill("SIGSTOP");
    const tasks = `/proc/${child.pid}/task`;
    const deadline = performance.now() + 5000;
    // The state is the field after the parenthesised command name of each thread's stat line.
    const stopped = (): boolean => readdirSync(tasks).every((t) => /\) T /.test(readFileSync(join(tasks, t, "stat"), "utf8")));
    while (!stopped()) {
      if (performance.now() > deadline) throw new Error("freeze: the server's threads did not all stop within 5 s");
      await sleep(2);
    }
  }

  /** Lets a frozen server go on (SIGCONT). */
  thaw(): void {
    if (this.#child && this.running) this.#child.kill("SIGCONT");
  }

  /** Kills the process with SIGKILL (a crash). */
  async kill(): Promise<void> {
    const child = this.#child;
    if (!child || !this.running) return;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.kill("SIGKILL");
    await exited;
  }

  /** Starts the process again on the same port and store. */
  async restart(): Promise<void> {
    await this.stop();
    await this.#launch();
  }

  /** Stops the server and removes its temp files. */
  async dispose(): Promise<void> {
    await this.stop();
    rmSync(this.#workDir, { recursive: true, force: true });
    if (this.#ownsStore) rmSync(this.storeDir, { recursive: true, force: true });
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.dispose();
  }
}

function minVersionBinary(minVersion: string): string {
  const found = serverAtLeast(minVersion);
  if (!found) throw new Error(`no nats-server ${minVersion} or newer (NATS_SERVER_BIN, PATH, .cache/nats-server): run scripts/fetch-nats-servers.sh`);
  return found.bin;
}

/** Starts one JetStream server on a free loopback port. */
export async function startServer(options: ServerOptions = {}): Promise<NatsServer> {
  return await NatsServer.start(options);
}

/** A 3-node JetStream cluster on loopback. `await using c = await startCluster()`. */
export class NatsCluster implements AsyncDisposable {
  readonly servers: readonly NatsServer[];

  private constructor(servers: readonly NatsServer[]) {
    this.servers = servers;
  }

  /**
   * Starts a cluster; one that cannot place a replicated stream within 20 s (seen under load,
   * and when a free port was taken between choosing it and binding it) is thrown away and
   * started again on new ports, up to three times.
   */
  static async start(size = 3): Promise<NatsCluster> {
    let last: unknown;
    for (let attempt = 1; attempt <= 3; attempt++) {
      let cluster: NatsCluster;
      try {
        cluster = await NatsCluster.#startOnce(size);
      } catch (err) {
        last = err;
        continue;
      }
      try {
        await cluster.waitForJetStream(20_000);
        return cluster;
      } catch (err) {
        last = err;
        await cluster.dispose();
      }
    }
    throw last;
  }

  static async #startOnce(size: number): Promise<NatsCluster> {
    const clientPorts = await distinctFreePorts(size);
    const routePorts = await distinctFreePorts(size, clientPorts);
    const routes = routePorts.map((p) => `nats-route://127.0.0.1:${p}`);
    const clusterName = `jsip-${process.pid}-${routePorts[0]}`;
    const started = await Promise.allSettled(
      clientPorts.map((port, i) =>
        NatsServer.start({
          port,
          name: `n${i + 1}`,
          config: [
            `server_name: n${i + 1}`,
            `jetstream { max_memory_store: 268435456, max_file_store: 1073741824 }`,
            `cluster {`,
            `  name: ${clusterName}`,
            `  listen: 127.0.0.1:${routePorts[i]}`,
            `  routes: [${routes.filter((_, j) => j !== i).join(", ")}]`,
            `}`,
          ].join("\n"),
        }),
      ),
    );
    const servers = started.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
    const failed = started.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed !== undefined) {
      await Promise.all(servers.map((srv) => srv.dispose()));
      throw failed.reason;
    }
    return new NatsCluster(servers);
  }

  /** Every node's client URL. */
  get urls(): string[] {
    return this.servers.map((s) => s.url);
  }

  /** Connects to the cluster (all nodes as seeds). */
  async connect(options: Parameters<typeof connect>[0] = {}): Promise<NatsConnection> {
    return await connect({ servers: this.urls, ...options });
  }

  /**
   * Waits until the JetStream meta group has a leader and can place a stream on every node:
   * answering account info is not enough (2.15 can still say "no suitable peers for
   * placement" for a while), so a throwaway replicated stream is created and deleted.
   */
  async waitForJetStream(timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const nc = await this.connect({ reconnect: true });
    const probe = `JSIP_READY_${process.pid}_${Date.now().toString(36)}`;
    try {
      let last = "";
      while (Date.now() < deadline) {
        try {
          const reply = await nc.request("$JS.API.INFO", "", { timeout: 1000 });
          const body = reply.json<{ error?: { description?: string } }>();
          if (!body.error) {
            const config = { name: probe, subjects: [`_jsip_ready.${probe}`], num_replicas: this.servers.length, storage: "memory" };
            const created = (await nc.request(`$JS.API.STREAM.CREATE.${probe}`, JSON.stringify(config), { timeout: 5000 })).json<{ error?: { description?: string } }>();
            if (!created.error) {
              await nc.request(`$JS.API.STREAM.DELETE.${probe}`, "", { timeout: 5000 });
              return;
            }
            last = created.error.description ?? "error";
          } else last = body.error.description ?? "error";
        } catch (err) {
          last = String(err);
        }
        await sleep(200);
      }
      throw new Error(`JetStream cluster not ready after ${timeoutMs} ms: ${last}`);
    } finally {
      await nc.close();
    }
  }

  async dispose(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.dispose()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.dispose();
  }
}

/** Starts a 3-node JetStream cluster on loopback. */
export async function startCluster(size = 3): Promise<NatsCluster> {
  return await NatsCluster.start(size);
}

async function distinctFreePorts(n: number, avoid: readonly number[] = []): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) {
    const p = await freePort();
    if (!avoid.includes(p)) ports.add(p);
  }
  return [...ports];
}
