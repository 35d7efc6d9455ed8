/**
 * The process's threads, for the rows that run work on a worker thread (Linux:
 * `/proc/self/task`): which threads appeared since a reading, the CPU time they used
 * (`schedstat`, nanoseconds, as `mainThreadCpuMs` reads the main thread's), the resident
 * memory of the whole process; and the CPU time of a child process (the suite's nats-server).
 * Off Linux the lists are empty and the CPU readings NaN.
 */
import { readdirSync, readFileSync } from "node:fs";
import { sleep } from "./measure.js";

/** The ids of the process's threads now (empty where they cannot be listed). */
export function threadIds(): string[] {
  try {
    return readdirSync("/proc/self/task");
  } catch {
    return [];
  }
}

/** The threads that exist now and did not at `before`. */
export function threadsSince(before: ReadonlySet<string>): string[] {
  return threadIds().filter((t) => !before.has(t));
}

/** CPU time in milliseconds used so far by the threads `tids` together (NaN when none can be read). */
export function threadsCpuMs(tids: readonly string[]): number {
  let sum = 0;
  let read = 0;
  for (const tid of tids) {
    try {
      sum += Number(readFileSync(`/proc/self/task/${tid}/schedstat`, "utf8").split(" ")[0]) / 1e6;
      read += 1;
    } catch {
      // The thread has ended.
    }
  }
  return read === 0 ? Number.NaN : sum;
}

/** Waits until none of `tids` is left (at most `timeoutMs`); whether they all ended. */
export async function untilThreadsEnded(tids: readonly string[], timeoutMs: number): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const now = new Set(threadIds());
    if (!tids.some((t) => now.has(t))) return true;
    if (performance.now() > deadline) return false;
    await sleep(50);
  }
}

/** Resident memory of the whole process (every thread), in bytes. */
export function residentBytes(): number {
  return process.memoryUsage.rss();
}

/** Clock ticks per second of `/proc/<pid>/stat` (USER_HZ: 100 on Linux). */
const USER_HZ = 100;

/**
 * CPU time in milliseconds (user + system, 10 ms resolution) used so far by this process's
 * child whose command is `command` (the first one found), or NaN when there is none.
 */
export function childProcessCpuMs(command: string): number {
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((d) => /^\d+$/.test(d));
  } catch {
    return Number.NaN;
  }
  for (const pid of pids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    } catch {
      continue;
    }
    const open = stat.indexOf("(");
    const close = stat.lastIndexOf(")");
    if (stat.slice(open + 1, close) !== command) continue;
    // After the command: state, ppid, ... utime is the 14th field overall, stime the 15th.
    const rest = stat.slice(close + 2).split(" ");
    if (Number(rest[1]) !== process.pid) continue;
    return ((Number(rest[11]) + Number(rest[12])) * 1000) / USER_HZ;
  }
  return Number.NaN;
}
