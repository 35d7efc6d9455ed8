/**
 * Ending a pull without dropping what is on its way. Stopping a fetch unsubscribes at once, so
 * a message the server sent just before it learnt of the stop arrives at a closed subscription
 * and is dropped: its delivery is spent, and it comes back only after AckWait (or never, on its
 * last delivery). Draining the pull's subscription instead unsubscribes, waits for the server
 * to answer a flush, and hands over everything that arrived until then; the client's pull
 * iterator then ends by itself. Clients without a drainable subscription are stopped.
 */

/** Ends a fetch or consume iterator, draining its subscription when the client allows it. */
export function endPull(iter: unknown): void {
  let drain: (() => Promise<unknown>) | undefined;
  let closed = false;
  try {
    const sub = (iter as { sub?: { drain?: unknown; isClosed?: unknown; isDraining?: unknown } } | null)?.sub;
    if (sub !== undefined && typeof sub.drain === "function") {
      if (typeof sub.isDraining === "function" && sub.isDraining() === true) return;
      closed = typeof sub.isClosed === "function" && sub.isClosed() === true;
      drain = () => (sub.drain as () => Promise<unknown>).call(sub);
    }
  } catch {
    drain = undefined;
  }
  const stop = (): void => {
    try {
      void (iter as { stop?: () => unknown } | null)?.stop?.();
    } catch {
      // Nothing more can be done: the iterator ends with the connection.
    }
  };
  if (drain === undefined || closed) {
    stop();
    return;
  }
  try {
    drain().then(undefined, stop);
  } catch {
    stop();
  }
}
