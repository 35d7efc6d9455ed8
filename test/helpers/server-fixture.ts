/** One nats-server per test file, with a worker connection, a spy connection and a second worker's connection. */
import { afterAll, beforeAll } from "vitest";
import type { NatsConnection } from "@nats-io/transport-node";
import { HeartbeatThread } from "../../src/lease/heartbeat-thread.js";
import { threadConnectionFrom } from "../../src/lease/heartbeat-thread-options.js";
import { startServer, type NatsServer, type ServerOptions } from "./nats-server.js";

export interface ServerFixture {
  readonly srv: NatsServer;
  /** The worker's connection. */
  readonly nc: NatsConnection;
  /** A second connection for the ack-frame spy. */
  readonly spyConn: NatsConnection;
  /** A connection for a second worker on the same durable (the proof of a kept lease). */
  readonly rivalConn: NatsConnection;
  /** Waits until frames the worker sent have reached the spy. */
  drain(): Promise<void>;
}

/** Starts a server in `beforeAll` and disposes of it in `afterAll`; read the fields inside tests. */
export function useServer(options: ServerOptions = {}): ServerFixture {
  let srv: NatsServer | undefined;
  let nc: NatsConnection | undefined;
  let spyConn: NatsConnection | undefined;
  let rivalConn: NatsConnection | undefined;
  beforeAll(async () => {
    srv = await startServer(options);
    nc = await srv.connect();
    spyConn = await srv.connect();
    rivalConn = await srv.connect();
  });
  afterAll(async () => {
    await nc?.close();
    await spyConn?.close();
    await rivalConn?.close();
    await srv?.dispose();
  });
  const need = <T>(v: T | undefined): T => {
    if (v === undefined) throw new Error("the server fixture is only ready inside tests");
    return v;
  };
  return {
    get srv() {
      return need(srv);
    },
    get nc() {
      return need(nc);
    },
    get spyConn() {
      return need(spyConn);
    },
    get rivalConn() {
      return need(rivalConn);
    },
    async drain() {
      await need(nc).flush();
      await need(spyConn).flush();
    },
  };
}

/**
 * The heartbeat thread of `thread: true` on the fixture's worker connection, connected before the
 * file's first test and released after its last: for tests of what the thread does, not of its
 * start on a busy machine (a round due before its connection is up is a failed beat).
 */
export function useWarmThread(fx: ServerFixture): void {
  let warm: HeartbeatThread | undefined;
  beforeAll(async () => {
    warm = HeartbeatThread.acquire(threadConnectionFrom(fx.nc));
    await warm.ready();
  });
  afterAll(() => {
    warm?.release();
  });
}
