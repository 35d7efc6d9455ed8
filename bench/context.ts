/**
 * What every row receives: the mode's sizes, the suite's own nats-server and its monitoring
 * endpoint (per-connection counts, bench/server-counts.ts).
 */
import type { NatsServer } from "../test/helpers/nats-server.js";
import type { BenchConfig } from "./config.js";

export interface Bench {
  readonly config: BenchConfig;
  readonly server: NatsServer;
  /** The server's HTTP monitoring, for example `http://127.0.0.1:8222`. */
  readonly monitorUrl: string;
}
