/**
 * Starts test/helpers/durable-observer.ts in a child process and parses what it saw: ack frames
 * and deliveries, each with the observer's Date.now(), so times stand even while the test's own
 * event loop was blocked.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";

const root = join(import.meta.dirname, "..", "..");

export interface ObservedFrame {
  readonly at: number;
  readonly kind: "+WPI" | "+ACK" | "-NAK" | "+TERM" | "other";
  readonly streamSequence: number;
  readonly payload: string;
}

export interface ObservedDelivery {
  readonly at: number;
  readonly seq: number;
  readonly deliveryCount: number;
}

export interface Observer {
  readonly frames: ObservedFrame[];
  readonly deliveries: ObservedDelivery[];
  readonly errors: string[];
  /** Closes the observer's stdin and waits for it to exit. */
  stop(): Promise<void>;
}

function frameOf(subject: string, payload: string, at: number): ObservedFrame {
  const t = subject.split(".");
  const base = t.length >= 12 ? 4 : 2;
  const kind = payload === "" || payload.startsWith("+ACK") ? "+ACK"
    : payload.startsWith("+WPI") ? "+WPI"
    : payload.startsWith("-NAK") ? "-NAK"
    : payload.startsWith("+TERM") ? "+TERM"
    : "other";
  return { at, kind, streamSequence: Number(t[base + 3]), payload };
}

export async function startObserver(o: { url: string; stream: string; consumer: string; pull: boolean }): Promise<Observer> {
  const child = spawn(process.execPath, ["--import", "tsx", join(root, "test", "helpers", "durable-observer.ts")], {
    cwd: root,
    env: { ...process.env, NATS_URL: o.url, STREAM: o.stream, CONSUMER: o.consumer, PULL: o.pull ? "1" : "0" },
    stdio: ["pipe", "pipe", "pipe"],
  });
  const frames: ObservedFrame[] = [];
  const deliveries: ObservedDelivery[] = [];
  const errors: string[] = [];
  let stderr = "";
  let buffered = "";
  let onReady: (() => void) | undefined;
  const ready = new Promise<void>((resolve, reject) => {
    onReady = resolve;
    child.once("exit", (code) => reject(new Error(`observer exited (${String(code)}) before it was ready: ${stderr}`)));
  });
  child.stderr.on("data", (d: Buffer) => void (stderr += d.toString()));
  child.stdout.on("data", (d: Buffer) => {
    buffered += d.toString();
    let nl: number;
    while ((nl = buffered.indexOf("\n")) >= 0) {
      const line = JSON.parse(buffered.slice(0, nl)) as Record<string, unknown>;
      buffered = buffered.slice(nl + 1);
      if (line["type"] === "ready") onReady?.();
      else if (line["type"] === "frame") frames.push(frameOf(String(line["subject"]), String(line["payload"]), Number(line["at"])));
      else if (line["type"] === "delivery") deliveries.push({ at: Number(line["at"]), seq: Number(line["seq"]), deliveryCount: Number(line["deliveryCount"]) });
      else if (line["type"] === "error") errors.push(String(line["error"]));
    }
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  await ready;
  return {
    frames,
    deliveries,
    errors,
    async stop() {
      child.stdin.end();
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}
