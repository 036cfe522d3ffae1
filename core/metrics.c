/* metrics: per-thread shards of relaxed atomic counters.
 *
 * Why shards: a request touches ~8 counters; with one global copy every
 * worker thread would bounce the same cache lines. Each thread takes a shard
 * (round-robin, on first use) and only readers (the renderers) visit all of
 * them. Threads beyond NSHARDS share shards, which stays correct because the
 * adds are atomic.
 *
 * Rates: a ring of per-second snapshots of the request and byte totals.
 * Whoever first notices that a new second has begun (a finishing request or
 * a renderer) wins a CAS on last_sec and writes that second's snapshot, so
 * the work is one shard sweep per second, lock-free. A second with no
 * snapshot had no request finish in it, which is what lets the rate code
 * reconstruct the totals at any second from the neighbouring snapshots. */
#include "metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

#ifndef TENSORD_VERSION
#define TENSORD_VERSION "unknown"
#endif

#define NSHARDS 32
#define NCLASS 6 /* 1xx..5xx, other */
#define NBOUNDS 16
#define NBUCKETS (NBOUNDS + 1) /* the last one is +Inf */
#define RING 64                /* > 60 seconds of history */
#define NS 1000000000ULL
#define RELAXED memory_order_relaxed

typedef _Atomic uint64_t counter;

static const uint64_t bounds_ns[NBOUNDS] = {
    100000,    250000,    500000,    1000000,    2500000,    5000000,    10000000,   25000000,
    50000000,  100000000, 250000000, 500000000, 1000000000, 2500000000, 5000000000, 10000000000};
static const char *const bound_labels[NBUCKETS] = {
    "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
    "0.1",    "0.25",    "0.5",    "1",     "2.5",    "5",     "10",   "+Inf"};
static const char *const class_labels[NCLASS] = {"1xx", "2xx", "3xx", "4xx", "5xx", "other"};
static const char *const ep_names[MEP_COUNT] = {
    "models", "model", "header", "file", "file_header", "tensor",
    "slice",  "gpu",   "fetch",   "hub_file", "hub_api", "metrics", "health", "other"};

struct shard {
    counter started, conn_opened, conn_closed;
    counter ctr[MC_COUNT];
    counter requests[MEP_COUNT][NCLASS];
    counter bytes[MEP_COUNT];
    counter duration[MEP_COUNT][NBUCKETS];
    counter duration_sum_ns[MEP_COUNT];
    counter ttfb[NBUCKETS];
    counter ttfb_sum_ns;
} __attribute__((aligned(128))); /* 128: adjacent-line prefetch pairs lines */

struct slot {
    _Atomic uint64_t sec; /* UINT64_MAX while being written */
    _Atomic uint64_t requests, bytes;
};

static struct shard shards[NSHARDS];
static _Atomic unsigned next_shard;
static _Thread_local struct shard *my_shard;

static struct slot ring[RING];
static _Atomic uint64_t last_sec;
static uint64_t start_ns;

static _Atomic uint64_t g_models, g_invalid, g_files, g_tensors, g_mapped, g_generation;
static _Atomic uint64_t g_open_files;
static _Atomic uint64_t g_gpu_resident, g_gpu_leases, g_gpu_bps_bits;
/* Hashing: a few updates per MiB hashed, so plain shared atomics do. */
static _Atomic uint64_t h_bytes, h_files, h_errors;
static _Atomic uint64_t g_hash_pending, g_hash_pending_bytes, g_hash_known, g_hash_files;

/* Seconds matter here, not nanoseconds: the coarse clock costs a few ns. */
static uint64_t coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * NS + (uint64_t)ts.tv_nsec;
}
static uint64_t (*clock_fn)(void) = coarse_ns;

void metrics_set_clock(uint64_t (*clock_ns)(void))
{
    clock_fn = clock_ns ? clock_ns : coarse_ns;
}

