/**
 * The test order. Without vitest's duration cache (a fresh clone in CI) vitest starts the
 * largest files first, but a few short files run the longest (a 3-node cluster's elections, the
 * README's and the demo's examples): started last, they kept one worker busy for a minute after
 * the others had finished. They go first; everything else keeps vitest's order.
 */
import { BaseSequencer, type TestSpecification } from "vitest/node";

const LONG_BUT_SMALL = [
  "test/reliability/loop-elections.test.ts",
  "test/integration/readme.test.ts",
  "test/integration/blocked-loop.test.ts",
  "test/integration/demo.test.ts",
  "test/integration/outages.test.ts",
  "test/integration/slow-link.test.ts",
];

function rank(f: TestSpecification): number {
  const i = LONG_BUT_SMALL.findIndex((p) => f.moduleId.endsWith(p));
  return i < 0 ? LONG_BUT_SMALL.length : i;
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
