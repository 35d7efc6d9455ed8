/**
 * The NATS client's objects as the library's public types speak of them: structural types with
 * the members it reads or calls on a pull consumer, a JetStream manager and a connection, and
 * the members of a message both clients have. The public signatures take these, so the objects
 * of `@nats-io/jetstream` 3.x and of the legacy `nats` 2.x client both fit, and a host's own
 * message type flows back to its callbacks. Types only.
 */

/**
 * A JetStream message, as the library's types speak of it: the members of `JsMsg` that both
 * `@nats-io/jetstream` 3.x and the legacy `nats` 2.x client have. The library reads or calls
 * only `subject`, `data`, `headers`, `info` (stream, consumer, delivery count, stream
 * sequence), `ack`, `nak`, `term`, `working` and `ackAck`; `seq`, `redelivered`, `json` and
 * `string` are here for your writes, so a write typed with a bare `BatchWrite` can read them.
 * What the client keeps private (the reply subject, whether a final ack was sent, the
 * connection behind it) is read structurally and guarded, so another client version degrades
 * to "unknown". Signatures that hand messages back (`process`, `run`, `runEach`,
 * `withInProgress`, `BatchResult<M>`) are generic: your callbacks see your client's own `JsMsg`.
 *
 * @example
 * ```ts
 * // A JsMsg of either client is one.
 * const where = (m: JsMsgLike) => `${m.info.stream} #${m.seq}, delivery ${m.info.deliveryCount}`;
 * for await (const m of await consumer.fetch({ max_messages: 10, expires: 1_000 })) console.log(where(m));
 * ```
 */
export interface JsMsgLike {
  /** The subject the message was published to (copied to a dead-letter header). */
  readonly subject: string;
  /** The payload (the dead-letter copy carries it unchanged). */
  readonly data: Uint8Array;
  /** The message's headers, if any: copied to a dead-letter copy, read for a producer's trace context. */
  readonly headers?: MsgHdrsLike | undefined;
  /** Where the message comes from and how often it was delivered, parsed from its ack subject. */
  readonly info: {
    /** The stream it is stored in. */
    readonly stream: string;
    /** The consumer that delivered it. */
    readonly consumer: string;
    /** How many times it was delivered, this delivery included (1 for a first delivery). */
    readonly deliveryCount: number;
    /** Its sequence in the stream. */
    readonly streamSequence: number;
    /** Its sequence in the consumer's deliveries. */
    readonly deliverySequence: number;
    /** Messages the consumer still had to deliver when this one was sent. */
    readonly pending: number;
    /** Whether this is a redelivery. */
    readonly redelivered: boolean;
    /** When it was stored, in nanoseconds since the epoch. */
    readonly timestampNanos: number;
  };
  /** Its sequence in the stream (`info.streamSequence`). */
  readonly seq: number;
  /** Whether this is a redelivery (`info.redelivered`). */
  readonly redelivered: boolean;
  /** The payload parsed as JSON. */
  json<T = unknown>(): T;
  /** The payload decoded as UTF-8. */
  string(): string;
  /** Sends `+ACK`. */
  ack(): void;
  /** Sends `-NAK`, with a redelivery delay in milliseconds when given. */
  nak(millis?: number): void;
  /** Sends `+TERM`, with a reason when given (nats-server 2.10.4+ reports it). */
  term(reason?: string): void;
  /** Sends `+WPI` (InProgress): the server restarts the message's AckWait. */
  working(): void;
  /** Sends `+ACK` as a request and resolves `true` once the server confirmed it (confirmed ACKs). */
  ackAck(options?: { readonly timeout?: number }): Promise<boolean>;
}

/**
 * A message's headers as the library's types speak of them: the library iterates them (to copy
 * them to a dead-letter copy) and looks names up (a producer's trace context). A NATS `MsgHdrs`
 * of either client is one.
 *
 * @example
 * ```ts
 * const headers: MsgHdrsLike | undefined = msg.headers; // a JsMsg's MsgHdrs
 * const traceparent = headers?.get("traceparent");
 * for (const [name, values] of headers ?? []) console.log(name, values.length);
 * ```
 */
