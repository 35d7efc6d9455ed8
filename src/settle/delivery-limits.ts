/**
 * Each consumer's MaxDeliver, as settling needs it: a NAK on a message's last allowed delivery
 * promises a retry that never comes, so the limit must be known before a failure is NAKed.
 * Given by the host (`maxDeliver`), bound by `forConsumer`, learnt by a loop from the consumer
 * it holds, or read from the server once per stream and consumer (consumer info, on the
 * messages' connection) and cached. A limit that cannot be read is `unknown` — never taken for
 * "more deliveries left" — and read again a minute later.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { requesterOf, type Requester } from "../nats/connection-state.js";
import { deliveryInfo, jetStreamDomain } from "../nats/message-access.js";

/** A consumer's MaxDeliver (0 or less: unlimited), or `unknown` when it could not be read. */
export type DeliveryLimit = number | "unknown";

/** How long a consumer-info read may take before the limit counts as unknown. */
const LOOKUP_TIMEOUT_MS = 2000;
/** How long an unknown limit is remembered before it is read again. */
const RETRY_UNKNOWN_MS = 60_000;

interface Entry {
  limit: DeliveryLimit | Promise<DeliveryLimit>;
  readAt: number;
}

/** The delivery limits of the consumers an instance settles for. */
export class DeliveryLimits {
  readonly #fixed: number | undefined;
  readonly #connection: Requester | undefined;
  readonly #byConsumer = new Map<string, Entry>();

  /**
   * @param fixed - the host's `maxDeliver` (or `forConsumer`'s), for every consumer; `undefined`: learn it.
   * @param connection - where consumer info is read; default the connection that delivered the message.
   */
  constructor(fixed: number | undefined, connection: Requester | undefined) {
    this.#fixed = fixed;
    this.#connection = connection;
  }

  /** Whether every limit is the host's own (nothing to read). */
  get fixed(): boolean {
    return this.#fixed !== undefined;
  }

  /** A loop learnt the limit of `stream`/`consumer` from the consumer it holds (0 or less: unlimited). */
  learn(stream: string, consumer: string, maxDeliver: number): void {
    if (this.#fixed === undefined) this.#byConsumer.set(key(stream, consumer), { limit: maxDeliver, readAt: Number.POSITIVE_INFINITY });
  }

  /** The limit for `m`'s consumer: known at once, or after one consumer-info read. */
  limitFor(m: JsMsg): DeliveryLimit | Promise<DeliveryLimit> {
    if (this.#fixed !== undefined) return this.#fixed;
    const info = deliveryInfo(m);
    if (info === undefined) return "unknown";
    const k = key(info.stream, info.consumer);
    const cached = this.#byConsumer.get(k);
    if (cached !== undefined && !(cached.limit === "unknown" && performance.now() - cached.readAt > RETRY_UNKNOWN_MS)) return cached.limit;
    const entry: Entry = { limit: "unknown", readAt: performance.now() };
    entry.limit = this.#read(m, info.stream, info.consumer, jetStreamDomain(m)).then((limit) => {
      entry.limit = limit;
      entry.readAt = performance.now();
      return limit;
    });
    this.#byConsumer.set(k, entry);
    return entry.limit;
  }

  async #read(m: JsMsg, stream: string, consumer: string, domain: string | undefined): Promise<DeliveryLimit> {
    const requester = this.#connection ?? requesterOf(m);
    if (requester === undefined) return "unknown";
    const prefix = domain ? `$JS.${domain}.API` : "$JS.API";
    try {
      const reply = await requester.request(`${prefix}.CONSUMER.INFO.${stream}.${consumer}`, "", { timeout: LOOKUP_TIMEOUT_MS });
      const body = JSON.parse(new TextDecoder().decode((reply as { data?: Uint8Array }).data ?? new Uint8Array())) as { error?: unknown; config?: { max_deliver?: unknown } };
      if (body.error !== undefined) return "unknown";
      const max = body.config?.max_deliver;
      // Absent: the server's default, unlimited.
      return max === undefined ? -1 : typeof max === "number" && Number.isInteger(max) ? max : "unknown";
    } catch {
      return "unknown";
    }
  }
}

function key(stream: string, consumer: string): string {
  return `${stream}\u0000${consumer}`;
}
