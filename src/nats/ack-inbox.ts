/**
 * Confirmed ACKs for a whole batch in one go. The client's `ackAck()` makes a request per
 * message (a reply registration and a timer each), so confirming a batch of 100 costs 100 of
 * each. Here one wildcard subscription per connection receives every reply, the `+ACK` frames of
 * a batch go out back to back with replies addressed to it, and one timer waits for them all.
 */

/** What confirming needs of a connection (a `NatsConnection`). */
export interface ConfirmingConnection {
  subscribe(subject: string, options: { callback: (err: unknown, msg: { subject: string; headers?: { code?: number } | undefined }) => void }): { unsubscribe(): void };
  publish(subject: string, payload: string, options: { reply: string }): void;
  isClosed(): boolean;
}

/** Whether `nc` can carry batch confirmations. */
export function canConfirmInBatches(nc: unknown): nc is ConfirmingConnection {
  const c = nc as Partial<ConfirmingConnection> | null | undefined;
  return c !== null && c !== undefined && typeof c.subscribe === "function" && typeof c.publish === "function" && typeof c.isClosed === "function";
}

const inboxes = new WeakMap<object, AckInbox>();
let batches = 0;

/** The reply inbox of one connection, shared by every batch confirmed through it. */
export class AckInbox {
  readonly #prefix: string;
  readonly #waiting = new Map<string, (index: number, status: number) => void>();
  readonly #nc: ConfirmingConnection;
  #subscribed = false;

  private constructor(nc: ConfirmingConnection) {
    this.#nc = nc;
    const base = (nc as { options?: { inboxPrefix?: unknown } }).options?.inboxPrefix;
    // The connection's own inbox prefix: accounts that restrict replies allow that one.
    this.#prefix = `${typeof base === "string" && base !== "" ? base : "_INBOX"}.${randomToken()}`;
  }

  static for(nc: ConfirmingConnection): AckInbox {
    let inbox = inboxes.get(nc);
    if (inbox === undefined) inboxes.set(nc, (inbox = new AckInbox(nc)));
    return inbox;
  }

  /**
   * Sends `+ACK` to each reply subject with a reply addressed to this batch, and calls
   * `answered(i, status)` for every answer: `status` 0 when the server confirmed the ACK, else
   * the status it sent instead (503: nobody holds the consumer, the ACK was not taken). `resend`
   * sends the ones given again (a retry). Dispose of the returned handle when done.
   */
  send(ackSubjects: readonly string[], answered: (index: number, status: number) => void): { resend(indexes: readonly number[]): void; dispose(): void } {
    this.#subscribe();
    const token = `${(++batches).toString(36)}`;
    this.#waiting.set(token, answered);
    const publish = (i: number): void => this.#nc.publish(ackSubjects[i]!, "+ACK", { reply: `${this.#prefix}.${token}.${i}` });
    for (let i = 0; i < ackSubjects.length; i++) publish(i);
    return {
      resend: (indexes) => {
        for (const i of indexes) publish(i);
      },
      dispose: () => void this.#waiting.delete(token),
    };
  }

  #subscribe(): void {
    if (this.#subscribed) return;
    this.#subscribed = true;
    const offset = this.#prefix.length + 1;
    this.#nc.subscribe(`${this.#prefix}.>`, {
      callback: (err, msg) => {
        if (err) return;
        const rest = msg.subject.slice(offset);
        const dot = rest.indexOf(".");
        this.#waiting.get(rest.slice(0, dot))?.(Number(rest.slice(dot + 1)), msg.headers?.code ?? 0);
      },
    });
  }
}

function randomToken(): string {
  return Array.from(globalThis.crypto.getRandomValues(new Uint8Array(12)), (b) => b.toString(36).padStart(2, "0")).join("");
}
