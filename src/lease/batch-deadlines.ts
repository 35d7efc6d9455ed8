/**
 * A batch's deadlines at its start: when each message was delivered (now, or the host's
 * receive times) and over which redelivery window, as the lease tracker the supervision keeps.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { VerifiedInProgressPolicy } from "../policy/in-progress-policy.js";
import { windowFor } from "../policy/redelivery-window.js";
import { deliveryCount } from "../nats/message-access.js";
import { LeaseTracker } from "./lease-tracker.js";
import { epochMs, isEpochMs } from "./received-at.js";
import type { WithInProgressOptions } from "./work-context.js";

/**
 * The lease tracker of a batch set up at `nowMono` (monotonic ms). `shared`: the window every
 * message has (no BackOff), else `undefined` (each message's window follows its delivery count).
 *
 * @throws TypeError when `receivedAt` is not a receive time, or its function throws.
 */
export function trackBatch(
  msgs: readonly JsMsg[],
  policy: VerifiedInProgressPolicy,
  receivedAt: WithInProgressOptions["receivedAt"],
  shared: number | undefined,
  nowMono: number,
): LeaseTracker {
  // Delivered now, one window: two numbers for the whole batch, whatever its size.
  if (receivedAt === undefined && shared !== undefined) return new LeaseTracker(shared, nowMono, msgs.length);
  const nowWall = Date.now();
  // A receive time in the future (clock skew) counts as now.
  const deliveredAt = (wall: number | undefined): number => (wall === undefined ? nowMono : nowMono - Math.max(0, nowWall - wall));
  const batchWall = receivedAt === undefined || typeof receivedAt === "function" ? undefined : epochMs(receivedAt, "options.receivedAt");
  if (shared !== undefined && typeof receivedAt !== "function") {
    // One window and one delivery time for the whole batch: constant work, whatever its size.
    return new LeaseTracker(shared, deliveredAt(batchWall), msgs.length);
  }
  const windows = new Float64Array(msgs.length);
  const delivered = new Float64Array(msgs.length);
  for (let i = 0; i < msgs.length; i++) {
    const m = msgs[i]!;
    windows[i] = shared ?? windowFor(policy, deliveryCount(m));
    let wall = batchWall;
    if (typeof receivedAt === "function") {
      let v: number | Date | undefined;
      try {
        v = receivedAt(m, i);
      } catch (err) {
        throw new TypeError(`options.receivedAt(msgs[${i}]) threw: it must return epoch milliseconds, a Date or undefined`, { cause: err });
      }
      // Epoch milliseconds pass as they are (no message string built per message).
      wall = v === undefined ? batchWall : isEpochMs(v) ? v : epochMs(v, `options.receivedAt(msgs[${i}])`);
    }
    delivered[i] = deliveredAt(wall);
  }
  return new LeaseTracker(windows, delivered);
}
