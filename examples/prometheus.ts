/**
 * Serves the library's metrics to Prometheus at /metrics.
 * Run: npx tsx examples/prometheus.ts   (PORT=9464 by default; PORT=0 picks a free port)
 *
 * In a real service, pass `metrics` as the `metrics` option of withInProgress or CommitThenAck;
 * here a few values are recorded directly so there is something to scrape.
 * With EXAMPLE_ONCE=1 it exits after serving /metrics once.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { register } from "prom-client";
import { MetricNames } from "jetstream-inprogress";
import { prometheusMetrics } from "jetstream-inprogress/prometheus";

const port = Number(process.env["PORT"] ?? 9464);
const once = process.env["EXAMPLE_ONCE"] === "1";

// Registered in prom-client's global register, next to anything else the service exports.
const metrics = prometheusMetrics({ prefix: "myapp_" });

metrics.setGauge(MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE, 1);
metrics.addCounter(MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL, 3);
metrics.addCounter(MetricNames.IN_PROGRESS_SUCCESSES_TOTAL, 3);
metrics.recordObservation(MetricNames.IN_PROGRESS_HEARTBEAT_SECONDS, 0.002);
metrics.recordObservation(MetricNames.BATCH_WRITE_SECONDS, 12.5);
metrics.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 100);
metrics.setGauge(MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE, 0);

const server = createServer((req, res) => {
  if (req.method !== "GET" || req.url?.split("?")[0] !== "/metrics") {
    res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
    return;
  }
  register.metrics().then(
    (body) => {
      // In once mode the connection is not kept alive, so the server can close right after.
      res.writeHead(200, { "content-type": register.contentType, ...(once ? { connection: "close" } : {}) }).end(body, () => {
        if (once) shutdown();
      });
    },
    (err: unknown) => {
      res.writeHead(500, { "content-type": "text/plain" }).end(`${String(err)}\n`);
    },
  );
});

function shutdown(): void {
  server.close(() => console.log("stopped"));
  server.closeIdleConnections();
}

process.once("SIGINT", shutdown);
process.once("SIGTERM", shutdown);

server.listen(port, () => {
  const { port: bound } = server.address() as AddressInfo;
  console.log(`serving metrics on http://localhost:${bound}/metrics`);
});
