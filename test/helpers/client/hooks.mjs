// Module resolve hook: a bare `@nats-io/...` specifier resolves as if imported from
// JSIP_NATS_CLIENT_DIR, so the whole process loads one client, the row's.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

let parentURL;

export function initialize(data) {
  parentURL = pathToFileURL(join(data.dir, "package.json")).href;
}

export async function resolve(specifier, context, nextResolve) {
  if (parentURL && specifier.startsWith("@nats-io/")) return nextResolve(specifier, { ...context, parentURL });
  return nextResolve(specifier, context);
}
