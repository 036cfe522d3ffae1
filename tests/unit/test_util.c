/* util: the small shared helpers (decimal parsing, hex digits, shapes,
 * UTF-8 encoding). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "util.h"

static int dec(const char *s, uint64_t *v, size_t *used)
{
    return decimal_u64(s, strlen(s), v, used);
}

TEST(decimal_digit_runs)
{
    uint64_t v = 7;
    size_t used = 9;
    CHECK(dec("0", &v, &used) == 0 && v == 0 && used == 1);
    CHECK(dec("42", &v, &used) == 0 && v == 42 && used == 2);
    CHECK(dec("0012x", &v, &used) == 0 && v == 12 && used == 4);
    CHECK(dec("65535:", &v, &used) == 0 && v == 65535 && used == 5);
    /* Only n bytes are read: the run stops at the end of the buffer. */
    CHECK(decimal_u64("12345", 3, &v, &used) == 0 && v == 123 && used == 3);
}

TEST(decimal_no_digit)
{
    uint64_t v = 7;
    size_t used = 9;
    CHECK(dec("", &v, &used) == -EINVAL);
    CHECK(dec("-1", &v, &used) == -EINVAL);
    CHECK(dec("+1", &v, &used) == -EINVAL);
    CHECK(dec(" 1", &v, &used) == -EINVAL);
    CHECK(dec("x1", &v, &used) == -EINVAL);
    CHECK(decimal_u64("1", 0, &v, &used) == -EINVAL);
    CHECK(v == 7 && used == 9); /* nothing stored on failure */
}

TEST(decimal_64_bit_edge)
{
    uint64_t v = 7;
    size_t used = 9;
    CHECK(dec("18446744073709551615", &v, &used) == 0 && v == UINT64_MAX && used == 20);
    CHECK(dec("000000000000000000000018446744073709551615", &v, &used) == 0 &&
          v == UINT64_MAX && used == 42);
    v = 7;
    CHECK(dec("18446744073709551616", &v, &used) == -ERANGE);
    CHECK(dec("99999999999999999999", &v, &used) == -ERANGE);
    CHECK(dec("184467440737095516150", &v, &used) == -ERANGE);
    CHECK(v == 7);
}

TEST(hex_digits)
{
    for (unsigned i = 0; i < 16; i++) {
        CHECK(hex_digit_value((unsigned char)hex_lower[i]) == (int)i);
        CHECK(hex_digit_value((unsigned char)hex_upper[i]) == (int)i);
    }
    CHECK(hex_lower[10] == 'a' && hex_upper[15] == 'F');
}

TEST(pct_decode)
{
    size_t n;
    char *d = pct_decode("a%41%62+", 8, 0, &n);
    CHECK_STR(d, "aAb+");
    CHECK_EQ_U64(n, 4);
    free(d);
    CHECK(pct_decode("%4", 2, 0, &n) == NULL);
    CHECK(pct_decode("%00", 3, 0, &n) == NULL);
    CHECK(pct_decode("%g0", 3, 0, &n) == NULL);
    /* A form value: '+' is a space, an escaped plus stays one. */
    d = pct_decode("a+b%2B%20c", 10, PCT_FORM, &n);
    CHECK_STR(d, "a b+ c");
    CHECK_EQ_U64(n, 6);
    free(d);
    CHECK(pct_decode("+%", 2, PCT_FORM, &n) == NULL);
    /* A decoded NUL kept when asked (its caller checks it with a message). */
    d = pct_decode("a%00b", 5, PCT_NUL, &n);
    CHECK(d && n == 3 && d[1] == '\0' && d[2] == 'b');
    free(d);
}

TEST(shape_format)
{
    char buf[64];
    const uint64_t shape[] = {2, 3, 18446744073709551615ULL};
    CHECK(shape_format(buf, sizeof(buf), shape, 2, ", ") == 4);
    CHECK_STR(buf, "2, 3");
    CHECK(shape_format(buf, sizeof(buf), shape, 3, ",") == 24);
    CHECK_STR(buf, "2,3,18446744073709551615");
    CHECK(shape_format(buf, sizeof(buf), shape, 0, ",") == 0);
    CHECK_STR(buf, "");
    /* cut short, still terminated */
    CHECK(shape_format(buf, 6, shape, 3, ", ") == 5);
    CHECK_STR(buf, "2, 3,");
    CHECK(shape_format(buf, 1, shape, 3, ", ") == 0);
    CHECK_STR(buf, "");
}

