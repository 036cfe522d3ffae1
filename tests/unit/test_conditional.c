/* Unit tests for server/handlers/conditional.c: dates, entity-tag lists and the
 * precondition order (RFC 9110 §5.6.7, §8.8.3, §13.1, §13.2.2). */
#include <stdlib.h>
#include <time.h>

#include "conditional.h"
#include "test.h"

TEST(date_formats)
{
    int64_t t;
    /* The three forms RFC 9110 §5.6.7 requires recipients to accept. */
    CHECK(http_date_parse("Sun, 06 Nov 1994 08:49:37 GMT", &t) == 0);
    CHECK_EQ_U64(t, 784111777);
    CHECK(http_date_parse("Sunday, 06-Nov-94 08:49:37 GMT", &t) == 0);
    CHECK_EQ_U64(t, 784111777);
    CHECK(http_date_parse("Sun Nov  6 08:49:37 1994", &t) == 0);
    CHECK_EQ_U64(t, 784111777);
    CHECK(http_date_parse("yesterday", &t) < 0);
    CHECK(http_date_parse("Sun, 06 Nov 1994 08:49:37 GMT trailing", &t) < 0);
    CHECK(http_date_parse("", &t) < 0);
}

TEST(date_round_trip)
{
    char buf[64];
    int64_t t;
    http_date_format(1700000000, buf, sizeof(buf));
    CHECK_STR(buf, "Tue, 14 Nov 2023 22:13:20 GMT");
    CHECK(http_date_parse(buf, &t) == 0);
    CHECK_EQ_U64(t, 1700000000);
}

/* The arithmetic formatter against the C library's gmtime_r + strftime,
 * across leap days, century years and both sides of the epoch. */
TEST(date_matches_libc)
{
    static const int64_t fixed[] = {0, -1, 59, 86399, 86400, 951782400 /* 2000-02-29 */,
                                    951868800, 4107542400 /* 2100-03-01 */, 4107456000,
                                    -2208988800 /* 1900-01-01 */, 253402300799 /* 9999-12-31 */};
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 20000; i++) {
        int64_t t;
        if (i < (int)(sizeof(fixed) / sizeof(fixed[0]))) {
            t = fixed[i];
        } else {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift */
            t = (int64_t)(x % 253402300800ull) - 2208988800; /* 1900 .. 9999 */
        }
        char ours[64], libc[64];
        struct tm tm;
        time_t tt = (time_t)t;
        gmtime_r(&tt, &tm);
        strftime(libc, sizeof(libc), "%a, %d %b %Y %H:%M:%S GMT", &tm);
        http_date_format(t, ours, sizeof(ours));
        if (strcmp(ours, libc) != 0) {
            CHECK_STR(ours, libc);
            break;
        }
    }
}

TEST(date_out_of_range)
{
    char buf[HTTP_DATE_LEN];
    http_date_format(INT64_MAX, buf, sizeof(buf));
    CHECK_STR(buf, "Thu, 01 Jan 1970 00:00:00 GMT");
    http_date_format(-62167219201, buf, sizeof(buf)); /* the second before year 0 */
    CHECK_STR(buf, "Thu, 01 Jan 1970 00:00:00 GMT");
    http_date_format(-62167219200, buf, sizeof(buf));
    CHECK_STR(buf, "Sat, 01 Jan 0000 00:00:00 GMT");
}

TEST(etag_lists)
{
    const char *tag = "\"abc-1\"";
    CHECK(http_etag_match("\"abc-1\"", tag, 0));
    CHECK(http_etag_match("\"x\", \"abc-1\"", tag, 0));
    CHECK(http_etag_match("*", tag, 0));
    CHECK(!http_etag_match("\"abc\"", tag, 0));
    /* Weak comparison ignores W/, strong comparison never matches a weak tag. */
    CHECK(http_etag_match("W/\"abc-1\"", tag, 1));
    CHECK(!http_etag_match("W/\"abc-1\"", tag, 0));
    CHECK(!http_etag_match("abc-1", tag, 1)); /* unquoted: malformed */
    CHECK(!http_etag_match("\"abc-1", tag, 1));
    CHECK(!http_etag_match("\"abc-1\"", "", 1));
    CHECK(!http_etag_match("", tag, 1));
}

