/**
 * A second worker pulling the same durable consumer: the proof that a lease was kept is that it
 * receives nothing. It never acknowledges (what it receives stays the test's evidence), and its
 * own pulls end by themselves when it stops.
 */
import type { JetStreamClient } from "@nats-io/jetstream";

export interface Rival {
  /** Stream sequences the rival received, with their delivery counts. */
  readonly received: Array<{ readonly seq: number; readonly deliveryCount: number }>;
  /** Stops after the open pull ended by itself. */
  stop(): Promise<void>;
}

/** Starts pulling `stream`/`consumer` through `js` (another connection than the worker's, usually). */
export async function startRival(js: JetStreamClient, stream: string, consumer: string, expiresMs = 1000): Promise<Rival> {
  const c = await js.consumers.get(stream, consumer);
  const received: Array<{ seq: number; deliveryCount: number }> = [];
  let stopping = false;
  const loop = (async () => {
    while (!stopping) {
      try {
        for await (const m of await c.fetch({ max_messages: 10, expires: expiresMs })) received.push({ seq: m.seq, deliveryCount: m.info.deliveryCount });
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  })();
  return {
    received,
    async stop() {
      stopping = true;
      await loop;
    },
  };
}
