/**
 * Sizes and rounds of the two modes: the full run (the figures in docs/benchmarks.md) and the
 * smoke run CI uses to prove every row still runs (one round each, smaller sizes).
 */

export type Mode = "full" | "smoke";

export interface BenchConfig {
  readonly mode: Mode;
  /** Item 1: rounds, batch sizes, calls per sample. */
  readonly overhead: {
    readonly rounds: number;
    readonly batchSizes: readonly number[];
    /** Calls per sample with instant work, for a batch of 1 (scaled down for larger batches). */
    readonly instantCalls: number;
    /** Calls per sample with the 100 µs write. */
    readonly slowCalls: number;
    readonly slowWriteMicros: number;
  };
  /** Item 2: messages in flight, rounds. */
  readonly round: { readonly messages: number; readonly rounds: number };
  /** Item 3: messages per arm, batch size, fetch expiry, rounds. */
  readonly endToEnd: { readonly messages: number; readonly batchSize: number; readonly expiresMs: number; readonly rounds: number };
  /** Item 4: messages held, fetch batch, AckWait, interval, CPU rounds and beat periods per arm. */
  readonly capacity: {
    readonly messages: number;
    readonly fetchBatch: number;
    readonly ackWaitMs: number;
    readonly intervalMs: number;
    readonly rounds: number;
    readonly periodsPerArm: number;
  };
  /** Item 5: concurrent batches, messages per batch, rounds. */
  readonly scaling: { readonly batches: readonly number[]; readonly batchSize: number; readonly rounds: number };
  /** Item 7: the write, batch size, expiry, concurrency, messages per arm (one lane, several), rounds. */
  readonly concurrency: {
    readonly writeMs: number;
    readonly batchSize: number;
    readonly expiresMs: number;
    readonly concurrency: number;
    readonly serialMessages: number;
    readonly parallelMessages: number;
    readonly rounds: number;
  };
  /** Item 8: the handler, concurrency, messages per arm, expiry, rounds. */
  readonly runEach: { readonly handlerMs: number; readonly concurrency: number; readonly messages: number; readonly expiresMs: number; readonly rounds: number };
  /** Item 9: idle loops side by side, the measured wall time per arm, batch size, expiry, rounds. */
  readonly idle: { readonly loops: number; readonly windowMs: number; readonly batchSize: number; readonly expiresMs: number; readonly rounds: number };
  /** Item 10: messages in flight, handlers, AckWait, interval, beat periods per window, rounds. */
  readonly inFlight: {
    readonly messages: number;
    readonly concurrency: number;
    readonly ackWaitMs: number;
    readonly intervalMs: number;
    readonly periods: number;
    readonly rounds: number;
  };
  /** Item 11: a batch with tracing on against the same batch with it off. */
  readonly tracing: { readonly batchSize: number; readonly writeMs: number; readonly batches: number; readonly rounds: number };
  /**
   * Item 12: messages in flight, handlers, AckWait, interval, beat periods per window, rounds,
   * and warm-up rounds (uncounted: the heartbeat thread starts and compiles its code in one).
   */
  readonly thread: {
    readonly messages: number;
    readonly concurrency: number;
    readonly ackWaitMs: number;
    readonly intervalMs: number;
    readonly periods: number;
    readonly rounds: number;
    readonly warmup: number;
  };
  /** Item 13: messages per arm, batch size, fetch expiry, rounds. */
  readonly confirmAck: { readonly messages: number; readonly batchSize: number; readonly expiresMs: number; readonly rounds: number };
  /** Item 14: batch size and concurrency (their product is in flight), AckWait, interval, beat periods per window, rounds. */
  readonly intake: {
    readonly batchSize: number;
    readonly concurrency: number;
    readonly ackWaitMs: number;
    readonly intervalMs: number;
    readonly periods: number;
    readonly rounds: number;
  };
}

export const FULL: BenchConfig = {
  mode: "full",
  overhead: { rounds: 9, batchSizes: [1, 100, 1000], instantCalls: 20_000, slowCalls: 1_000, slowWriteMicros: 100 },
  round: { messages: 10_000, rounds: 7 },
  endToEnd: { messages: 100_000, batchSize: 100, expiresMs: 1000, rounds: 7 },
  capacity: { messages: 100_000, fetchBatch: 1000, ackWaitMs: 4000, intervalMs: 2000, rounds: 5, periodsPerArm: 2 },
  scaling: { batches: [1, 100, 1000], batchSize: 100, rounds: 7 },
  concurrency: { writeMs: 50, batchSize: 100, expiresMs: 1000, concurrency: 4, serialMessages: 2000, parallelMessages: 8000, rounds: 7 },
  runEach: { handlerMs: 10, concurrency: 32, messages: 6400, expiresMs: 1000, rounds: 7 },
  idle: { loops: 64, windowMs: 3000, batchSize: 100, expiresMs: 1000, rounds: 9 },
  inFlight: { messages: 1000, concurrency: 1000, ackWaitMs: 2000, intervalMs: 1000, periods: 5, rounds: 7 },
  tracing: { batchSize: 100, writeMs: 1, batches: 300, rounds: 9 },
  thread: { messages: 1000, concurrency: 1000, ackWaitMs: 2000, intervalMs: 1000, periods: 5, rounds: 7, warmup: 1 },
  confirmAck: { messages: 100_000, batchSize: 100, expiresMs: 1000, rounds: 7 },
  intake: { batchSize: 100, concurrency: 10, ackWaitMs: 2000, intervalMs: 1000, periods: 5, rounds: 7 },
};

export const SMOKE: BenchConfig = {
  mode: "smoke",
  overhead: { rounds: 1, batchSizes: [1, 100, 1000], instantCalls: 2_000, slowCalls: 100, slowWriteMicros: 100 },
  round: { messages: 2_000, rounds: 1 },
  endToEnd: { messages: 5_000, batchSize: 100, expiresMs: 1000, rounds: 1 },
  capacity: { messages: 10_000, fetchBatch: 1000, ackWaitMs: 2000, intervalMs: 1000, rounds: 1, periodsPerArm: 2 },
  scaling: { batches: [1, 100, 1000], batchSize: 100, rounds: 1 },
  concurrency: { writeMs: 50, batchSize: 100, expiresMs: 1000, concurrency: 4, serialMessages: 600, parallelMessages: 1600, rounds: 1 },
  runEach: { handlerMs: 10, concurrency: 32, messages: 1280, expiresMs: 1000, rounds: 1 },
  idle: { loops: 64, windowMs: 1000, batchSize: 100, expiresMs: 1000, rounds: 1 },
  inFlight: { messages: 1000, concurrency: 1000, ackWaitMs: 1000, intervalMs: 500, periods: 2, rounds: 1 },
  tracing: { batchSize: 100, writeMs: 1, batches: 50, rounds: 1 },
  thread: { messages: 1000, concurrency: 1000, ackWaitMs: 1000, intervalMs: 500, periods: 2, rounds: 1, warmup: 0 },
  confirmAck: { messages: 5_000, batchSize: 100, expiresMs: 1000, rounds: 1 },
  intake: { batchSize: 100, concurrency: 10, ackWaitMs: 1000, intervalMs: 500, periods: 2, rounds: 1 },
};
