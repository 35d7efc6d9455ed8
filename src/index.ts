/**
 * jetstream-inprogress: bounded JetStream InProgress heartbeats, commit-then-ack settlement
 * and fail-closed AckWait/BackOff guardrails for Node.js consumer services.
 *
 * @packageDocumentation
 */
export {
  ACK_WAIT_SAFETY_RATIO,
  DEFAULT_IN_PROGRESS_POLICY,
  checkInProgressPolicy,
  consumerTimingFromConfig,
  verifyInProgressPolicy,
} from "./guardrails.js";
export type {
  BackOffMode,
  CheckOptions,
  ConsumerTiming,
  DisabledInProgressPolicy,
  InProgressPolicy,
  PolicyCheck,
  PolicyViolation,
  VerifiedInProgressPolicy,
  ViolationCode,
} from "./guardrails.js";
export {
  ConsumerPolicyError,
  HeartbeatLimitError,
  InProgressPolicyError,
  LeaseExpiredError,
  PermanentSinkError,
  TemporarySinkError,
} from "./errors.js";
export type { ConsumerPolicyReason } from "./errors.js";
export { InMemoryMetrics, MetricNames } from "./metrics.js";
export type { MetricLabels, MetricName, MetricsSink, MetricsSnapshot } from "./metrics.js";
export { DiagnosticsChannels } from "./diagnostics.js";
export type {
  BatchEventBase,
  BatchSettledEvent,
  HeartbeatFailedEvent,
  HeartbeatLimitEvent,
  HeartbeatSentEvent,
  LeaseExpiredEvent,
} from "./diagnostics.js";
export { withInProgress } from "./with-in-progress.js";
export type { HeartbeatConfirmation, Lease, WithInProgressOptions, WorkContext } from "./with-in-progress.js";
export { CommitThenAck } from "./commit-then-ack.js";
export type {
  BatchOutcome,
  BatchResult,
  BatchWrite,
  CommitThenAckOptions,
  FailedMessage,
  ForConsumerOptions,
  MessageResult,
  ProcessOptions,
  TemporaryFailureAction,
  WriteReport,
} from "./commit-then-ack.js";
export type { RunOptions } from "./run-loop.js";
export type { ConfirmAckOptions } from "./settle.js";
export { DeadLetterHeaders } from "./dead-letter.js";
export type { DeadLetterTarget } from "./dead-letter.js";
export { watchConsumer } from "./watch-consumer.js";
export type { ConsumerInfoSource, ConsumerPollFailure, ConsumerWatch, WatchConsumerOptions } from "./watch-consumer.js";
export type { ConsumerHealthSample } from "./consumer-health.js";
