/**
 * The client a run is on: the devDependencies, or a matrix row's JSIP_NATS_CLIENT_DIR. One copy
 * of each `@nats-io` package, in the test process and in the child processes the examples run in.
 * On the legacy-client row (JSIP_NATS_CLIENT=legacy), the host's side is the `nats` 2.x client
 * and the library's peers the pinned 3.x packages beside it.
 */
import { execFile } from "node:child_process";
import { realpathSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { jetstreamManager } from "@nats-io/jetstream";
import { expectedClientVersion, legacyClientVersion, loadedNatsClients, onLegacyClient, type LoadedClientPackage } from "../helpers/nats-client.js";
import { useServer } from "../helpers/server-fixture.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "..", "..");
const legacy = onLegacyClient();

function expectOneClient(loaded: readonly LoadedClientPackage[], version: string): void {
  const byName = (name: string) => loaded.filter((p) => p.name === name);
  if (legacy) {
    // The host's objects: nats 2.x, one copy. The 3.x peers, when the library loaded them: one copy each, pinned.
    expect(byName("nats").map((p) => p.version), `nats loaded from ${byName("nats").map((p) => p.dir).join(", ")}`).toEqual([legacyClientVersion()]);
    for (const name of ["@nats-io/jetstream", "@nats-io/transport-node", "@nats-io/nats-core"]) {
      expect(byName(name).length, name).toBeLessThanOrEqual(1);
      for (const p of byName(name)) expect(p.version, name).toBe(version);
    }
    return;
  }
  for (const name of ["@nats-io/jetstream", "@nats-io/transport-node", "@nats-io/nats-core"]) {
    expect(byName(name).map((p) => p.version), `${name} loaded from ${byName(name).map((p) => p.dir).join(", ")}`).toEqual([version]);
  }
  // Module paths are real paths: compare with the directory's own (it may be reached through a link).
  const dir = process.env["JSIP_NATS_CLIENT_DIR"];
  if (dir) for (const p of loaded) expect(p.dir.startsWith(realpathSync(dir)), `${p.name} from ${p.dir}`).toBe(true);
}

describe(`nats client ${legacy ? `nats ${legacyClientVersion()}` : expectedClientVersion()} on Node ${process.versions.node}`, () => {
  const fx = useServer();

  it(`the test process loads one copy of each ${legacy ? "client package, the host's on nats 2.x" : "@nats-io package, at the row's version"}`, async () => {
    await (await jetstreamManager(fx.nc)).getAccountInfo();
    const loaded = loadedNatsClients();
    console.log(`nats client in use: ${loaded.map((p) => `${p.name}@${p.version}`).join(" ")} (Node ${process.versions.node}, nats-server ${fx.nc.info?.version})`);
    expectOneClient(loaded, expectedClientVersion());
    // nats 2.x connections carry their own jetstream(); 3.x ones do not.
    expect(typeof (fx.nc as unknown as { jetstream?: unknown }).jetstream).toBe(legacy ? "function" : "undefined");
  });

  it("child processes (examples, workers) load the same client", async () => {
    const { stdout } = await run(join(root, "node_modules", ".bin", "tsx"), [join(root, "test", "helpers", "client", "print-client.ts")], {
      cwd: root,
      env: { ...process.env, NATS_URL: fx.srv.url },
      timeout: 30_000,
    });
    const loaded = JSON.parse(stdout.trim().split("\n").at(-1)!) as LoadedClientPackage[];
    expectOneClient(loaded, expectedClientVersion());
    const { stdout: node } = await run(join(root, "node_modules", ".bin", "tsx"), ["-e", "console.log(process.versions.node)"], { cwd: root });
    expect(node.trim()).toBe(process.versions.node);
  });
});
