import { defineConfig } from "tsup";

export default defineConfig({
  entry: {
    index: "src/index.ts",
    prometheus: "src/adapters/prometheus.ts",
    opentelemetry: "src/adapters/opentelemetry.ts",
  },
  format: ["esm", "cjs"],
  dts: true,
  clean: true,
  sourcemap: true,
  target: "node20",
  platform: "node",
  splitting: false,
  treeshake: true,
  // Optional peers of the adapter entry points: never bundled, never reached from the root.
  external: ["prom-client", "@opentelemetry/api"],
});
