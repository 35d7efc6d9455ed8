/**
 * What a consumer loop learns and builds before its first pull: the consumer's limits (from
 * `forConsumer`'s binding, or the info `js.consumers.get()` already holds), the capacity, the
 * lease-bounded pull expiry, the source, and the reports a host needs (`max_ack_pending` below
 * the capacity, an expiry clamped, a paused or vanished consumer).
 */
import type { Consumer, ConsumerInfo } from "@nats-io/jetstream";
import { ConsumerPolicyError } from "../errors.js";
import { HoldingBeats } from "../lease/holding-beats.js";
import { sharedScheduler } from "../lease/scheduler.js";
import { canConfirmInBatches } from "../nats/ack-inbox.js";
import { connectionOfConsumer, serverVersionOf, type Flushable } from "../nats/connection-state.js";
import { AckingDeliveries } from "../settle/acking-deliveries.js";
import type { ConfirmAckOptions } from "../settle/frames.js";
import type { LoopConfirmation } from "../settle/settler.js";
import { consumerTimingFromConfig, nanosToMillis } from "../policy/consumer-timing.js";
import { inactiveThresholdProblem } from "../policy/inactive-threshold.js";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { ConsumerBinding } from "./consumer-binding.js";
import { Intake } from "./intake.js";
import { expiryBound, pullExpiryMs, shortestWindowMs } from "./intake-plan.js";
import { consumeSource, fetchSource, type Arrival, type PullSource, type SourceNotice } from "./pull-source.js";
import { linkProblem, measureRttMs } from "./link-check.js";
import { isRefusedByClient, refusedPull, type LoopBase } from "./run-loop.js";
import { callGuarded, type LoopSettings } from "./run-options.js";

/** A consumer as the loops use it. */
export type LoopConsumer = Pick<Consumer, "fetch"> & Partial<Pick<Consumer, "consume" | "info">>;

/** What a loop knows about its consumer before the first pull. */
export interface ConsumerFacts {
  readonly stream: string | undefined;
  readonly consumer: string | undefined;
  readonly ackWaitMs: number | undefined;
  readonly backOffMs: readonly number[] | undefined;
  /** MaxDeliver (0 or less: unlimited); `undefined` when the consumer's info was not at hand. */
  readonly maxDeliver: number | undefined;
  readonly maxAckPending: number | undefined;
  readonly pinned: boolean;
  readonly paused: boolean;
  /** The consumer's `inactive_threshold` (ms), when the loop read it (`forConsumer` checked it already). */
  readonly inactiveThresholdMs?: number;
}

/** What the instance gives a loop. */
export interface LoopInputs {
  readonly binding: ConsumerBinding | undefined;
  /** The heartbeat interval when heartbeats are on. */
  readonly intervalMs: number | undefined;
  readonly metrics: MetricsRecorder;
  readonly connection: (Partial<Flushable> & { isClosed(): boolean }) | undefined;
  readonly shutdownTimeoutMs: number;
  /** A batch is being retried in place (the sink is down): pull nothing new. */
  readonly sinkDown: () => boolean;
  /** Calls the listener once no batch is retried any more; returns its remover. */
  readonly onRecovered: (listener: () => void) => () => void;
  /** The host's `confirmAck`: `false` turns the loops' confirmed ACKs off; options use the host's. */
  readonly confirmAck: ConfirmAckOptions | false | undefined;
}

/** A loop's settings and the parts both loops share. */
export interface LoopSetup {
  readonly settings: LoopSettings;
  readonly facts: ConsumerFacts;
  readonly base: LoopBase;
  /** The intake of a batch loop (its waiting messages beaten when heartbeats are on). */
  intake(): Intake;
}

/** How often an idle loop may look whether its consumer was paused. */
const PAUSE_CHECK_MS = 30_000;

