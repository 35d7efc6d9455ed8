/**
 * Counting the client's socket writes, by wrapping its transport's `send` (client internals:
 * when they are not where this expects, the count is NaN). Frames published in one tick share a
 * write; each write to the loopback socket costs tens of microseconds of CPU on this machine.
 */
import type { NatsConnection } from "@nats-io/transport-node";

export interface WriteCounter {
  /** Writes so far (NaN when the transport could not be wrapped). */
  readonly writes: number;
  /** Puts the transport's own `send` back. */
  restore(): void;
}

export function countSocketWrites(nc: NatsConnection): WriteCounter {
  const transport = (nc as unknown as { protocol?: { transport?: { send?: (data: Uint8Array) => void } } }).protocol?.transport;
  const send = transport?.send;
  if (!transport || typeof send !== "function") return { writes: Number.NaN, restore: () => {} };
  let writes = 0;
  transport.send = (data: Uint8Array): void => {
    writes += 1;
    send.call(transport, data);
  };
  return {
    get writes() {
      return writes;
    },
    restore: () => {
      transport.send = send;
    },
  };
}
