/**
 * The test order. Without vitest's duration cache (a fresh clone in CI) vitest starts the
 * largest files first, but file size says little about time: short files that start a 3-node
 * cluster or build the examples ran a minute, and started last they kept one worker busy after
 * the others had finished (in one run the TypeScript checks of consumer-types started at 264 s of
 * 380). The files that take longest go first, longest first (durations of a whole `npm test` on
 * 2 cores, 4 workers, in seconds); everything else keeps vitest's order after them.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node";

const LONGEST_FIRST = [
  "test/reliability/loop-elections.test.ts", // 120
  "test/integration/lossless-settling.test.ts", // 82
  "test/integration/intake.test.ts", // 67
  "test/integration/readme.test.ts", // 66
  "test/integration/with-in-progress.test.ts", // 55
  "test/unit/consumer-types.test.ts", // 49
  "test/integration/blocked-loop.test.ts", // 48
  "test/integration/thread-watch-edges.test.ts", // 46
  "test/integration/thread-watch.test.ts", // 43
  "test/integration/slow-link.test.ts", // 40
  "test/integration/demo.test.ts", // 38
  "test/integration/outages.test.ts", // 36
  "test/integration/commit-then-ack.test.ts", // 34
  "test/integration/heartbeat-thread-loops.test.ts", // 30
  "test/integration/consumer-loop.test.ts", // 26
  "test/integration/examples-engine.test.ts", // 26
  "test/integration/priority-groups.test.ts", // 25
  "test/unit/api-surface.test.ts", // 24
  "test/reliability/cluster-failover.test.ts", // 24
  "test/integration/redaction.test.ts", // 22
  "test/integration/heartbeat-thread-refused.test.ts", // 21
  "test/integration/watch-consumer.test.ts", // 20
  "test/integration/examples-commonjs.test.ts", // 19
  "test/integration/heartbeat-thread.test.ts", // 18
  "test/integration/postgres-sink.test.ts", // 16
  "test/integration/diagnostics.test.ts", // 15
  "test/integration/dead-letter-headers.test.ts", // 14
  "test/integration/heartbeat-thread-lifecycle.test.ts", // 13
  "test/reliability/connection-drop.test.ts", // 12
];

function rank(f: TestSpecification): number {
  const i = LONGEST_FIRST.findIndex((p) => f.moduleId.endsWith(p));
  return i < 0 ? LONGEST_FIRST.length : i;
}

export class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const at = new Map(sorted.map((f, i) => [f, i]));
    // Groups first (the quiet group stays last), then the list, then vitest's own order.
    const group = (f: TestSpecification): number => f.project.config.sequence.groupOrder;
    return [...sorted].sort((a, b) => group(a) - group(b) || rank(a) - rank(b) || at.get(a)! - at.get(b)!);
  }
}
