/**
 * A connection whose ack frames (`$JS.ACK.…`) reach the server `delayMs` late, everything else
 * at once: a stand-in for a consumer leader election, so a message comes back after AckWait
 * while the ACK of its committed write is still on its way.
 */
import type { NatsConnection } from "@nats-io/transport-node";

export function withLateAcks(nc: NatsConnection, delayMs: number): NatsConnection {
  return new Proxy(nc, {
    get(target, key) {
      if (key === "publish") {
        return (subject: string, data?: string | Uint8Array, opts?: { reply?: string }) => {
          if (subject.startsWith("$JS.ACK.")) setTimeout(() => target.publish(subject, data, opts), delayMs);
          else target.publish(subject, data, opts);
        };
      }
      const v = Reflect.get(target, key) as unknown;
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}
