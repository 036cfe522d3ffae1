/* metrics_int.h: what metrics.c (the figures) and metrics_render.c (their
 * two renderings) share; no other module includes it. */
#ifndef TENSORD_METRICS_INT_H
#define TENSORD_METRICS_INT_H

#include <stdint.h>

#include "metrics.h"

#define METRICS_NBOUNDS 16
#define METRICS_NBUCKETS (METRICS_NBOUNDS + 1) /* the last one is +Inf */

/* Upper bounds of the latency buckets, 100 us .. 10 s. */
extern const uint64_t metrics_bounds_ns[METRICS_NBOUNDS];

/* The gauges, each set (or, hashing's counters, added to) on its own. */
enum metrics_gauge {
    MG_MODELS, MG_INVALID, MG_FILES, MG_TENSORS, MG_FILE_BYTES, MG_GENERATION, MG_OPEN_FILES,
    MG_GPU_RESIDENT, MG_GPU_LEASES, MG_GPU_BPS_BITS, MG_GPU_STAGING,
    MG_HASH_BYTES, MG_HASH_FILES, MG_HASH_ERRORS,
    MG_HASH_PENDING, MG_HASH_PENDING_BYTES, MG_HASH_KNOWN, MG_HASH_FILES_ALL,
    MG_MIRROR_BYTES, MG_MIRROR_IN_USE, MG_MIRROR_FILES, MG_MIRROR_PARTIAL, MG_MIRROR_WAITING,
    MG_MIRROR_UP, /* 0: no mirror; 1: its upstream is failing; 2: it answers */
    MG_MIRROR_LAST_SUCCESS, MG_MIRROR_FAILURES_IN_ROW,
    MG_COUNT
};

/* Every figure at one moment: the shards summed (each read once), the
 * gauges, and the request labels they are counted under. */
struct metrics_snapshot {
    struct metrics_labels labels;
    double uptime_seconds;
    uint64_t started, done, conn_opened, conn_closed, in_flight, conn_open;
    uint64_t ctr[MC_COUNT];
    uint64_t requests[METRICS_MAX_KINDS][METRICS_MAX_OUTCOMES];
    uint64_t bytes[METRICS_MAX_KINDS];
    uint64_t duration[METRICS_MAX_KINDS][METRICS_NBUCKETS];
    uint64_t duration_sum_ns[METRICS_MAX_KINDS];
    uint64_t ttfb[METRICS_NBUCKETS];
    uint64_t ttfb_sum_ns;
    uint64_t gauge[MG_COUNT];
    double gpu_bps;            /* gauge[MG_GPU_BPS_BITS] as a double, 0 unless finite and >= 0 */
    struct metrics_gpu_device gpu_devices[METRICS_GPU_DEVICES];
    size_t n_gpu_devices;
    struct metrics_rates r1, r10, r60; /* only when taken with_rates */
};

void metrics_snapshot_take(struct metrics_snapshot *sn, int with_rates);

#endif
