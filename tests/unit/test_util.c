/* Tests for core/util.c's decimal_u64: the one decimal reader the config
 * parser and others share (digit runs, leading zeros, the 64-bit edge, what
 * follows the run left to the caller). */
#include <errno.h>
#include <stdint.h>
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

int main(void)
{
    RUN(decimal_digit_runs);
    RUN(decimal_no_digit);
    RUN(decimal_64_bit_edge);
    return TEST_SUMMARY();
}
