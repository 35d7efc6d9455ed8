/**
 * better-sqlite3 on whichever Node.js runs the tests: the copy in node_modules is built for the
 * Node.js that installed it; for the other runtimes of the matrix, scripts/fetch-nats-servers.sh
 * builds the same version into .cache/better-sqlite3/<version>/node-<major>/, passed as
 * better-sqlite3's own `nativeBinding` option.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import Database from "better-sqlite3";

const root = join(import.meta.dirname, "..", "..");

/** The native module to load for this runtime, `undefined` when node_modules' own one loads. */
export function sqliteNativeBinding(): string | undefined {
  try {
    new Database(":memory:").close();
    return undefined;
  } catch (err) {
    const version = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { devDependencies: Record<string, string> }).devDependencies["better-sqlite3"];
    const major = process.versions.node.split(".")[0];
    const built = join(root, ".cache", "better-sqlite3", String(version), `node-${major}`, "better_sqlite3.node");
    if (existsSync(built)) return built;
    throw new Error(`better-sqlite3 ${version} is not built for Node.js ${process.versions.node}: run npm run fetch:servers (it builds it into .cache/better-sqlite3)`, { cause: err });
  }
}

/** A database on this runtime (in memory by default). */
export function openSqlite(file = ":memory:"): Database.Database {
  const nativeBinding = sqliteNativeBinding();
  return new Database(file, nativeBinding === undefined ? {} : { nativeBinding });
}
