/**
 * A worker that plays the heartbeat thread's side of the stop handshake as fast as it can:
 * for each slot, rounds back to back (plan, begin, "publish" = bump a shared counter, end),
 * until the slot is stopped. The main thread checks that no "publish" follows a stop.
 * workerData: { buffers: SharedArrayBuffer[], published: SharedArrayBuffer }.
 */
import { parentPort, workerData } from "node:worker_threads";
import { beginRound, endRound, planBeat, slotView } from "../../src/lease/heartbeat-thread-protocol.js";

const { buffers, published } = workerData as { buffers: SharedArrayBuffer[]; published: SharedArrayBuffer };
const counts = new Int32Array(published);
const slots = buffers.map((b) => slotView(b, 1));
const live = new Set(slots.keys());
parentPort!.postMessage("running");
let rounds = 0;
while (live.size > 0) {
  for (const i of live) {
    const slot = slots[i]!;
    const plan = planBeat(slot, 1e15, 0);
    if (plan.kind !== "beat" || !beginRound(slot)) {
      if (plan.kind === "drop" || plan.kind === "beat") live.delete(i);
      continue;
    }
    // A round of a few "publishes".
    for (let k = 0; k < 3; k++) Atomics.add(counts, i, 1);
    endRound(slot, 0, plan.progress, true);
    rounds += 1;
  }
}
parentPort!.postMessage({ rounds });
