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

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "metrics_int.h"

#define NSHARDS 32
#define NBOUNDS METRICS_NBOUNDS
#define NBUCKETS METRICS_NBUCKETS
#define NKINDS METRICS_MAX_KINDS
#define NOUTCOMES METRICS_MAX_OUTCOMES
#define RING 64 /* > 60 seconds of history */
#define NS 1000000000ULL
#define RELAXED memory_order_relaxed

typedef _Atomic uint64_t counter;

const uint64_t metrics_bounds_ns[NBOUNDS] = {
    100000,    250000,    500000,    1000000,    2500000,    5000000,    10000000,   25000000,
    50000000,  100000000, 250000000, 500000000, 1000000000, 2500000000, 5000000000, 10000000000};
#define bounds_ns metrics_bounds_ns

/* Until a caller names them, requests have one kind and one outcome. */
static const char *const unnamed[] = {"other"};
static struct metrics_labels labels = {"kind", "outcome", unnamed, 1, unnamed, 1};

struct shard {
    counter started, conn_opened, conn_closed;
    counter ctr[MC_COUNT];
    counter requests[NKINDS][NOUTCOMES];
    counter bytes[NKINDS];
    counter duration[NKINDS][NBUCKETS];
    counter duration_sum_ns[NKINDS];
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

/* The gauges (and hashing's counters: a few updates per MiB hashed, so
 * plain shared atomics do), by enum metrics_gauge, zeroed together by
 * metrics_init. */
static _Atomic uint64_t g[MG_COUNT];

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
        for (int e = 0; e < NKINDS; e++) {
            for (int c = 0; c < NOUTCOMES; c++)
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
    memset(g, 0, sizeof(g));
    metrics_set_gpu_devices(NULL, 0);
}

void metrics_set_labels(const struct metrics_labels *l)
{
    labels = *l;
    if (labels.n_kinds > NKINDS)
        labels.n_kinds = NKINDS;
    if (labels.n_outcomes > NOUTCOMES)
        labels.n_outcomes = NOUTCOMES;
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

void metrics_request_done(unsigned kind, unsigned outcome, uint64_t bytes_sent,
                          uint64_t duration_ns, uint64_t ttfb_ns)
{
    struct shard *s = shard();
    if (kind >= labels.n_kinds)
        kind = labels.n_kinds - 1;
    if (outcome >= labels.n_outcomes)
        outcome = labels.n_outcomes - 1;
    tick(clock_fn());
    add(&s->requests[kind][outcome], 1);
    add(&s->bytes[kind], bytes_sent);
    add(&s->duration[kind][bucket_of(duration_ns)], 1);
    add(&s->duration_sum_ns[kind], duration_ns);
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
    atomic_store_explicit(&g[MG_OPEN_FILES], n, RELAXED);
}

void metrics_set_registry(uint64_t models, uint64_t invalid_models, uint64_t files,
                          uint64_t tensors, uint64_t file_bytes, uint64_t generation)
{
    atomic_store_explicit(&g[MG_MODELS], models, RELAXED);
    atomic_store_explicit(&g[MG_INVALID], invalid_models, RELAXED);
    atomic_store_explicit(&g[MG_FILES], files, RELAXED);
    atomic_store_explicit(&g[MG_TENSORS], tensors, RELAXED);
    atomic_store_explicit(&g[MG_FILE_BYTES], file_bytes, RELAXED);
    atomic_store_explicit(&g[MG_GENERATION], generation, RELAXED);
}

void metrics_set_gpu(uint64_t bytes_resident, uint64_t leases_active,
                     double last_preload_bytes_per_second, uint64_t staging_bytes)
{
    uint64_t bits;
    memcpy(&bits, &last_preload_bytes_per_second, sizeof(bits));
    atomic_store_explicit(&g[MG_GPU_RESIDENT], bytes_resident, RELAXED);
    atomic_store_explicit(&g[MG_GPU_LEASES], leases_active, RELAXED);
    atomic_store_explicit(&g[MG_GPU_BPS_BITS], bits, RELAXED);
    atomic_store_explicit(&g[MG_GPU_STAGING], staging_bytes, RELAXED);
}

/* The per-device rows: set a few times per preload, read per scrape. */
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static struct metrics_gpu_device devices[METRICS_GPU_DEVICES];
static size_t n_devices;

void metrics_set_gpu_devices(const struct metrics_gpu_device *d, size_t n)
{
    if (n > METRICS_GPU_DEVICES)
        n = METRICS_GPU_DEVICES;
    pthread_mutex_lock(&devices_lock);
    if (n)
        memcpy(devices, d, n * sizeof(*d));
    n_devices = n;
    pthread_mutex_unlock(&devices_lock);
}

void metrics_hash_progress(uint64_t bytes, uint64_t files, uint64_t errors)
{
    atomic_fetch_add_explicit(&g[MG_HASH_BYTES], bytes, RELAXED);
    atomic_fetch_add_explicit(&g[MG_HASH_FILES], files, RELAXED);
    atomic_fetch_add_explicit(&g[MG_HASH_ERRORS], errors, RELAXED);
}

void metrics_set_hashing(uint64_t files_pending, uint64_t bytes_pending, uint64_t files_known,
                         uint64_t files)
{
    atomic_store_explicit(&g[MG_HASH_PENDING], files_pending, RELAXED);
    atomic_store_explicit(&g[MG_HASH_PENDING_BYTES], bytes_pending, RELAXED);
    atomic_store_explicit(&g[MG_HASH_KNOWN], files_known, RELAXED);
    atomic_store_explicit(&g[MG_HASH_FILES_ALL], files, RELAXED);
}

void metrics_set_mirror(uint64_t bytes, uint64_t bytes_in_use, uint64_t files,
                        uint64_t partial_files)
{
    atomic_store_explicit(&g[MG_MIRROR_BYTES], bytes, RELAXED);
    atomic_store_explicit(&g[MG_MIRROR_IN_USE], bytes_in_use, RELAXED);
    atomic_store_explicit(&g[MG_MIRROR_FILES], files, RELAXED);
    atomic_store_explicit(&g[MG_MIRROR_PARTIAL], partial_files, RELAXED);
}

void metrics_set_mirror_queue(uint64_t waiting)
{
    atomic_store_explicit(&g[MG_MIRROR_WAITING], waiting, RELAXED);
}

void metrics_set_mirror_upstream(int up, int64_t last_success, uint64_t failures_in_row)
{
    /* 1 + up: 0 stays "no mirror" (nothing rendered) */
    atomic_store_explicit(&g[MG_MIRROR_UP], up ? 2u : 1u, RELAXED);
    atomic_store_explicit(&g[MG_MIRROR_LAST_SUCCESS],
                          (uint64_t)(last_success > 0 ? last_success : 0), RELAXED);
    atomic_store_explicit(&g[MG_MIRROR_FAILURES_IN_ROW], failures_in_row, RELAXED);
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

static uint64_t gauge_sub(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

static double gpu_bps(void)
{
    uint64_t bits = atomic_load_explicit(&g[MG_GPU_BPS_BITS], RELAXED);
    double d;
    memcpy(&d, &bits, sizeof(d));
    return __builtin_isfinite(d) && d >= 0 ? d : 0; /* JSON has no NaN */
}

/* The gauges, read one by one (each is consistent on its own). */
static void gauges_take(struct metrics_snapshot *sn)
{
    for (int i = 0; i < MG_COUNT; i++)
        sn->gauge[i] = atomic_load(&g[i]);
    sn->gpu_bps = gpu_bps();
    pthread_mutex_lock(&devices_lock);
    memcpy(sn->gpu_devices, devices, n_devices * sizeof(devices[0]));
    sn->n_gpu_devices = n_devices;
    pthread_mutex_unlock(&devices_lock);
}

void metrics_snapshot_take(struct metrics_snapshot *sn, int with_rates)
{
    memset(sn, 0, sizeof(*sn));
    if (with_rates) {
        metrics_rates(1, &sn->r1);
        metrics_rates(10, &sn->r10);
        metrics_rates(60, &sn->r60);
    }
    sn->labels = labels;
    sn->uptime_seconds = (double)(clock_fn() - start_ns) / 1e9;
    for (int i = 0; i < NSHARDS; i++) {
        struct shard *s = &shards[i];
        /* Read completions before starts so in-flight never goes negative. */
        for (int e = 0; e < NKINDS; e++)
            for (int c = 0; c < NOUTCOMES; c++) {
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
        for (int e = 0; e < NKINDS; e++) {
            sn->bytes[e] += atomic_load_explicit(&s->bytes[e], RELAXED);
            sn->duration_sum_ns[e] += atomic_load_explicit(&s->duration_sum_ns[e], RELAXED);
            for (int b = 0; b < NBUCKETS; b++)
                sn->duration[e][b] += atomic_load_explicit(&s->duration[e][b], RELAXED);
        }
        for (int b = 0; b < NBUCKETS; b++)
            sn->ttfb[b] += atomic_load_explicit(&s->ttfb[b], RELAXED);
        sn->ttfb_sum_ns += atomic_load_explicit(&s->ttfb_sum_ns, RELAXED);
    }
    sn->in_flight = gauge_sub(sn->started, sn->done);
    sn->conn_open = gauge_sub(sn->conn_opened, sn->conn_closed);
    gauges_take(sn);
}
