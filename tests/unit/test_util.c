/* util: the small shared helpers (decimal parsing, hex digits, shapes). */
#include <errno.h>
#include <stdint.h>

#include "test.h"
#include "util.h"

TEST(parse_u64)
{
    uint64_t v = 7;
    size_t used = 9;
    CHECK(str_parse_u64("12345,", 6, &used, &v) == 0);
    CHECK(used == 5 && v == 12345);
    CHECK(str_parse_u64("12345", 3, &used, &v) == 0); /* n bounds the digits */
    CHECK(used == 3 && v == 123);
    CHECK(str_parse_u64("x1", 2, &used, &v) == 0);
    CHECK(used == 0 && v == 0);
    CHECK(str_parse_u64("", 0, &used, &v) == 0 && used == 0);
    CHECK(str_parse_u64("007", SIZE_MAX, &used, &v) == 0); /* NUL ends a C string */
    CHECK(used == 3 && v == 7);
    CHECK(str_parse_u64("18446744073709551615", 20, &used, &v) == 0);
    CHECK(used == 20 && v == UINT64_MAX);
    used = 9, v = 7;
    CHECK(str_parse_u64("18446744073709551616", 20, &used, &v) == -ERANGE);
    CHECK(used == 9 && v == 7); /* untouched */
    CHECK(str_parse_u64("99999999999999999999999", 23, &used, &v) == -ERANGE);
    CHECK(str_parse_u64("-1", 2, &used, &v) == 0 && used == 0);
}

TEST(hex_digits)
{
    for (unsigned i = 0; i < 16; i++) {
        CHECK(hex_digit_value((unsigned char)hex_lower[i]) == (int)i);
        CHECK(hex_digit_value((unsigned char)hex_upper[i]) == (int)i);
    }
    CHECK(hex_lower[10] == 'a' && hex_upper[15] == 'F');
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

int main(void)
{
    RUN(parse_u64);
    RUN(hex_digits);
    RUN(shape_format);
    RUN(utf8_encode);
    return TEST_SUMMARY();
}
