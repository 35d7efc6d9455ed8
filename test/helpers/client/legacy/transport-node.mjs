// `@nats-io/transport-node` for the tests of the legacy-client matrix row, made of the `nats`
// 2.x client (see ./jetstream.mjs).
import nats from "nats";

export const {
  connect,
  createInbox,
  headers,
  millis,
  nanos,
  Empty,
  Events,
  DebugEvents,
  buildAuthenticator,
  credsAuthenticator,
  jwtAuthenticator,
  nkeyAuthenticator,
  nkeys,
  tokenAuthenticator,
  usernamePasswordAuthenticator,
} = nats;
