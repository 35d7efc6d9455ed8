/** The shim's file URL for `specifier` imported by `importer`, or `undefined` when it resolves as usual. */
export declare function legacyShim(specifier: string, importer: string | undefined): string | undefined;
