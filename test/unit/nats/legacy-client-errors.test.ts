/**
 * The errors of the legacy `nats` 2.x client, as measured against nats-server 2.15.1, read like
 * the 3.x client's: a missing consumer or stream (`NatsError` code "404", the API error in
 * `api_error`), no stream for a subject (a plain `Error`), and an ACK request that timed out
 * (code "TIMEOUT") or found no responder (code "503").
 */
import { describe, expect, it } from "vitest";
import { AckNotConfirmedError, CommitThenAck, ConsumerPolicyError, type JetStreamManagerLike } from "../../../src/index.js";

/** A `NatsError` of nats 2.x: its class name, code and, for JetStream API errors, the API error. */
function natsError(code: string, message: string, apiError?: { code: number; err_code: number; description: string }): Error {
  return Object.assign(new Error(message), { name: "NatsError", code, ...(apiError ? { api_error: apiError } : {}) });
}

const durable = { config: { durable_name: "writer", ack_policy: "explicit", ack_wait: 30_000_000_000 } };

describe("errors of nats 2.x", () => {
  it.each([
    ["the consumer", 10014, "consumer not found"],
    ["the stream", 10059, "stream not found"],
  ])("forConsumer names a missing consumer when %s is missing: consumer_not_found, not consumer_unreadable", async (_what, errCode, description) => {
    const jsm: JetStreamManagerLike = {
      consumers: { info: async () => Promise.reject(natsError("404", description, { code: 404, err_code: errCode, description })) },
    };
    const err = await CommitThenAck.forConsumer(jsm, "ORDERS", "writer").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConsumerPolicyError);
    expect((err as ConsumerPolicyError).reason).toBe("consumer_not_found");
  });

  it("another refusal of consumer info stays consumer_unreadable", async () => {
    const jsm: JetStreamManagerLike = { consumers: { info: async () => Promise.reject(natsError("PERMISSIONS_VIOLATION", "permissions violation")) } };
    const err = await CommitThenAck.forConsumer(jsm, "ORDERS", "writer").catch((e: unknown) => e);
    expect((err as ConsumerPolicyError).reason).toBe("consumer_unreadable");
  });

  it("forConsumer refuses a dead-letter subject no stream captures (streams.find rejects with a plain Error)", async () => {
    const jsm: JetStreamManagerLike = {
      consumers: { info: async () => durable },
      streams: { find: async () => Promise.reject(new Error("no stream matches subject")) },
    };
    const err = await CommitThenAck.forConsumer(jsm, "ORDERS", "writer", { deadLetter: { js: { publish: async () => undefined }, subject: "dlq.orders" } }).catch((e: unknown) => e);
    expect((err as ConsumerPolicyError).reason).toBe("dead_letter_uncaptured");
  });

  it("an unconfirmed ACK names a timeout and a missing responder", () => {
    expect(new AckNotConfirmedError(2, natsError("TIMEOUT", "TIMEOUT"))).toMatchObject({ lastFailure: "timeout", lastErrorName: "NatsError" });
    expect(new AckNotConfirmedError(2, natsError("503", "503"))).toMatchObject({ lastFailure: "no_responders", lastErrorName: "NatsError" });
    expect(new AckNotConfirmedError(2, natsError("BAD_JSON", "bad json"))).toMatchObject({ lastFailure: "error" });
  });
});
