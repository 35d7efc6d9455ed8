// Checks the packed package as a consumer would get it: only the allowed files, every relative
// link of the README and of the shipped docs/*.md pages resolving inside the tarball, every
// example path the README names present, every relative import of a shipped example
// resolvable, then publint (package.json, exports, files) and Are The Types Wrong (types
// resolve for ESM and CommonJS, under node10/node16/bundler).
//
// The link and path checks are pure functions of the packed file list and the texts, exported
// for the unit test; the checks run only when this file is the program.
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, posix } from "node:path";
import { pathToFileURL } from "node:url";

/** What may be in the tarball: the build, the top-level texts, the docs pages and the examples. */
const ALLOWED = /^(dist\/[^/].*|README\.md|CHANGELOG\.md|LICENSE|package\.json|docs\/[^/]+\.md|examples\/[^/]+\.ts)$/;

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
 * Relative imports of a shipped source file (`from`) that do not resolve inside the tarball:
 * a `.js` specifier may stand for the `.ts` source.
 */
export function unresolvedImports(from, source, files) {
  const present = new Set(files);
  const missing = [];
  for (const m of source.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)["'](\.{1,2}\/[^"']+)["']/g)) {
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

function main() {
  const dir = mkdtempSync(join(tmpdir(), "jsip-pack-"));
  const run = (cmd, args, options = {}) => execFileSync(cmd, args, { stdio: "inherit", ...options });
  try {
    const out = execFileSync("npm", ["pack", "--json", "--pack-destination", dir], { encoding: "utf8" });
    const [{ filename, files }] = JSON.parse(out);
    const tarball = join(dir, filename);
    const paths = files.map((f) => f.path);
    console.log(`packed ${filename}: ${paths.length} files`);
    // Read the texts from the tarball itself, not from the working tree.
    const unpacked = join(dir, "unpacked");
    mkdirSync(unpacked);
    run("tar", ["-xzf", tarball, "-C", unpacked]);
    const read = (p) => readFileSync(join(unpacked, "package", p), "utf8");
    const problems = packageProblems(paths, read);
    if (problems.length > 0) throw new Error(`the package's documentation does not hold together:\n  ${problems.join("\n  ")}`);
    console.log("README and docs links, example paths and example imports resolve inside the package");
    run("npx", ["--no-install", "publint", "run", tarball, "--strict"]);
    run("npx", ["--no-install", "attw", tarball, "--format", "table-flipped"]);
    console.log("package checks passed");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) main();
