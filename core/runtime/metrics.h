/* metrics: lock-free counters, gauges and latency histograms, rendered as
 * JSON or Prometheus text.
 *
 * Requests are counted by kind x outcome, two small label sets the caller
 * names (metrics_set_labels): the daemon's kinds are its endpoints and its
 * outcomes the HTTP status classes (server/http/http_metrics), which this
 * library does not know.
 *
 * Every hot-path call is a few relaxed atomic adds on a cache-line-padded
 * shard that belongs to the calling thread (threads are spread over the
 * shards round-robin on first use), so request threads never share a
 * written cache line and never take a lock. Rendering sums the shards. */
#ifndef TENSORD_METRICS_H
#define TENSORD_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "device_name.h"

#define METRICS_MAX_KINDS 24
#define METRICS_MAX_OUTCOMES 8

/* The labels requests are counted under. The last kind and the last
 * outcome also take every index out of range ("other"). */
struct metrics_labels {
    const char *kind_key;          /* the label's name, e.g. "endpoint" */
    const char *outcome_key;       /* e.g. "code" */
    const char *const *kinds;      /* n_kinds names, 1..METRICS_MAX_KINDS */
    unsigned n_kinds;
    const char *const *outcomes;   /* n_outcomes names, 1..METRICS_MAX_OUTCOMES */
    unsigned n_outcomes;
};

/* Monotonic counters bumped with metrics_add. */
enum metrics_ctr {
    MC_RANGE_REQUESTS,        /* answers to a (satisfiable) Range request */
    MC_MULTIRANGE_REQUESTS,   /* ... of which multipart/byteranges */
    MC_SLICE_REQUESTS,
    MC_NOT_MODIFIED,          /* 304 */
    MC_RANGE_NOT_SATISFIABLE, /* 416 */
    MC_SENDFILE_BYTES,        /* body bytes sent with sendfile (zero copy), added when the answer
                               * ends: the bytes the kernel accepted, not the ones queued */
    MC_COPIED_BYTES,          /* body bytes sent from a buffer (likewise) */
    MC_RELOADS,               /* registry rescans (SIGHUP, inotify) */
    MC_RELOAD_ERRORS,
    MC_CONNECTIONS_TOTAL,     /* bumped by metrics_conn_opened; no need to add it */
    MC_CONNECTIONS_REJECTED,  /* over max_connections / max_connections_per_ip */
    MC_GPU_PRELOAD_BYTES,     /* bytes copied to devices by preloads */
    MC_LEASES_TOTAL,          /* IPC leases granted */
    MC_IPC_REFUSED,           /* IPC connections refused by the allow-list */
    MC_SCAN_ERRORS,           /* I/O or resource errors met by rescans (the models they hit
                               * kept their previous state; the rescan is retried) */
    MC_TRANSFERS_CUT,         /* answers cut short because the file they sent was written */
    MC_GPU_PRELOAD_PAGE_CACHE_BYTES, /* preload bytes copied from the page cache */
    MC_GPU_PRELOAD_DISK_BYTES,       /* preload bytes read from the disk */
    MC_RESPONSES_ABORTED,     /* answers whose body did not go out whole (client left, timeout,
                               * write error, file written): their bytes count what was sent */
    MC_DOCS_RENDERED,         /* model and repo documents rendered (server/handlers/doc_cache) */
    MC_MIRROR_UPSTREAM_BYTES, /* bytes the mirror fetched from its upstream */
    MC_MIRROR_BLOCKS,         /* blocks it fetched whole */
    MC_MIRROR_VERIFY_FAILURES,/* files whose bytes did not hash to the digest they were asked by */
    MC_MIRROR_EVICTIONS,      /* files evicted from its cache */
    MC_GPU_PRELOAD_UPSTREAM_BYTES, /* preload bytes a mirror brought from its upstream during the
                                    * preload (counted in neither page cache nor disk) */
    /* Nanoseconds finished preloads spent in each phase (gpu/gpu_manager.h,
     * enum gm_phase), in its order: rendered as seconds. */
    MC_GPU_PRELOAD_ALLOC_NS,
    MC_GPU_PRELOAD_RING_NS,
    MC_GPU_PRELOAD_PLAN_NS,
    MC_GPU_PRELOAD_COPY_NS,
    MC_GPU_PRELOAD_FINISH_NS,
    MC_MIRROR_QUESTIONS_REFUSED, /* questions to the upstream refused at once, its queue full */
    MC_MIRROR_HIT_BYTES,      /* bytes answers read from a mirror's cache that were there */
    MC_MIRROR_MISS_BYTES,     /* ... that had to be fetched (or were being fetched) */
    MC_MIRROR_UPSTREAM_FAILURES, /* requests to a mirror's upstream that got no answer, or a 5xx */
    MC_MIRROR_STALE_ANSWERS,  /* answers a mirror served from what it kept, its upstream failing */
    MC_MIRROR_QUESTIONS_SHARED, /* questions answered by the same one already asked */
    MC_MIRROR_QUESTIONS_ABANDONED, /* questions whose clients all left: dropped or stopped */
    MC_COUNT
};

