#include "range.h"
#include "test.h"

#define MAXR 8

/* Parses h against size; returns the result and fills r/n. */
static enum range_result rp(const char *h, uint64_t size, struct byte_range *r, size_t *n)
{
    return range_parse(h, size, MAXR, r, n);
}

/* Checks that h against size gives exactly one range [start, start+len). */
static int one(const char *h, uint64_t size, uint64_t start, uint64_t len)
{
    struct byte_range r[MAXR];
    size_t n = 99;
    enum range_result res = rp(h, size, r, &n);
    if (res != RANGE_OK || n != 1 || r[0].start != start || r[0].len != len) {
        fprintf(stderr, "  \"%s\" size %" PRIu64 ": result %d n %zu start %" PRIu64 " len %" PRIu64
                "\n", h, size, res, n, n ? r[0].start : 0, n ? r[0].len : 0);
        return 0;
    }
    return 1;
}

static enum range_result res_of(const char *h, uint64_t size)
{
    struct byte_range r[MAXR];
    size_t n = 99;
    enum range_result res = rp(h, size, r, &n);
    if (res != RANGE_OK && n != 0)
        return (enum range_result)-1; /* n must be 0 unless OK */
    return res;
}

TEST(forms)
{
    CHECK(one("bytes=0-0", 10, 0, 1));
    CHECK(one("bytes=0-9", 10, 0, 10));
    CHECK(one("bytes=2-5", 10, 2, 4));
    CHECK(one("bytes=3-", 10, 3, 7));
    CHECK(one("bytes=9-", 10, 9, 1));
    CHECK(one("bytes=-3", 10, 7, 3));
    CHECK(one("bytes=-10", 10, 0, 10));
    CHECK(one("bytes=-1", 1, 0, 1));
    CHECK(one("bytes=0-", 1, 0, 1));
}

TEST(clamping)
{
    CHECK(one("bytes=5-100", 10, 5, 5));
    CHECK(one("bytes=0-18446744073709551615", 10, 0, 10));
    CHECK(one("bytes=-11", 10, 0, 10));
    CHECK(one("bytes=-18446744073709551615", 10, 0, 10));
    CHECK(one("bytes=0-0", UINT64_MAX, 0, 1));
    CHECK(one("bytes=-5", UINT64_MAX, UINT64_MAX - 5, 5));
    CHECK(one("bytes=0-", UINT64_MAX, 0, UINT64_MAX));
}

TEST(unit_case_and_whitespace)
{
    CHECK(one("BYTES=1-2", 10, 1, 2));
    CHECK(one("Bytes=1-2", 10, 1, 2));
    CHECK(one("bytes= 1-2", 10, 1, 2));
    CHECK(one("bytes=1-2 ", 10, 1, 2));
    CHECK(one("  bytes=1-2", 10, 1, 2));
    CHECK(one("bytes=\t1-2\t", 10, 1, 2));
    CHECK(one("bytes=,1-2", 10, 1, 2));
    CHECK(one("bytes=1-2,", 10, 1, 2));
    CHECK(one("bytes= , ,1-2 , ,", 10, 1, 2));
    /* whitespace inside a range-spec or around '=' is not in the grammar */
    CHECK(res_of("bytes=1 -2", 10) == RANGE_NONE);
    CHECK(res_of("bytes=1- 2", 10) == RANGE_NONE);
    CHECK(res_of("bytes =1-2", 10) == RANGE_NONE);
    CHECK(res_of("bytes=- 2", 10) == RANGE_NONE);
}

TEST(multiple_sorted_and_merged)
{
    struct byte_range r[MAXR];
    size_t n;
    CHECK(rp("bytes=500-599, 0-99,-100", 1000, r, &n) == RANGE_OK);
    CHECK_EQ_U64(n, 3);
    CHECK_EQ_U64(r[0].start, 0);
    CHECK_EQ_U64(r[0].len, 100);
    CHECK_EQ_U64(r[1].start, 500);
    CHECK_EQ_U64(r[1].len, 100);
    CHECK_EQ_U64(r[2].start, 900);
    CHECK_EQ_U64(r[2].len, 100);
    /* overlapping and touching ranges become one */
    CHECK(rp("bytes=0-4,2-6", 100, r, &n) == RANGE_OK);
    CHECK_EQ_U64(n, 1);
    CHECK_EQ_U64(r[0].start, 0);
    CHECK_EQ_U64(r[0].len, 7);
    CHECK(rp("bytes=10-19,0-9,20-29", 100, r, &n) == RANGE_OK);
    CHECK_EQ_U64(n, 1);
    CHECK_EQ_U64(r[0].len, 30);
    /* a range inside another adds nothing */
    CHECK(rp("bytes=0-49,10-19", 100, r, &n) == RANGE_OK);
    CHECK_EQ_U64(n, 1);
    CHECK_EQ_U64(r[0].len, 50);
    /* a gap smaller than a part's own header is sent rather than framed */
    CHECK(rp("bytes=0-9,50-59", 1000, r, &n) == RANGE_OK);
    CHECK_EQ_U64(n, 1);
    CHECK_EQ_U64(r[0].len, 60);
    CHECK(rp("bytes=0-9,90-99", 1000, r, &n) == RANGE_OK);
    CHECK_EQ_U64(n, 2);
}

/* CVE-2011-3192's class: parts asking for more than the whole body (16
 * times "0-" made a 16x answer) are ignored, and the whole body is sent. */
