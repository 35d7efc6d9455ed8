/**
 * The worker side of {@link ProxyThread}: a {@link TcpProxy} that takes its orders by message
 * and keeps its own timers, so it cuts and restores while the test's main thread is blocked.
 */
import { parentPort, workerData } from "node:worker_threads";
import { TcpProxy } from "../reliability/tcp-proxy.js";

const port = parentPort!;
const data = workerData as { targetPort: number; restores: SharedArrayBuffer };
// Restores so far, for a main thread that cannot read a message while it is blocked.
const restores = new Int32Array(data.restores);
const proxy = await TcpProxy.start(data.targetPort);
port.on("message", (m: { type: "cut"; downMs: number } | { type: "close" }) => {
  if (m.type === "cut") {
    proxy.cut();
    setTimeout(() => {
      proxy.restore();
      Atomics.add(restores, 0, 1);
      port.postMessage({ type: "restored", at: Date.now() });
    }, m.downMs);
  } else {
    void proxy.close().then(() => port.postMessage({ type: "closed" }));
  }
});
port.postMessage({ type: "ready", port: proxy.port });
