import { defineConfig } from "tsup";

const publicEntries = {
  index: "src/index.ts",
  prometheus: "src/adapters/prometheus.ts",
  opentelemetry: "src/adapters/opentelemetry.ts",
};

export default defineConfig({
  entry: {
    ...publicEntries,
    // The heartbeat thread's worker: started by path from index.js / index.cjs, never imported.
    "heartbeat-thread": "src/lease/heartbeat-thread-entry.ts",
  },
  format: ["esm", "cjs"],
  // Types for what users import; the worker entry has none to offer.
  dts: { entry: publicEntries },
  // In the CommonJS build, import.meta.url (which finds the worker beside the bundle) becomes this file's URL.
  shims: true,
  clean: true,
  sourcemap: true,
  target: "node20",
  platform: "node",
  splitting: false,
  treeshake: true,
  // Optional peers of the adapter entry points: never bundled, never reached from the root.
  external: ["prom-client", "@opentelemetry/api"],
});
