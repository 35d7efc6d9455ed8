import { defineConfig } from "vitest/config";
import base from "./vitest.config.js";

// The whole fault suite: the short scenarios that also run in `npm test`, and the long ones
// (`*.full.test.ts`) that only run here. Everything else comes from the main config.
export default defineConfig({
  ...base,
  test: {
    ...base.test,
    include: ["test/reliability/**/*.test.ts"],
    exclude: ["**/node_modules/**"],
    testTimeout: 240_000,
    hookTimeout: 120_000,
  },
});
