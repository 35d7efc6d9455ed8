// Checks the packed package as a consumer would get it. It packs as from a fresh clone (no
// dist/: the prepack script must build it), then checks only the allowed files ship, every
// relative link of the README and of the shipped docs/*.md pages resolves inside the tarball,
// every example path the README names is present, every relative import of a shipped example
// resolves, then publint (package.json, exports, files), Are The Types Wrong (types resolve
// for ESM and CommonJS, under node10/node16/bundler), loads every entry point of the unpacked
// tarball with require() and with import, which must see the same names, and finally compiles
// the typed services of test/types/ (nats 2.x and 3.x clients) against the packed types.
//
// The link and path checks are pure functions of the packed file list and the texts, exported
// for the unit test; the checks run only when this file is the program.
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, posix, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { compile, format } from "./consumer-types.mjs";

/** What may be in the tarball: the build, the top-level texts, the docs pages and the examples. */
const ALLOWED = /^(dist\/[^/].*|README\.md|CHANGELOG\.md|LICENSE|package\.json|docs\/[^/]+\.md|examples\/[^/]+\.(?:ts|cjs))$/;

/** The entry points a consumer loads, by specifier. */
const ENTRIES = ["jetstream-inprogress", "jetstream-inprogress/prometheus", "jetstream-inprogress/opentelemetry"];

/** Peer dependencies the entry points load, linked from this checkout into the consumer's node_modules. */
const PEERS = ["@nats-io", "@opentelemetry", "prom-client"];

/** What the typed services of test/types/ compile with besides the peers: the legacy client and Node's types. */
const TYPED_SERVICE_DEPENDENCIES = ["nats", "@types"];

/** The typed services (test/types/<client>/) compiled against the packed declarations. */
const TYPED_SERVICES = ["nats-2", "nats-3"];

/**
 * The problems of loading the entry points both ways: `names[format][entry]` is the sorted list
 * of names `require()` (`cjs`) or `import` (`esm`) saw, or an error message string.
 */
export function loadProblems(names) {
  const problems = [];
  for (const entry of ENTRIES) {
    const cjs = names.cjs[entry];
    const esm = names.esm[entry];
    for (const [format, got] of [["require()", cjs], ["import", esm]]) {
      if (!Array.isArray(got)) problems.push(`${format} of ${entry} failed: ${String(got)}`);
      else if (got.length === 0) problems.push(`${format} of ${entry} gave no exports`);
    }
    if (Array.isArray(cjs) && Array.isArray(esm) && cjs.length > 0 && esm.length > 0 && cjs.join() !== esm.join()) {
      problems.push(`${entry}: require() and import see different names (only require: ${cjs.filter((n) => !esm.includes(n)).join(", ") || "-"}; only import: ${esm.filter((n) => !cjs.includes(n)).join(", ") || "-"})`);
    }
  }
  if (Array.isArray(names.cjs[ENTRIES[0]]) && !names.cjs[ENTRIES[0]].includes("CommitThenAck")) problems.push(`${ENTRIES[0]} does not export CommitThenAck`);
  return problems;
}

/** Paths in the tarball that are not allowed (`files` holds paths relative to the package root). */
export function unexpectedFiles(files) {
  return files.filter((p) => !ALLOWED.test(p));
}

/**
 * The link targets of a Markdown text: inline links and images `[x](target "title")` and
 * reference definitions `[x]: target`, outside fenced code blocks and inline code.
 */
