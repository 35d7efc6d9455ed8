// `@nats-io/jetstream` for the tests of the legacy-client matrix row, made of the `nats` 2.x
// client: what the tests and examples import from it, so every connection, manager, JetStream
// client, consumer and message they hand the library is a nats 2.x object. The library's own
// imports are not mapped here: beside nats 2.x it loads the 3.x peers, as a service would.
import nats from "nats";

export const { AckPolicy, DeliverPolicy, DiscardPolicy, ReplayPolicy, RetentionPolicy, StorageType, StoreCompression } = nats;

/** `jetstream(nc, opts)` of 3.x: `nc.jetstream(opts)` in 2.x. */
export function jetstream(nc, opts) {
  return nc.jetstream(opts);
}

/** `jetstreamManager(nc, opts)` of 3.x: `nc.jetstreamManager(opts)` in 2.x. */
export function jetstreamManager(nc, opts) {
  return nc.jetstreamManager(opts);
}
