/**
 * An unconfirmed ACK is reported with an error the library creates: the client's own error
 * names the ack reply subject, which carries the stream, the consumer and the sequences.
 * The real-server case (a consumer deleted before the ACK) is in test/integration/redaction.test.ts.
 */
import { describe, expect, it } from "vitest";
import { CommitThenAck } from "../../../src/index.js";
import { fakeMsg } from "../../helpers/fakes.js";

/** What the NATS client raises for a request nobody answers, shaped like its errors. */
function noResponders(subject: string): Error {
  const cause = Object.assign(new Error(`no responders: '${subject}'`), { name: "NoResponders", subject });
  return Object.assign(new Error(`no responders: '${subject}'`, { cause }), { name: "RequestError" });
}

const timeout = (): Error => Object.assign(new Error("timeout"), { name: "TimeoutError" });

describe("confirmed ACK failures", () => {
  it("after every retry failed: AckNotConfirmedError with attempts and kind, without the ack subject", async () => {
    const m = fakeMsg({ stream: "ORDERS_EU", consumer: "writer_7", seq: 4242 });
    m.ackAck = async () => {
      m.didAck = true;
      throw timeout();
    };
    const requests: string[] = [];
    const connection = {
      request: async (subject: string) => {
        requests.push(subject);
        throw noResponders(subject);
      },
      isClosed: () => false,
      info: undefined,
    };
    const ack = new CommitThenAck({ connection: connection as never, confirmAck: { timeoutMs: 100, retries: 2 } });
    const started = performance.now();
    const result = await ack.process([m], async () => undefined);
    // A refusal spends no retry: it is asked again every 100 ms until the window (100 ms × 3) passed.
    expect(performance.now() - started).toBeGreaterThanOrEqual(250);
    expect(requests.length).toBeGreaterThanOrEqual(2);
    expect(requests.every((s) => s === m.reply)).toBe(true);
    const r = result.messages[0]!;
    expect(r).toMatchObject({ action: "acked", confirmed: false });
    const err = r.settleError as Error & { attempts: number; lastFailure: string; lastErrorName: string };
    expect(err).toBeInstanceOf(Error);
    expect(err.name).toBe("AckNotConfirmedError");
    expect(err).toMatchObject({ attempts: requests.length + 1, lastFailure: "no_responders", lastErrorName: "RequestError" });
    expect(err.message).toBe(`the ACK was not confirmed after ${requests.length + 1} attempts: no responders (RequestError); it may or may not have landed`);
    expect(err.cause).toBeUndefined();
    const text = `${err.message} ${JSON.stringify(err)}`;
    for (const secret of ["$JS.ACK", "ORDERS_EU", "writer_7", "4242"]) expect(text).not.toContain(secret);
  });

  it("a host's confirmAck rides out an election: refused ACKs are asked again every 100 ms within timeoutMs × (retries + 1), spending no retry", async () => {
    const m = fakeMsg();
    const started = performance.now();
    m.ackAck = async () => {
      m.didAck = true;
      throw noResponders(m.reply);
    };
    const requests: number[] = [];
    const connection = {
      request: async (subject: string) => {
        requests.push(performance.now() - started);
        // Nobody holds the consumer for 350 ms; then the new leader answers.
        if (performance.now() - started < 350) throw noResponders(subject);
        return {};
      },
      isClosed: () => false,
      info: undefined,
    };
    // Two retries, but a window of 250 ms × 3.
    const ack = new CommitThenAck({ connection: connection as never, confirmAck: { timeoutMs: 250, retries: 2 } });
    const result = await ack.process([m], async () => undefined);
    expect(result.messages[0]).toMatchObject({ action: "acked", confirmed: true });
    expect(result.messages[0]!.settleError).toBeUndefined();
    // Spaced by the pause, not asked in a burst.
    expect(requests.length).toBeGreaterThanOrEqual(2);
    for (let i = 1; i < requests.length; i++) expect(requests[i]! - requests[i - 1]!).toBeGreaterThanOrEqual(90);
  });

  it("a timeout with no retries names one attempt and the timeout", async () => {
    const m = fakeMsg();
    m.ackAck = async () => {
      m.didAck = true;
      throw timeout();
    };
    const ack = new CommitThenAck({ confirmAck: { timeoutMs: 100, retries: 0 } });
    const result = await ack.process([m], async () => undefined);
    const err = result.messages[0]?.settleError as Error & { attempts: number; lastFailure: string };
    expect(err.name).toBe("AckNotConfirmedError");
    expect(err).toMatchObject({ attempts: 1, lastFailure: "timeout" });
    expect(err.message).toBe("the ACK was not confirmed after 1 attempt: timeout (TimeoutError); it may or may not have landed");
  });

  it("a confirmed ACK that lands leaves no settle error", async () => {
    const m = fakeMsg();
    const ack = new CommitThenAck({ confirmAck: { timeoutMs: 100, retries: 0 } });
    const result = await ack.process([m], async () => undefined);
    expect(result.messages[0]).toMatchObject({ action: "acked", confirmed: true });
    expect(result.messages[0]?.settleError).toBeUndefined();
  });
});