export function linkTargets(markdown) {
  const text = markdown.replace(/^(```|~~~)[\s\S]*?^\1[^\n]*$/gm, "").replace(/`[^`\n]*`/g, "");
  const targets = [];
  for (const m of text.matchAll(/!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+["'(][^)]*)?\)/g)) targets.push(m[1]);
  for (const m of text.matchAll(/^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$/gm)) targets.push(m[1]);
  return targets;
}

/** Whether a link target leaves the package: a URL (`https:`, `mailto:`), or an anchor of the page itself. */
function isExternal(target) {
  return /^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith("#") || target.startsWith("//");
}

/**
 * The relative links of `markdown` (a file at `from`, relative to the package root) whose
 * target is not in `files`. A link to a directory counts when some file lies under it.
 * Returns `{ from, target, resolved }` for each dead link.
 */
export function deadLinks(from, markdown, files) {
  const present = new Set(files);
  const dead = [];
  for (const target of linkTargets(markdown)) {
    if (isExternal(target)) continue;
    const path = decodeURIComponent(target.split("#")[0].split("?")[0]);
    if (path === "") continue;
    const resolved = posix.normalize(posix.join(posix.dirname(from), path)).replace(/\/$/, "");
    const found = present.has(resolved) || files.some((f) => f.startsWith(`${resolved}/`));
    if (!found || resolved.startsWith("../")) dead.push({ from, target, resolved });
  }
  return dead;
}

/** The `.ts` / `.js` example paths a text names (`examples/x.ts`, also inside code and commands). */
export function examplePaths(markdown) {
  const paths = new Set();
  for (const m of markdown.matchAll(/(?<![\w./-])(?:[\w.-]+\/)*?(examples\/[\w./-]+?\.(?:ts|js|mjs|cjs|mts|cts))(?![\w/-])/g)) paths.add(m[1]);
  return [...paths];
}

/** The example paths `markdown` names that are not in `files`. */
export function missingExamples(markdown, files) {
  const present = new Set(files);
  return examplePaths(markdown).filter((p) => !present.has(p));
}

/**
 * Relative imports (and `require()` calls) of a shipped source file (`from`) that do not
 * resolve inside the tarball: a `.js` specifier may stand for the `.ts` source.
 */
export function unresolvedImports(from, source, files) {
  const present = new Set(files);
  const missing = [];
  for (const m of source.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*|\brequire\s*\(\s*)["'](\.{1,2}\/[^"']+)["']/g)) {
    const resolved = posix.normalize(posix.join(posix.dirname(from), m[1]));
    const candidates = [resolved, resolved.replace(/\.js$/, ".ts"), resolved.replace(/\.mjs$/, ".mts")];
    if (resolved.startsWith("../") || !candidates.some((c) => present.has(c))) missing.push({ from, specifier: m[1] });
  }
  return missing;
}

/**
 * Every documentation problem of a packed file list: files that must not ship, dead links in
 * the README and the shipped docs pages, example paths the README names that are missing, and
 * shipped examples importing files that are not shipped. `read(path)` returns a packed file's text.
 */
export function packageProblems(files, read) {
  const problems = unexpectedFiles(files).map((p) => `unexpected file in the package: ${p}`);
  if (!files.includes("README.md")) return [...problems, "README.md is not in the package"];
  const pages = ["README.md", ...files.filter((f) => /^docs\/[^/]+\.md$/.test(f))];
  for (const page of pages) {
    for (const d of deadLinks(page, read(page), files)) {
      problems.push(`${d.from}: link (${d.target}) does not resolve inside the package (${d.resolved})`);
    }
  }
  for (const p of missingExamples(read("README.md"), files)) problems.push(`README.md names ${p}, which is not in the package`);
  for (const f of files.filter((x) => /^examples\/.+\.[cm]?[jt]s$/.test(x))) {
    for (const u of unresolvedImports(f, read(f), files)) problems.push(`${u.from} imports ${u.specifier}, which is not in the package`);
  }
  return problems;
}

/** Every file under `dir`, as a path relative to it with `/` separators. */
function walk(dir, base = dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(join(dir, e.name), base) : [relative(base, join(dir, e.name)).split("\\").join("/")],
  );
}

/** Loads every entry point of the package installed under `project` both ways, in a fresh node. */
function loadEntries(project) {
  const script = (format) => `
    const entries = ${JSON.stringify(ENTRIES)};
    const out = {};
    for (const e of entries) {
      try { out[e] = Object.keys(${format === "cjs" ? "require(e)" : "await import(e)"}).filter((k) => k !== "default" && k !== "module.exports").sort(); }
      catch (err) { out[e] = String(err && err.message || err).split("\\n")[0]; }
    }
    console.log(JSON.stringify(out));`;
  const node = (args) => JSON.parse(execFileSync(process.execPath, args, { cwd: project, encoding: "utf8" }));
  return { cjs: node(["-e", script("cjs")]), esm: node(["--input-type=module", "-e", script("esm")]) };
}

/**
 * Compiles the typed services of test/types/ (one on the legacy `nats` 2.x client, one on
 * `@nats-io/jetstream` 3.x) as strict ES modules of a project that installed the tarball, with
 * the packed declarations checked as well.
 */
function checkTypedServices(root, project) {
  for (const dep of TYPED_SERVICE_DEPENDENCIES) symlinkSync(join(root, "node_modules", dep), join(project, "node_modules", dep), "dir");
  writeFileSync(join(project, "package.json"), `${JSON.stringify({ private: true, type: "module" })}\n`);
  for (const service of TYPED_SERVICES) {
    cpSync(join(root, "test", "types", service), join(project, service), { recursive: true });
    const files = readdirSync(join(project, service)).filter((f) => f.endsWith(".ts")).map((f) => join(project, service, f));
    // The packed declarations are checked too (skipLibCheck off); the clients' own are not ours to check.
    const diagnostics = compile(files, { options: { skipLibCheck: false } }).filter((d) => d.file === undefined || d.file.startsWith(project));
    if (diagnostics.length > 0) throw new Error(`the typed service test/types/${service} does not compile against the packed types:\n${format(diagnostics, project)}`);
  }
  console.log(`the typed services (${TYPED_SERVICES.join(", ")}) compile against the packed types as strict ES modules`);
}

function main() {
  const root = process.cwd();
  const dir = mkdtempSync(join(tmpdir(), "jsip-pack-"));
  const run = (cmd, args, options = {}) => execFileSync(cmd, args, { stdio: "inherit", ...options });
  try {
    // As from a fresh clone: no build output before packing, so prepack must make it.
    rmSync(join(root, "dist"), { recursive: true, force: true });
    // The build's own output goes to stdout too: the tarball is found on disk, not in the JSON.
    execFileSync("npm", ["pack", "--pack-destination", dir], { stdio: ["ignore", "ignore", "inherit"] });
    const filename = readdirSync(dir).find((f) => f.endsWith(".tgz"));
    if (filename === undefined) throw new Error("npm pack made no tarball");
    const tarball = join(dir, filename);
    // Read the texts from the tarball itself, not from the working tree.
    const unpacked = join(dir, "unpacked");
    mkdirSync(unpacked);
    run("tar", ["-xzf", tarball, "-C", unpacked]);
    const paths = walk(join(unpacked, "package")).sort();
    console.log(`packed ${filename}: ${paths.length} files`);
    if (!paths.includes("dist/index.cjs") || !paths.includes("dist/index.js")) throw new Error("the package has no build output (dist/): the prepack script must build it");
    const read = (p) => readFileSync(join(unpacked, "package", p), "utf8");
    const problems = packageProblems(paths, read);
    if (problems.length > 0) throw new Error(`the package's documentation does not hold together:\n  ${problems.join("\n  ")}`);
    console.log("README and docs links, example paths and example imports resolve inside the package");
    run("npx", ["--no-install", "publint", "run", tarball, "--strict"]);
    run("npx", ["--no-install", "attw", tarball, "--format", "table-flipped"]);
    // A project with the unpacked tarball as its dependency and this checkout's peers.
    const project = join(dir, "consumer");
    mkdirSync(join(project, "node_modules"), { recursive: true });
    renameSync(join(unpacked, "package"), join(project, "node_modules", "jetstream-inprogress"));
    for (const peer of PEERS) symlinkSync(join(root, "node_modules", peer), join(project, "node_modules", peer), "dir");
    const loaded = loadProblems(loadEntries(project));
    if (loaded.length > 0) throw new Error(`the packed package does not load:\n  ${loaded.join("\n  ")}`);
    console.log(`require() and import load ${ENTRIES.join(", ")} from the tarball, with the same names`);
    checkTypedServices(root, project);
    console.log("package checks passed");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) main();
