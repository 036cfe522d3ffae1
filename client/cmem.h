/* cmem: the client library's allocations. A worker must never be killed
 * by the library: where the daemon aborts on a failed small allocation
 * (core/base/util.h), every client function turns one into an error return.
 * All client code allocates through here, which also lets the unit tests
 * fail the n-th allocation (cmem_fail_after). */
#ifndef TENSORD_CMEM_H
#define TENSORD_CMEM_H

#include <stddef.h>

/* malloc/calloc/realloc/strdup that may return NULL (the caller reports
 * "out of memory"). cmem_calloc(0, x) and cmem_malloc(0) return a
 * one-byte block, never NULL for success. */
void *cmem_malloc(size_t n);
void *cmem_calloc(size_t n, size_t size);
void *cmem_realloc(void *p, size_t n);
char *cmem_strdup(const char *s);

/* Tests only: the allocation after the next n fails (then every later one
 * succeeds again); n < 0 turns failures off. Not thread-safe. */
void cmem_fail_after(long n);

#endif