static struct shard *shard(void)
{
    if (!my_shard)
        my_shard = &shards[atomic_fetch_add_explicit(&next_shard, 1, RELAXED) % NSHARDS];
    return my_shard;
}

static inline void add(counter *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, RELAXED);
}

static void totals(uint64_t *requests, uint64_t *bytes)
{
    uint64_t r = 0, b = 0;
    for (int s = 0; s < NSHARDS; s++)
        for (int e = 0; e < MEP_COUNT; e++) {
            for (int c = 0; c < NCLASS; c++)
                r += atomic_load_explicit(&shards[s].requests[e][c], RELAXED);
            b += atomic_load_explicit(&shards[s].bytes[e], RELAXED);
        }
    *requests = r;
    *bytes = b;
}

/* Seqlock-style write of one slot: readers that see sec change or
 * UINT64_MAX skip it. */
static void slot_write(uint64_t sec, uint64_t requests, uint64_t bytes)
{
    struct slot *sl = &ring[sec % RING];
    atomic_store_explicit(&sl->sec, UINT64_MAX, RELAXED);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&sl->requests, requests, RELAXED);
    atomic_store_explicit(&sl->bytes, bytes, RELAXED);
    atomic_store_explicit(&sl->sec, sec, memory_order_release);
}

static int slot_read(unsigned i, uint64_t *sec, uint64_t *requests, uint64_t *bytes)
{
    struct slot *sl = &ring[i];
    uint64_t s1 = atomic_load_explicit(&sl->sec, memory_order_acquire);
    *requests = atomic_load_explicit(&sl->requests, RELAXED);
    *bytes = atomic_load_explicit(&sl->bytes, RELAXED);
    atomic_thread_fence(memory_order_acquire);
    uint64_t s2 = atomic_load_explicit(&sl->sec, RELAXED);
    if (s1 != s2 || s1 == UINT64_MAX)
        return -1;
    *sec = s1;
    return 0;
}

/* Records the totals at the start of the current second, once per second. */
static void tick(uint64_t now_ns)
{
    uint64_t sec = now_ns / NS, cur = atomic_load_explicit(&last_sec, RELAXED);
    if (sec <= cur)
        return;
    if (!atomic_compare_exchange_strong_explicit(&last_sec, &cur, sec, RELAXED, RELAXED))
        return; /* another thread records this second */
    uint64_t r, b;
    totals(&r, &b);
    slot_write(sec, r, b);
}

void metrics_init(void)
{
    memset(shards, 0, sizeof(shards));
    for (unsigned i = 0; i < RING; i++)
        atomic_store(&ring[i].sec, UINT64_MAX);
    start_ns = clock_fn();
    atomic_store(&last_sec, start_ns / NS);
    slot_write(start_ns / NS, 0, 0);
    atomic_store(&g_models, 0), atomic_store(&g_invalid, 0), atomic_store(&g_files, 0);
    atomic_store(&g_tensors, 0), atomic_store(&g_mapped, 0), atomic_store(&g_generation, 0);
    atomic_store(&g_open_files, 0);
    atomic_store(&g_gpu_resident, 0), atomic_store(&g_gpu_leases, 0);
    atomic_store(&g_gpu_bps_bits, 0);
    atomic_store(&h_bytes, 0), atomic_store(&h_files, 0), atomic_store(&h_errors, 0);
    atomic_store(&g_hash_pending, 0), atomic_store(&g_hash_pending_bytes, 0);
    atomic_store(&g_hash_known, 0), atomic_store(&g_hash_files, 0);
}

void metrics_add(enum metrics_ctr c, uint64_t n)
{
    if ((unsigned)c < MC_COUNT)
        add(&shard()->ctr[c], n);
}

void metrics_request_start(void)
{
    add(&shard()->started, 1);
}

static unsigned bucket_of(uint64_t ns)
{
    unsigned i = 0;
    while (i < NBOUNDS && ns > bounds_ns[i])
        i++;
    return i;
}