/** Learns the consumer's facts, then builds the loop's settings, source and reports. */
export async function setUpLoop(consumer: LoopConsumer, settings: LoopSettings, inputs: LoopInputs, mode: "batch" | "each"): Promise<LoopSetup> {
  const facts = await learnConsumer(consumer, inputs.binding, settings.pull);
  const report = (err: Error, during: "start" | "fetch"): void => void callGuarded(settings.onError, err, Object.freeze({ during }));
  const named = (reason: ConstructorParameters<typeof ConsumerPolicyError>[0], message: string): ConsumerPolicyError =>
    new ConsumerPolicyError(reason, { stream: facts.stream ?? "?", consumer: facts.consumer ?? "?", message });

  // Before the first pull, as forConsumer checks it: a consumer the server would delete between two beats.
  const inactive = inactiveThresholdProblem(facts.inactiveThresholdMs, inputs.intervalMs, serverVersionOf(inputs.connection) ?? serverVersionOf(connectionOfConsumer(consumer)));
  if (inactive !== undefined) throw named("inactive_threshold_too_short", inactive);

  let capacity = settings.capacity;
  if (facts.maxAckPending !== undefined && facts.maxAckPending < capacity) {
    report(
      named(
        "max_ack_pending_below_capacity",
        `its max_ack_pending is ${facts.maxAckPending}, below the ${capacity} messages the loop could hold (${settings.capacityRule}): the loop holds at most ${facts.maxAckPending}; raise max_ack_pending or lower concurrency or batchSize`,
      ),
      "start",
    );
    capacity = facts.maxAckPending;
  }
  const bound = expiryBound(inputs.intervalMs, shortestWindowMs(facts.ackWaitMs, facts.backOffMs));
  const expiry = pullExpiryMs(settings.expiresMs, bound);
  if (expiry.clamped) {
    const why =
      bound.basis === "interval"
        ? `the heartbeat interval (${inputs.intervalMs} ms)`
        : bound.basis === "ack_wait"
          ? `a quarter of the consumer's redelivery window (${shortestWindowMs(facts.ackWaitMs, facts.backOffMs)} ms), heartbeats being off`
          : "the client's minimum, the consumer's AckWait being unknown and heartbeats off";
    report(
      named(
        "pull_expiry_clamped",
        `expiresMs ${settings.expiresMs} is longer than ${why}: pulls expire after ${expiry.ms} ms instead, so a partial batch never waits longer (a pull is never cut short: the server may be delivering into it)`,
      ),
      "start",
    );
  }
  if (facts.paused) report(named("consumer_paused", "it is paused: nothing is delivered until it resumes; the loop waits for it"), "start");

  const loopSettings: LoopSettings = { ...settings, capacity, expiresMs: expiry.ms };
  const flushing = inputs.connection?.flush !== undefined ? (inputs.connection as Flushable) : connectionOfConsumer(consumer);
  // Both loops read the consumer through one gated subscription when the client has one: a
  // request per refill and no prefetch, no subscription per pull, and a pull the client never
  // ends while the server still delivers into it (a fetch's heartbeat watch does, on a slow link).
  const subscribed = typeof consumer.consume === "function";
  const rtt = await measureRttMs(flushing);
  const window = shortestWindowMs(facts.ackWaitMs, facts.backOffMs);
  const slow = rtt === undefined ? undefined : linkProblem(rtt, { pullExpiryMs: subscribed ? undefined : expiry.ms, intervalMs: inputs.intervalMs, windowMs: window });
  if (slow !== undefined) throw named("link_too_slow", slow);
  const acking = new AckingDeliveries();
  // A client whose consume() cannot be gated fetches: its pulls must fit the link too.
  const fallbackFetch = (arrive: Arrival): PullSource => {
    const cut = rtt === undefined ? undefined : linkProblem(rtt, { pullExpiryMs: expiry.ms, intervalMs: undefined, windowMs: window });
    if (cut !== undefined) throw named("link_too_slow", cut);
    return fetchSource(consumer, expiry.ms, settings.pull, arrive);
  };
  const openSource = async (deliver: Parameters<LoopBase["openSource"]>[0], room: () => number): Promise<PullSource> => {
    const arrive = skipCommitted(deliver, acking, inputs.metrics);
    if (!subscribed) return fetchSource(consumer, expiry.ms, settings.pull, arrive);
    let source: PullSource | undefined;
    try {
      source = await consumeSource(consumer as Pick<Consumer, "consume">, expiry.ms, capacity, settings.pull, room, arrive);
    } catch (err) {
      // An older client refuses the options of a pinned pull when the subscription opens.
      throw isRefusedByClient(err) ? refusedPull(err) : err;
    }
    if (source === undefined) {
      if (!facts.pinned) return fallbackFetch(arrive);
      throw new TypeError("this NATS client's consume() cannot be bounded to the loop's capacity: use @nats-io/jetstream 3.1 or later for pinned consumers");
    }
    source.onNotice = (n: SourceNotice) => report(named("consumer_unavailable", `its subscription reported ${n.type}${n.description ? ` (${n.description})` : ""}`), "fetch");
    return source;
  };
  const base: LoopBase = {
    openSource,
    metrics: inputs.metrics,
    // The consumer's own connection when none was given: a pull failing on it closed for good ends the loop.
    connection: inputs.connection ?? connectionOfConsumer(consumer),
    shutdownTimeoutMs: inputs.shutdownTimeoutMs,
    sinkDown: inputs.sinkDown,
    onRecovered: inputs.onRecovered,
    confirm: loopConfirmation(inputs.confirmAck, flushing, shortestWindowMs(facts.ackWaitMs, facts.backOffMs)),
    acking,
    flush: () => flushBounded(flushing, inputs.shutdownTimeoutMs),
    onIdle: pauseWatch(consumer, facts.paused, (paused) => {
      if (paused) report(named("consumer_paused", "it is paused: nothing is delivered until it resumes; the loop waits for it"), "fetch");
    }),
  };
  return {
    settings: loopSettings,
    facts,
    base,
    intake: () =>
      new Intake(mode === "batch" && inputs.intervalMs !== undefined ? new HoldingBeats(inputs.intervalMs, sharedScheduler(), inputs.metrics, inputs.connection) : undefined),
  };
}

