// Compiles TypeScript files as a strict service would (strict, exactOptionalPropertyTypes,
// noUncheckedIndexedAccess, NodeNext), against this checkout's sources or against an
// installed package: test/unit/consumer-types.test.ts uses it on the fixtures in test/types/,
// scripts/check-package.mjs on the same fixtures against the packed package.
import ts from "typescript";

/** The compiler options of a strict service. */
export const SERVICE_OPTIONS = {
  strict: true,
  exactOptionalPropertyTypes: true,
  noUncheckedIndexedAccess: true,
  noImplicitOverride: true,
  target: ts.ScriptTarget.ES2022,
  lib: ["lib.es2023.d.ts"],
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  types: ["node"],
  skipLibCheck: true,
  noEmit: true,
};

/**
 * The diagnostics of compiling `files` (absolute paths), each `{ file, line, message }` with a
 * 1-based line. `options` are added to SERVICE_OPTIONS (for example `paths` to map the package
 * name onto sources). With `withoutExpectError`, every `// @ts-expect-error` in `files` is
 * read as a plain comment, so the errors it would swallow are reported.
 */
export function compile(files, { options = {}, withoutExpectError = false } = {}) {
  const compilerOptions = { ...SERVICE_OPTIONS, ...options };
  const host = ts.createCompilerHost(compilerOptions, true);
  if (withoutExpectError) {
    const own = new Set(files);
    const getSourceFile = host.getSourceFile.bind(host);
    host.getSourceFile = (fileName, languageVersion, onError, shouldCreate) => {
      if (!own.has(fileName)) return getSourceFile(fileName, languageVersion, onError, shouldCreate);
      const text = ts.sys.readFile(fileName)?.replaceAll("// @ts-expect-error", "// expected error:");
      return text === undefined ? undefined : ts.createSourceFile(fileName, text, languageVersion, true);
    };
  }
  const program = ts.createProgram({ rootNames: files, options: compilerOptions, host });
  return ts.getPreEmitDiagnostics(program).map((d) => ({
    file: d.file?.fileName,
    line: d.file !== undefined && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line + 1 : undefined,
    message: ts.flattenDiagnosticMessageText(d.messageText, "\n"),
  }));
}

/** One line per diagnostic, for a failure message. */
export function format(diagnostics, root = "") {
  return diagnostics.map((d) => `${d.file?.replace(root, "") ?? "?"}:${d.line ?? "?"} ${d.message.split("\n")[0]}`).join("\n");
}
