/* strbuf: appends and growth, the failed state (sticky, answered by a NULL
 * detach, never an abort), and the JSON writer checked against jansson's
 * json_dumps byte for byte: strings of every byte value and random UTF-8,
 * integers at the edges, and reals (shortest round trip, exponents). */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#include "strbuf.h"
#include "test.h"
#include "util.h"

/* RFC 3986's unreserved bytes as they are, '/' when asked, the rest %XX in
 * upper case (as Python's urllib.parse.quote(s, safe="/") writes it). */
TEST(pct_encode)
{
    struct strbuf b = STRBUF_INIT;
    const char s[] = "a b/c~-._\xc3\xa9%+";
    strbuf_pct_encode(&b, s, sizeof(s) - 1, 1);
    CHECK_STR(b.buf, "a%20b/c~-._%C3%A9%25%2B");
    strbuf_release(&b);
    strbuf_pct_encode(&b, "x/y", 3, 0);
    CHECK_STR(b.buf, "x%2Fy");
    strbuf_release(&b);
}

TEST(append_and_detach)
{
    struct strbuf sb = STRBUF_INIT;
    strbuf_puts(&sb, "abc");
    strbuf_putc(&sb, '-');
    strbuf_append(&sb, "x\0y", 3);
    strbuf_printf(&sb, "%d:%s", 42, "z");
    CHECK_EQ_U64(sb.len, 11);
    CHECK(memcmp(sb.buf, "abc-x\0y42:z", 11) == 0);
    CHECK(sb.buf[sb.len] == '\0');
    size_t len = 99;
    char *t = strbuf_detach(&sb, &len);
    CHECK_EQ_U64(len, 11);
    CHECK(t && t[11] == 0);
    free(t);
    /* detached: the buffer is empty and usable again */
    CHECK(sb.buf == NULL && sb.len == 0 && sb.cap == 0);
    strbuf_puts(&sb, "again");
    t = strbuf_detach(&sb, NULL);
    CHECK_STR(t, "again");
    free(t);
}

TEST(empty_detach_is_an_empty_string)
{
    struct strbuf sb = STRBUF_INIT;
    size_t len = 7;
    char *t = strbuf_detach(&sb, &len);
    CHECK(t != NULL);
    CHECK_STR(t, "");
    CHECK_EQ_U64(len, 0);
    free(t);
    strbuf_release(&sb); /* releasing an empty buffer is fine */
}

TEST(grows_to_megabytes)
{
    struct strbuf sb = STRBUF_INIT;
    char chunk[1000];
    memset(chunk, 'q', sizeof(chunk));
    for (int i = 0; i < 20000; i++)
        strbuf_append(&sb, chunk, sizeof(chunk));
    CHECK_EQ_U64(sb.len, 20000000);
    CHECK(!sb.failed);
    /* a long printf goes straight into the buffer */
    char *big = xmalloc(5000);
    memset(big, 'r', 4999);
    big[4999] = '\0';
    strbuf_printf(&sb, "[%s]", big);
    CHECK_EQ_U64(sb.len, 20000000 + 5001);
    size_t len;
    char *t = strbuf_detach(&sb, &len);
    CHECK(t && len == 20005001 && t[20000000] == '[' && t[len - 1] == ']' && t[len] == '\0');
    CHECK(t[19999999] == 'q' && t[20000001] == 'r');
    free(t);
    free(big);
}

TEST(failure_is_sticky_and_detach_answers_null)
{
    struct strbuf sb = STRBUF_INIT;
    strbuf_puts(&sb, "start");
    /* A size no allocator can give: the buffer fails instead of aborting. */
    CHECK(strbuf_reserve(&sb, SIZE_MAX - 2) == -ENOMEM);
    CHECK(sb.failed);
    strbuf_puts(&sb, "more");
    strbuf_json_cstr(&sb, "x");
    strbuf_printf(&sb, "%d", 1);
    CHECK(strbuf_reserve(&sb, 1) == -ENOMEM);
    size_t len = 5;
    CHECK(strbuf_detach(&sb, &len) == NULL);
    CHECK_EQ_U64(len, 0);
    /* and it is usable again after detach */
    CHECK(!sb.failed);
    strbuf_puts(&sb, "ok");
    char *t = strbuf_detach(&sb, NULL);
    CHECK_STR(t, "ok");
    free(t);
    /* a request for more than the address space, from an empty buffer */
    CHECK(strbuf_reserve(&sb, SIZE_MAX / 2) == -ENOMEM);
    strbuf_release(&sb);
    CHECK(!sb.failed && sb.buf == NULL);
}

/* json_dumps of one value, compact, as the reference. */
static char *jansson_dump(json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(v);
    return s;
}

static int same_string_as_jansson(const char *s, size_t n)
{
    struct strbuf sb = STRBUF_INIT;
    strbuf_json_string(&sb, s, n);
    char *mine = strbuf_detach(&sb, NULL);
    char *ref = jansson_dump(json_stringn_nocheck(s, n));
    int same = mine && ref && strcmp(mine, ref) == 0;
    if (!same)
        fprintf(stderr, "  string: strbuf %s, jansson %s\n", mine ? mine : "(null)",
                ref ? ref : "(null)");
    free(mine);
    free(ref);
    return same;
}

