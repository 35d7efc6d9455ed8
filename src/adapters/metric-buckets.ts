// Histogram bucket boundaries shared by the metrics adapters: one set for durations in
// seconds, one for the count-valued observation (heartbeats per batch).

/**
 * Upper bounds (seconds) for the duration histograms: from one millisecond for a heartbeat
 * round to a minute for a slow batch write or a long NAK delay.
 *
 * @example
 * ```ts
 * prometheusMetrics({ buckets: [...DEFAULT_SECONDS_BUCKETS, 300] });
 * ```
 */
export const DEFAULT_SECONDS_BUCKETS: readonly number[] = Object.freeze([
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60,
]);

/**
 * Upper bounds for count-valued histograms (`in_progress_heartbeats_per_batch`): `0` catches
 * batches that finished before their first heartbeat, `12` is the default `maxHeartbeats`,
 * `10000` the largest one allowed.
 *
 * @example
 * ```ts
 * prometheusMetrics({ countBuckets: [0, 1, 2, 4, 8, 16, 32] });
 * ```
 */
export const DEFAULT_COUNT_BUCKETS: readonly number[] = Object.freeze([
  0, 1, 2, 3, 5, 8, 12, 20, 30, 50, 100, 250, 1000, 10000,
]);
