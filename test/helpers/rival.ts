/**
 * A second worker pulling the same durable consumer: the proof that a lease was kept is that it
 * receives nothing. It never acknowledges (what it receives stays the test's evidence), and its
 * own pulls end by themselves when it stops.
 */
import type { JetStreamClient } from "@nats-io/jetstream";

export interface Rival {
  /** Stream sequences the rival received, with their delivery counts. */
  readonly received: Array<{ readonly seq: number; readonly deliveryCount: number }>;
  /**
   * Stops after the open pull ended by itself. Throws when no pull of the rival ever ended
   * normally: a rival that could not pull (a refused argument, a closed connection) would
   * receive nothing and prove nothing.
   */
  stop(): Promise<void>;
}

/** Starts pulling `stream`/`consumer` through `js` (another connection than the worker's, usually). */
export async function startRival(js: JetStreamClient, stream: string, consumer: string, expiresMs = 1000): Promise<Rival> {
  let c: Awaited<ReturnType<JetStreamClient["consumers"]["get"]>> | undefined;
  const received: Array<{ seq: number; deliveryCount: number }> = [];
  let stopping = false;
  let pulled = 0;
  let lastError: unknown;
  try {
    c = await js.consumers.get(stream, consumer);
  } catch (err) {
    lastError = err;
  }
  const loop = (async () => {
    while (!stopping) {
      try {
        // Read inside the loop: a server whose JetStream is not answering yet is asked again.
        c ??= await js.consumers.get(stream, consumer);
        for await (const m of await c.fetch({ max_messages: 10, expires: expiresMs })) received.push({ seq: m.seq, deliveryCount: m.info.deliveryCount });
        pulled += 1;
      } catch (err) {
        lastError = err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  })();
  return {
    received,
    async stop() {
      stopping = true;
      await loop;
      if (pulled === 0) throw new Error(`the rival never completed a pull: ${String(lastError)}`, { cause: lastError });
    },
  };
}