void metrics_request_done(enum metrics_ep ep, unsigned status, uint64_t bytes_sent,
                          uint64_t duration_ns, uint64_t ttfb_ns)
{
    struct shard *s = shard();
    if ((unsigned)ep >= MEP_COUNT)
        ep = MEP_OTHER;
    unsigned cls = status >= 100 && status <= 599 ? status / 100 - 1 : NCLASS - 1;
    tick(clock_fn());
    add(&s->requests[ep][cls], 1);
    add(&s->bytes[ep], bytes_sent);
    add(&s->duration[ep][bucket_of(duration_ns)], 1);
    add(&s->duration_sum_ns[ep], duration_ns);
    add(&s->ttfb[bucket_of(ttfb_ns)], 1);
    add(&s->ttfb_sum_ns, ttfb_ns);
}

void metrics_conn_opened(void)
{
    struct shard *s = shard();
    add(&s->conn_opened, 1);
    add(&s->ctr[MC_CONNECTIONS_TOTAL], 1);
}

void metrics_conn_closed(void)
{
    add(&shard()->conn_closed, 1);
}

void metrics_set_open_files(uint64_t n)
{
    atomic_store_explicit(&g_open_files, n, RELAXED);
}

void metrics_set_registry(uint64_t models, uint64_t invalid_models, uint64_t files,
                          uint64_t tensors, uint64_t bytes_mapped, uint64_t generation)
{
    atomic_store_explicit(&g_models, models, RELAXED);
    atomic_store_explicit(&g_invalid, invalid_models, RELAXED);
    atomic_store_explicit(&g_files, files, RELAXED);
    atomic_store_explicit(&g_tensors, tensors, RELAXED);
    atomic_store_explicit(&g_mapped, bytes_mapped, RELAXED);
    atomic_store_explicit(&g_generation, generation, RELAXED);
}

void metrics_set_gpu(uint64_t bytes_resident, uint64_t leases_active,
                     double last_preload_bytes_per_second)
{
    uint64_t bits;
    memcpy(&bits, &last_preload_bytes_per_second, sizeof(bits));
    atomic_store_explicit(&g_gpu_resident, bytes_resident, RELAXED);
    atomic_store_explicit(&g_gpu_leases, leases_active, RELAXED);
    atomic_store_explicit(&g_gpu_bps_bits, bits, RELAXED);
}

void metrics_hash_progress(uint64_t bytes, uint64_t files, uint64_t errors)
{
    atomic_fetch_add_explicit(&h_bytes, bytes, RELAXED);
    atomic_fetch_add_explicit(&h_files, files, RELAXED);
    atomic_fetch_add_explicit(&h_errors, errors, RELAXED);
}

void metrics_set_hashing(uint64_t files_pending, uint64_t bytes_pending, uint64_t files_known,
                         uint64_t files)
{
    atomic_store_explicit(&g_hash_pending, files_pending, RELAXED);
    atomic_store_explicit(&g_hash_pending_bytes, bytes_pending, RELAXED);
    atomic_store_explicit(&g_hash_known, files_known, RELAXED);
    atomic_store_explicit(&g_hash_files, files, RELAXED);
}

const char *metrics_ep_name(enum metrics_ep ep)
{
    return (unsigned)ep < MEP_COUNT ? ep_names[ep] : "other";
}

/* ---- rates ---------------------------------------------------------------- */

