/* cmem: checked allocations for the client library. */
#include "cmem.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long countdown = -1; /* allocations left before the injected failure */

/* 1 when this allocation must fail (a test asked for it). */
static int injected(void)
{
    long n = atomic_load_explicit(&countdown, memory_order_relaxed);
    if (n < 0)
        return 0;
    atomic_store_explicit(&countdown, n - 1, memory_order_relaxed);
    return n == 0;
}

void cmem_fail_after(long n)
{
    atomic_store(&countdown, n);
}

void *cmem_malloc(size_t n)
{
    return injected() ? NULL : malloc(n ? n : 1);
}

void *cmem_calloc(size_t n, size_t size)
{
    return injected() ? NULL : calloc(n ? n : 1, size ? size : 1);
}

void *cmem_realloc(void *p, size_t n)
{
    return injected() ? NULL : realloc(p, n ? n : 1);
}

char *cmem_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = cmem_malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}
