// Which module a bare `@nats-io/*` import resolves to on the legacy-client matrix row: the
// host's side (the tests and their helpers, the README blocks they run, the examples, the
// benchmarks) gets the shims over `nats` 2.x; the library (src/, and its builds the tests make
// under test/.tmp/) keeps the 3.x peers, as in a service that installed them beside nats 2.x.
import { join, sep } from "node:path";
import { fileURLToPath } from "node:url";

const SHIMS = { "@nats-io/jetstream": "jetstream.mjs", "@nats-io/transport-node": "transport-node.mjs" };
const ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
const HOST = ["test", "examples", "bench"].map((dir) => join(ROOT, dir) + sep);
const LIBRARY_BUILDS = join(ROOT, "test", ".tmp") + sep;

/**
 * The shim's file URL for `specifier` imported by `importer` (a path or a file URL), or
 * `undefined` when the import resolves as usual.
 */
export function legacyShim(specifier, importer) {
  const file = SHIMS[specifier];
  if (file === undefined || importer === undefined) return undefined;
  const from = importer.startsWith("file:") ? fileURLToPath(importer) : importer;
  if (from.startsWith(LIBRARY_BUILDS) || !HOST.some((dir) => from.startsWith(dir))) return undefined;
  return new URL(file, import.meta.url).href;
}
