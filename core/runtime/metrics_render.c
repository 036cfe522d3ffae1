/* metrics_render: the two renderings of a metrics snapshot, Prometheus
 * text exposition (version 0.0.4) and the JSON document. Built in a strbuf:
 * out of memory gives NULL, never an abort. */
#include <stdio.h>
#include <stdlib.h>

#include "metrics.h"
#include "metrics_int.h"
#include "strbuf.h"
#include "util.h"

#ifndef TENSORD_VERSION
#define TENSORD_VERSION "unknown"
#endif

static const char *const bound_labels[METRICS_NBUCKETS] = {
    "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
    "0.1",    "0.25",    "0.5",    "1",     "2.5",    "5",     "10",   "+Inf"};

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
    {MC_GPU_PRELOAD_PAGE_CACHE_BYTES, "tensord_gpu_preload_page_cache_bytes_total",
     "Preload bytes copied from the page cache."},
    {MC_GPU_PRELOAD_DISK_BYTES, "tensord_gpu_preload_disk_bytes_total",
     "Preload bytes read from the disk."},
    {MC_RESPONSES_ABORTED, "tensord_http_responses_aborted_total",
     "Answers whose body did not go out whole (the client left, a timeout, a write error, "
     "the file was written); their bytes count only what the client acknowledged."},
    {MC_DOCS_RENDERED, "tensord_documents_rendered_total",
     "Documents rendered: a model description's tensors once per model, each state of its "
     "hashes, each merged header; a Hub repo's document and listing once each per repo."},
    {MC_MIRROR_UPSTREAM_BYTES, "tensord_mirror_upstream_bytes_total",
     "Bytes the mirror fetched from its upstream."},
    {MC_MIRROR_BLOCKS, "tensord_mirror_blocks_fetched_total",
     "Blocks the mirror fetched whole from its upstream."},
    {MC_MIRROR_VERIFY_FAILURES, "tensord_mirror_verify_failures_total",
     "Mirrored files whose bytes did not hash to the digest the upstream named (discarded)."},
    {MC_MIRROR_EVICTIONS, "tensord_mirror_evictions_total",
     "Files evicted from the mirror's cache."},
    {MC_GPU_PRELOAD_UPSTREAM_BYTES, "tensord_gpu_preload_upstream_bytes_total",
     "Preload bytes that a mirror fetched from its upstream while the preload waited for them."},
    {MC_MIRROR_QUESTIONS_REFUSED, "tensord_mirror_questions_refused_total",
     "Questions to a mirror's upstream refused at once (503) because its queue, or the "
     "client's share of it, was full."},
    {MC_MIRROR_HIT_BYTES, "tensord_mirror_cache_hit_bytes_total",
     "Bytes answers asked of a mirror's cache that it held already."},
    {MC_MIRROR_MISS_BYTES, "tensord_mirror_cache_miss_bytes_total",
     "Bytes answers asked of a mirror's cache that it had to fetch (or was fetching)."},
    {MC_MIRROR_UPSTREAM_FAILURES, "tensord_mirror_upstream_failures_total",
     "Requests to a mirror's upstream that got no answer (connection, timeout) or a 5xx."},
    {MC_MIRROR_STALE_ANSWERS, "tensord_mirror_stale_answers_total",
     "Answers a mirror served from what it kept (marked stale) while its upstream failed."},
    {MC_MIRROR_QUESTIONS_SHARED, "tensord_mirror_questions_shared_total",
     "Questions to a mirror's upstream answered by the same question already queued or "
     "running (not asked again)."},
    {MC_MIRROR_QUESTIONS_ABANDONED, "tensord_mirror_questions_abandoned_total",
     "Questions to a mirror's upstream whose clients all left: dropped from the queue, or "
     "stopped while they ran."},
};

/* The preload phases' counters, in enum gm_phase's order, by their label. */
static const struct {
    enum metrics_ctr c;
    const char *phase;
} preload_phases[] = {
    {MC_GPU_PRELOAD_ALLOC_NS, "alloc"}, {MC_GPU_PRELOAD_RING_NS, "ring"},
    {MC_GPU_PRELOAD_PLAN_NS, "plan"},   {MC_GPU_PRELOAD_COPY_NS, "copy"},
    {MC_GPU_PRELOAD_FINISH_NS, "finish"}};

