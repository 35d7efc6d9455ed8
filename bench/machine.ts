/** What the figures were measured on: cores, load, Node and nats-server versions. */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { cpus, loadavg, release, totalmem, type as osType } from "node:os";
import { dirname, join } from "node:path";
import { natsServerVersion } from "../test/helpers/nats-server.js";

export interface Machine {
  readonly cores: number;
  readonly cpuModel: string;
  readonly os: string;
  readonly memoryGiB: number;
  readonly node: string;
  readonly v8: string;
  /** What `nats-server --version` prints. */
  readonly natsServerBinary: string;
  /** What the connected server reports (`nc.info.version`). */
  readonly natsServerConnected: string | undefined;
  readonly natsClient: string;
  /** 1, 5 and 15 minute load averages when the run started and when it ended. */
  readonly loadAtStart: readonly number[];
  readonly loadAtEnd: readonly number[];
}

/** The installed client's version (its package.json is not an exported subpath, so read the file). */
function clientVersion(): string {
  try {
    const entry = createRequire(import.meta.url).resolve("@nats-io/jetstream");
    const pkg = JSON.parse(readFileSync(join(dirname(entry), "..", "package.json"), "utf8")) as { version?: unknown };
    return typeof pkg.version === "string" ? `@nats-io/jetstream ${pkg.version}` : "unknown";
  } catch {
    return "unknown";
  }
}

export function describeMachine(connected: string | undefined, loadAtStart: readonly number[]): Machine {
  const list = cpus();
  return {
    cores: list.length,
    cpuModel: list[0]?.model.trim() ?? "unknown",
    os: `${osType()} ${release()}`,
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    v8: process.versions.v8,
    natsServerBinary: natsServerVersion(),
    natsServerConnected: connected,
    natsClient: clientVersion(),
    loadAtStart: loadAtStart.map(round2),
    loadAtEnd: loadavg().map(round2),
  };
}

function round2(x: number): number {
  return Math.round(x * 100) / 100;
}
