/**
 * A host process with nothing of its own keeping the event loop alive, for tests that check the
 * library's bounded waits do: a pending top-level await whose only timers are unref'd makes
 * Node exit at once with code 13, mid-await. Prints one JSON line with what the call returned.
 * Argument: the case to run.
 *   shutdown-bound   withInProgress aborted at once, its work resolves 300 ms later (bound 2 s)
 *   shutdown-expiry  the same, but the work needs 3 s and the bound is 500 ms: the call rejects
 *   held-ack         CommitThenAck.process whose write returns while the client is between
 *                    connections; the connection comes back 300 ms later
 */
import { CommitThenAck, verifyInProgressPolicy, withInProgress } from "../../src/index.js";
import { fakeMsg } from "./fakes.js";

/** A timer that never keeps the process alive: anything that does must come from the library. */
function later(ms: number, fn: () => void): void {
  setTimeout(fn, ms).unref();
}

const started = performance.now();
const elapsed = (): number => Math.round(performance.now() - started);
const mode = process.argv[2];

if (mode === "shutdown-bound" || mode === "shutdown-expiry") {
  const bound = mode === "shutdown-bound" ? 2000 : 500;
  const workMs = mode === "shutdown-bound" ? 300 : 3000;
  const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 1000, maxHeartbeats: 5, shutdownTimeoutMs: bound }, { ackWaitMs: 30_000, source: "configured" });
  const shutdown = new AbortController();
  const call = withInProgress(
    fakeMsg(),
    (ctx) =>
      new Promise<string>((resolve) => {
        ctx.signal.addEventListener("abort", () => later(workMs, () => resolve("written")), { once: true });
      }),
    policy,
    { signal: shutdown.signal },
  );
  shutdown.abort(new Error("shutdown"));
  try {
    console.log(JSON.stringify({ value: await call, ms: elapsed() }));
  } catch (err) {
    console.log(JSON.stringify({ rejected: (err as Error).message, ms: elapsed() }));
  }
} else if (mode === "held-ack") {
  const m = fakeMsg();
  const publisher = { connected: false, isClosed: () => false };
  (m as unknown as { msg: unknown }).msg = { publisher };
  later(300, () => {
    publisher.connected = true;
  });
  const result = await new CommitThenAck().process([m], async () => undefined);
  console.log(JSON.stringify({ action: result.messages[0]?.action, settleError: String(result.messages[0]?.settleError ?? ""), acks: m.calls.ack, ms: elapsed() }));
} else {
  throw new Error(`unknown case ${String(mode)}`);
}