TEST(precondition_order)
{
    /* RFC 9110 §13.2.2 with a representation "x" last modified at 1000. */
    const char *e = "\"x\"";
    const char *before = "Thu, 01 Jan 1970 00:08:20 GMT"; /* 500 */
    const char *after = "Thu, 01 Jan 1970 00:33:20 GMT";  /* 2000 */
    struct cond_headers h = {0};
    CHECK(cond_evaluate(&h, e, 1000, 1) == COND_PROCEED);
    /* If-Match decides, and If-Unmodified-Since is then ignored. */
    h = (struct cond_headers){.if_match = "\"y\"", .if_unmodified_since = after};
    CHECK(cond_evaluate(&h, e, 1000, 1) == COND_PRECONDITION_FAILED);
    h = (struct cond_headers){.if_match = "\"x\"", .if_unmodified_since = before};
    CHECK(cond_evaluate(&h, e, 1000, 1) == COND_PROCEED);
    h = (struct cond_headers){.if_unmodified_since = before};
    CHECK(cond_evaluate(&h, e, 1000, 1) == COND_PRECONDITION_FAILED);
    h = (struct cond_headers){.if_unmodified_since = "not a date"};
    CHECK(cond_evaluate(&h, e, 1000, 1) == COND_PROCEED);
    /* If-None-Match: 304 for GET/HEAD, 412 for a method that acts; it
     * overrides If-Modified-Since. */
    h = (struct cond_headers){.if_none_match = "W/\"x\"", .if_modified_since = before};
    CHECK(cond_evaluate(&h, e, 1000, 1) == COND_NOT_MODIFIED);
    CHECK(cond_evaluate(&h, e, 1000, 0) == COND_PRECONDITION_FAILED);
    h = (struct cond_headers){.if_none_match = "\"y\"", .if_modified_since = after};
    CHECK(cond_evaluate(&h, e, 1000, 1) == COND_PROCEED);
    h = (struct cond_headers){.if_modified_since = after};
    CHECK(cond_evaluate(&h, e, 1000, 1) == COND_NOT_MODIFIED);
    CHECK(cond_evaluate(&h, e, 1000, 0) == COND_PROCEED); /* only GET and HEAD */
    CHECK(cond_evaluate(&h, e, -1, 1) == COND_PROCEED);   /* no Last-Modified */
    h = (struct cond_headers){.if_modified_since = before};
    CHECK(cond_evaluate(&h, e, 1000, 1) == COND_PROCEED);
    /* "*" matches a representation without a validator too. */
    h = (struct cond_headers){.if_none_match = "*"};
    CHECK(cond_evaluate(&h, "", -1, 0) == COND_PRECONDITION_FAILED);
    h = (struct cond_headers){.if_match = "*"};
    CHECK(cond_evaluate(&h, "", -1, 0) == COND_PROCEED);
}

TEST(if_range)
{
    CHECK(cond_if_range_allows(NULL, "\"x\""));
    CHECK(cond_if_range_allows(" \"x\"", "\"x\""));
    CHECK(!cond_if_range_allows("\"y\"", "\"x\""));
    CHECK(!cond_if_range_allows("W/\"x\"", "W/\"x\""));  /* weak never matches */
    CHECK(!cond_if_range_allows("\"x\"", "W/\"x\""));
    CHECK(!cond_if_range_allows("Thu, 01 Jan 1970 00:33:20 GMT", "\"x\"")); /* dates never do */
}

int main(void)
{
    RUN(date_formats);
    RUN(date_round_trip);
    RUN(date_matches_libc);
    RUN(date_out_of_range);
    RUN(etag_lists);
    RUN(precondition_order);
    RUN(if_range);
    return TEST_SUMMARY();
}
