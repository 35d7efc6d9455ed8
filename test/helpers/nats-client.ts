/**
 * Which `@nats-io/*` client the tests run on. By default the devDependencies; with
 * JSIP_NATS_CLIENT_DIR (a directory with its own node_modules, as scripts/fetch-nats-servers.sh
 * makes under .cache/nats-client/<version>) every `@nats-io/*` import resolves there instead:
 * in the test process through the vitest alias below, in child processes (examples, workers)
 * through the resolve hook in ./client/register.mjs (NODE_OPTIONS=--import …).
 */
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, sep } from "node:path";

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

/** One loaded `@nats-io/*` package: where it lives and its version. */
export interface LoadedClientPackage {
  readonly name: string;
  readonly dir: string;
  readonly version: string;
}

/**
 * The `@nats-io/*` packages this process has loaded, one entry per package directory (two
 * entries with one name mean two copies). The client is CommonJS, so Node's module cache
 * holds every file of it that was loaded.
 */
export function loadedNatsClients(): LoadedClientPackage[] {
  const cache = createRequire(import.meta.url).cache;
  const dirs = new Set<string>();
  for (const file of Object.keys(cache)) {
    const m = new RegExp(`^(.*\\${sep}node_modules\\${sep}@nats-io\\${sep}[^\\${sep}]+)\\${sep}`).exec(file);
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