TEST(amplification_refused)
{
    struct byte_range r[32];
    size_t n = 99;
    CHECK(range_parse("bytes=0-,0-,0-,0-,0-,0-,0-,0-,0-,0-,0-,0-,0-,0-,0-,0-", 1000, 32, r, &n) ==
          RANGE_NONE);
    CHECK_EQ_U64(n, 0);
    CHECK(rp("bytes=0-599,400-999", 1000, r, &n) == RANGE_NONE);   /* 1200 bytes of 1000 */
    CHECK(rp("bytes=-1000,0-0", 1000, r, &n) == RANGE_NONE);
    CHECK(rp("bytes=0-499,500-999", 1000, r, &n) == RANGE_OK);     /* exactly the body */
    CHECK_EQ_U64(n, 1);
    CHECK(rp("bytes=0-18446744073709551614,1-18446744073709551614", UINT64_MAX, r, &n) ==
          RANGE_NONE); /* the sum overflows */
    CHECK(one("bytes=0-", 1000, 0, 1000));                          /* one range is never refused */
}

TEST(unsatisfiable_parts)
{
    struct byte_range r[MAXR];
    size_t n;
    /* unsatisfiable parts are dropped, the rest kept */
    CHECK(rp("bytes=20-30,1-2,-0,10-", 10, r, &n) == RANGE_OK);
    CHECK_EQ_U64(n, 1);
    CHECK_EQ_U64(r[0].start, 1);
    CHECK(res_of("bytes=10-", 10) == RANGE_UNSATISFIABLE);
    CHECK(res_of("bytes=10-20", 10) == RANGE_UNSATISFIABLE);
    CHECK(res_of("bytes=10-20,30-", 10) == RANGE_UNSATISFIABLE);
    CHECK(res_of("bytes=-0", 10) == RANGE_UNSATISFIABLE);
    CHECK(res_of("bytes=-0,-0", 10) == RANGE_UNSATISFIABLE);
    CHECK(res_of("bytes=-00", 10) == RANGE_UNSATISFIABLE);
}

TEST(size_zero)
{
    CHECK(res_of("bytes=0-", 0) == RANGE_UNSATISFIABLE);
    CHECK(res_of("bytes=0-0", 0) == RANGE_UNSATISFIABLE);
    CHECK(res_of("bytes=-1", 0) == RANGE_UNSATISFIABLE);
    CHECK(res_of("bytes=-0", 0) == RANGE_UNSATISFIABLE);
    CHECK(res_of("bytes=0-5,-3", 0) == RANGE_UNSATISFIABLE);
    CHECK(res_of("bytes=", 0) == RANGE_NONE);
    CHECK(res_of("bytes=x", 0) == RANGE_NONE);
}

TEST(overflowing_numbers)
{
    CHECK(res_of("bytes=18446744073709551616-", 10) == RANGE_NONE);
    CHECK(res_of("bytes=0-18446744073709551616", 10) == RANGE_NONE);
    CHECK(res_of("bytes=-18446744073709551616", 10) == RANGE_NONE);
    CHECK(res_of("bytes=99999999999999999999999999-", 10) == RANGE_NONE);
    CHECK(one("bytes=00000000000000000000000001-2", 10, 1, 2)); /* long but not large */
}

TEST(first_greater_than_last_invalidates_all)
{
    CHECK(res_of("bytes=5-4", 10) == RANGE_NONE);
    CHECK(res_of("bytes=0-1,5-4", 10) == RANGE_NONE);
    CHECK(res_of("bytes=50-40", 10) == RANGE_NONE);
    CHECK(one("bytes=5-5", 10, 5, 1));
}

TEST(garbage_ignored)
{
    const char *bad[] = {
        "",           "bytes",      "bytes=",       "bytes=,",     "bytes= , ",
        "bytes=-",    "bytes=--1",  "bytes=1",      "bytes=a-b",   "bytes=1-2-3",
        "bytes=+1-2", "bytes=1-+2", "bytes=0x1-2",  "bytes=1-2;",  "bytes=1-2 3-4",
        "items=0-1",  "byte=0-1",   "bytesx=0-1",   "=0-1",        "bytes==0-1",
        "bytes=1.5-2", "bytes=1-2,x", "bytes=-1-2", "bytes 0-1",   "bytes=\xc3\xa9-1",
        "bytes=1-2\n", "none",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        enum range_result r = res_of(bad[i], 10);
        if (r != RANGE_NONE)
            fprintf(stderr, "  \"%s\" -> %d\n", bad[i], r);
        CHECK(r == RANGE_NONE);
    }
    CHECK(res_of(NULL, 10) == RANGE_NONE);
}

TEST(too_many_parts)
{
    struct byte_range r[3];
    size_t n;
    CHECK(range_parse("bytes=0-0,100-100,200-200", 1000, 3, r, &n) == RANGE_OK);
    CHECK_EQ_U64(n, 3);
    CHECK(range_parse("bytes=0-0,100-100,200-200,300-300", 1000, 3, r, &n) == RANGE_NONE);
    CHECK_EQ_U64(n, 0);
    /* unsatisfiable parts count too: the bound is on work, not on output */
    CHECK(range_parse("bytes=0-0,5000-,6000-,7000-", 1000, 3, r, &n) == RANGE_NONE);
    /* empty list elements do not count */
    CHECK(range_parse("bytes=0-0,,,,100-100,,,200-200", 1000, 3, r, &n) == RANGE_OK);
    CHECK_EQ_U64(n, 3);
    CHECK(range_parse("bytes=0-0", 10, 0, r, &n) == RANGE_NONE);
}

int main(void)
{
    RUN(forms);
    RUN(clamping);
    RUN(unit_case_and_whitespace);
    RUN(multiple_sorted_and_merged);
    RUN(amplification_refused);
    RUN(unsatisfiable_parts);
    RUN(size_zero);
    RUN(overflowing_numbers);
    RUN(first_greater_than_last_invalidates_all);
    RUN(garbage_ignored);
    RUN(too_many_parts);
    return TEST_SUMMARY();
}
