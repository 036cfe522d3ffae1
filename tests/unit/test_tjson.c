/* Tests for client/tjson.c: the client's JSON reader (exact 64-bit integers,
 * escapes and surrogates, depth limit, errors). */
#include <stdint.h>
#include <string.h>

#include "test.h"
#include "tjson.h"

static struct tjson *P(const char *s)
{
    char err[128];
    return tjson_parse(s, strlen(s), err, sizeof(err));
}

static void expect_bad(const char *s)
{
    char err[128] = "";
    struct tjson *v = tjson_parse(s, strlen(s), err, sizeof(err));
    if (v || !strstr(err, "bad JSON")) {
        fprintf(stderr, "  accepted or no message: %s (%s)\n", s, err);
        test_failed_flag = 1;
    }
    tjson_free(v);
}

TEST(numbers_exact)
{
    struct tjson *v = P("[18446744073709551615, 0, -1, 1.5, 1e3, 18446744073709551616, 9007199254740993]");
    uint64_t u;
    CHECK(v && v->type == TJ_ARRAY && v->len == 7);
    CHECK(tjson_uint(&v->items[0], &u) == 0 && u == UINT64_MAX);
    CHECK(tjson_uint(&v->items[1], &u) == 0 && u == 0);
    CHECK(tjson_uint(&v->items[2], &u) < 0 && v->items[2].num == -1);
    CHECK(tjson_uint(&v->items[3], &u) < 0 && v->items[3].num == 1.5);
    CHECK(tjson_uint(&v->items[4], &u) < 0);
    CHECK(tjson_uint(&v->items[5], &u) < 0); /* overflows 64 bits */
    CHECK(tjson_uint(&v->items[6], &u) == 0 && u == 9007199254740993ULL);
    tjson_free(v);
}

TEST(objects_and_strings)
{
    struct tjson *v = P("{\"a\":\"x\\\"\\\\\\/\\n\\u00e9\\ud83d\\ude00\",\"b\":[true,false,null],"
                        "\"c\":{}}");
    CHECK(v != NULL);
    CHECK_STR(tjson_str(tjson_get(v, "a")), "x\"\\/\n\xc3\xa9\xf0\x9f\x98\x80");
    const struct tjson *b = tjson_get(v, "b");
    CHECK(b && b->len == 3 && b->items[0].type == TJ_BOOL && b->items[0].boolean);
    CHECK(b->items[2].type == TJ_NULL);
    CHECK(tjson_get(v, "c")->type == TJ_OBJECT);
    CHECK(tjson_get(v, "zz") == NULL && tjson_get(b, "a") == NULL && tjson_str(b) == NULL);
    tjson_free(v);
}

TEST(errors)
{
    expect_bad("");
    expect_bad("{");
    expect_bad("{\"a\" 1}");
    expect_bad("[1,]");
    expect_bad("[1 2]");
    expect_bad("\"abc");
    expect_bad("\"a\\qb\"");
    expect_bad("\"\\ud800\"");
    expect_bad("\"\\udc00x\"");
    expect_bad("\"\\u12\"");
    expect_bad("\"tab\there\"");
    expect_bad("01");
    expect_bad("-");
    expect_bad("1.");
    expect_bad("1e");
    expect_bad("tru");
    expect_bad("{} {}");
    char deep[200];
    memset(deep, '[', sizeof(deep) - 1);
    deep[sizeof(deep) - 1] = '\0';
    expect_bad(deep);
    char ok[2 * TJSON_MAX_DEPTH + 1];
    memset(ok, '[', TJSON_MAX_DEPTH);
    memset(ok + TJSON_MAX_DEPTH, ']', TJSON_MAX_DEPTH);
    ok[2 * TJSON_MAX_DEPTH] = '\0';
    struct tjson *v = P(ok);
    CHECK(v != NULL);
    tjson_free(v);
}

int main(void)
{
    RUN(numbers_exact);
    RUN(objects_and_strings);
    RUN(errors);
    return TEST_SUMMARY();
}
