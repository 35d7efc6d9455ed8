// Loaded with NODE_OPTIONS="--import <this file>" in child processes of a matrix row, like the
// vitest alias and plugin do in-process: every `@nats-io/*` import resolves in
// JSIP_NATS_CLIENT_DIR, or, with JSIP_NATS_CLIENT=legacy, the host's side gets the shims over
// `nats` 2.x (./legacy/map.mjs).
import * as nodeModule from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { legacyShim } from "./legacy/map.mjs";

const dir = process.env.JSIP_NATS_CLIENT_DIR;
const legacy = process.env.JSIP_NATS_CLIENT === "legacy";
if (dir || legacy) {
  if (typeof nodeModule.registerHooks === "function") {
    // In-thread hooks (Node 22.15+); they cover require() too. module.register is deprecated on 26.
    const parentURL = dir ? pathToFileURL(join(dir, "package.json")).href : undefined;
    nodeModule.registerHooks({
      resolve: (specifier, context, nextResolve) => {
        const shim = legacy ? legacyShim(specifier, context.parentURL) : undefined;
        if (shim) return { url: shim, shortCircuit: true };
        return nextResolve(specifier, parentURL && specifier.startsWith("@nats-io/") ? { ...context, parentURL } : context);
      },
    });
  } else {
    nodeModule.register("./hooks.mjs", import.meta.url, { data: { dir, legacy } });
  }
}