void metrics_rates(unsigned seconds, struct metrics_rates *out)
{
    if (seconds < 1)
        seconds = 1;
    if (seconds > 60)
        seconds = 60;
    uint64_t now = clock_fn();
    tick(now);
    uint64_t now_sec = now / NS, r_now, b_now, r_base = 0, b_base = 0;
    totals(&r_now, &b_now);
    double elapsed;
    if (now_sec < seconds || now_sec - seconds < start_ns / NS) {
        /* Younger than the window: the rate since start. */
        elapsed = (double)(now - start_ns) / 1e9;
    } else {
        uint64_t base = now_sec - seconds, best = UINT64_MAX;
        r_base = r_now, b_base = b_now; /* no snapshot since base: nothing finished */
        for (unsigned i = 0; i < RING; i++) {
            uint64_t sec, r, b;
            if (slot_read(i, &sec, &r, &b) < 0 || sec < base || sec > now_sec || sec >= best)
                continue;
            /* The snapshot at base itself, else the first one after it: no
             * request finished between base and that second. */
            best = sec, r_base = r, b_base = b;
        }
        elapsed = (double)(now - base * NS) / 1e9;
    }
    if (elapsed < 1.0)
        elapsed = 1.0;
    out->requests = r_now;
    out->bytes = b_now;
    out->requests_per_second = (double)(r_now - r_base) / elapsed;
    out->bytes_per_second = (double)(b_now - b_base) / elapsed;
}

/* ---- snapshot and rendering ------------------------------------------------ */

struct snapshot {
    uint64_t started, done, conn_opened, conn_closed;
    uint64_t ctr[MC_COUNT];
    uint64_t requests[MEP_COUNT][NCLASS];
    uint64_t bytes[MEP_COUNT];
    uint64_t duration[MEP_COUNT][NBUCKETS];
    uint64_t duration_sum_ns[MEP_COUNT];
    uint64_t ttfb[NBUCKETS];
    uint64_t ttfb_sum_ns;
};

static void snapshot_take(struct snapshot *sn)
{
    memset(sn, 0, sizeof(*sn));
    for (int i = 0; i < NSHARDS; i++) {
        struct shard *s = &shards[i];
        /* Read completions before starts so in-flight never goes negative. */
        for (int e = 0; e < MEP_COUNT; e++)
            for (int c = 0; c < NCLASS; c++) {
                uint64_t v = atomic_load_explicit(&s->requests[e][c], memory_order_acquire);
                sn->requests[e][c] += v;
                sn->done += v;
            }
        sn->conn_closed += atomic_load_explicit(&s->conn_closed, memory_order_acquire);
    }
    for (int i = 0; i < NSHARDS; i++) {
        struct shard *s = &shards[i];
        sn->started += atomic_load_explicit(&s->started, RELAXED);
        sn->conn_opened += atomic_load_explicit(&s->conn_opened, RELAXED);
        for (int c = 0; c < MC_COUNT; c++)
            sn->ctr[c] += atomic_load_explicit(&s->ctr[c], RELAXED);
        for (int e = 0; e < MEP_COUNT; e++) {
            sn->bytes[e] += atomic_load_explicit(&s->bytes[e], RELAXED);
            sn->duration_sum_ns[e] += atomic_load_explicit(&s->duration_sum_ns[e], RELAXED);
            for (int b = 0; b < NBUCKETS; b++)
                sn->duration[e][b] += atomic_load_explicit(&s->duration[e][b], RELAXED);
        }
        for (int b = 0; b < NBUCKETS; b++)
            sn->ttfb[b] += atomic_load_explicit(&s->ttfb[b], RELAXED);
        sn->ttfb_sum_ns += atomic_load_explicit(&s->ttfb_sum_ns, RELAXED);
    }
}

static uint64_t gauge_sub(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

static double gpu_bps(void)
{
    uint64_t bits = atomic_load_explicit(&g_gpu_bps_bits, RELAXED);
    double d;
    memcpy(&d, &bits, sizeof(d));
    return __builtin_isfinite(d) && d >= 0 ? d : 0; /* JSON has no NaN */
}

struct sb {
    char *p;
    size_t len, cap;
};

static void sb_printf(struct sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sb *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = b->cap * 2 + (n > 0 ? (size_t)n : 0);
        b->p = xrealloc(b->p, b->cap);
    }
}

static void sb_init(struct sb *b)
{
    b->cap = 16384;
    b->len = 0;
    b->p = xmalloc(b->cap);
    b->p[0] = '\0';
}

