/** Prints, as JSON, the `@nats-io/*` packages a child process loads (for the client-matrix test). */
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { loadedNatsClients } from "../nats-client.js";

const nc = await connect({ servers: process.env["NATS_URL"] ?? "nats://127.0.0.1:4222" });
await (await jetstreamManager(nc)).getAccountInfo();
await nc.close();
console.log(JSON.stringify(loadedNatsClients()));