/* Zeroes everything and starts the uptime clock. Call once before any
 * other thread uses metrics (not safe against concurrent updates). */
void metrics_init(void);
/* Names the request labels (the strings must outlive the metrics); call
 * after metrics_init, before any request is counted. Until then requests
 * have one kind and one outcome, both "other". */
void metrics_set_labels(const struct metrics_labels *labels);

void metrics_add(enum metrics_ctr c, uint64_t n);

/* A request began (in-flight + 1). Pair each call with metrics_request_done. */
void metrics_request_start(void);
/* A request ended: in-flight - 1, requests by kind x outcome, body bytes
 * by kind, duration and time-to-first-byte histograms. Durations in
 * nanoseconds. */
void metrics_request_done(unsigned kind, unsigned outcome, uint64_t bytes_sent,
                          uint64_t duration_ns, uint64_t ttfb_ns);

/* A connection opened (also counts MC_CONNECTIONS_TOTAL) / closed. */
void metrics_conn_opened(void);
void metrics_conn_closed(void);

/* Gauges published after each registry scan. */
/* Descriptors the served snapshot holds open (one per .safetensors file). */
void metrics_set_open_files(uint64_t n);
/* file_bytes: the sum of the sizes of the models' files. */
void metrics_set_registry(uint64_t models, uint64_t invalid_models, uint64_t files,
                          uint64_t tensors, uint64_t file_bytes, uint64_t generation);
/* Gauges published by the GPU manager when they change. staging_bytes:
 * the memory the devices' staging rings hold between preloads. */
void metrics_set_gpu(uint64_t bytes_resident, uint64_t leases_active,
                     double last_preload_bytes_per_second, uint64_t staging_bytes);

/* The same per device (labelled by device in the renderings): each device
 * that holds an instance, a staging ring, or has a loader. Replaces the
 * previous set; at most METRICS_GPU_DEVICES are kept: the host and every
 * GPU a device name can name. */
#define METRICS_GPU_DEVICES (DEVICE_NAME_MAX_DEVICES + 1)
struct metrics_gpu_device {
    char device[24];           /* "cuda:0", "host" */
    uint64_t resident_bytes;   /* published allocations of its instances */
    uint64_t leases_active;
    uint64_t staging_bytes;    /* its staging ring */
    unsigned instances;        /* instances held there, loading or draining included */
    unsigned loading;          /* 1 while its loader loads one */
};
void metrics_set_gpu_devices(const struct metrics_gpu_device *d, size_t n);

/* Content hashing (core/hash/hasher): bytes read into SHA-256, files whose hash
 * was recorded, files that could not be read. Added as they happen. */
void metrics_hash_progress(uint64_t bytes, uint64_t files, uint64_t errors);
/* Gauges about the latest snapshot's files: still to hash (queued, waiting
 * to retry or being hashed) and their bytes, with a known hash, in all. */
void metrics_set_hashing(uint64_t files_pending, uint64_t bytes_pending, uint64_t files_known,
                         uint64_t files);

/* Gauges of a mirror's cache (mirror/mirror): the bytes it holds, of those
 * the bytes of files in use (read, fetched, preloaded: no eviction can
 * free them now), its files, and those of them still partial. Set as they
 * change. */
void metrics_set_mirror(uint64_t bytes, uint64_t bytes_in_use, uint64_t files,
                        uint64_t partial_files);
/* The questions a mirror's upstream queue holds waiting (mirror/mirror_job). */
void metrics_set_mirror_queue(uint64_t waiting);
/* A mirror's upstream (mirror/mirror_health): whether its last request got
 * an answer, when one last did (unix seconds, 0 = not since start), and the
 * requests that failed in a row since. Rendered only once set. */
void metrics_set_mirror_upstream(int up, int64_t last_success, uint64_t failures_in_row);

/* Renderings of a consistent-enough snapshot (each shard is read once,
 * metrics_render.c). Caller frees; NULL when memory ran out. */
char *metrics_render_json(void);
char *metrics_render_prometheus(void);

/* Tests only: replaces the monotonic clock used for uptime and rates
 * (NULL restores time_mono_ns). */
void metrics_set_clock(uint64_t (*clock_ns)(void));

/* Totals and request/byte rates over the last `seconds` (1..60) seconds, as
 * the JSON rendering reports them. */
struct metrics_rates {
    uint64_t requests, bytes;
    double requests_per_second, bytes_per_second;
};
void metrics_rates(unsigned seconds, struct metrics_rates *out);

#endif
