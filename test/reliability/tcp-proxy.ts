/**
 * A loopback TCP proxy in front of a nats-server, so a test can take a client's connection
 * away without touching the server:
 * - `cut()` closes every proxied connection and refuses new ones until `restore()` (the client
 *   sees the drop at once and reconnects through the proxy afterwards);
 * - `blackhole()` keeps the connections open but forwards nothing in either direction (a
 *   silent partition: the client notices nothing until its own ping timeout);
 * - `latencyMs` (at start) holds what the client sends for that long, in order (a slow link),
 *   and `returnLatencyMs` what the server sends;
 * - `retarget(port)` drops every connection and forwards new ones to another server (a
 *   client's reconnects then meet that server: another one's refusal, say);
 * - `hold()` accepts new connections but connects them upstream only at `release()` (a
 *   connection that takes that long to come up; the open ones are not touched).
 */
import { createServer, connect, type Server, type Socket } from "node:net";

type Mode = "open" | "cut" | "blackhole";

export class TcpProxy implements AsyncDisposable {
  readonly #server: Server;
  readonly #pairs = new Set<{ client: Socket; upstream: Socket }>();
  #mode: Mode = "open";
  #targetPort: number;
  readonly #latencyMs: number;
  readonly #returnLatencyMs: number;
  /** Connections accepted and forwarded so far (a reconnect adds one). */
  accepted = 0;
  /** New connections waiting for `release()`, when held. */
  #held: Socket[] | undefined;

  private constructor(server: Server, targetPort: number, latencyMs: number, returnLatencyMs: number) {
    this.#server = server;
    this.#targetPort = targetPort;
    this.#latencyMs = latencyMs;
    this.#returnLatencyMs = returnLatencyMs;
  }

  /** Listens on a free loopback port and forwards to `127.0.0.1:targetPort`. */
  static async start(targetPort: number, options: { readonly latencyMs?: number; readonly returnLatencyMs?: number } = {}): Promise<TcpProxy> {
    const holder: { proxy?: TcpProxy } = {};
    const server = createServer((client) => {
      if (holder.proxy) holder.proxy.#accept(client);
      else client.destroy();
    });
    const proxy = new TcpProxy(server, targetPort, options.latencyMs ?? 0, options.returnLatencyMs ?? 0);
    holder.proxy = proxy;
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    return proxy;
  }

  get port(): number {
    const a = this.#server.address();
    return typeof a === "object" && a ? a.port : 0;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  get mode(): Mode {
    return this.#mode;
  }

  #accept(client: Socket): void {
    if (this.#mode === "cut") {
      client.destroy();
      return;
    }
    if (this.#held !== undefined) {
      // Nothing is read until released: what the client sends meanwhile waits in its socket.
      client.pause();
      this.#held.push(client);
      return;
    }
    this.#forward(client);
  }

  #forward(client: Socket): void {
    const upstream = connect(this.#targetPort, "127.0.0.1");
    const pair = { client, upstream };
    this.#pairs.add(pair);
    this.accepted += 1;
    const end = (): void => {
      client.destroy();
      upstream.destroy();
      this.#pairs.delete(pair);
    };
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
    // Each chunk leaves `delay` after it came, never before the one before it.
    const delayed = (to: Socket, delay: number): ((chunk: Buffer) => void) => {
      let lastAt = 0;
      return (chunk) => {
        if (this.#mode !== "open") return;
        if (delay <= 0) {
          to.write(chunk);
          return;
        }
        const at = Math.max(performance.now() + delay, lastAt);
        lastAt = at;
        setTimeout(() => {
          if (this.#mode === "open" && !to.destroyed) to.write(chunk);
        }, at - performance.now());
      };
    };
    client.on("data", delayed(upstream, this.#latencyMs));
    upstream.on("data", delayed(client, this.#returnLatencyMs));
    // A held connection was paused: it flows now that its listeners are on.
    client.resume();
  }

  /** Drops every connection and refuses new ones. */
  cut(): void {
    this.#mode = "cut";
    for (const p of [...this.#pairs]) {
      p.client.destroy();
      p.upstream.destroy();
    }
    this.#pairs.clear();
  }

  /** Drops every connection; new ones go to `127.0.0.1:targetPort`. */
  retarget(targetPort: number): void {
    this.cut();
    this.#targetPort = targetPort;
    this.#mode = "open";
  }

  /** Keeps connections open but lets nothing through (bytes sent meanwhile are lost). */
  blackhole(): void {
    this.#mode = "blackhole";
  }

  /** New connections wait, unconnected upstream, until `release()`. */
  hold(): void {
    this.#held ??= [];
  }

  /** Connects the held connections upstream, and new ones at once again. */
  release(): void {
    const held = this.#held ?? [];
    this.#held = undefined;
    for (const client of held) if (!client.destroyed) this.#forward(client);
  }

  /** Forwards again and accepts new connections. */
  restore(): void {
    this.#mode = "open";
  }

  async close(): Promise<void> {
    for (const client of this.#held ?? []) client.destroy();
    this.#held = undefined;
    this.cut();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