export interface MsgHdrsLike extends Iterable<[string, string[]]> {
  /** The first value of a header, or `""` when it is absent. */
  get(name: string): string;
  /** Whether the header is present. */
  has(name: string): boolean;
  /** Every value of a header (empty when it is absent). */
  values(name: string): string[];
  /** The header names. */
  keys(): string[];
}

/**
 * A pull consumer as the loops use it (`js.consumers.get(stream, durable)` of either client):
 * `fetch` for one bounded pull; `consume` when present, for one long-lived subscription (every
 * `runEach`, and `run` on a `pinned_client` priority group); `info` when present, for the
 * consumer's limits and whether it is paused. Both loops iterate what the pulls return, so the
 * message type `M` is inferred from it and handed to your write or handler.
 *
 * @typeParam M - the client's message type.
 *
 * @example
 * ```ts
 * const consumer: PullConsumerLike<JsMsg> = await js.consumers.get("ORDERS", "writer");
 * await ack.run(consumer, async (msgs) => db.insertMany(msgs.map((m) => m.json())), { signal });
 * ```
 */
export interface PullConsumerLike<M extends JsMsgLike = JsMsgLike> {
  /** One pull of at most `max_messages`, ending by itself at `expires` (ms); the library adds priority-group fields when asked to. */
  fetch(options: { readonly max_messages: number; readonly expires: number }): Promise<AsyncIterable<M>>;
  /** A long-lived pull subscription; the library gates its refills to what the loop can start. */
  consume?(options: { readonly max_messages: number; readonly expires: number }): Promise<AsyncIterable<M>>;
  /** The consumer's info (`cached: true`: what the client already holds, no request). */
  info?(cached?: boolean): Promise<unknown>;
}

/**
 * A JetStream manager as {@link CommitThenAck.forConsumer} uses it (`await
 * jetstreamManager(nc)` of `@nats-io/jetstream`, `await nc.jetstreamManager()` of `nats` 2.x):
 * `consumers.info` to read the durable consumer, and `streams.find` when present, to check
 * which stream captures the dead-letter subject. Its answers are read as untrusted data.
 *
 * @example
 * ```ts
 * const jsm: JetStreamManagerLike = await jetstreamManager(nc, { checkAPI: false });
 * const ack = await CommitThenAck.forConsumer(jsm, "ORDERS", "writer", { inProgress: { enabled: true } });
 * ```
 */
export interface JetStreamManagerLike {
  /** The consumer API; only `info(stream, consumer)` is called. */
  readonly consumers: {
    /** The consumer's info: its config (ack policy, AckWait, BackOff, MaxDeliver, …) and state. */
    info(stream: string, consumer: string): Promise<unknown>;
  };
  /** The stream API; only `find(subject)` is called, and only with `deadLetter`. */
  readonly streams?: {
    /** The name of the stream that captures `subject`. */
    find?(subject: string): Promise<string>;
  };
}

/**
 * A NATS connection as the library uses it (`nc` from `connect()` of either client): `request`
 * for confirmed ACKs and confirmed heartbeats, `isClosed` to stop supervising on a closed
 * connection, `info.version` for the server's version, and `flush`, when present, so a loop's
 * last frames reach the server before it returns.
 *
 * @example
 * ```ts
 * const nc = await connect({ servers: "nats://127.0.0.1:4222" });
 * const connection: NatsConnectionLike = nc;
 * const ack = new CommitThenAck({ connection, confirmAck: { timeoutMs: 2_000, retries: 2 } });
 * ```
 */
export interface NatsConnectionLike {
  /** Sends a request and resolves with the reply (its content is not read). */
  request(subject: string, payload?: Uint8Array | string, options?: { readonly timeout?: number }): Promise<unknown>;
  /** Whether the connection is closed for good. */
  isClosed(): boolean;
  /** Resolves once the server answered a PING: every earlier frame was processed. */
  flush?(): Promise<void>;
  /** What the server said when the client connected; `version` is read. */
  readonly info?:
    | {
        /** The server's version, for example `2.10.27`. */
        readonly version: string;
      }
    | undefined;
}
