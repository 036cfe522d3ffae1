/* Fuzzes glob patterns (a fetch's split rules come from the request body).
 * Input: pattern, a NUL byte, then a name. Checks that matching with a
 * budget agrees with matching without one, and, for patterns without '[',
 * compares with an independent dynamic-programming matcher of '*', '?' and
 * literal code points (fnmatchcase's rules for those). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "globpat.h"
#include "util.h"

#define REF_MAX 256 /* code points the reference matcher takes */

/* UTF-8 to code points; returns the count, or -1 when invalid or too long. */
static int decode(const uint8_t *s, size_t n, uint32_t *out)
{
    if (!utf8_valid((const char *)s, n))
        return -1;
    int k = 0;
    for (size_t i = 0; i < n; k++) {
        if (k == REF_MAX)
            return -1;
        uint8_t c = s[i];
        size_t len = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
        uint32_t cp = len == 1 ? c : c & (0x7f >> len);
        for (size_t j = 1; j < len; j++)
            cp = cp << 6 | (s[i + j] & 0x3f);
        out[k] = cp;
        i += len;
    }
    return k;
}

/* Whether name[0..nn) matches pat[0..np) with '*' any run and '?' any one. */
static int reference_match(const uint32_t *pat, int np, const uint32_t *name, int nn)
{
    static unsigned char ok[REF_MAX + 1][REF_MAX + 1]; /* ok[i][j]: pat[i..) matches name[j..) */
    for (int i = np; i >= 0; i--) {
        for (int j = nn; j >= 0; j--) {
            if (i == np)
                ok[i][j] = j == nn;
            else if (pat[i] == '*')
                ok[i][j] = ok[i + 1][j] || (j < nn && ok[i][j + 1]);
            else
                ok[i][j] = j < nn && (pat[i] == '?' || pat[i] == name[j]) && ok[i + 1][j + 1];
        }
    }
    return ok[0][0];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t plen = nul ? (size_t)(nul - data) : size;
    const uint8_t *name = nul ? nul + 1 : data + size;
    size_t nlen = nul ? size - plen - 1 : 0;
    struct globpat *g = globpat_compile((const char *)data, plen);
    if (!g)
        return 0;
    int m = globpat_match(g, (const char *)name, nlen, NULL);
    uint64_t budget = UINT64_MAX;
    if (globpat_match(g, (const char *)name, nlen, &budget) != m)
        abort();
    uint64_t small = 8;
    int b = globpat_match(g, (const char *)name, nlen, &small);
    if (b != m && !(b == -1 && small == 0))
        abort();
    static uint32_t p[REF_MAX], n[REF_MAX];
    int np, nn;
    if (!memchr(data, '[', plen) && (np = decode(data, plen, p)) >= 0 &&
        (nn = decode(name, nlen, n)) >= 0 && reference_match(p, np, n, nn) != m)
        abort();
    globpat_free(g);
    return 0;
}
