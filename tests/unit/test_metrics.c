/* Tests for core/runtime/metrics.c: exact sums across threads, histogram buckets,
 * gauges, per-second rates on a fake clock, and both renderings.
 *
 * With TENSORD_METRICS_DUMP=PATH the Prometheus text of a populated registry
 * is written to PATH (tests/ops/test_promtool.py runs promtool on it). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "http_metrics.h"
#include "metrics.h"
#include "test.h"

/* The value of the sample line that starts with `series ` in text, or -1. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

#define THREADS 4
#define PER_THREAD 100000

static void *hammer(void *arg)
{
    (void)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        metrics_request_start();
        metrics_add(MC_SENDFILE_BYTES, 3);
        metrics_conn_opened();
        http_metrics_request_done(MEP_TENSOR, 200 + (unsigned)(i % 2) * 6, 10, 1000, 500);
        metrics_conn_closed();
    }
    return NULL;
}

TEST(threads_sum_exactly)
{
    http_metrics_init();
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, hammer, NULL);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    char *p = metrics_render_prometheus();
    CHECK(sample(p, "tensord_http_requests_total{endpoint=\"tensor\",code=\"2xx\"}") ==
          THREADS * PER_THREAD);
    CHECK(sample(p, "tensord_http_response_bytes_total{endpoint=\"tensor\"}") ==
          10.0 * THREADS * PER_THREAD);
    CHECK(sample(p, "tensord_sent_bytes_total{method=\"sendfile\"}") == 3.0 * THREADS * PER_THREAD);
    CHECK(sample(p, "tensord_http_connections_total") == THREADS * PER_THREAD);
    CHECK(sample(p, "tensord_http_connections_open") == 0);
    CHECK(sample(p, "tensord_http_requests_in_flight") == 0);
    CHECK(sample(p, "tensord_http_request_duration_seconds_count{endpoint=\"tensor\"}") ==
          THREADS * PER_THREAD);
    free(p);
}

TEST(histogram_buckets)
{
    http_metrics_init();
    http_metrics_request_done(MEP_SLICE, 206, 0, 50000, 1000);        /* 50 us */
    http_metrics_request_done(MEP_SLICE, 206, 0, 100000, 1000);       /* le is inclusive */
    http_metrics_request_done(MEP_SLICE, 206, 0, 150000, 1000);       /* 150 us */
    http_metrics_request_done(MEP_SLICE, 206, 0, 20000000000, 1000);  /* 20 s: +Inf only */
    char *p = metrics_render_prometheus();
    const char *h = "tensord_http_request_duration_seconds_bucket{endpoint=\"slice\",le=";
    char key[160];
    struct { const char *le; double want; } cases[] = {
        {"0.0001", 2}, {"0.00025", 3}, {"0.001", 3}, {"10", 3}, {"+Inf", 4}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(key, sizeof(key), "%s\"%s\"}", h, cases[i].le);
        CHECK(sample(p, key) == cases[i].want);
    }
    CHECK(sample(p, "tensord_http_request_duration_seconds_count{endpoint=\"slice\"}") == 4);
    double sum = sample(p, "tensord_http_request_duration_seconds_sum{endpoint=\"slice\"}");
    CHECK(sum > 20.00029 && sum < 20.00031);
    CHECK(sample(p, "tensord_http_time_to_first_byte_seconds_bucket{le=\"0.0001\"}") == 4);
    CHECK(sample(p, "tensord_http_time_to_first_byte_seconds_count") == 4);
    CHECK(sample(p, "tensord_http_requests_total{endpoint=\"slice\",code=\"2xx\"}") == 4);
    CHECK(sample(p, "tensord_http_requests_total{endpoint=\"model\",code=\"2xx\"}") == 0);
    free(p);
}