static void prom_head(struct strbuf *b, const char *name, const char *type, const char *help)
{
    strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void prom_gauge(struct strbuf *b, const char *name, const char *help, double v)
{
    prom_head(b, name, "gauge", help);
    strbuf_printf(b, "%s %.17g\n", name, v);
}

static void prom_histogram(struct strbuf *b, const char *name, const char *label,
                           const uint64_t *buckets, uint64_t sum_ns)
{
    uint64_t cum = 0;
    const char *sep = label[0] ? "," : "";
    for (int i = 0; i < METRICS_NBUCKETS; i++) {
        cum += buckets[i];
        strbuf_printf(b, "%s_bucket{%s%sle=\"%s\"} %llu\n", name, label, sep, bound_labels[i],
                      (unsigned long long)cum);
    }
    const char *open = label[0] ? "{" : "", *close = label[0] ? "}" : "";
    strbuf_printf(b, "%s_sum%s%s%s %.9f\n", name, open, label, close, (double)sum_ns / 1e9);
    strbuf_printf(b, "%s_count%s%s%s %llu\n", name, open, label, close, (unsigned long long)cum);
}

/* The per-request series: counts by kind x outcome, bytes and durations by
 * kind, time to first byte. */
static void prom_requests(struct strbuf *b, const struct metrics_snapshot *sn)
{
    const struct metrics_labels *l = &sn->labels;
    char label[96];
    prom_head(b, "tensord_http_requests_total", "counter",
              "Finished HTTP requests by endpoint and status class.");
    for (unsigned e = 0; e < l->n_kinds; e++)
        for (unsigned c = 0; c < l->n_outcomes; c++)
            strbuf_printf(b, "tensord_http_requests_total{%s=\"%s\",%s=\"%s\"} %llu\n",
                          l->kind_key, l->kinds[e], l->outcome_key, l->outcomes[c],
                          (unsigned long long)sn->requests[e][c]);
    prom_head(b, "tensord_http_response_bytes_total", "counter",
              "Response body bytes the kernel accepted for the client, by endpoint.");
    for (unsigned e = 0; e < l->n_kinds; e++)
        strbuf_printf(b, "tensord_http_response_bytes_total{%s=\"%s\"} %llu\n", l->kind_key,
                      l->kinds[e], (unsigned long long)sn->bytes[e]);
    prom_head(b, "tensord_http_request_duration_seconds", "histogram",
              "Time from request line to the last byte queued, by endpoint.");
    for (unsigned e = 0; e < l->n_kinds; e++) {
        snprintf(label, sizeof(label), "%s=\"%s\"", l->kind_key, l->kinds[e]);
        prom_histogram(b, "tensord_http_request_duration_seconds", label, sn->duration[e],
                       sn->duration_sum_ns[e]);
    }
    prom_head(b, "tensord_http_time_to_first_byte_seconds", "histogram",
              "Time from request line to the answer's headers being queued.");
    prom_histogram(b, "tensord_http_time_to_first_byte_seconds", "", sn->ttfb, sn->ttfb_sum_ns);
}

/* The per-device gauges, one family per figure labelled by device (names
 * the manager writes, "cuda:N" or "host": nothing to escape). */
static void gpu_devices_prometheus(struct strbuf *b, const struct metrics_snapshot *sn)
{
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"tensord_gpu_device_resident_bytes", "Bytes of model data resident on the device."},
        {"tensord_gpu_device_leases_active", "Leases held on the device's instances."},
        {"tensord_gpu_device_staging_bytes", "Memory the device's staging ring holds."},
        {"tensord_gpu_device_instances", "Model instances held on the device (any state)."},
        {"tensord_gpu_device_loading", "1 while the device's loader loads an instance."},
    };
    for (size_t f = 0; f < ARRAY_LEN(fam); f++) {
        prom_head(b, fam[f].name, "gauge", fam[f].help);
        for (size_t i = 0; i < sn->n_gpu_devices; i++) {
            const struct metrics_gpu_device *d = &sn->gpu_devices[i];
            uint64_t v = f == 0   ? d->resident_bytes
                         : f == 1 ? d->leases_active
                         : f == 2 ? d->staging_bytes
                         : f == 3 ? d->instances
                                  : d->loading;
            strbuf_printf(b, "%s{device=\"%s\"} %llu\n", fam[f].name, d->device,
                          (unsigned long long)v);
        }
    }
}

