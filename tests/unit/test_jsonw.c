/* jsonw: commas, nesting, escapes, and non-UTF-8 strings written with
 * U+FFFD so the output always parses. */
#include <stdlib.h>

#include "json_scan.h"
#include "jsonw.h"
#include "test.h"

static char *render(void (*f)(struct jsonw *))
{
    struct jsonw w = JSONW_INIT;
    f(&w);
    return jsonw_take(&w, NULL);
}

static int valid(const char *s)
{
    struct json_scan sc;
    json_scan_init(&sc, s, strlen(s));
    return json_scan_document(&sc) == 0;
}

static void doc(struct jsonw *w)
{
    jsonw_obj(w);
    jsonw_kstr(w, "a", "x\"y\\z\n\x01");
    jsonw_ku64(w, "n", 9223372036854775807ull);
    jsonw_key(w, "l");
    jsonw_arr(w);
    jsonw_bool(w, 1);
    jsonw_null(w);
    jsonw_obj(w);
    jsonw_obj_end(w);
    jsonw_arr(w);
    jsonw_arr_end(w);
    jsonw_str(w, "ü");
    jsonw_arr_end(w);
    jsonw_kbool(w, "f", 0);
    jsonw_obj_end(w);
}

static void not_utf8(struct jsonw *w)
{
    jsonw_arr(w);
    jsonw_strn(w, "a\xff\xc3", 3);
    jsonw_strn(w, "", 0);
    jsonw_arr_end(w);
}

TEST(documents)
{
    char *s = render(doc);
    CHECK_STR(s, "{\"a\":\"x\\\"y\\\\z\\n\\u0001\",\"n\":9223372036854775807,"
                 "\"l\":[true,null,{},[],\"ü\"],\"f\":false}");
    CHECK(valid(s));
    free(s);
}

TEST(invalid_utf8_is_replaced)
{
    char *s = render(not_utf8);
    CHECK_STR(s, "[\"a\xef\xbf\xbd\xef\xbf\xbd\",\"\"]");
    CHECK(valid(s));
    free(s);
}

TEST(grows)
{
    struct jsonw w = JSONW_INIT;
    jsonw_arr(&w);
    for (int i = 0; i < 10000; i++)
        jsonw_u64(&w, (uint64_t)i);
    jsonw_arr_end(&w);
    size_t len;
    char *s = jsonw_take(&w, &len);
    CHECK(len == strlen(s) && valid(s) && strncmp(s, "[0,1,2,", 7) == 0);
    free(s);
    jsonw_free(&w); /* after take: nothing left, and safe */
}

int main(void)
{
    RUN(documents);
    RUN(invalid_utf8_is_replaced);
    RUN(grows);
    return TEST_SUMMARY();
}
