/**
 * The settle decision: which frame one message gets, from what is known about it. Pure — no
 * I/O, no clock — so the whole table is tested exhaustively; sending the frame is elsewhere.
 *
 * | facts | frame |
 * | --- | --- |
 * | connection closed, failed on the last allowed delivery | none (`exhausted_connection_closed`) |
 * | connection closed | none (`connection_closed`) |
 * | committed | `+ACK` (also after a lost lease: the commit happened) |
 * | failed on the last allowed delivery | dead-letter (final), else `+TERM` for a permanent failure (not after a shutdown or a lost lease), else none (`exhausted`) |
 * | failed, cancelled by the host | none (`cancelled`) |
 * | failed, lease lost | none (`lease_lost`: another worker may hold it) |
 * | permanent failure | dead-letter, else `+TERM` |
 * | temporary failure | `-NAK` with a delay, or none (`leave`); none (`limit_unknown`) when MaxDeliver is unknown |
 *
 * "Failed" covers every message the write did not commit: a temporary or permanent error, a
 * cancelled write, a write cut short by a lost lease.
 */

/** What the write did for one message. */
export type Verdict = "committed" | "temporary" | "permanent";

/** What is known about one message when it is settled. */
export interface SettleFacts {
  /** What the write did for it. */
  readonly verdict: Verdict;
  /** Its delivery count (1 for a first delivery), when readable. */
  readonly deliveryCount: number | undefined;
  /** The consumer's MaxDeliver; `undefined`, `0` or negative: unlimited (or unknown, see `limitKnown`). */
  readonly maxDeliver: number | undefined;
  /** Whether the consumer's MaxDeliver is known; an unknown limit is never taken for "deliveries left". */
  readonly limitKnown: boolean;
  /** The host shut down before the write committed. */
  readonly cancelled: boolean;
  /** The batch's lease ran out while the write ran. */
  readonly leaseLost: boolean;
  /** The messages' connection is closed: no frame can be sent. */
  readonly connectionClosed: boolean;
}

/** The instance's settle rules. */
export interface SettleRules {
  /** What a temporary failure gets when deliveries are left. */
  readonly temporary: "nak" | "leave";
  /**
   * A dead-letter target is configured. A target found unusable later (a copy stored by the
   * source stream) still routes here; the settler then reports `target_unusable`.
   */
  readonly deadLetter: boolean;
}

/** Why a message gets no frame. */
export type NoFrameReason = "connection_closed" | "cancelled" | "lease_lost" | "leave" | "limit_unknown" | "exhausted" | "exhausted_connection_closed";

/** The frame one message gets. */
export type Decision =
  | { readonly frame: "ack" }
  | { readonly frame: "nak" }
  | { readonly frame: "term" }
  /** Publish a copy, then `+ACK`; `final`: no delivery is left, so a failed publish exhausts it. */
  | { readonly frame: "dead_letter"; readonly final: boolean }
  | { readonly frame: "none"; readonly reason: NoFrameReason };

/** The frame of a committed message on an open connection. */
export const ACK: Decision = Object.freeze({ frame: "ack" });
const NAK: Decision = Object.freeze({ frame: "nak" });
const TERM: Decision = Object.freeze({ frame: "term" });
const DEAD_LETTER: Decision = Object.freeze({ frame: "dead_letter", final: false });
const DEAD_LETTER_FINAL: Decision = Object.freeze({ frame: "dead_letter", final: true });
const NONE: Readonly<Record<NoFrameReason, Decision>> = Object.freeze({
  connection_closed: Object.freeze({ frame: "none", reason: "connection_closed" }),
  cancelled: Object.freeze({ frame: "none", reason: "cancelled" }),
  lease_lost: Object.freeze({ frame: "none", reason: "lease_lost" }),
  leave: Object.freeze({ frame: "none", reason: "leave" }),
  limit_unknown: Object.freeze({ frame: "none", reason: "limit_unknown" }),
  exhausted: Object.freeze({ frame: "none", reason: "exhausted" }),
  exhausted_connection_closed: Object.freeze({ frame: "none", reason: "exhausted_connection_closed" }),
});

/**
 * Whether delivery `n` is the last the consumer allows: the server never delivers the message
 * again, whatever is sent (a NAK or nothing both end it there).
 */
export function isLastDelivery(n: number | undefined, maxDeliver: number | undefined): boolean {
  return n !== undefined && maxDeliver !== undefined && maxDeliver > 0 && n >= maxDeliver;
}

/** The frame for one message (see the module table). */
export function decide(facts: SettleFacts, rules: SettleRules): Decision {
  const last = isLastDelivery(facts.deliveryCount, facts.maxDeliver);
  if (facts.connectionClosed) {
    // No frame and no copy can leave; on the last delivery the server never sends it again,
    // so calling it "left for redelivery" would hide a loss.
    return facts.verdict !== "committed" && last ? NONE.exhausted_connection_closed : NONE.connection_closed;
  }
  if (facts.verdict === "committed") return ACK;
  // Nothing sent (or a NAK) on the last delivery would be a loss: only a copy keeps it.
  if (last) {
    if (rules.deadLetter) return DEAD_LETTER_FINAL;
    return facts.verdict === "permanent" && !facts.cancelled && !facts.leaseLost ? TERM : NONE.exhausted;
  }
  if (facts.cancelled) return NONE.cancelled;
  if (facts.leaseLost) return NONE.lease_lost;
  if (facts.verdict === "permanent") return rules.deadLetter ? DEAD_LETTER : TERM;
  if (rules.temporary === "leave") return NONE.leave;
  // A NAK promises a retry: only when the limit says one is left.
  return facts.limitKnown ? NAK : NONE.limit_unknown;
}