char *metrics_render_prometheus(void)
{
    struct metrics_snapshot *sn = malloc(sizeof(*sn)); /* ~15 KiB: off the worker's stack */
    if (!sn)
        return NULL;
    metrics_snapshot_take(sn, 0);
    const uint64_t *g = sn->gauge;
    struct strbuf b = STRBUF_INIT;
    strbuf_reserve(&b, 16384);

    prom_head(&b, "tensord_build_info", "gauge", "Build information; the value is always 1.");
    strbuf_printf(&b, "tensord_build_info{version=\"%s\"} 1\n", TENSORD_VERSION);
    prom_gauge(&b, "tensord_uptime_seconds", "Seconds since the daemon started.",
               sn->uptime_seconds);
    prom_requests(&b, sn);
    prom_gauge(&b, "tensord_http_requests_in_flight", "Requests being answered.",
               (double)sn->in_flight);
    prom_gauge(&b, "tensord_http_connections_open", "Open HTTP connections.",
               (double)sn->conn_open);

    for (size_t i = 0; i < ARRAY_LEN(prom_counters); i++) {
        prom_head(&b, prom_counters[i].name, "counter", prom_counters[i].help);
        strbuf_printf(&b, "%s %llu\n", prom_counters[i].name,
                      (unsigned long long)sn->ctr[prom_counters[i].c]);
    }
    prom_head(&b, "tensord_sent_bytes_total", "counter",
              "Body bytes the kernel accepted, by method: sendfile (zero copy) or copy (from a buffer).");
    strbuf_printf(&b, "tensord_sent_bytes_total{method=\"sendfile\"} %llu\n",
                  (unsigned long long)sn->ctr[MC_SENDFILE_BYTES]);
    strbuf_printf(&b, "tensord_sent_bytes_total{method=\"copy\"} %llu\n",
                  (unsigned long long)sn->ctr[MC_COPIED_BYTES]);

    prom_gauge(&b, "tensord_models", "Models in the registry (valid and invalid).",
               (double)g[MG_MODELS]);
    prom_gauge(&b, "tensord_models_invalid", "Models that failed validation.",
               (double)g[MG_INVALID]);
    prom_gauge(&b, "tensord_files", "Files in the registry.", (double)g[MG_FILES]);
    prom_gauge(&b, "tensord_tensors", "Tensors in the registry.", (double)g[MG_TENSORS]);
    prom_gauge(&b, "tensord_model_file_bytes", "Bytes of the models' files (sum of their sizes).",
               (double)g[MG_FILE_BYTES]);
    /* The old name of the same figure (tensord never maps files), kept for
     * the dashboards docs/OPERATIONS.md promised it to. */
    prom_gauge(&b, "tensord_mapped_bytes",
               "Deprecated: the same figure as tensord_model_file_bytes.",
               (double)g[MG_FILE_BYTES]);
    prom_gauge(&b, "tensord_registry_generation", "Generation of the registry snapshot served.",
               (double)g[MG_GENERATION]);
    prom_gauge(&b, "tensord_registry_open_files",
               "Descriptors the served snapshot holds open (one per .safetensors file).",
               (double)g[MG_OPEN_FILES]);
    prom_gauge(&b, "tensord_gpu_resident_bytes", "Bytes of model data resident in device memory.",
               (double)g[MG_GPU_RESIDENT]);
    prom_gauge(&b, "tensord_gpu_leases_active", "Leases currently held on the IPC socket.",
               (double)g[MG_GPU_LEASES]);
    prom_gauge(&b, "tensord_gpu_preload_bytes_per_second", "Throughput of the last preload.",
               sn->gpu_bps);
    prom_gauge(&b, "tensord_gpu_staging_bytes",
               "Memory the devices' preload staging rings hold (pinned for CUDA).",
               (double)g[MG_GPU_STAGING]);
    gpu_devices_prometheus(&b, sn);
    prom_head(&b, "tensord_gpu_preload_phase_seconds_total", "counter",
              "Seconds finished preloads spent in each phase (alloc, ring, plan, copy, finish).");
    for (size_t i = 0; i < ARRAY_LEN(preload_phases); i++)
        strbuf_printf(&b, "tensord_gpu_preload_phase_seconds_total{phase=\"%s\"} %.9f\n",
                      preload_phases[i].phase, (double)sn->ctr[preload_phases[i].c] / 1e9);
    prom_head(&b, "tensord_hash_bytes_total", "counter", "Bytes read into SHA-256 by content hashing.");
    strbuf_printf(&b, "tensord_hash_bytes_total %llu\n", (unsigned long long)g[MG_HASH_BYTES]);
    prom_head(&b, "tensord_hash_files_total", "counter", "Files whose content hash was computed.");
    strbuf_printf(&b, "tensord_hash_files_total %llu\n", (unsigned long long)g[MG_HASH_FILES]);
    prom_head(&b, "tensord_hash_errors_total", "counter",
              "Files that could not be read for their content hash.");
    strbuf_printf(&b, "tensord_hash_errors_total %llu\n", (unsigned long long)g[MG_HASH_ERRORS]);
    prom_gauge(&b, "tensord_hash_files_pending",
               "Files of the registry still to hash (queued, waiting to retry, or being hashed).",
               (double)g[MG_HASH_PENDING]);
    prom_gauge(&b, "tensord_hash_pending_bytes", "Bytes of the files still to hash.",
               (double)g[MG_HASH_PENDING_BYTES]);
    prom_gauge(&b, "tensord_hash_files_known", "Files of the registry whose content hash is known.",
               (double)g[MG_HASH_KNOWN]);
    prom_gauge(&b, "tensord_hash_files", "Distinct files of the registry (hard links count once).",
               (double)g[MG_HASH_FILES_ALL]);
    prom_gauge(&b, "tensord_mirror_cache_bytes",
               "Bytes a mirror's cache holds (its files' fetched blocks and those being fetched).",
               (double)g[MG_MIRROR_BYTES]);
    prom_gauge(&b, "tensord_mirror_cache_in_use_bytes",
               "Of a mirror's cache bytes, those of files being read, fetched or preloaded, "
               "which no eviction can free now.", (double)g[MG_MIRROR_IN_USE]);
    prom_gauge(&b, "tensord_mirror_files", "Files in a mirror's cache.",
               (double)g[MG_MIRROR_FILES]);
    prom_gauge(&b, "tensord_mirror_questions_waiting",
               "Questions waiting in a mirror's queue to its upstream.",
               (double)g[MG_MIRROR_WAITING]);
    prom_gauge(&b, "tensord_mirror_partial_files",
               "Files in a mirror's cache that are not complete yet.",
               (double)g[MG_MIRROR_PARTIAL]);
    if (g[MG_MIRROR_UP]) {
        prom_gauge(&b, "tensord_mirror_upstream_up",
                   "1 when a mirror's last request to its upstream got an answer, 0 when it "
                   "failed.", (double)(g[MG_MIRROR_UP] - 1));
        prom_gauge(&b, "tensord_mirror_upstream_last_success_timestamp_seconds",
                   "When a mirror's upstream last answered (unix time; 0: not since start).",
                   (double)g[MG_MIRROR_LAST_SUCCESS]);
        prom_gauge(&b, "tensord_mirror_upstream_consecutive_failures",
                   "Requests to a mirror's upstream that failed in a row since its last answer.",
                   (double)g[MG_MIRROR_FAILURES_IN_ROW]);
    }
    free(sn);
    return strbuf_detach(&b, NULL);
}

