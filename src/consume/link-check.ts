/**
 * The link to the server, measured once before a loop's first pull. A round trip long enough
 * to lose a delivery or a lease is refused there (fail closed), rather than found later as a
 * duplicate or a lost message:
 *
 * - A fetch: the client ends it once two of its idle heartbeats (half the expiry each, the
 *   most the server allows) go missing. The server sends the first half an expiry after the
 *   request arrived, so on a link whose round trip nears half the expiry it comes too late:
 *   the client ends the pull while the server still holds it and delivers into it, and that
 *   delivery is spent on a subscription that is gone (for good on the last allowed one).
 * - A beat reaches the server half a round trip after it leaves, and the message reached the
 *   client half a round trip after its lease began: the interval plus the round trip is what
 *   the lease must outlast.
 */

/** How long the measurement may take; a link that does not answer by then is not judged here. */
const RTT_TIMEOUT_MS = 5000;

/** The round trip to the server (a PING), in ms; `undefined` when it cannot be measured. */
export async function measureRttMs(connection: unknown): Promise<number | undefined> {
  const rtt = (connection as { rtt?: unknown } | null | undefined)?.rtt;
  if (typeof rtt !== "function") return undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const timeout = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), RTT_TIMEOUT_MS);
      timer.unref();
    });
    const ms: unknown = await Promise.race([(rtt as () => Promise<unknown>).call(connection), timeout]);
    return typeof ms === "number" && Number.isFinite(ms) && ms >= 0 ? ms : undefined;
  } catch {
    return undefined;
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The round trip through the heartbeat thread's own connection: a flush (its PING answered),
 * timed from the main thread. It holds the hops to the worker and back as well, a little more
 * than the link's own, which errs on the side of refusing; `undefined` when it did not answer in
 * time (not judged here, as for the host's link).
 */
export async function threadRttMs(thread: { flush(timeoutMs: number): Promise<void> }): Promise<number | undefined> {
  const started = performance.now();
  try {
    await thread.flush(RTT_TIMEOUT_MS);
  } catch {
    return undefined;
  }
  return performance.now() - started;
}

/** What the link must fit. */
export interface LinkLimits {
  /** The fetch expiry, when the loop fetches (a subscription's pulls are not ended by the client). */
  readonly pullExpiryMs: number | undefined;
  /** The heartbeat interval, heartbeats on. */
  readonly intervalMs: number | undefined;
  /** The consumer's shortest redelivery window (AckWait, or BackOff's shortest step). */
  readonly windowMs: number | undefined;
}

/**
 * Why a link with this round trip would lose deliveries or leases, with the fix; `undefined`
 * when it fits. Margins: the round trip must stay below a third of the expiry (half is where
 * pulls are cut), and the interval plus twice the round trip below the window.
 */
export function linkProblem(rttMs: number, limits: LinkLimits): string | undefined {
  const rtt = Math.ceil(rttMs);
  const { pullExpiryMs: expiry, intervalMs: interval, windowMs: window } = limits;
  if (expiry !== undefined && rtt * 3 >= expiry) {
    return (
      `the round trip to the server took ${rtt} ms, a third or more of the pull expiry (${expiry} ms): the client ends a pull once two of its idle ` +
      `heartbeats (${expiry / 2} ms apart) are late, which on this link they can be, while the server still delivers into it, spending that delivery ` +
      `(for good on the last allowed one). Raise expiresMs to at least ${rtt * 3 + 1} (the heartbeat interval and AckWait with it), or run the worker nearer the server`
    );
  }
  if (interval !== undefined && window !== undefined && interval + 2 * rtt >= window) {
    return (
      `the round trip to the server took ${rtt} ms: a beat arrives half of it after it leaves and a message half of it after its lease began, so the ` +
      `heartbeat interval (${interval} ms) plus twice the round trip must stay below the consumer's redelivery window (${window} ms). ` +
      (window - 2 * rtt > 1 ? `Lower intervalMs below ${window - 2 * rtt}, raise AckWait,` : `No interval fits: raise AckWait above ${interval + 2 * rtt},`) +
      " or run the worker nearer the server"
    );
  }
  return undefined;
}

/** {@link linkProblem} for the heartbeat thread's own connection (only the beats' rule applies: it pulls nothing). */
export function threadLinkProblem(rttMs: number, intervalMs: number | undefined, windowMs: number | undefined): string | undefined {
  const problem = linkProblem(rttMs, { pullExpiryMs: undefined, intervalMs, windowMs });
  return problem === undefined
    ? undefined
    : `the heartbeat thread's own connection (heartbeat.thread) is too slow for its beats: ${problem.replace(/ or run the worker nearer the server$/, " point heartbeat.thread at a nearer server, or leave the thread off")}`;
}