TEST(status_classes_and_gauges)
{
    http_metrics_init();
    unsigned statuses[] = {101, 200, 304, 404, 416, 503, 0, 999};
    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
        http_metrics_request_done(MEP_FILE, statuses[i], 1, 1, 1);
    http_metrics_request_done((enum metrics_ep)77, 200, 1, 1, 1); /* out of range: "other" */
    metrics_request_start();
    metrics_request_start();
    metrics_conn_opened();
    metrics_add(MC_RANGE_NOT_SATISFIABLE, 2);
    metrics_add((enum metrics_ctr)99, 1); /* ignored */
    metrics_set_registry(5, 1, 12, 3400, 1ULL << 40, 7);
    metrics_set_gpu(123456789, 3, 2.5e9, 1 << 20);
    struct metrics_gpu_device devs[2] = {
        {.device = "cuda:0", .resident_bytes = 100, .leases_active = 2, .staging_bytes = 7,
         .instances = 3, .loading = 1},
        {.device = "cuda:1", .resident_bytes = 5}};
    metrics_set_gpu_devices(devs, 2);
    char *p = metrics_render_prometheus();
    CHECK(sample(p, "tensord_gpu_device_resident_bytes{device=\"cuda:0\"}") == 100);
    CHECK(sample(p, "tensord_gpu_device_resident_bytes{device=\"cuda:1\"}") == 5);
    CHECK(sample(p, "tensord_gpu_device_leases_active{device=\"cuda:0\"}") == 2);
    CHECK(sample(p, "tensord_gpu_device_staging_bytes{device=\"cuda:0\"}") == 7);
    CHECK(sample(p, "tensord_gpu_device_instances{device=\"cuda:0\"}") == 3);
    CHECK(sample(p, "tensord_gpu_device_loading{device=\"cuda:0\"}") == 1);
    CHECK(sample(p, "tensord_gpu_device_loading{device=\"cuda:1\"}") == 0);
    CHECK_CONTAINS(p, "# TYPE tensord_gpu_device_resident_bytes gauge\n");
    char *j = metrics_render_json();
    CHECK_CONTAINS(j, "\"devices\":[{\"device\":\"cuda:0\",\"resident_bytes\":100,"
                      "\"leases_active\":2,\"staging_bytes\":7,\"instances\":3,\"loading\":true},"
                      "{\"device\":\"cuda:1\",");
    free(j);
    CHECK(sample(p, "tensord_http_requests_total{endpoint=\"file\",code=\"1xx\"}") == 1);
    CHECK(sample(p, "tensord_http_requests_total{endpoint=\"file\",code=\"4xx\"}") == 2);
    CHECK(sample(p, "tensord_http_requests_total{endpoint=\"file\",code=\"5xx\"}") == 1);
    CHECK(sample(p, "tensord_http_requests_total{endpoint=\"file\",code=\"other\"}") == 2);
    CHECK(sample(p, "tensord_http_requests_total{endpoint=\"other\",code=\"2xx\"}") == 1);
    CHECK(sample(p, "tensord_http_requests_in_flight") == 0); /* 2 started, 9 done: clamps */
    CHECK(sample(p, "tensord_http_connections_open") == 1);
    CHECK(sample(p, "tensord_http_range_not_satisfiable_total") == 2);
    CHECK(sample(p, "tensord_models") == 5);
    CHECK(sample(p, "tensord_models_invalid") == 1);
    CHECK(sample(p, "tensord_files") == 12);
    CHECK(sample(p, "tensord_tensors") == 3400);
    CHECK(sample(p, "tensord_model_file_bytes") == 1099511627776.0);
    CHECK(sample(p, "tensord_mapped_bytes") == 1099511627776.0); /* the deprecated alias */
    CHECK(sample(p, "tensord_registry_generation") == 7);
    CHECK(sample(p, "tensord_gpu_resident_bytes") == 123456789);
    CHECK(sample(p, "tensord_gpu_leases_active") == 3);
    CHECK(sample(p, "tensord_gpu_preload_bytes_per_second") == 2.5e9);
    CHECK(sample(p, "tensord_build_info{version=\"" TENSORD_VERSION "\"}") == 1);
    CHECK(sample(p, "tensord_uptime_seconds") >= 0);
    CHECK_CONTAINS(p, "# TYPE tensord_http_request_duration_seconds histogram\n");
    CHECK_CONTAINS(p, "# TYPE tensord_http_requests_total counter\n");
    CHECK_CONTAINS(p, "# HELP tensord_models ");
    free(p);
    http_metrics_request_done(MEP_OTHER, 200, 0, 0, 0);
}

