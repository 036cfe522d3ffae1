/* hub_req: paths-info bodies as huggingface_hub (a form) and huggingface.js
 * (JSON) send them, and what is refused. */
#include <stdlib.h>

#include "hub_req.h"
#include "test.h"
#include "util.h"

static enum st_status parse(const char *text, int json, struct hub_paths *p)
{
    struct st_error err;
    enum st_status st = ST_CODE(hub_paths_parse(text, strlen(text), json, p, &err), &err);
    if (st != ST_OK)
        CHECK(err.message[0] != '\0');
    return st;
}

TEST(forms)
{
    struct hub_paths p;
    CHECK(parse("paths=unet&paths=model_index.json&expand=False", 0, &p) == ST_OK);
    CHECK(p.n == 2 && !p.expand);
    CHECK_STR(p.paths[0], "unet");
    CHECK_STR(p.paths[1], "model_index.json");
    hub_paths_free(&p);
    CHECK(parse("paths=a&expand=True", 0, &p) == ST_OK && p.expand); /* huggingface_hub's */
    hub_paths_free(&p);
    CHECK(parse("expand=1&paths=a", 0, &p) == ST_OK && p.expand);
    hub_paths_free(&p);
    CHECK(parse("paths=a&expand=yes&expand", 0, &p) == ST_OK && !p.expand);
    hub_paths_free(&p);
    CHECK(parse("paths%5B%5D=a+b%2Fc&other=1&paths", 0, &p) == ST_OK);
    CHECK(p.n == 2);
    CHECK_STR(p.paths[0], "a b/c");
    CHECK_STR(p.paths[1], "");
    hub_paths_free(&p);
    CHECK(parse("", 0, &p) == ST_OK && p.n == 0);
    CHECK(parse("paths=%zz", 0, &p) == ST_ERR_INVALID_ARGUMENT && p.n == 0);
    CHECK(parse("paths=%4", 0, &p) == ST_ERR_INVALID_ARGUMENT);
    CHECK(parse("paths=a%00b", 0, &p) == ST_ERR_INVALID_ARGUMENT);
    CHECK(parse("paths=%ff", 0, &p) == ST_ERR_INVALID_ARGUMENT);
}

TEST(json)
{
    struct hub_paths p;
    CHECK(parse("{\"paths\": [\"a\", \"b/\\u00fc\"], \"expand\": true, \"x\": {\"y\": [1]}}", 1,
                &p) == ST_OK);
    CHECK(p.n == 2 && p.expand);
    CHECK_STR(p.paths[1], "b/ü");
    hub_paths_free(&p);
    CHECK(parse("{\"paths\": \"one\", \"expand\": false}", 1, &p) == ST_OK && !p.expand);
    hub_paths_free(&p);
    CHECK(parse("{\"expand\": \"true\", \"paths\": \"one\"}", 1, &p) == ST_OK && !p.expand);
    hub_paths_free(&p);
    CHECK(parse("{\"paths\": \"one\"}", 1, &p) == ST_OK && p.n == 1);
    hub_paths_free(&p);
    CHECK(parse("{}", 1, &p) == ST_OK && p.n == 0);
    const char *bad[] = {"", "[]", "{\"paths\": [1]}", "{\"paths\": 1}", "{\"paths\": [\"a\",]}",
                         "{\"paths\": [], \"paths\": []}", "{\"paths\": [\"a\\u0000\"]}",
                         "{\"paths\": []} x", "{\"a\": 1, \"a\": 2}", "{\"paths\": [\"\xff\"]}"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        if (parse(bad[i], 1, &p) != ST_ERR_INVALID_ARGUMENT) {
            fprintf(stderr, "  accepted: %s\n", bad[i]);
            CHECK(!bad[i]);
        }
        CHECK(p.n == 0 && p.paths == NULL);
    }
}

TEST(bounds)
{
    struct hub_paths p;
    size_t n = HUB_PATHS_MAX + 1;
    char *text = xmalloc(n * 8 + 16), *q = text;
    q += sprintf(q, "{\"paths\":[");
    for (size_t i = 0; i < n; i++)
        q += sprintf(q, "%s\"x\"", i ? "," : "");
    sprintf(q, "]}");
    CHECK(parse(text, 1, &p) == ST_ERR_LIMIT);
    free(text);
    char *longp = xmalloc(HUB_PATH_MAX + 16);
    memcpy(longp, "paths=", 6);
    memset(longp + 6, 'a', HUB_PATH_MAX + 1);
    longp[6 + HUB_PATH_MAX + 1] = '\0';
    CHECK(parse(longp, 0, &p) == ST_ERR_LIMIT);
    longp[6 + HUB_PATH_MAX] = '\0';
    CHECK(parse(longp, 0, &p) == ST_OK && p.n == 1);
    hub_paths_free(&p);
    free(longp);
}

int main(void)
{
    RUN(forms);
    RUN(json);
    RUN(bounds);
    return TEST_SUMMARY();
}
