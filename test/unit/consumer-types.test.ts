/**
 * The public types as a strict service meets them: a service typed against the legacy `nats`
 * 2.x client and one typed against `@nats-io/jetstream` 3.x both compile against the sources;
 * a write's report in a wrong shape does not compile, and nothing else is refused; and the
 * sources themselves use nothing of a message or a client that `nats` 2.x or JsMsgLike lacks.
 * (`npm run check:package` compiles the same services against the packed type declarations.)
 */
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

interface Diagnostic {
  readonly file: string | undefined;
  readonly line: number | undefined;
  readonly message: string;
}
interface ConsumerTypes {
  compile(files: readonly string[], options?: { options?: ts.CompilerOptions; withoutExpectError?: boolean }): Diagnostic[];
  format(diagnostics: readonly Diagnostic[], root?: string): string;
}

const root = join(import.meta.dirname, "..", "..");
// A computed specifier: the script is plain JavaScript without declarations.
const { compile, format } = (await import(pathToFileURL(join(root, "scripts", "consumer-types.mjs")).href)) as ConsumerTypes;
const types = join(root, "test", "types");
const onSources = { paths: { "jetstream-inprogress": [join(root, "src", "index.ts")] } };

function tsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? tsFiles(join(dir, e.name)) : e.name.endsWith(".ts") && !e.name.endsWith(".d.ts") ? [join(dir, e.name)] : [],
  );
}

/** The lines that follow a `// @ts-expect-error` in `file` (1-based). */
function expectedErrorLines(file: string): number[] {
  return readFileSync(file, "utf8")
    .split("\n")
    .flatMap((line, i) => (line.trim().startsWith("// @ts-expect-error") ? [i + 2] : []));
}

describe.each(["nats-2", "nats-3"])("a strict service on %s", (client) => {
  const dir = join(types, client);

  it("compiles against the library (strict, exactOptionalPropertyTypes, noUncheckedIndexedAccess)", () => {
    const diagnostics = compile(tsFiles(dir), { options: onSources });
    expect(format(diagnostics, root)).toBe("");
  });

  it("a write resolving with a report in a wrong shape does not compile, and says what to return", () => {
    const file = join(dir, "reports.ts");
    const expected = expectedErrorLines(file);
    // The five shapes a migrating service wrote by mistake, two under run, one on one path.
    expect(expected).toHaveLength(8);
    const diagnostics = compile([file], { options: onSources, withoutExpectError: true });
    expect(diagnostics.map((d) => d.line)).toEqual(expected);
    for (const d of diagnostics) {
      expect(d.message).toContain("WriteReportExpected");
      expect(d.message).toContain("failed must be readonly FailedMessage[]: one { msg, error } per message that failed");
    }
  });

  it("the service imports only its own client", () => {
    const imports = tsFiles(dir).flatMap((f) => ts.preProcessFile(readFileSync(f, "utf8"), true, true).importedFiles.map((i) => i.fileName));
    const packages = new Set(imports.filter((s) => !s.startsWith(".")));
    expect([...packages].sort()).toEqual(client === "nats-2" ? ["jetstream-inprogress", "nats"] : ["@nats-io/jetstream", "@nats-io/transport-node", "jetstream-inprogress"]);
  });
});

describe("the sources", () => {
  const config = ts.getParsedCommandLineOfConfigFile(join(root, "tsconfig.json"), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => undefined });
  const sources = tsFiles(join(root, "src"));

  function compileSources(peers: Record<string, string>): string {
    const options = { ...config!.options, paths: Object.fromEntries(Object.entries(peers).map(([name, file]) => [name, [join(types, file)]])) };
    const program = ts.createProgram(sources, options);
    const diagnostics = ts.getPreEmitDiagnostics(program);
    return diagnostics.map((d) => `${d.file?.fileName.replace(root, "") ?? "?"}: ${ts.flattenDiagnosticMessageText(d.messageText, " ")}`).join("\n");
  }

  it("type-check with nats 2.29's types as the client's: they use nothing a nats 2.x object lacks", () => {
    expect(compileSources({ "@nats-io/jetstream": "peers-nats-2/jetstream.d.ts", "@nats-io/transport-node": "peers-nats-2/transport-node.d.ts" })).toBe("");
  });

  it("type-check with JsMsgLike as the client's JsMsg: they read and call nothing on a message that it lacks", () => {
    expect(compileSources({ "@nats-io/jetstream": "peers-like/jetstream.d.ts", "@nats-io/transport-node": "peers-nats-2/transport-node.d.ts" })).toBe("");
  });

  it("the checks can fail: a source reading JsMsg.time does not type-check on nats 2.29", () => {
    const file = join(root, "src", "nats", "message-access.ts");
    const options = { ...config!.options, paths: { "@nats-io/jetstream": [join(types, "peers-nats-2", "jetstream.d.ts")] } };
    const host = ts.createCompilerHost(options, true);
    const getSourceFile = host.getSourceFile.bind(host);
    host.getSourceFile = (name, version, onError, create) =>
      name === file ? ts.createSourceFile(name, `${readFileSync(file, "utf8")}\nexport const received = (m: JsMsg): Date => m.time;\n`, version, true) : getSourceFile(name, version, onError, create);
    const diagnostics = ts.getPreEmitDiagnostics(ts.createProgram([file], options, host));
    expect(diagnostics.map((d) => ts.flattenDiagnosticMessageText(d.messageText, " "))).toEqual([expect.stringContaining("Property 'time' does not exist")]);
  });
});