TEST(hashing)
{
    http_metrics_init();
    metrics_hash_progress(1 << 20, 0, 0);
    metrics_hash_progress(5, 1, 0);
    metrics_hash_progress(0, 0, 2);
    metrics_set_hashing(3, 4096, 7, 10);
    char *p = metrics_render_prometheus();
    CHECK(sample(p, "tensord_hash_bytes_total") == (1 << 20) + 5);
    CHECK(sample(p, "tensord_hash_files_total") == 1);
    CHECK(sample(p, "tensord_hash_errors_total") == 2);
    CHECK(sample(p, "tensord_hash_files_pending") == 3);
    CHECK(sample(p, "tensord_hash_pending_bytes") == 4096);
    CHECK(sample(p, "tensord_hash_files_known") == 7);
    CHECK(sample(p, "tensord_hash_files") == 10);
    CHECK_CONTAINS(p, "# TYPE tensord_hash_bytes_total counter\n");
    CHECK_CONTAINS(p, "# TYPE tensord_hash_files_pending gauge\n");
    free(p);
    char *j = metrics_render_json();
    CHECK_CONTAINS(j, "\"hashing\":{\"bytes_hashed\":1048581,\"files_hashed\":1,\"errors\":2,"
                      "\"files_pending\":3,\"bytes_pending\":4096,\"files_known\":7,"
                      "\"files\":10},");
    free(j);
    /* A mirror's cache gauges, in both renderings. */
    metrics_set_mirror(123456789, 65536, 12, 3);
    p = metrics_render_prometheus();
    CHECK(sample(p, "tensord_mirror_cache_bytes") == 123456789);
    CHECK(sample(p, "tensord_mirror_files") == 12);
    CHECK(sample(p, "tensord_mirror_cache_in_use_bytes") == 65536);
    CHECK(sample(p, "tensord_mirror_partial_files") == 3);
    CHECK_CONTAINS(p, "# TYPE tensord_mirror_cache_bytes gauge\n");
    /* The upstream's health: nothing until a mirror sets it. */
    CHECK(!strstr(p, "tensord_mirror_upstream_up"));
    free(p);
    j = metrics_render_json();
    CHECK_CONTAINS(j, "\"mirror\":{\"cache_bytes\":123456789,\"in_use_bytes\":65536,\"files\":12,"
                      "\"partial_files\":3,\"questions_waiting\":0,\"upstream_up\":null,"
                      "\"upstream_last_success\":0,\"upstream_consecutive_failures\":0}}");
    free(j);
    metrics_set_mirror_upstream(0, 1700000000, 7);
    metrics_add(MC_MIRROR_STALE_ANSWERS, 2);
    p = metrics_render_prometheus();
    CHECK(sample(p, "tensord_mirror_upstream_up") == 0);
    CHECK(sample(p, "tensord_mirror_upstream_last_success_timestamp_seconds") == 1700000000);
    CHECK(sample(p, "tensord_mirror_upstream_consecutive_failures") == 7);
    CHECK(sample(p, "tensord_mirror_stale_answers_total") == 2);
    free(p);
    j = metrics_render_json();
    CHECK_CONTAINS(j, "\"upstream_up\":false,\"upstream_last_success\":1700000000,"
                      "\"upstream_consecutive_failures\":7}}");
    free(j);
    metrics_set_mirror_upstream(1, 1700000001, 0);
    p = metrics_render_prometheus();
    CHECK(sample(p, "tensord_mirror_upstream_up") == 1);
    free(p);
}

static uint64_t fake_now;
static uint64_t fake_clock(void)
{
    return fake_now;
}

TEST(rates)
{
    const uint64_t s = 1000000000ULL;
    fake_now = 1000 * s;
    metrics_set_clock(fake_clock);
    http_metrics_init();
    /* 10 requests of 100 bytes in each of seconds 1000..1019. */
    for (int sec = 0; sec < 20; sec++) {
        fake_now = (1000 + (uint64_t)sec) * s + s / 2;
        for (int i = 0; i < 10; i++)
            http_metrics_request_done(MEP_TENSOR, 200, 100, 1000, 1000);
    }
    struct metrics_rates r;
    fake_now = 1020 * s; /* exactly at the start of second 1020 */
    metrics_rates(1, &r);
    CHECK_EQ_U64(r.requests, 200);
    CHECK_EQ_U64(r.bytes, 20000);
    CHECK(r.requests_per_second == 10.0);
    metrics_rates(10, &r);
    CHECK(r.requests_per_second == 10.0);
    CHECK(r.bytes_per_second == 1000.0);
    metrics_rates(60, &r); /* younger than 60 s: rate since start */
    CHECK(r.requests_per_second == 10.0);

    /* Idle for 30 s: the 1 s and 10 s rates drop to 0, the 60 s one does not. */
    fake_now = 1050 * s;
    metrics_rates(1, &r);
    CHECK(r.requests_per_second == 0);
    metrics_rates(10, &r);
    CHECK(r.requests_per_second == 0);
    metrics_rates(60, &r);
    CHECK(r.requests_per_second == 4.0); /* 200 requests in the 50 s since start */

    /* A burst after the idle time counts in every window. */
    fake_now = 1050 * s + s / 4;
    for (int i = 0; i < 30; i++)
        http_metrics_request_done(MEP_TENSOR, 200, 1, 1, 1);
    fake_now = 1051 * s;
    metrics_rates(1, &r);
    CHECK(r.requests_per_second == 30.0);
    metrics_rates(10, &r);
    CHECK(r.requests_per_second == 3.0);

    /* 70 s later the ring has wrapped: still correct. */
    fake_now = 1121 * s;
    metrics_rates(60, &r);
    CHECK(r.requests_per_second == 0);
    char *j = metrics_render_json();
    CHECK_CONTAINS(j, "\"uptime_seconds\":121.000");
    CHECK_CONTAINS(j, "\"requests\":{\"total\":230,\"in_flight\":0,\"per_second\":{\"1s\":0.000");
    free(j);
    metrics_set_clock(NULL);
}

