/**
 * Receive times: epoch milliseconds or a `Date`, checked once.
 */

export function isEpochMs(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value) && value >= 0;
}

export function epochMs(value: unknown, field: string): number {
  const ms = value instanceof Date ? value.getTime() : value;
  if (!isEpochMs(ms)) {
    throw new TypeError(`${field} must be epoch milliseconds (Date.now()) or a valid Date, got ${String(value)}`);
  }
  return ms;
}

