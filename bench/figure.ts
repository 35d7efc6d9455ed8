/**
 * One line of the results: a measured figure, the baseline measured in the same run, their
 * ratio, and the goal it is held to (or none: reported for information).
 */

/** What a goal compares: the ratio to the baseline, the difference to it, or the value itself. */
export type GoalOn = "ratio" | "added" | "value";

export interface Goal {
  /** What the table prints, for example `added ≤ 0.2 µs`. */
  readonly text: string;
  readonly on: GoalOn;
  readonly op: "<=" | ">=" | "==";
  readonly limit: number;
}

export type Status = "pass" | "MISS" | "info";

export interface FigureInput {
  /** Stable id: issue item, then a letter per line (`1a`, `1b`, ...). */
  readonly id: string;
  /** The item (1 to 10) this figure answers. */
  readonly item: number;
  /** What was measured. */
  readonly name: string;
  readonly unit: string;
  /** The measured figure (the library's, or the naive pattern's on item 6 lines). */
  readonly value: number;
  /** What the baseline is. */
  readonly baselineName: string;
  readonly baseline: number;
  readonly goal?: Goal;
  /** Every sample behind the medians, for anyone who wants to check the spread. */
  readonly samples?: { readonly value: readonly number[]; readonly baseline: readonly number[] };
  readonly note?: string;
}

/** A measured figure with its ratio, difference and goal status. */
export interface Figure extends Omit<FigureInput, "goal"> {
  readonly goal: Goal | undefined;
  /** value / baseline. */
  readonly ratio: number;
  /** value - baseline. */
  readonly added: number;
  readonly status: Status;
}

/** Builds a figure and judges it against its goal. */
export function figure(input: FigureInput): Figure {
  const ratio = input.baseline === 0 ? (input.value === 0 ? 1 : Number.POSITIVE_INFINITY) : input.value / input.baseline;
  const added = input.value - input.baseline;
  const goal = input.goal;
  let status: Status = "info";
  if (goal) {
    const x = goal.on === "ratio" ? ratio : goal.on === "added" ? added : input.value;
    status = (goal.op === "<=" ? x <= goal.limit : goal.op === ">=" ? x >= goal.limit : x === goal.limit) ? "pass" : "MISS";
  }
  return { ...input, goal, ratio, added, status };
}

/** Goal helpers, so every row words its goals the same way. */
export const goals = {
  addedAtMost: (limit: number, unit: string): Goal => ({ text: `added ≤ ${limit} ${unit}`, on: "added", op: "<=", limit }),
  ratioAtMost: (limit: number): Goal => ({ text: `ratio ≤ ${limit}`, on: "ratio", op: "<=", limit }),
  ratioAtLeast: (limit: number): Goal => ({ text: `ratio ≥ ${limit}`, on: "ratio", op: ">=", limit }),
  valueAtLeast: (limit: number, text: string): Goal => ({ text, on: "value", op: ">=", limit }),
  valueAtMost: (limit: number, text: string): Goal => ({ text, on: "value", op: "<=", limit }),
  valueExactly: (limit: number, text: string): Goal => ({ text, on: "value", op: "==", limit }),
};

/**
 * What a row found wrong besides its goals (a message not acknowledged, a redelivery): every
 * figure with a goal becomes a miss that names the problem, so it is reported, never thrown.
 */
export function withProblems(figures: Figure[], problems: readonly string[]): Figure[] {
  if (problems.length === 0) return figures;
  const shown = problems.slice(0, 3).join("; ") + (problems.length > 3 ? ` (and ${problems.length - 3} more)` : "");
  return figures.map((f) => (f.goal === undefined ? f : { ...f, status: "MISS", note: `${f.note !== undefined ? `${f.note}; ` : ""}PROBLEM: ${shown}` }));
}
