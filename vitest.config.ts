import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  resolve: {
    // Examples import the package by name; tests run them against the sources.
    alias: [
      { find: /^jetstream-inprogress$/, replacement: fileURLToPath(new URL("./src/index.ts", import.meta.url)) },
      { find: /^jetstream-inprogress\/(.*)$/, replacement: fileURLToPath(new URL("./src/$1.ts", import.meta.url)) },
    ],
  },
  test: {
    include: ["test/**/*.test.ts"],
    exclude: ["test/reliability/**/*.full.test.ts", "**/node_modules/**"],
    globalSetup: ["test/helpers/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    maxWorkers: 2,
    allowOnly: false,
  },
});
