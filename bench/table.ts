/**
 * The terminal table: one line per figure, with the baseline, the ratio, the goal and its
 * status. The same text goes into docs/benchmarks.md.
 */
import type { Figure } from "./figure.js";

/** A number with sensible precision and thousands separators. */
export function formatNumber(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  const abs = Math.abs(v);
  const digits = abs >= 1000 ? 0 : abs >= 100 ? 1 : abs >= 10 ? 2 : 3;
  return v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function formatRatio(r: number): string {
  if (!Number.isFinite(r)) return String(r);
  return r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(4);
}

function signed(v: number): string {
  return `${v >= 0 ? "+" : ""}${formatNumber(v)}`;
}

/** The table as lines of text. */
export function renderTable(figures: readonly Figure[]): string[] {
  const header = ["id", "measured", "value", "baseline", "ratio", "goal", "status"];
  const rows = figures.map((f) => [
    f.id,
    f.name,
    `${formatNumber(f.value)} ${f.unit}`,
    `${formatNumber(f.baseline)} (${f.baselineName})`,
    f.goal?.on === "added" ? `${formatRatio(f.ratio)} (${signed(f.added)})` : formatRatio(f.ratio),
    f.goal?.text ?? "—",
    f.status,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]): string => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  const out = [line(header), line(widths.map((w) => "-".repeat(w)))];
  let lastItem = figures[0]?.item;
  for (const [i, r] of rows.entries()) {
    const item = figures[i]!.item;
    if (item !== lastItem) out.push("");
    lastItem = item;
    out.push(line(r));
  }
  const notes = figures.filter((f) => f.note !== undefined);
  if (notes.length > 0) {
    out.push("");
    for (const f of notes) out.push(`${f.id}: ${f.note}`);
  }
  return out;
}
