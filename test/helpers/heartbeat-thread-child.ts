/**
 * A host that uses the heartbeat thread for one batch and then finishes its work, for the test
 * that the thread never keeps a finished host alive. argv: <mode> <server URL>.
 *   tidy       stops its lease (stopAndFlush) and releases the thread
 *   forgetful  leaves its lease beating and never releases the thread
 * Prints one JSON line when its work is done; nothing of its own is left to keep it alive.
 */
import { connect } from "@nats-io/transport-node";
import { HeartbeatThread } from "../../src/lease/heartbeat-thread.js";
import { nowEpochMs } from "../../src/lease/heartbeat-thread-protocol.js";

const [mode, url] = process.argv.slice(2) as [string, string];
const nc = await connect({ servers: url });
let frames = 0;
nc.subscribe(`child.beats.${process.pid}`, { callback: () => void (frames += 1) });
await nc.flush();
const thread = HeartbeatThread.acquire({ servers: url });
await thread.ready();
const lease = thread.register([`child.beats.${process.pid}`], { intervalMs: 100, maxHeartbeats: 1000, firstDueAt: nowEpochMs() });
await new Promise((r) => setTimeout(r, 500));
if (mode === "tidy") {
  await lease.stopAndFlush();
  thread.release();
}
await nc.close();
console.log(JSON.stringify({ mode, frames, beats: lease.beats, doneAt: Date.now() }));
