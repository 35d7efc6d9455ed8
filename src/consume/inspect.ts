/**
 * Reading a durable consumer's effective timing before anything is fetched: the only I/O at
 * setup, and the only permission it needs is consumer info. Everything that is missing,
 * unreadable or unsafe fails closed with a {@link ConsumerPolicyError}.
 */
import type { ConsumerInfo } from "@nats-io/jetstream";
import { ConsumerPolicyError } from "../errors.js";
import type { JetStreamManagerLike } from "../nats/client-types.js";
import { checkInProgressPolicy } from "../policy/check-policy.js";
import { consumerTimingFromConfig, nanosToMillis } from "../policy/consumer-timing.js";
import type { BackOffMode, ConsumerTiming, InProgressPolicy, VerifiedInProgressPolicy } from "../policy/in-progress-policy.js";
import { inactiveThresholdProblem } from "../policy/inactive-threshold.js";
import { maxDeliverProblem } from "../policy/max-deliver.js";
import { checkConsumerTiming } from "../policy/timing-checks.js";
import { isVerifiedPolicy } from "../policy/verified-policies.js";

/** What {@link inspectConsumer} needs to know. */
export interface InspectOptions {
  /** The InProgress policy the host asks for (defaults fill the rest; disabled by default), or one verified earlier. */
  readonly inProgress?: Partial<InProgressPolicy> | VerifiedInProgressPolicy;
  /** BackOff handling; default `reject`. */
  readonly backOff?: BackOffMode;
  /** The AckWait the host expects (ms); a different value on the server fails closed (drift). */
  readonly ackWaitMs?: number;
  /** The server version (`nc.info.version`), for version-dependent checks. */
  readonly serverVersion?: string;
}

/** The verified result of an inspection. */
export interface Inspection {
  readonly info: ConsumerInfo;
  readonly timing: ConsumerTiming;
  readonly policy: VerifiedInProgressPolicy;
}

/** Reads and checks a durable consumer; throws {@link ConsumerPolicyError} when it is unsuitable. */
export async function inspectConsumer(
  jsm: JetStreamManagerLike,
  stream: string,
  consumer: string,
  options: InspectOptions,
): Promise<Inspection> {
  const fail = (reason: ConstructorParameters<typeof ConsumerPolicyError>[0], message: string, extra: { cause?: unknown; violations?: ConstructorParameters<typeof ConsumerPolicyError>[1]["violations"] } = {}) =>
    new ConsumerPolicyError(reason, { stream, consumer, message, ...(extra.violations ? { violations: extra.violations } : {}) }, extra.cause === undefined ? undefined : { cause: extra.cause });

  // The policy's own shape first, before any request: a misspelt field or a policy that is not
  // an object fails at once, not behind a consumer that is missing or unreadable.
  const shape = checkInProgressPolicy(policyFields(options.inProgress), undefined);
  const misshapen = shape.ok ? [] : shape.violations.filter((v) => v.code === "invalid_policy" || v.code === "unknown_field");
  if (misshapen.length > 0) throw fail("policy_violation", misshapen.map((v) => v.message).join("; "), { violations: misshapen });

  let info: ConsumerInfo;
  try {
    // Read as untrusted data below, whichever client answered.
    info = (await jsm.consumers.info(stream, consumer)) as ConsumerInfo;
  } catch (err) {
    if (isNotFound(err)) throw fail("consumer_not_found", "the stream or the durable consumer does not exist: create it before starting workers", { cause: err });
    throw fail(
      "consumer_unreadable",
      `its info could not be read (${errorLabel(err)}): grant the worker's identity permission for $JS.API.CONSUMER.INFO.${stream}.${consumer} and check the server is reachable`,
      { cause: err },
    );
  }

  const config = ((info as { config?: unknown }).config ?? {}) as Record<string, unknown>;
  if (typeof config["durable_name"] !== "string" || config["durable_name"] === "") {
    throw fail("not_durable", "it is not a durable consumer: workers that share work need a durable consumer (set durable_name)");
  }
  if (config["ack_policy"] !== "explicit") {
    throw fail("ack_policy_not_explicit", `its ack policy is ${JSON.stringify(config["ack_policy"])}: commit-then-ack needs ack_policy "explicit"`);
  }

  const timing = consumerTimingFromConfig(info, "inspected");
  const mode = options.backOff ?? "reject";
  const check = checkInProgressPolicy(policyFields(options.inProgress), timing, { backOff: mode });
  // The consumer's own timing is checked even with heartbeats off: a BackOff also changes
  // NAK delays, and an invalid AckWait is invalid either way.
  const timingViolations = check.ok && !check.policy.enabled ? checkConsumerTiming(timing, mode) : [];
  if (!check.ok || timingViolations.length > 0) {
    const violations = check.ok ? timingViolations : check.violations;
    throw fail("policy_violation", violations.map((v) => v.message).join("; "), { violations });
  }

  const expected = options.ackWaitMs;
  if (expected !== undefined && timing.ackWaitMs !== undefined && expected !== timing.ackWaitMs) {
    throw fail(
      "ack_wait_drift",
      `the host expects AckWait ${expected} ms but the server has ${timing.ackWaitMs} ms: update the configuration or the consumer so they agree`,
    );
  }

  if (check.policy.enabled) {
    const threshold = config["inactive_threshold"] === undefined ? undefined : nanosToMillis(config["inactive_threshold"]);
    const problem = inactiveThresholdProblem(threshold, check.policy.intervalMs, options.serverVersion);
    if (problem) throw fail("inactive_threshold_too_short", problem);
  }

  if (mode === "aware" && timing.backOffMs && timing.backOffMs.length > 0) {
    const problem = maxDeliverProblem(timing.maxDeliver, timing.backOffMs.length, options.serverVersion);
    if (problem) throw fail("max_deliver_backoff", problem);
  }
  return { info, timing, policy: check.policy };
}

/**
 * The policy fields to check: a policy verified earlier (against another timing, perhaps) is
 * checked again on its own fields, so it can be passed wherever a policy is.
 */
function policyFields(policy: InspectOptions["inProgress"]): unknown {
  // Only a missing policy is the disabled default: null is refused, as by the constructor.
  if (!isVerifiedPolicy(policy)) return policy === undefined ? {} : policy;
  const { enabled, intervalMs, maxHeartbeats, shutdownTimeoutMs } = policy;
  return { enabled, intervalMs, maxHeartbeats, shutdownTimeoutMs };
}

/** Consumer or stream not found: the 3.x client's error classes and codes, or the JetStream API error nats 2.x keeps in `api_error`. */
function isNotFound(err: unknown): boolean {
  const e = err as { name?: unknown; code?: unknown; status?: unknown; api_error?: { err_code?: unknown } } | null;
  if (!e || typeof e !== "object") return false;
  const apiCode = e.api_error?.err_code;
  return e.name === "ConsumerNotFoundError" || e.name === "StreamNotFoundError" || e.code === 10014 || e.code === 10059 || e.status === 404 || apiCode === 10014 || apiCode === 10059;
}

function errorLabel(err: unknown): string {
  return err instanceof Error && /^[A-Za-z0-9_]{1,64}$/.test(err.name) ? err.name : "error";
}
