/**
 * Which `@nats-io/*` client the tests run on. By default the devDependencies; with
 * JSIP_NATS_CLIENT_DIR (a directory with its own node_modules, as scripts/fetch-nats-servers.sh
 * makes under .cache/nats-client/<version>) every `@nats-io/*` import resolves there instead:
 * in the test process through the vitest alias below, in child processes (examples, workers)
 * through the resolve hook in ./client/register.mjs (NODE_OPTIONS=--import …).
 *
 * With JSIP_NATS_CLIENT=legacy the host's side runs on the legacy `nats` 2.x client: the
 * tests', helpers' and examples' `@nats-io/jetstream` and `@nats-io/transport-node` imports
 * resolve to shims over `nats` (./client/legacy/), so every connection, manager, consumer and
 * message handed to the library is a nats 2.x object, while the library's own imports keep the
 * 3.x peers, as in a service that installed them beside nats 2.x.
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, sep } from "node:path";
import { fileURLToPath } from "node:url";
import type { Plugin } from "vite";
import { legacyShim } from "./client/legacy/map.mjs";

const PACKAGES = ["jetstream", "transport-node", "nats-core"] as const;

/** Vitest `resolve.alias` entries pointing `@nats-io/*` at JSIP_NATS_CLIENT_DIR (none when unset). */
export function natsClientAlias(): { find: RegExp; replacement: string }[] {
  const dir = process.env["JSIP_NATS_CLIENT_DIR"];
  if (!dir) return [];
  if (!existsSync(join(dir, "node_modules", "@nats-io", "jetstream"))) {
    throw new Error(`JSIP_NATS_CLIENT_DIR=${dir} has no @nats-io/jetstream: run scripts/fetch-nats-servers.sh`);
  }
  const req = createRequire(join(dir, "package.json"));
  const out: { find: RegExp; replacement: string }[] = [];
  for (const name of PACKAGES) {
    for (const sub of ["", "/internal"]) {
      let file: string;
      try {
        file = req.resolve(`@nats-io/${name}${sub}`);
      } catch {
        continue;
      }
      out.push({ find: new RegExp(`^@nats-io/${name}${sub}$`), replacement: file });
    }
  }
  return out;
}

/** Whether the run is on the legacy-client row (JSIP_NATS_CLIENT=legacy): the host's side on `nats` 2.x. */
export function onLegacyClient(): boolean {
  return process.env["JSIP_NATS_CLIENT"] === "legacy";
}

/** On the legacy-client row, the Vite plugin that resolves the host's side to the shims over `nats` 2.x (none otherwise). */
export function legacyClientPlugin(): Plugin[] {
  if (!onLegacyClient()) return [];
  return [
    {
      name: "jsip-legacy-nats-client",
      enforce: "pre",
      resolveId(source, importer) {
        const shim = legacyShim(source, importer);
        return shim === undefined ? null : fileURLToPath(shim);
      },
    },
  ];
}

/** The version of the legacy `nats` client (the devDependency). */
export function legacyClientVersion(): string {
  const file = createRequire(join(import.meta.dirname, "..", "..", "package.json")).resolve("nats/package.json");
  return (JSON.parse(readFileSync(file, "utf8")) as { version: string }).version;
}

/** One loaded `@nats-io/*` (or `nats`) package: where it lives and its version. */
export interface LoadedClientPackage {
  readonly name: string;
  readonly dir: string;
  readonly version: string;
}

/**
 * The `@nats-io/*` and `nats` packages this process has loaded, one entry per package
 * directory (two entries with one name mean two copies). The clients are CommonJS, so Node's
 * module cache holds every file of them that was loaded.
 */
export function loadedNatsClients(): LoadedClientPackage[] {
  const cache = createRequire(import.meta.url).cache;
  const dirs = new Set<string>();
  for (const file of Object.keys(cache)) {
    const m = new RegExp(`^(.*\\${sep}node_modules\\${sep}(?:@nats-io\\${sep}[^\\${sep}]+|nats))\\${sep}`).exec(file);
    if (m?.[1]) dirs.add(m[1]);
  }
  return [...dirs].sort().map((dir) => {
    const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { name: string; version: string };
    return { name: pkg.name, dir, version: pkg.version };
  });
}

/** The client version the run is meant to use: JSIP_NATS_CLIENT_DIR's, else the devDependency. */
export function expectedClientVersion(): string {
  const dir = process.env["JSIP_NATS_CLIENT_DIR"];
  const root = dir ?? join(import.meta.dirname, "..", "..");
  const file = createRequire(join(root, "package.json")).resolve("@nats-io/jetstream");
  const pkg = JSON.parse(readFileSync(join(dirname(file), "..", "package.json"), "utf8")) as { version: string };
  return pkg.version;
}
