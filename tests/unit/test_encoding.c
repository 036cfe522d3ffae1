/* Unit tests for core/body/encoding.c: the coding a request's Accept-Encoding
 * lets tensord send (RFC 9110 §12.5.3: q-values, "*", refusals, case,
 * malformed parameters), and gzip members that zlib's own inflate reads
 * back to the input, equal for equal inputs whatever the pieces. */
#include <zlib.h>

#include "encoding.h"
#include "test.h"
#include "util.h"

TEST(choose)
{
    static const struct {
        const char *header;
        enum encoding want;
    } cases[] = {
        {NULL, ENCODING_IDENTITY},
        {"", ENCODING_IDENTITY},
        {"gzip", ENCODING_GZIP},
        {"GZip", ENCODING_GZIP},
        {"x-gzip", ENCODING_GZIP},
        {"gzip, deflate, br, zstd", ENCODING_GZIP},            /* a browser's */
        {"deflate, br", ENCODING_IDENTITY},
        {"identity", ENCODING_IDENTITY},
        {"*", ENCODING_GZIP},
        {"*;q=0", ENCODING_IDENTITY},
        {"gzip;q=0", ENCODING_IDENTITY},
        {"gzip;q=0.000", ENCODING_IDENTITY},
        {"gzip;q=0.001", ENCODING_GZIP},
        {"gzip ; q=0.5", ENCODING_GZIP},
        {"gzip;q=0, *", ENCODING_IDENTITY},                    /* refused by name */
        {"*;q=0, gzip;q=1", ENCODING_GZIP},                     /* named beats "*" */
        {"br, *;q=0.1", ENCODING_GZIP},
        {"gzip;q=2", ENCODING_IDENTITY},                       /* malformed: not taken */
        {"gzip;q=abc", ENCODING_IDENTITY},
        {"gzip;q=0.5x", ENCODING_IDENTITY},
        {"gzip;level=9", ENCODING_GZIP},                       /* other parameters ignored */
        {"gzipx", ENCODING_IDENTITY},
        {",,gzip,,", ENCODING_GZIP},
        {"  gzip  ", ENCODING_GZIP},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (encoding_choose(cases[i].header) != cases[i].want)
            fprintf(stderr, "  case \"%s\"\n", cases[i].header ? cases[i].header : "(null)");
        CHECK(encoding_choose(cases[i].header) == cases[i].want);
    }
    CHECK_STR(encoding_name(ENCODING_GZIP), "gzip");
    CHECK(encoding_name(ENCODING_IDENTITY) == NULL);
}

/* Inflates a gzip member with zlib; returns the length, or -1. */
static long gunzip(const char *in, size_t n, char *out, size_t cap)
{
    z_stream z = {0};
    CHECK(inflateInit2(&z, 15 + 16) == Z_OK);
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)out;
    z.avail_out = (uInt)cap;
    int rc = inflate(&z, Z_FINISH);
    long len = rc == Z_STREAM_END && z.avail_in == 0 ? (long)(cap - z.avail_out) : -1;
    inflateEnd(&z);
    return len;
}

TEST(gzip)
{
    size_t n = 200000;
    char *text = xmalloc(n), *back = xmalloc(n + 1);
    for (size_t i = 0; i < n; i++)
        text[i] = "{\"dtype\":\"BF16\",\"shape\":[4096,4096]},"[i % 36];
    char *one, *three;
    size_t one_len, three_len;
    struct encoding_piece whole = {text, n};
    struct encoding_piece parts[3] = {{text, 10}, {text + 10, n - 20}, {text + n - 10, 10}};
    CHECK(encoding_gzip(&whole, 1, ENCODING_LEVEL_KEPT, &one, &one_len) == 0);
    CHECK(encoding_gzip(parts, 3, ENCODING_LEVEL_KEPT, &three, &three_len) == 0);
    CHECK(one_len < n / 20); /* repetitive JSON shrinks */
    CHECK(one_len == three_len && memcmp(one, three, one_len) == 0);
    /* RFC 1952: magic, deflate, no flags, no time */
    CHECK((unsigned char)one[0] == 0x1f && (unsigned char)one[1] == 0x8b && one[2] == 8);
    CHECK(one[3] == 0 && !one[4] && !one[5] && !one[6] && !one[7]);
    CHECK(gunzip(one, one_len, back, n + 1) == (long)n && memcmp(back, text, n) == 0);
    free(one);
    free(three);
    /* empty input: a valid member of nothing */
    CHECK(encoding_gzip(NULL, 0, ENCODING_LEVEL_ANSWER, &one, &one_len) == 0);
    CHECK(gunzip(one, one_len, back, n) == 0);
    free(one);
    free(text);
    free(back);
}

int main(void)
{
    RUN(choose);
    RUN(gzip);
    return TEST_SUMMARY();
}