/* Linear interpolation inside the bucket holding quantile q (seconds). */
static double quantile(const uint64_t *buckets, double q)
{
    uint64_t total = 0;
    for (int i = 0; i < METRICS_NBUCKETS; i++)
        total += buckets[i];
    if (!total)
        return 0;
    double rank = q * (double)total, cum = 0;
    for (int i = 0; i < METRICS_NBUCKETS; i++) {
        if (cum + (double)buckets[i] >= rank && buckets[i]) {
            if (i == METRICS_NBOUNDS)
                return (double)metrics_bounds_ns[METRICS_NBOUNDS - 1] / 1e9;
            double lo = i ? (double)metrics_bounds_ns[i - 1] : 0, hi = (double)metrics_bounds_ns[i];
            return (lo + (hi - lo) * (rank - cum) / (double)buckets[i]) / 1e9;
        }
        cum += (double)buckets[i];
    }
    return (double)metrics_bounds_ns[METRICS_NBOUNDS - 1] / 1e9;
}

static void json_histogram(struct strbuf *b, const uint64_t *buckets, uint64_t sum_ns)
{
    uint64_t count = 0;
    for (int i = 0; i < METRICS_NBUCKETS; i++)
        count += buckets[i];
    strbuf_printf(b, "{\"count\":%llu,\"sum\":%.9f,\"p50\":%.6f,\"p90\":%.6f,\"p99\":%.6f,\"buckets\":{",
                  (unsigned long long)count, (double)sum_ns / 1e9, quantile(buckets, 0.5),
                  quantile(buckets, 0.9), quantile(buckets, 0.99));
    for (int i = 0; i < METRICS_NBUCKETS; i++)
        strbuf_printf(b, "%s\"%s\":%llu", i ? "," : "", bound_labels[i],
                      (unsigned long long)buckets[i]);
    strbuf_printf(b, "}}");
}