static const struct {
    enum metrics_ctr c;
    const char *name, *help;
} prom_counters[] = {
    {MC_RANGE_REQUESTS, "tensord_http_range_requests_total", "Answers to Range requests (206)."},
    {MC_MULTIRANGE_REQUESTS, "tensord_http_multirange_requests_total",
     "Range answers with several parts (multipart/byteranges)."},
    {MC_SLICE_REQUESTS, "tensord_slice_requests_total", "Tensor slice requests."},
    {MC_NOT_MODIFIED, "tensord_http_not_modified_total", "Answers 304 Not Modified."},
    {MC_RANGE_NOT_SATISFIABLE, "tensord_http_range_not_satisfiable_total",
     "Answers 416 Range Not Satisfiable."},
    {MC_RELOADS, "tensord_registry_reloads_total", "Rescans of the models root."},
    {MC_RELOAD_ERRORS, "tensord_registry_reload_errors_total",
     "Rescans that failed (the previous snapshot kept serving)."},
    {MC_CONNECTIONS_TOTAL, "tensord_http_connections_total", "Connections accepted."},
    {MC_CONNECTIONS_REJECTED, "tensord_http_connections_rejected_total",
     "Connections refused over max_connections or max_connections_per_ip."},
    {MC_GPU_PRELOAD_BYTES, "tensord_gpu_preload_bytes_total", "Bytes copied to devices by preloads."},
    {MC_LEASES_TOTAL, "tensord_gpu_leases_total", "Leases granted on the IPC socket."},
    {MC_IPC_REFUSED, "tensord_ipc_refused_total",
     "Connections to the IPC socket refused by the allow-list."},
    {MC_SCAN_ERRORS, "tensord_registry_scan_errors_total",
     "I/O or resource errors met by rescans; the models they hit kept their previous state."},
    {MC_TRANSFERS_CUT, "tensord_http_transfers_cut_total",
     "Answers cut short because the file they were sending was written."},
};

static void prom_head(struct sb *b, const char *name, const char *type, const char *help)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_gauge(struct sb *b, const char *name, const char *help, double v)
{
    prom_head(b, name, "gauge", help);
    sb_printf(b, "%s %.17g\n", name, v);
}

static void prom_histogram(struct sb *b, const char *name, const char *label,
                           const uint64_t *buckets, uint64_t sum_ns)
{
    uint64_t cum = 0;
    const char *sep = label[0] ? "," : "";
    for (int i = 0; i < NBUCKETS; i++) {
        cum += buckets[i];
        sb_printf(b, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, label, sep, bound_labels[i],
                  (unsigned long long)cum);
    }
    const char *open = label[0] ? "{" : "", *close = label[0] ? "}" : "";
    sb_printf(b, "%s_sum%s%s%s %.9f\n", name, open, label, close, (double)sum_ns / 1e9);
    sb_printf(b, "%s_count%s%s%s %llu\n", name, open, label, close, (unsigned long long)cum);
}

