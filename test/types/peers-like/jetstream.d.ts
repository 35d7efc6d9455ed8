// @nats-io/jetstream with the library's own JsMsgLike as its JsMsg (the rest from nats 2.x):
// the sources compiled against this read and call nothing on a message that JsMsgLike lacks.
export type { JsMsgLike as JsMsg } from "../../../src/nats/client-types.js";
export type { Consumer, ConsumerAPI, ConsumerInfo, JetStreamManager } from "nats";