static const char *const json_ctr_names[MC_COUNT] = {
    "range_requests",        "multirange_requests", "slice_requests",     "not_modified",
    "range_not_satisfiable", "sendfile_bytes",      "copied_bytes",       "reloads",
    "reload_errors",         "connections_total",   "connections_rejected",
    "gpu_preload_bytes",     "leases_total",        "ipc_refused",        "scan_errors",
    "transfers_cut",         "gpu_preload_page_cache_bytes", "gpu_preload_disk_bytes",
    "responses_aborted",     "documents_rendered",  "mirror_upstream_bytes",
    "mirror_blocks_fetched", "mirror_verify_failures", "mirror_evictions",
    "gpu_preload_upstream_bytes", "gpu_preload_alloc_ns", "gpu_preload_ring_ns",
    "gpu_preload_plan_ns", "gpu_preload_copy_ns", "gpu_preload_finish_ns",
    "mirror_questions_refused", "mirror_cache_hit_bytes", "mirror_cache_miss_bytes",
    "mirror_upstream_failures", "mirror_stale_answers", "mirror_questions_shared",
    "mirror_questions_abandoned"};


/* "endpoints": per kind, its requests by outcome, bytes and durations. */
static void json_kinds(struct strbuf *b, const struct metrics_snapshot *sn)
{
    const struct metrics_labels *l = &sn->labels;
    strbuf_printf(b, "},\"endpoints\":{");
    for (unsigned e = 0; e < l->n_kinds; e++) {
        strbuf_printf(b, "%s\"%s\":{\"requests\":{", e ? "," : "", l->kinds[e]);
        for (unsigned c = 0; c < l->n_outcomes; c++)
            strbuf_printf(b, "%s\"%s\":%llu", c ? "," : "", l->outcomes[c],
                          (unsigned long long)sn->requests[e][c]);
        strbuf_printf(b, "},\"bytes\":%llu,\"duration_seconds\":", (unsigned long long)sn->bytes[e]);
        json_histogram(b, sn->duration[e], sn->duration_sum_ns[e]);
        strbuf_printf(b, "}");
    }
    strbuf_printf(b, "},\"time_to_first_byte_seconds\":");
    json_histogram(b, sn->ttfb, sn->ttfb_sum_ns);
}

