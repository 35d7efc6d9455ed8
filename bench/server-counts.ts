/**
 * What each client connection published, as the server counted it: the `in_msgs` of its
 * monitoring endpoint's `/connz`. Frames sent by a worker thread's own connection are counted
 * the same way as the main connection's, and nothing in the measured process subscribes to
 * them (a spy subscription would add its own CPU to the arm it counts).
 */

/** Messages received by the server from each open client connection, by connection id. */
export type Published = ReadonlyMap<number, { readonly name: string | undefined; readonly inMsgs: number }>;

interface Connz {
  readonly connections?: ReadonlyArray<{ readonly cid: number; readonly name?: string; readonly in_msgs: number }>;
}

/** Reads `/connz` of the server whose monitoring listens at `monitorUrl`. */
export async function publishedByConnection(monitorUrl: string): Promise<Published> {
  const res = await fetch(`${monitorUrl}/connz?limit=10000`);
  if (!res.ok) throw new Error(`${monitorUrl}/connz answered ${res.status}`);
  const body = (await res.json()) as Connz;
  return new Map((body.connections ?? []).map((c) => [c.cid, { name: c.name, inMsgs: c.in_msgs }]));
}

/**
 * Messages the connections that pass `which` published between two readings (a connection
 * opened in between counts from zero; one closed in between is not in the second reading and
 * counts nothing).
 */
export function publishedBetween(before: Published, after: Published, which: (cid: number, name: string | undefined) => boolean): number {
  let n = 0;
  for (const [cid, c] of after) if (which(cid, c.name)) n += c.inMsgs - (before.get(cid)?.inMsgs ?? 0);
  return n;
}
