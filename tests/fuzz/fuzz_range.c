/* Fuzzes Range header parsing. Input: 8 bytes of body size (little-endian,
 * often reduced so that ranges hit it), then the header. Checks that every
 * returned range is non-empty and inside the body, that *n is 0 unless
 * RANGE_OK, and that a satisfiable answer never comes for an empty body. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "range.h"
#include "util.h"

#define FUZZ_MAX_RANGES 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    uint64_t body = 0;
    for (int i = 7; i >= 0; i--)
        body = body << 8 | data[i];
    if (body & 1)
        body >>= 1; /* keep huge sizes reachable */
    else
        body %= 1000; /* but mostly small ones, so ranges overlap the end */
    char *h = xstrndup((const char *)data + 8, size - 8);
    struct byte_range out[FUZZ_MAX_RANGES + 1];
    out[FUZZ_MAX_RANGES].start = 0xdead; /* guard: never written */
    size_t n = 12345;
    size_t max = (size_t)(data[0] % (FUZZ_MAX_RANGES + 1));
    enum range_result r = range_parse(h, body, max, out, &n);
    if (out[FUZZ_MAX_RANGES].start != 0xdead)
        abort();
    if (r != RANGE_OK && n != 0)
        abort();
    if (r == RANGE_OK) {
        if (n == 0 || n > max || body == 0)
            abort();
        for (size_t i = 0; i < n; i++) {
            if (out[i].len == 0 || out[i].start >= body || out[i].len > body - out[i].start)
                abort();
        }
    }
    if (r != RANGE_NONE && r != RANGE_OK && r != RANGE_UNSATISFIABLE)
        abort();
    free(h);
    return 0;
}
