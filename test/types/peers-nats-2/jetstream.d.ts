// The names the library's sources import from @nats-io/jetstream, taken from `nats` 2.x: the
// sources compiled against these use nothing a nats 2.x object lacks.
export type { Consumer, ConsumerAPI, ConsumerInfo, JetStreamManager, JsMsg } from "nats";