TEST(json_strings_match_jansson)
{
    /* every ASCII byte alone and in company, NUL included */
    for (int c = 0; c < 0x80; c++) {
        char s[4] = {'a', (char)c, 'b', 0};
        CHECK(same_string_as_jansson(s + 1, 1));
        CHECK(same_string_as_jansson(s, 3));
    }
    static const char *const samples[] = {
        "", "plain", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x98\x80 smile",
        "a/b", "quote\"back\\slash", "\x7f", "tab\there\nnewline\r\x01\x1f",
        "\xe2\x80\xa8 line separator", "\xef\xbb\xbf bom",
    };
    for (size_t i = 0; i < ARRAY_LEN(samples); i++)
        CHECK(same_string_as_jansson(samples[i], strlen(samples[i])));
    /* random strings of random code points */
    unsigned seed = 12345;
    for (int round = 0; round < 2000; round++) {
        char s[200];
        size_t n = 0;
        int len = (int)(rand_r(&seed) % 30);
        for (int k = 0; k < len; k++) {
            unsigned r = (unsigned)rand_r(&seed), cp;
            switch (r % 4) {
            case 0: cp = r % 0x80; break;
            case 1: cp = 0x80 + r % 0x780; break;
            case 2: cp = 0x800 + r % 0xF800; break;
            default: cp = 0x10000 + r % 0x100000; break;
            }
            if (cp >= 0xD800 && cp <= 0xDFFF)
                cp = 'x';
            if (cp < 0x80) {
                s[n++] = (char)cp;
            } else if (cp < 0x800) {
                s[n++] = (char)(0xC0 | cp >> 6);
                s[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                s[n++] = (char)(0xE0 | cp >> 12);
                s[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                s[n++] = (char)(0xF0 | cp >> 18);
                s[n++] = (char)(0x80 | (cp >> 12 & 0x3F));
                s[n++] = (char)(0x80 | (cp >> 6 & 0x3F));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            }
        }
        CHECK(same_string_as_jansson(s, n));
    }
}

TEST(json_string_of_bad_utf8_is_still_json)
{
    /* jansson refuses these; the writer replaces each bad byte with U+FFFD */
    struct strbuf sb = STRBUF_INIT;
    strbuf_json_string(&sb, "a\xff" "b\xc3", 4);
    strbuf_json_string(&sb, "\xed\xa0\x80", 3); /* a surrogate */
    char *t = strbuf_detach(&sb, NULL);
    CHECK_STR(t, "\"a\xef\xbf\xbd" "b\xef\xbf\xbd\"\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    CHECK(utf8_valid(t, strlen(t)));
    free(t);
}

static int same_int_as_jansson(int64_t v)
{
    struct strbuf sb = STRBUF_INIT;
    strbuf_json_int(&sb, v);
    char *mine = strbuf_detach(&sb, NULL);
    char *ref = jansson_dump(json_integer((json_int_t)v));
    int same = mine && ref && strcmp(mine, ref) == 0;
    free(mine);
    free(ref);
    return same;
}

static int same_real_as_jansson(double v)
{
    struct strbuf sb = STRBUF_INIT;
    strbuf_json_real(&sb, v);
    char *mine = strbuf_detach(&sb, NULL);
    char *ref = jansson_dump(json_real(v));
    int same = mine && ref && strcmp(mine, ref) == 0;
    if (!same)
        fprintf(stderr, "  real %.17g: strbuf %s, jansson %s\n", v, mine ? mine : "(null)",
                ref ? ref : "(null)");
    free(mine);
    free(ref);
    return same;
}

TEST(json_numbers_match_jansson)
{
    static const int64_t ints[] = {0, 1, -1, 42, INT64_MAX, INT64_MIN, 1000000000000LL};
    for (size_t i = 0; i < ARRAY_LEN(ints); i++)
        CHECK(same_int_as_jansson(ints[i]));
    static const double reals[] = {0.0, -0.0, 1.0, -1.5, 0.1, 1e5, 1e-5, 1e17, 1e16, 1e-7,
                                   1.5e300, -2.5e-300, 4.9e-324, 1.7976931348623157e308,
                                   123456789.125, 3.0e10, 1e100, 1e-100, 1e21, 1e22};
    for (size_t i = 0; i < ARRAY_LEN(reals); i++)
        CHECK(same_real_as_jansson(reals[i]));
    unsigned seed = 99;
    for (int i = 0; i < 5000; i++) {
        uint64_t bits = (uint64_t)rand_r(&seed) << 33 ^ (uint64_t)rand_r(&seed) << 11 ^
                        (uint64_t)rand_r(&seed);
        double d;
        memcpy(&d, &bits, sizeof(d));
        if (isfinite(d))
            CHECK(same_real_as_jansson(d));
        CHECK(same_int_as_jansson((int64_t)bits));
    }
    struct strbuf sb = STRBUF_INIT;
    strbuf_json_real(&sb, NAN);
    strbuf_putc(&sb, ' ');
    strbuf_json_real(&sb, -INFINITY);
    char *t = strbuf_detach(&sb, NULL);
    CHECK_STR(t, "null null");
    free(t);
}

int main(void)
{
    RUN(pct_encode);
    RUN(append_and_detach);
    RUN(empty_detach_is_an_empty_string);
    RUN(grows_to_megabytes);
    RUN(failure_is_sticky_and_detach_answers_null);
    RUN(json_strings_match_jansson);
    RUN(json_string_of_bad_utf8_is_still_json);
    RUN(json_numbers_match_jansson);
    return TEST_SUMMARY();
}
