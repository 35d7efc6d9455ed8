import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";
import { legacyClientPlugin, natsClientAlias } from "./test/helpers/nats-client.js";
import { SlowFirstSequencer } from "./test/helpers/slow-first-sequencer.js";

// Files whose timing margins are set by the scenario itself (BackOff [1 s, 4 s] with a 700 ms
// interval leaves 300 ms): they run in a group of their own, after everything else, so a
// neighbour's CPU burst cannot eat the margin.
const QUIET = ["test/integration/backoff-aware.test.ts"];

// Files a matrix row leaves out (its "exclude" in scripts/matrix.json, passed by scripts/test-servers.mjs).
const ROW_EXCLUDE = (process.env["JSIP_TEST_EXCLUDE"] ?? "").split(",").filter((f) => f !== "");

export default defineConfig({
  // The legacy-client row (JSIP_NATS_CLIENT=legacy): the host's side on nats 2.x.
  plugins: legacyClientPlugin(),
  resolve: {
    // Examples import the package by name; tests run them against the sources.
    alias: [
      { find: /^jetstream-inprogress$/, replacement: fileURLToPath(new URL("./src/index.ts", import.meta.url)) },
      { find: /^jetstream-inprogress\/(.*)$/, replacement: fileURLToPath(new URL("./src/adapters/$1.ts", import.meta.url)) },
      // A matrix row's client (JSIP_NATS_CLIENT_DIR) instead of the devDependencies.
      ...natsClientAlias(),
    ],
  },
  test: {
    globalSetup: ["test/helpers/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Five files at a time on two cores: the real-server files mostly wait on timers (a file
    // uses a fraction of a core). Five keep npm test near 5 minutes (four took about 6¼, three
    // about 7); JSIP_TEST_WORKERS sets it (the server matrix keeps three a row).
    maxWorkers: Number(process.env["JSIP_TEST_WORKERS"] ?? 5),
    allowOnly: false,
    sequence: { sequencer: SlowFirstSequencer },
    projects: [
      {
        extends: true,
        test: {
          name: "main",
          include: ["test/**/*.test.ts"],
          exclude: ["test/reliability/**/*.full.test.ts", "**/node_modules/**", ...QUIET, ...ROW_EXCLUDE],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: "quiet",
          include: QUIET,
          exclude: ROW_EXCLUDE,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
