import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";
import { legacyClientPlugin, natsClientAlias } from "./test/helpers/nats-client.js";

// The whole fault suite: the short scenarios that also run in `npm test`, and the long ones
// (`*.full.test.ts`) that only run here.
export default defineConfig({
  // The legacy-client row (JSIP_NATS_CLIENT=legacy): the host's side on nats 2.x.
  plugins: legacyClientPlugin(),
  resolve: {
    alias: [
      { find: /^jetstream-inprogress$/, replacement: fileURLToPath(new URL("./src/index.ts", import.meta.url)) },
      // A matrix row's client (JSIP_NATS_CLIENT_DIR) instead of the devDependencies.
      ...natsClientAlias(),
    ],
  },
  test: {
    include: ["test/reliability/**/*.test.ts"],
    exclude: ["**/node_modules/**"],
    globalSetup: ["test/helpers/global-setup.ts"],
    testTimeout: 240_000,
    hookTimeout: 120_000,
    pool: "forks",
    maxWorkers: 2,
    allowOnly: false,
  },
});
