// Loaded with NODE_OPTIONS="--import <this file>" in child processes of a matrix row: points
// every `@nats-io/*` import at JSIP_NATS_CLIENT_DIR, like the vitest alias does in-process.
import * as nodeModule from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const dir = process.env.JSIP_NATS_CLIENT_DIR;
if (dir) {
  if (typeof nodeModule.registerHooks === "function") {
    // In-thread hooks (Node 22.15+); they cover require() too. module.register is deprecated on 26.
    const parentURL = pathToFileURL(join(dir, "package.json")).href;
    nodeModule.registerHooks({
      resolve: (specifier, context, nextResolve) =>
        nextResolve(specifier, specifier.startsWith("@nats-io/") ? { ...context, parentURL } : context),
    });
  } else {
    nodeModule.register("./hooks.mjs", import.meta.url, { data: { dir } });
  }
}
