/**
 * Reading a `consume()` subscription's notices (a deleted consumer, missed heartbeats). The
 * client tells them to its `status()` listeners through one method, `notify`, which it also
 * calls for every pull it sends and every heartbeat and expiry it reads: three times a second
 * for an idle loop with a 1 s expiry, each a promise round through an async iterator on the
 * main thread. Wrapping `notify` (an own property shadowing the prototype's, as the pull gate
 * wraps `pull`) reads each notice where it is made, and leaves the client no listener to feed.
 *
 * This reads the client's iterator internals (`notify`), like `pull-gate.ts`. A client without
 * that method is read through `status()`.
 */

/** A notice as the client made it: its type and, from @nats-io clients, the server's words. */
export interface ConsumeNotice {
  readonly type: string;
  readonly description: string | undefined;
}

/**
 * Calls `report` with each notice `iter` makes until it ends. `report` must not throw; if it
 * does, the throw is dropped, never raised into the client's message handling.
 */
export function watchConsumeNotices(iter: unknown, report: (notice: ConsumeNotice) => void): void {
  const it = iter as { notify?: unknown; status?: unknown } | null;
  if (it === null || typeof it !== "object") return;
  if (typeof it.notify === "function") {
    const original = it.notify as (this: unknown, ...args: unknown[]) => void;
    it.notify = function notifyWatched(this: unknown, ...args: unknown[]): void {
      const notice = noticeOf(args);
      if (notice !== undefined) {
        try {
          report(notice);
        } catch {
          // The caller's problem; the client's message handling goes on.
        }
      }
      original.apply(this, args);
    };
    return;
  }
  if (typeof it.status === "function") void readStatus(it as { status(): unknown }, report);
}

/** @nats-io clients call `notify({ type, description? })`, nats 2.x `notify(type, data)`. */
function noticeOf(args: readonly unknown[]): ConsumeNotice | undefined {
  const [first] = args;
  if (typeof first === "string") return { type: first, description: undefined };
  if (first === null || typeof first !== "object") return undefined;
  const { type, description } = first as { type?: unknown; description?: unknown };
  if (typeof type !== "string") return undefined;
  return { type, description: typeof description === "string" ? description : undefined };
}

async function readStatus(iter: { status(): unknown }, report: (notice: ConsumeNotice) => void): Promise<void> {
  try {
    // A promise in older clients, the iterator itself in newer ones.
    const status = (await iter.status()) as AsyncIterable<{ type?: unknown; description?: unknown }>;
    for await (const s of status) {
      const notice = noticeOf([s]);
      if (notice !== undefined) report(notice);
    }
  } catch {
    // The status stream ends with the iterator.
  }
}