TEST(utf8_encode)
{
    /* each boundary of each length, checked against the validator and the bytes */
    static const struct {
        uint32_t cp;
        const char *utf8;
    } cases[] = {{0, "\0"},          {0x41, "A"},        {0x7F, "\x7F"},
                 {0x80, "\xC2\x80"},  {0x7FF, "\xDF\xBF"}, {0x800, "\xE0\xA0\x80"},
                 {0xFFFD, "\xEF\xBF\xBD"}, {0xFFFF, "\xEF\xBF\xBF"},
                 {0x10000, "\xF0\x90\x80\x80"}, {0x10FFFF, "\xF4\x8F\xBF\xBF"}};
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        unsigned char u[4];
        size_t n = utf8_encode(cases[i].cp, u);
        size_t want = cases[i].cp ? strlen(cases[i].utf8) : 1;
        CHECK(n == want && n == utf8_len(cases[i].cp));
        CHECK(memcmp(u, cases[i].utf8, want) == 0);
        CHECK(utf8_valid((const char *)u, n));
    }
}

TEST(utf8_decode)
{
    /* every scalar value back from utf8_encode, with its length */
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        unsigned char u[4];
        uint32_t got = UINT32_MAX;
        size_t n = utf8_encode(cp, u);
        if (utf8_decode((const char *)u, n, &got) != n || got != cp) {
            CHECK(!"round trip");
            break;
        }
    }
    /* what is not a sequence: overlongs, surrogates, past U+10FFFF, a lone
     * continuation byte, an invalid lead, cut short, a bad continuation */
    static const char *const bad[] = {"\xC0\x80", "\xC1\xBF", "\xE0\x9F\xBF",
                                      "\xF0\x8F\xBF\xBF", "\xED\xA0\x80", "\xED\xBF\xBF",
                                      "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\x80",
                                      "\xF8\x88\x80\x80\x80", "\xE2\x82", "\xE2\x28\xA1"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        uint32_t cp = 7;
        CHECK(utf8_decode(bad[i], strlen(bad[i]), &cp) == 0 && cp == 7);
        CHECK(!utf8_valid(bad[i], strlen(bad[i])));
    }
    /* the length asked for bounds it; the code point is optional */
    CHECK(utf8_decode("\xE2\x82\xAC", 2, NULL) == 0);
    CHECK(utf8_decode("\xE2\x82\xACx", 4, NULL) == 3);
    CHECK(utf8_decode("\0", 1, NULL) == 1);
}

/* A deadline ms from now, normalised (tv_nsec under a second), whatever
 * the current nanoseconds add to. */
TEST(time_real_after)
{
    for (unsigned ms = 0; ms <= 2500; ms += 250) {
        struct timespec before, dl, after;
        clock_gettime(CLOCK_REALTIME, &before);
        dl = time_real_after(ms);
        clock_gettime(CLOCK_REALTIME, &after);
        int64_t b = (int64_t)before.tv_sec * 1000000000 + before.tv_nsec;
        int64_t a = (int64_t)after.tv_sec * 1000000000 + after.tv_nsec;
        int64_t d = (int64_t)dl.tv_sec * 1000000000 + dl.tv_nsec;
        CHECK(dl.tv_nsec >= 0 && dl.tv_nsec < 1000000000);
        CHECK(d >= b + (int64_t)ms * 1000000 && d <= a + (int64_t)ms * 1000000);
    }
}

int main(void)
{
    RUN(decimal_digit_runs);
    RUN(decimal_no_digit);
    RUN(decimal_64_bit_edge);
    RUN(hex_digits);
    RUN(pct_decode);
    RUN(shape_format);
    RUN(utf8_encode);
    RUN(utf8_decode);
    RUN(time_real_after);
    return TEST_SUMMARY();
}
