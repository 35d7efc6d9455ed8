/** What every row receives: the mode's sizes and the suite's own nats-server. */
import type { NatsServer } from "../test/helpers/nats-server.js";
import type { BenchConfig } from "./config.js";

export interface Bench {
  readonly config: BenchConfig;
  readonly server: NatsServer;
}