char *metrics_render_json(void)
{
    struct metrics_snapshot *sn = malloc(sizeof(*sn));
    if (!sn)
        return NULL;
    metrics_snapshot_take(sn, 1);
    const struct metrics_rates *r1 = &sn->r1, *r10 = &sn->r10, *r60 = &sn->r60;
    const uint64_t *g = sn->gauge;
    struct strbuf b = STRBUF_INIT;
    strbuf_reserve(&b, 16384);
    strbuf_printf(&b, "{\"version\":\"%s\",\"uptime_seconds\":%.3f,", TENSORD_VERSION,
                  sn->uptime_seconds);
    strbuf_printf(&b,
                  "\"requests\":{\"total\":%llu,\"in_flight\":%llu,\"per_second\":{\"1s\":%.3f,"
                  "\"10s\":%.3f,\"60s\":%.3f}},",
                  (unsigned long long)sn->done, (unsigned long long)sn->in_flight,
                  r1->requests_per_second, r10->requests_per_second, r60->requests_per_second);
    uint64_t bytes = 0;
    for (unsigned e = 0; e < sn->labels.n_kinds; e++)
        bytes += sn->bytes[e];
    strbuf_printf(&b,
                  "\"bytes\":{\"total\":%llu,\"per_second\":{\"1s\":%.3f,\"10s\":%.3f,\"60s\":%.3f}},",
                  (unsigned long long)bytes, r1->bytes_per_second, r10->bytes_per_second,
                  r60->bytes_per_second);
    strbuf_printf(&b, "\"connections\":{\"open\":%llu},", (unsigned long long)sn->conn_open);
    strbuf_printf(&b, "\"counters\":{");
    for (int c = 0; c < MC_COUNT; c++)
        strbuf_printf(&b, "%s\"%s\":%llu", c ? "," : "", json_ctr_names[c],
                      (unsigned long long)sn->ctr[c]);
    json_kinds(&b, sn);
    strbuf_printf(&b,
                  ",\"registry\":{\"models\":%llu,\"invalid_models\":%llu,\"files\":%llu,"
                  "\"tensors\":%llu,\"file_bytes\":%llu,\"mapped_bytes\":%llu,\"generation\":%llu,"
                  "\"open_files\":%llu},",
                  (unsigned long long)g[MG_MODELS], (unsigned long long)g[MG_INVALID],
                  (unsigned long long)g[MG_FILES], (unsigned long long)g[MG_TENSORS],
                  (unsigned long long)g[MG_FILE_BYTES], (unsigned long long)g[MG_FILE_BYTES],
                  (unsigned long long)g[MG_GENERATION], (unsigned long long)g[MG_OPEN_FILES]);
    strbuf_printf(&b,
                  "\"gpu\":{\"resident_bytes\":%llu,\"leases_active\":%llu,"
                  "\"last_preload_bytes_per_second\":%.1f,\"staging_bytes\":%llu,"
                  "\"preload_phase_seconds\":{",
                  (unsigned long long)g[MG_GPU_RESIDENT], (unsigned long long)g[MG_GPU_LEASES],
                  sn->gpu_bps, (unsigned long long)g[MG_GPU_STAGING]);
    for (size_t i = 0; i < ARRAY_LEN(preload_phases); i++)
        strbuf_printf(&b, "%s\"%s\":%.9f", i ? "," : "", preload_phases[i].phase,
                      (double)sn->ctr[preload_phases[i].c] / 1e9);
    strbuf_printf(&b, "},\"devices\":[");
    for (size_t i = 0; i < sn->n_gpu_devices; i++) {
        const struct metrics_gpu_device *d = &sn->gpu_devices[i];
        strbuf_printf(&b, "%s{\"device\":\"%s\",\"resident_bytes\":%llu,\"leases_active\":%llu,"
                      "\"staging_bytes\":%llu,\"instances\":%u,\"loading\":%s}", i ? "," : "",
                      d->device, (unsigned long long)d->resident_bytes,
                      (unsigned long long)d->leases_active, (unsigned long long)d->staging_bytes,
                      d->instances, d->loading ? "true" : "false");
    }
    strbuf_printf(&b, "]},");
    strbuf_printf(&b,
                  "\"hashing\":{\"bytes_hashed\":%llu,\"files_hashed\":%llu,\"errors\":%llu,"
                  "\"files_pending\":%llu,\"bytes_pending\":%llu,\"files_known\":%llu,"
                  "\"files\":%llu},",
                  (unsigned long long)g[MG_HASH_BYTES], (unsigned long long)g[MG_HASH_FILES],
                  (unsigned long long)g[MG_HASH_ERRORS], (unsigned long long)g[MG_HASH_PENDING],
                  (unsigned long long)g[MG_HASH_PENDING_BYTES],
                  (unsigned long long)g[MG_HASH_KNOWN], (unsigned long long)g[MG_HASH_FILES_ALL]);
    strbuf_printf(&b, "\"mirror\":{\"cache_bytes\":%llu,\"in_use_bytes\":%llu,\"files\":%llu,"
                  "\"partial_files\":%llu,\"questions_waiting\":%llu,\"upstream_up\":%s,"
                  "\"upstream_last_success\":%llu,\"upstream_consecutive_failures\":%llu}}",
                  (unsigned long long)g[MG_MIRROR_BYTES], (unsigned long long)g[MG_MIRROR_IN_USE],
                  (unsigned long long)g[MG_MIRROR_FILES], (unsigned long long)g[MG_MIRROR_PARTIAL],
                  (unsigned long long)g[MG_MIRROR_WAITING],
                  g[MG_MIRROR_UP] == 0 ? "null" : g[MG_MIRROR_UP] == 2 ? "true" : "false",
                  (unsigned long long)g[MG_MIRROR_LAST_SUCCESS],
                  (unsigned long long)g[MG_MIRROR_FAILURES_IN_ROW]);
    free(sn);
    return strbuf_detach(&b, NULL);
}
