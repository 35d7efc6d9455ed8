// Loads a built copy of the heartbeat thread (ESM with import, CommonJS with require) and checks
// that its worker starts from beside the bundle and beats: argv: <bundle path> <server URL>.
// Prints one JSON line; exits by itself.
import { createRequire } from "node:module";
import { connect } from "@nats-io/transport-node";

const [bundle, url] = process.argv.slice(2);
const mod = bundle.endsWith(".cjs") ? createRequire(import.meta.url)(bundle) : await import(bundle);
const nc = await connect({ servers: url });
const subject = `built.beats.${process.pid}`;
let frames = 0;
nc.subscribe(subject, { callback: () => void (frames += 1) });
await nc.flush();
const thread = mod.HeartbeatThread.acquire({ servers: url }, { idleCloseMs: 50 });
await thread.ready(10_000);
const lease = thread.register([subject], { intervalMs: 50, maxHeartbeats: 3, firstDueAt: performance.timeOrigin + performance.now() });
const deadline = Date.now() + 10_000;
while (frames < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
await lease.stopAndFlush();
thread.release();
await thread.exited;
await nc.close();
console.log(JSON.stringify({ frames, beats: lease.beats }));