char *metrics_render_prometheus(void)
{
    struct snapshot *sn = xmalloc(sizeof(*sn)); /* ~12 KiB: off the worker's stack */
    snapshot_take(sn);
    struct sb b;
    sb_init(&b);
    char label[64];

    prom_head(&b, "tensord_build_info", "gauge", "Build information; the value is always 1.");
    sb_printf(&b, "tensord_build_info{version=\"%s\"} 1\n", TENSORD_VERSION);
    prom_gauge(&b, "tensord_uptime_seconds", "Seconds since the daemon started.",
               (double)(clock_fn() - start_ns) / 1e9);

    prom_head(&b, "tensord_http_requests_total", "counter",
              "Finished HTTP requests by endpoint and status class.");
    for (int e = 0; e < MEP_COUNT; e++)
        for (int c = 0; c < NCLASS; c++)
            sb_printf(&b, "tensord_http_requests_total{endpoint=\"%s\",code=\"%s\"} %llu\n",
                      ep_names[e], class_labels[c], (unsigned long long)sn->requests[e][c]);
    prom_head(&b, "tensord_http_response_bytes_total", "counter",
              "Response body bytes sent, by endpoint.");
    for (int e = 0; e < MEP_COUNT; e++)
        sb_printf(&b, "tensord_http_response_bytes_total{endpoint=\"%s\"} %llu\n", ep_names[e],
                  (unsigned long long)sn->bytes[e]);
    prom_head(&b, "tensord_http_request_duration_seconds", "histogram",
              "Time from request line to the last byte queued, by endpoint.");
    for (int e = 0; e < MEP_COUNT; e++) {
        snprintf(label, sizeof(label), "endpoint=\"%s\"", ep_names[e]);
        prom_histogram(&b, "tensord_http_request_duration_seconds", label, sn->duration[e],
                       sn->duration_sum_ns[e]);
    }
    prom_head(&b, "tensord_http_time_to_first_byte_seconds", "histogram",
              "Time from request line to the answer's headers being queued.");
    prom_histogram(&b, "tensord_http_time_to_first_byte_seconds", "", sn->ttfb, sn->ttfb_sum_ns);
    prom_gauge(&b, "tensord_http_requests_in_flight", "Requests being answered.",
               (double)gauge_sub(sn->started, sn->done));
    prom_gauge(&b, "tensord_http_connections_open", "Open HTTP connections.",
               (double)gauge_sub(sn->conn_opened, sn->conn_closed));

    for (size_t i = 0; i < ARRAY_LEN(prom_counters); i++) {
        prom_head(&b, prom_counters[i].name, "counter", prom_counters[i].help);
        sb_printf(&b, "%s %llu\n", prom_counters[i].name,
                  (unsigned long long)sn->ctr[prom_counters[i].c]);
    }
    prom_head(&b, "tensord_sent_bytes_total", "counter",
              "Body bytes sent, by method: sendfile (zero copy) or copy (from a buffer).");
    sb_printf(&b, "tensord_sent_bytes_total{method=\"sendfile\"} %llu\n",
              (unsigned long long)sn->ctr[MC_SENDFILE_BYTES]);
    sb_printf(&b, "tensord_sent_bytes_total{method=\"copy\"} %llu\n",
              (unsigned long long)sn->ctr[MC_COPIED_BYTES]);

    prom_gauge(&b, "tensord_models", "Models in the registry (valid and invalid).",
               (double)atomic_load(&g_models));
    prom_gauge(&b, "tensord_models_invalid", "Models that failed validation.",
               (double)atomic_load(&g_invalid));
    prom_gauge(&b, "tensord_files", "Files in the registry.", (double)atomic_load(&g_files));
    prom_gauge(&b, "tensord_tensors", "Tensors in the registry.",
               (double)atomic_load(&g_tensors));
    prom_gauge(&b, "tensord_mapped_bytes", "Bytes of safetensors files mapped.",
               (double)atomic_load(&g_mapped));
    prom_gauge(&b, "tensord_registry_generation", "Generation of the registry snapshot served.",
               (double)atomic_load(&g_generation));
    prom_gauge(&b, "tensord_registry_open_files",
               "Descriptors the served snapshot holds open (one per .safetensors file).",
               (double)atomic_load(&g_open_files));
    prom_gauge(&b, "tensord_gpu_resident_bytes", "Bytes of model data resident in device memory.",
               (double)atomic_load(&g_gpu_resident));
    prom_gauge(&b, "tensord_gpu_leases_active", "Leases currently held on the IPC socket.",
               (double)atomic_load(&g_gpu_leases));
    prom_gauge(&b, "tensord_gpu_preload_bytes_per_second", "Throughput of the last preload.",
               gpu_bps());
    prom_head(&b, "tensord_hash_bytes_total", "counter", "Bytes read into SHA-256 by content hashing.");
    sb_printf(&b, "tensord_hash_bytes_total %llu\n", (unsigned long long)atomic_load(&h_bytes));
    prom_head(&b, "tensord_hash_files_total", "counter", "Files whose content hash was computed.");
    sb_printf(&b, "tensord_hash_files_total %llu\n", (unsigned long long)atomic_load(&h_files));
    prom_head(&b, "tensord_hash_errors_total", "counter",
              "Files that could not be read for their content hash.");
    sb_printf(&b, "tensord_hash_errors_total %llu\n", (unsigned long long)atomic_load(&h_errors));
    prom_gauge(&b, "tensord_hash_files_pending",
               "Files of the registry still to hash (queued, waiting to retry, or being hashed).",
               (double)atomic_load(&g_hash_pending));
    prom_gauge(&b, "tensord_hash_pending_bytes", "Bytes of the files still to hash.",
               (double)atomic_load(&g_hash_pending_bytes));
    prom_gauge(&b, "tensord_hash_files_known", "Files of the registry whose content hash is known.",
               (double)atomic_load(&g_hash_known));
    prom_gauge(&b, "tensord_hash_files", "Distinct files of the registry (hard links count once).",
               (double)atomic_load(&g_hash_files));
    free(sn);
    return b.p;
}

