/**
 * The registry of verified policies. A WeakSet cannot be forged by copying or spreading a
 * policy object, and it lives on `globalThis` under a registered symbol, so every copy of this
 * module in a process (the ESM and CommonJS builds side by side) shares it: a policy verified
 * by one copy is recognised by the other.
 */
import type { VerifiedInProgressPolicy } from "./in-progress-policy.js";

const REGISTRY_KEY = Symbol.for("jetstream-inprogress.verified-policies");
const verified: WeakSet<object> = ((globalThis as Record<symbol, unknown>)[REGISTRY_KEY] as
  | WeakSet<object>
  | undefined) ?? new WeakSet<object>();
(globalThis as Record<symbol, unknown>)[REGISTRY_KEY] = verified;

/** Records a frozen policy as verified (only the guardrails call it). */
export function markVerified(policy: VerifiedInProgressPolicy): void {
  verified.add(policy);
}

/**
 * True when `policy` is an object returned by {@link verifyInProgressPolicy} or
 * {@link checkInProgressPolicy}. Not part of the public barrel.
 *
 * @internal
 */
export function isVerifiedPolicy(policy: unknown): policy is VerifiedInProgressPolicy {
  return typeof policy === "object" && policy !== null && verified.has(policy);
}

