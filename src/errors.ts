/**
 * The error classes of the library, and the types their fields use: the ground floor. The
 * classes live in `errors/`, one file per stage they belong to; this file gathers them, so every
 * stage takes its errors from here. Every class is recognised by `instanceof` across copies of
 * the library in one process (see `errors/error-kind.ts`).
 */
export { errorKind, errorName } from "./errors/error-kind.js";
export { ConsumerPolicyError, InProgressPolicyError, type ConsumerPolicyReason, type PolicyViolation, type ViolationCode } from "./errors/policy-errors.js";
export { PermanentSinkError, TemporarySinkError } from "./errors/sink-errors.js";
export { ConnectionClosedError, DisconnectedError, HeartbeatLimitError, HeartbeatThreadError, LeaseExpiredError, type HeartbeatThreadFailure } from "./errors/lease-errors.js";
export { AckNotConfirmedError, DeadLetterError, type DeadLetterFailure } from "./errors/settle-errors.js";