/* Linear interpolation inside the bucket holding quantile q (seconds). */
static double quantile(const uint64_t *buckets, double q)
{
    uint64_t total = 0;
    for (int i = 0; i < NBUCKETS; i++)
        total += buckets[i];
    if (!total)
        return 0;
    double rank = q * (double)total, cum = 0;
    for (int i = 0; i < NBUCKETS; i++) {
        if (cum + (double)buckets[i] >= rank && buckets[i]) {
            if (i == NBOUNDS)
                return (double)bounds_ns[NBOUNDS - 1] / 1e9;
            double lo = i ? (double)bounds_ns[i - 1] : 0, hi = (double)bounds_ns[i];
            return (lo + (hi - lo) * (rank - cum) / (double)buckets[i]) / 1e9;
        }
        cum += (double)buckets[i];
    }
    return (double)bounds_ns[NBOUNDS - 1] / 1e9;
}

static void json_histogram(struct sb *b, const uint64_t *buckets, uint64_t sum_ns)
{
    uint64_t count = 0;
    for (int i = 0; i < NBUCKETS; i++)
        count += buckets[i];
    sb_printf(b, "{\"count\":%llu,\"sum\":%.9f,\"p50\":%.6f,\"p90\":%.6f,\"p99\":%.6f,\"buckets\":{",
              (unsigned long long)count, (double)sum_ns / 1e9, quantile(buckets, 0.5),
              quantile(buckets, 0.9), quantile(buckets, 0.99));
    for (int i = 0; i < NBUCKETS; i++)
        sb_printf(b, "%s\"%s\":%llu", i ? "," : "", bound_labels[i],
                  (unsigned long long)buckets[i]);
    sb_printf(b, "}}");
}

static const char *const json_ctr_names[MC_COUNT] = {
    "range_requests",        "multirange_requests", "slice_requests",     "not_modified",
    "range_not_satisfiable", "sendfile_bytes",      "copied_bytes",       "reloads",
    "reload_errors",         "connections_total",   "connections_rejected",
    "gpu_preload_bytes",     "leases_total",        "ipc_refused",        "scan_errors",
    "transfers_cut"};

