/* split_bounds: which part of a dimension a rank of a tensor-parallel
 * split holds, as numpy.array_split cuts it. The one definition of it: the
 * fetch and the GPU preload plan their parts with it (core/req/fetch_req.c),
 * and the client library, which links none of core's planning, checks the
 * parts a daemon's open answer describes with it (client/answer.c). */
#ifndef TENSORD_SPLIT_BOUNDS_H
#define TENSORD_SPLIT_BOUNDS_H

#include <stdint.h>

/* Part `rank` of `world` (rank < world) of n elements: [*lo, *hi), the
 * first n % world parts one element longer. */
static inline void fetch_split_bounds(uint64_t n, uint64_t world, uint64_t rank, uint64_t *lo,
                                      uint64_t *hi)
{
    uint64_t q = n / world, r = n % world;
    *lo = rank * q + (rank < r ? rank : r);
    *hi = *lo + q + (rank < r);
}

#endif