TEST(json_rendering)
{
    http_metrics_init();
    metrics_request_start();
    http_metrics_request_done(MEP_MODELS, 200, 42, 2000000, 1000000);
    metrics_request_start();
    metrics_add(MC_RELOADS, 3);
    metrics_set_registry(2, 0, 3, 4, 5, 6);
    metrics_set_gpu(0, 0, 0.0 / 0.0, 0); /* NaN must not reach the JSON */
    char *j = metrics_render_json();
    CHECK(j[0] == '{' && j[strlen(j) - 1] == '}');
    CHECK_CONTAINS(j, "\"version\":\"" TENSORD_VERSION "\"");
    CHECK_CONTAINS(j, "\"in_flight\":1");
    CHECK_CONTAINS(j, "\"bytes\":{\"total\":42,");
    CHECK_CONTAINS(j, "\"reloads\":3");
    CHECK_CONTAINS(j, "\"responses_aborted\":0,\"documents_rendered\":0,\"mirror_upstream_bytes\":0,");
    CHECK_CONTAINS(j, "\"gpu_preload_upstream_bytes\":0,\"gpu_preload_alloc_ns\":0,");
    CHECK_CONTAINS(j, "\"gpu_preload_finish_ns\":0,\"mirror_questions_refused\":0,"
                      "\"mirror_cache_hit_bytes\":0,\"mirror_cache_miss_bytes\":0,"
                      "\"mirror_upstream_failures\":0,\"mirror_stale_answers\":0,"
                      "\"mirror_questions_shared\":0,\"mirror_questions_abandoned\":0},"
                      "\"endpoints\":{");
    CHECK_CONTAINS(j, "\"ui\":{\"requests\":{");
    CHECK_CONTAINS(j, "\"models\":{\"requests\":{\"1xx\":0,\"2xx\":1,");
    CHECK_CONTAINS(j, "\"duration_seconds\":{\"count\":1,\"sum\":0.002000000,");
    CHECK_CONTAINS(j, "\"registry\":{\"models\":2,\"invalid_models\":0,\"files\":3,\"tensors\":4,"
                      "\"file_bytes\":5,\"mapped_bytes\":5,\"generation\":6,\"open_files\":0}");
    CHECK_CONTAINS(j, "\"last_preload_bytes_per_second\":0.0");
    CHECK(strstr(j, "nan") == NULL);
    CHECK_CONTAINS(j, "\"per_second\":{\"1s\":");
    free(j);
    metrics_add(MC_RESPONSES_ABORTED, 2);
    char *p = metrics_render_prometheus();
    CHECK_CONTAINS(p, "# TYPE tensord_http_responses_aborted_total counter\n"
                      "tensord_http_responses_aborted_total 2\n");
    free(p);
}

/* A registry with some of everything, for promtool. */
static void dump_for_promtool(const char *path)
{
    http_metrics_init();
    for (int e = 0; e < MEP_COUNT; e++) {
        metrics_request_start();
        http_metrics_request_done((enum metrics_ep)e, 200, 1024, 3000000, 100000);
    }
    http_metrics_request_done(MEP_TENSOR, 404, 80, 200000, 200000);
    for (int c = 0; c < MC_COUNT; c++)
        metrics_add((enum metrics_ctr)c, (uint64_t)c + 1);
    metrics_conn_opened();
    metrics_set_registry(3, 1, 7, 1000, 1 << 30, 2);
    metrics_set_gpu(1 << 30, 1, 1.5e10, 0);
    struct metrics_gpu_device dev = {.device = "cuda:0", .resident_bytes = 1 << 30};
    metrics_set_gpu_devices(&dev, 1);
    metrics_hash_progress(3 << 30, 40, 1);
    metrics_set_hashing(2, 1 << 30, 40, 42);
    char *p = metrics_render_prometheus();
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(p, f);
        fclose(f);
    }
    CHECK(f != NULL);
    free(p);
}

int main(void)
{
    RUN(threads_sum_exactly);
    RUN(histogram_buckets);
    RUN(status_classes_and_gauges);
    RUN(rates);
    RUN(json_rendering);
    RUN(hashing);
    const char *dump = getenv("TENSORD_METRICS_DUMP");
    if (dump) {
        test_failed_flag = 0;
        dump_for_promtool(dump);
        tests_failed += test_failed_flag;
        tests_passed += !test_failed_flag;
    }
    return TEST_SUMMARY();
}
