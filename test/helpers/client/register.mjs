// Loaded with NODE_OPTIONS="--import <this file>" in child processes of a matrix row: points
// every `@nats-io/*` import at JSIP_NATS_CLIENT_DIR, like the vitest alias does in-process.
import { register } from "node:module";

const dir = process.env.JSIP_NATS_CLIENT_DIR;
if (dir) register("./hooks.mjs", import.meta.url, { data: { dir } });
