// Module resolve hook: a bare `@nats-io/...` specifier resolves as if imported from
// JSIP_NATS_CLIENT_DIR, so the whole process loads one client, the row's; on the legacy row
// the host's side gets the shims over `nats` 2.x instead (./legacy/map.mjs).
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { legacyShim } from "./legacy/map.mjs";

let parentURL;
let legacy = false;

export function initialize(data) {
  if (data.dir) parentURL = pathToFileURL(join(data.dir, "package.json")).href;
  legacy = data.legacy === true;
}

export async function resolve(specifier, context, nextResolve) {
  const shim = legacy ? legacyShim(specifier, context.parentURL) : undefined;
  if (shim) return { url: shim, shortCircuit: true };
  if (parentURL && specifier.startsWith("@nats-io/")) return nextResolve(specifier, { ...context, parentURL });
  return nextResolve(specifier, context);
}