/** The consumer's facts: from the binding when `forConsumer` made the instance, else from the info the consumer object holds. */
export async function learnConsumer(consumer: LoopConsumer, binding: ConsumerBinding | undefined, pull: LoopSettings["pull"]): Promise<ConsumerFacts> {
  if (binding !== undefined) {
    return {
      stream: binding.stream,
      consumer: binding.consumer,
      ackWaitMs: binding.ackWaitMs,
      backOffMs: binding.backOffMs,
      maxDeliver: binding.maxDeliver ?? -1,
      maxAckPending: binding.maxAckPending,
      pinned: pull?.group !== undefined && binding.priorityPolicy === "pinned_client",
      paused: binding.paused,
    };
  }
  let info: ConsumerInfo | undefined;
  try {
    // The info js.consumers.get() read: no request.
    info = typeof consumer.info === "function" ? await consumer.info(true) : undefined;
  } catch {
    info = undefined;
  }
  const raw = info as { stream_name?: unknown; name?: unknown; paused?: unknown; config?: Record<string, unknown> } | undefined;
  const config = raw?.config ?? {};
  const timing = consumerTimingFromConfig(info);
  const positive = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) && v > 0 ? v : undefined);
  return {
    stream: typeof raw?.stream_name === "string" ? raw.stream_name : undefined,
    consumer: typeof raw?.name === "string" ? raw.name : undefined,
    ackWaitMs: positive(timing.ackWaitMs),
    backOffMs: timing.backOffMs?.every((s) => positive(s) !== undefined) ? timing.backOffMs : undefined,
    // Absent from the info: the server's default, unlimited.
    maxDeliver: info === undefined ? undefined : typeof timing.maxDeliver === "number" && Number.isInteger(timing.maxDeliver) ? timing.maxDeliver : -1,
    maxAckPending: positive(config["max_ack_pending"]),
    pinned: pull?.group !== undefined && config["priority_policy"] === "pinned_client",
    paused: raw?.paused === true,
    ...(config["inactive_threshold"] === undefined ? {} : { inactiveThresholdMs: nanosToMillis(config["inactive_threshold"]) }),
  };
}

/**
 * Another delivery of a message the loop committed, arriving while its ACK is still on its way
 * (a new consumer leader, or AckWait passing during an election or a reconnect) or redelivered
 * soon after the server confirmed it (a leader lost before its followers had the ACK), is acked
 * at once and never handed to the write: the write already committed it.
 */
function skipCommitted(arrive: Arrival, acking: AckingDeliveries, metrics: MetricsRecorder): Arrival {
  return (m, at) => {
    if (!acking.has(m)) {
      arrive(m, at);
      return;
    }
    metrics.count(MetricNames.REDELIVERIES_OF_COMMITTED_TOTAL);
    try {
      m.ack();
    } catch {
      // Not sent: the ACK on its way settles it, or it comes back once more.
    }
  };
}

/**
 * The loops confirm their ACKs by default (an ACK lost in a leader election is sent again before
 * the message comes back), on the connection the loop reads from: an answer within an eighth of
 * the redelivery window (0.2 to 2 s), asked again up to 6 times. Off with `confirmAck: false`;
 * the host's own `confirmAck` is used as it is.
 */
function loopConfirmation(host: ConfirmAckOptions | false | undefined, nc: unknown, windowMs: number | undefined): LoopConfirmation | undefined {
  if (host !== undefined || !canConfirmInBatches(nc)) return undefined;
  const timeoutMs = windowMs === undefined ? 1000 : Math.min(2000, Math.max(200, Math.round(windowMs / 8)));
  return { options: { timeoutMs, retries: 6 }, connection: nc };
}

/** Flushes `nc` (the frames owed reach the server), within `ms`; a closed connection owes nothing. */
async function flushBounded(nc: Flushable | undefined, ms: number): Promise<void> {
  if (nc === undefined) return;
  try {
    if (nc.isClosed()) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([nc.flush().catch(() => undefined), new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(1000, ms))))]);
    clearTimeout(timer);
  } catch {
    // Nothing more can be sent.
  }
}

/**
 * An idle loop's look at its consumer: at most every 30 s, a fresh consumer info; a pause is
 * reported once, and again after it ended and began anew.
 */
function pauseWatch(consumer: LoopConsumer, pausedAtStart: boolean, onChange: (paused: boolean) => void): () => void {
  let paused = pausedAtStart;
  let lastCheck = performance.now();
  let checking = false;
  return () => {
    if (checking || typeof consumer.info !== "function" || performance.now() - lastCheck < PAUSE_CHECK_MS) return;
    checking = true;
    lastCheck = performance.now();
    consumer
      .info(false)
      .then((info) => {
        const now = (info as { paused?: unknown }).paused === true;
        if (now !== paused) {
          paused = now;
          onChange(now);
        }
      })
      .catch(() => undefined)
      .finally(() => (checking = false));
  };
}
