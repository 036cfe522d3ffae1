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
    uint64_t models, invalid, files, tensors, file_bytes, generation, open_files;
    uint64_t gpu_resident, gpu_leases, gpu_staging;
    double gpu_bps;
    struct metrics_gpu_device gpu_devices[METRICS_GPU_DEVICES];
    size_t n_gpu_devices;
    uint64_t hash_bytes, hash_files, hash_errors, hash_pending, hash_pending_bytes, hash_known,
        hash_files_all;
    uint64_t mirror_bytes, mirror_in_use, mirror_files, mirror_partial, mirror_waiting;
    uint64_t mirror_up;        /* 0: no mirror; 1: its upstream is failing; 2: it answers */
    uint64_t mirror_last_success, mirror_failures_in_row;
    struct metrics_rates r1, r10, r60; /* only when taken with_rates */
};

void metrics_snapshot_take(struct metrics_snapshot *sn, int with_rates);

#endif
