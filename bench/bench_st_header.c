/* Benchmark: validates an in-memory 500,000-tensor header (~50 MB of JSON,
 * names like "model.layers.N.mlp.weight", F16 shapes) five times with
 * st_header_parse and prints the median time, tensors/s and peak RSS.
 *
 *   make bench-header      (builds build/bench_st_header against the core library and runs it)
 *   build/bench_st_header [n_tensors] [reversed]
 * "reversed" lays the data out in the opposite order of the JSON keys, so
 * the tensors need sorting (writers usually emit them in offset order). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "st_header.h"
#include "util.h"

#define RUNS 5

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Builds the header into a new buffer; *data_len gets the data size. */
static char *build_header(size_t n, int reversed, size_t *len, uint64_t *data_len)
{
    static const char *const parts[] = {"mlp.gate_proj.weight", "mlp.up_proj.weight",
                                        "mlp.down_proj.weight", "self_attn.q_proj.weight",
                                        "input_layernorm.weight"};
    size_t cap = n * 128 + 64, pos = 0;
    char *buf = xmalloc(cap);
    uint64_t off = 0, total = 0;
    for (size_t i = 0; i < n; i++)
        total += (16 + i % 48) * 64 * 2;
    pos += (size_t)snprintf(buf + pos, cap - pos,
                            "{\"__metadata__\":{\"format\":\"pt\"},");
    for (size_t i = 0; i < n; i++) {
        uint64_t rows = 16 + i % 48, cols = 64;
        uint64_t bytes = rows * cols * 2;
        uint64_t b = reversed ? total - off - bytes : off;
        pos += (size_t)snprintf(buf + pos, cap - pos,
                                "%s\"model.layers.%zu.%s\":{\"dtype\":\"F16\",\"shape\":[%" PRIu64
                                ",%" PRIu64 "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                                i ? "," : "", i / 5, parts[i % 5], rows, cols, b, b + bytes);
        off += bytes;
    }
    pos += (size_t)snprintf(buf + pos, cap - pos, "}");
    *len = pos;
    *data_len = off;
    return buf;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 500000;
    size_t len;
    uint64_t data_len;
    int reversed = argc > 2 && strcmp(argv[2], "reversed") == 0;
    char *json = build_header(n, reversed, &len, &data_len);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long rss_before = ru.ru_maxrss;
    uint64_t ns[RUNS];
    size_t kept = 0;
    for (int r = 0; r < RUNS; r++) {
        struct st_header *h;
        struct st_error e;
        uint64_t t0 = time_mono_ns();
        int rc = st_header_parse(json, len, data_len, "bench.safetensors", &h, &e);
        ns[r] = time_mono_ns() - t0;
        if (rc != 0) {
            fprintf(stderr, "bench: %s: %s\n", st_status_name(e.code), e.message);
            return 1;
        }
        kept = h->n_tensors;
        st_header_free(h);
    }
    qsort(ns, RUNS, sizeof(ns[0]), cmp_u64);
    double ms = (double)ns[RUNS / 2] / 1e6;
    getrusage(RUSAGE_SELF, &ru);
    printf("st_header_parse: %zu tensors, %.1f MB of JSON: median %.1f ms (min %.1f, max %.1f) "
           "over %d runs, %.2f M tensors/s, %.0f MB/s%s\n",
           kept, (double)len / 1e6, ms, (double)ns[0] / 1e6, (double)ns[RUNS - 1] / 1e6, RUNS,
           (double)kept / (ms / 1e3) / 1e6, (double)len / 1e6 / (ms / 1e3),
           reversed ? " (reversed offsets)" : "");
    printf("peak RSS: %ld MB (%ld MB before parsing: the JSON buffer and the binary)\n",
           ru.ru_maxrss / 1024, rss_before / 1024);
    free(json);
    return 0;
}
