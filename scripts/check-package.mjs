// Checks the packed package as a consumer would get it: publint (package.json, exports,
// files) and Are The Types Wrong (types resolve for ESM and CommonJS, under node10/node16/bundler).
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const dir = mkdtempSync(join(tmpdir(), "jsip-pack-"));
const run = (cmd, args) => execFileSync(cmd, args, { stdio: "inherit" });
try {
  const out = execFileSync("npm", ["pack", "--json", "--pack-destination", dir], { encoding: "utf8" });
  const [{ filename, files }] = JSON.parse(out);
  const tarball = join(dir, filename);
  console.log(`packed ${filename}: ${files.length} files`);
  const leaked = files.map((f) => f.path).filter((p) => !/^(dist\/|README\.md$|CHANGELOG\.md$|LICENSE$|package\.json$)/.test(p));
  if (leaked.length > 0) throw new Error(`unexpected files in the package: ${leaked.join(", ")}`);
  run("npx", ["--no-install", "publint", "run", tarball, "--strict"]);
  run("npx", ["--no-install", "attw", tarball, "--format", "table-flipped"]);
  console.log("package checks passed");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
