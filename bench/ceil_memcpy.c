/* Machine ceiling: single-thread memcpy bandwidth between two buffers far larger
 * than the caches. Prints one JSON line; GB/s counts bytes copied (10^9 bytes/s).
 * usage: ceil_memcpy [MiB per copy (256)] [runs (9)] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ceil.h"

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
    int runs = argc > 2 ? atoi(argv[2]) : 9;
    if (mib == 0 || runs <= 0 || runs > 1000) {
        fprintf(stderr, "usage: ceil_memcpy [MiB] [runs]\n");
        return 2;
    }
    size_t n = mib << 20;
    unsigned char *src = aligned_alloc(4096, n), *dst = aligned_alloc(4096, n);
    double *gbps = calloc((size_t)runs, sizeof(*gbps));
    if (!src || !dst || !gbps) {
        fprintf(stderr, "ceil_memcpy: out of memory\n");
        return 1;
    }
    /* Fault every page in before timing, so the copies measure memory, not the kernel. */
    memset(src, 0x5a, n);
    memset(dst, 0, n);
    memcpy(dst, src, n);
    unsigned sink = 0;
    for (int i = 0; i < runs; i++) {
        src[(size_t)i * 4099 % n] = (unsigned char)i;
        double t0 = ceil_now();
        memcpy(dst, src, n);
        double t1 = ceil_now();
        sink += dst[(size_t)i * 4099 % n];
        gbps[i] = (double)n / (t1 - t0) / 1e9;
    }
    printf("{\"bytes\":%zu,\"runs\":[", n);
    for (int i = 0; i < runs; i++)
        printf("%s%.3f", i ? "," : "", gbps[i]);
    printf("],\"median_gbps\":%.3f,\"sink\":%u}\n", ceil_median(gbps, runs), sink & 1);
    free(src);
    free(dst);
    free(gbps);
    return 0;
}
