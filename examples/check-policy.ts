/**
 * The guardrails on their own: check a policy against a consumer's AckWait before fetching.
 * Run: npx tsx examples/check-policy.ts
 */
import { InProgressPolicyError, checkInProgressPolicy, verifyInProgressPolicy } from "jetstream-inprogress";

const timing = { ackWaitMs: 30_000, source: "configured" } as const;

// An unsafe policy: the interval sits exactly on the 80% boundary.
const check = checkInProgressPolicy({ enabled: true, intervalMs: 24_000 }, timing);
if (!check.ok) {
  for (const v of check.violations) console.log(`refused ${v.code}: ${v.message}`);
}

// A typo and a bad value, reported together.
try {
  verifyInProgressPolicy({ enabled: true, interval_ms: 10_000, maxHeartbeats: 0 }, timing);
} catch (err) {
  if (!(err instanceof InProgressPolicyError)) throw err;
  console.log(err.violations.map((v) => v.code).join(", "));
}

// A safe policy: frozen and ready for withInProgress or CommitThenAck.
const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 10_000, maxHeartbeats: 30 }, timing);
console.log(`verified: every ${policy.intervalMs} ms, at most ${policy.maxHeartbeats} beats`);
