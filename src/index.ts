/**
 * jetstream-inprogress: bounded JetStream InProgress heartbeats, commit-then-ack settlement
 * and fail-closed AckWait/BackOff guardrails for Node.js consumer services.
 *
 * @packageDocumentation
 */

// The guardrails (pure).
export { checkInProgressPolicy, verifyInProgressPolicy } from "./policy/check-policy.js";
export { consumerTimingFromConfig } from "./policy/consumer-timing.js";
export { ACK_WAIT_SAFETY_RATIO, DEFAULT_IN_PROGRESS_POLICY } from "./policy/in-progress-policy.js";
export type {
  BackOffMode,
  CheckOptions,
  ConsumerTiming,
  DisabledInProgressPolicy,
  InProgressPolicy,
  PolicyCheck,
  VerifiedInProgressPolicy,
} from "./policy/in-progress-policy.js";

// Errors.
export {
  AckNotConfirmedError,
  ConnectionClosedError,
  ConsumerPolicyError,
  DeadLetterError,
  DisconnectedError,
  HeartbeatLimitError,
  InProgressPolicyError,
  LeaseExpiredError,
  PermanentSinkError,
  TemporarySinkError,
} from "./errors.js";
export type { ConsumerPolicyReason, DeadLetterFailure, PolicyViolation, ViolationCode } from "./errors.js";

// Telemetry.
export { InMemoryMetrics } from "./telemetry/in-memory-metrics.js";
export type { MetricsSnapshot } from "./telemetry/in-memory-metrics.js";
export { MetricNames } from "./telemetry/metric-names.js";
export type { MetricName } from "./telemetry/metric-names.js";
export type { MetricLabels, MetricsSink } from "./telemetry/metrics-sink.js";
export type { BatchTrace, TracedBatch, TracedOutcome, Tracing } from "./telemetry/tracing.js";
export { DiagnosticsChannels } from "./telemetry/diagnostics.js";
export type { BatchEventBase } from "./telemetry/diagnostics.js";
export type { HeartbeatFailedEvent, HeartbeatLimitEvent, HeartbeatSentEvent, LeaseExpiredEvent } from "./lease/lease-events.js";
export type { EventLoopStallEvent } from "./lease/stall-watch.js";
export type { BatchSettledEvent, MessageExhaustedEvent } from "./settle/settle-events.js";

// The NATS client's objects, as the library reads them (either client fits).
export type { JetStreamManagerLike, JsMsgLike, MsgHdrsLike, NatsConnectionLike, PullConsumerLike } from "./nats/client-types.js";

// Heartbeat supervision.
export { withInProgress } from "./lease/with-in-progress.js";
export type { HeartbeatConfirmation, Lease, WithInProgressOptions, WorkContext } from "./lease/work-context.js";
export type { HeartbeatThreadConnection, HeartbeatThreadOption } from "./lease/heartbeat-thread-options.js";

// Settling.
export type {
  BatchOutcome,
  BatchResult,
  BatchWrite,
  FailedMessage,
  MessageResult,
  TemporaryFailureAction,
  WriteReport,
} from "./settle/batch-result.js";
export type { WriteReportCheck, WriteReportExpected } from "./settle/write-check.js";
export type { ConfirmAckOptions } from "./settle/frames.js";
export { DeadLetterHeaders } from "./settle/dead-letter.js";
export type { DeadLetterTarget } from "./settle/dead-letter.js";

// Consuming.
export { CommitThenAck } from "./consume/commit-then-ack.js";
export type { CommitThenAckOptions, ForConsumerOptions, ProcessOptions } from "./consume/commit-then-ack-options.js";
export type { ConsumerBinding } from "./consume/consumer-binding.js";
export type { PullOptions, RunEachOptions, RunErrorContext, RunOptions } from "./consume/run-options.js";

// Consumer health.
export { watchConsumer } from "./health/watch-consumer.js";
export type { ConsumerWatch } from "./health/watch-consumer.js";
export type { ConsumerInfoSource, ConsumerPollFailure, WatchConsumerOptions } from "./health/watch-options.js";
export type { ConsumerHealthSample } from "./health/consumer-health.js";
export type { StallEvidence } from "./health/stall-rule.js";
