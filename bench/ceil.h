/* ceil.h: what the ceiling programs (ceil_memcpy.c, ceil_sendfile.c) share. */
#ifndef TENSORD_BENCH_CEIL_H
#define TENSORD_BENCH_CEIL_H

#include <stdlib.h>
#include <time.h>

static inline double ceil_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int ceil_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0..n) and returns its median (the upper one for even n). */
static inline double ceil_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), ceil_cmp_double);
    return v[n / 2];
}

#endif