char *metrics_render_json(void)
{
    struct snapshot *sn = xmalloc(sizeof(*sn));
    snapshot_take(sn);
    struct metrics_rates r1, r10, r60;
    metrics_rates(1, &r1);
    metrics_rates(10, &r10);
    metrics_rates(60, &r60);
    struct sb b;
    sb_init(&b);
    sb_printf(&b, "{\"version\":\"%s\",\"uptime_seconds\":%.3f,", TENSORD_VERSION,
              (double)(clock_fn() - start_ns) / 1e9);
    sb_printf(&b,
              "\"requests\":{\"total\":%llu,\"in_flight\":%llu,\"per_second\":{\"1s\":%.3f,"
              "\"10s\":%.3f,\"60s\":%.3f}},",
              (unsigned long long)sn->done, (unsigned long long)gauge_sub(sn->started, sn->done),
              r1.requests_per_second, r10.requests_per_second, r60.requests_per_second);
    uint64_t bytes = 0;
    for (int e = 0; e < MEP_COUNT; e++)
        bytes += sn->bytes[e];
    sb_printf(&b,
              "\"bytes\":{\"total\":%llu,\"per_second\":{\"1s\":%.3f,\"10s\":%.3f,\"60s\":%.3f}},",
              (unsigned long long)bytes, r1.bytes_per_second, r10.bytes_per_second,
              r60.bytes_per_second);
    sb_printf(&b, "\"connections\":{\"open\":%llu},",
              (unsigned long long)gauge_sub(sn->conn_opened, sn->conn_closed));
    sb_printf(&b, "\"counters\":{");
    for (int c = 0; c < MC_COUNT; c++)
        sb_printf(&b, "%s\"%s\":%llu", c ? "," : "", json_ctr_names[c],
                  (unsigned long long)sn->ctr[c]);
    sb_printf(&b, "},\"endpoints\":{");
    for (int e = 0; e < MEP_COUNT; e++) {
        sb_printf(&b, "%s\"%s\":{\"requests\":{", e ? "," : "", ep_names[e]);
        for (int c = 0; c < NCLASS; c++)
            sb_printf(&b, "%s\"%s\":%llu", c ? "," : "", class_labels[c],
                      (unsigned long long)sn->requests[e][c]);
        sb_printf(&b, "},\"bytes\":%llu,\"duration_seconds\":", (unsigned long long)sn->bytes[e]);
        json_histogram(&b, sn->duration[e], sn->duration_sum_ns[e]);
        sb_printf(&b, "}");
    }
    sb_printf(&b, "},\"time_to_first_byte_seconds\":");
    json_histogram(&b, sn->ttfb, sn->ttfb_sum_ns);
    sb_printf(&b,
              ",\"registry\":{\"models\":%llu,\"invalid_models\":%llu,\"files\":%llu,"
              "\"tensors\":%llu,\"mapped_bytes\":%llu,\"generation\":%llu,\"open_files\":%llu},",
              (unsigned long long)atomic_load(&g_models), (unsigned long long)atomic_load(&g_invalid),
              (unsigned long long)atomic_load(&g_files), (unsigned long long)atomic_load(&g_tensors),
              (unsigned long long)atomic_load(&g_mapped),
              (unsigned long long)atomic_load(&g_generation),
              (unsigned long long)atomic_load(&g_open_files));
    sb_printf(&b,
              "\"gpu\":{\"resident_bytes\":%llu,\"leases_active\":%llu,"
              "\"last_preload_bytes_per_second\":%.1f},",
              (unsigned long long)atomic_load(&g_gpu_resident),
              (unsigned long long)atomic_load(&g_gpu_leases), gpu_bps());
    sb_printf(&b,
              "\"hashing\":{\"bytes_hashed\":%llu,\"files_hashed\":%llu,\"errors\":%llu,"
              "\"files_pending\":%llu,\"bytes_pending\":%llu,\"files_known\":%llu,"
              "\"files\":%llu}}",
              (unsigned long long)atomic_load(&h_bytes), (unsigned long long)atomic_load(&h_files),
              (unsigned long long)atomic_load(&h_errors),
              (unsigned long long)atomic_load(&g_hash_pending),
              (unsigned long long)atomic_load(&g_hash_pending_bytes),
              (unsigned long long)atomic_load(&g_hash_known),
              (unsigned long long)atomic_load(&g_hash_files));
    free(sn);
    return b.p;
}
