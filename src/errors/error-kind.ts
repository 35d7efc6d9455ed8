/**
 * What makes every error class of the library recognisable across copies of the library in one
 * process (the ESM and CommonJS builds side by side, two installed versions): its prototype
 * carries a kind under a registered symbol, and the class's `Symbol.hasInstance` accepts an
 * object of that kind. A host's own subclass keeps the ordinary `instanceof`. And the one way an
 * error is named in events and metrics.
 */
const ERROR_KIND = Symbol.for("jetstream-inprogress.error-kind");

/** The kind of a library error from any copy of the library, or `undefined`. */
export function errorKind(value: unknown): string | undefined {
  try {
    if (typeof value !== "object" || value === null) return undefined;
    const kind: unknown = (value as Record<symbol, unknown>)[ERROR_KIND];
    return typeof kind === "string" ? kind : undefined;
  } catch {
    return undefined;
  }
}

/** Makes `cls` recognised by `instanceof` across copies of the library, as `kind`. */
export function recognise(cls: abstract new (...args: never[]) => Error, kind: string): void {
  Object.defineProperty(cls.prototype, ERROR_KIND, { value: kind });
  Object.defineProperty(cls, Symbol.hasInstance, {
    value(this: unknown, value: unknown): boolean {
      if (typeof this === "function" && Function.prototype[Symbol.hasInstance].call(this, value)) return true;
      // Only the class itself accepts copies; a host's subclass keeps the ordinary check.
      return this === cls && errorKind(value) === kind;
    },
  });
}

/**
 * An error's class name for events and metrics — never its message, which may carry
 * subjects or payload fragments.
 *
 * @internal
 */
export function errorName(err: unknown): string {
  if (err instanceof Error) return /^[A-Za-z0-9_$.]{1,64}$/.test(err.name) ? err.name : "Error";
  return err === null ? "null" : typeof err;
}

