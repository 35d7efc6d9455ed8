/**
 * The limits the guardrails hold consumer timing to, beyond what the server itself checks.
 * Constants only.
 */

/**
 * The longest AckWait or BackOff step (ms) accepted for heartbeats: one day. Heartbeat
 * intervals are at most an hour, so no safe schedule needs a longer window, and a longer
 * value is usually a duration in nanoseconds passed as milliseconds (30 s is 3e10 ns). It is
 * also far below what a Node.js timer can hold (2^31 − 1 ms, about 24.8 days).
 */
export const MAX_WINDOW_MS = 86_400_000;

/**
 * A window at least this large (ms) is reported as "probably nanoseconds": one second in
 * nanoseconds is 1e9, and no real AckWait is 11.6 days.
 */
export const LOOKS_LIKE_NANOS_MS = 1e9;

/**
 * The most BackOff steps the library reads or accepts. nats-server has no step limit of its
 * own (`checkConsumerCfg` only requires MaxDeliver to cover the list); the only bound is the
 * size of the consumer create request, `max_payload` (1 MiB by default, `MAX_PAYLOAD_SIZE` in
 * the server's `const.go`), which fits about 131,000 steps of at least 1 ms. Beyond the last
 * step the server repeats it for every later delivery, so a list longer than this is a
 * generated mistake, and refusing it keeps every read of a list bounded.
 */
export const MAX_BACKOFF_STEPS = 10_000;
