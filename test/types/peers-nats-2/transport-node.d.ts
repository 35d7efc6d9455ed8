// The names the library's sources import from @nats-io/transport-node, taken from `nats` 2.x.
export type { ConnectionOptions, MsgHdrs, NatsConnection } from "nats";
export { connect, credsAuthenticator, headers, nkeyAuthenticator } from "nats";
