/* The OpenAPI description (/v1/openapi.json, server/handlers/openapi/)
 * against the daemon's own route table, so neither can change without the
 * other: every path it describes, its parameters filled with examples,
 * parses (server/handlers/route.c) to an endpoint whose methods
 * (route_allowed_methods) are exactly the operations described, and every
 * endpoint is described. The document is read with jansson, as a client
 * would. tests/integration/test_openapi.py validates it against the OpenAPI
 * 3.1 schema and sends every request it describes. */
#include <jansson.h>

#include "route.h"
#include "test.h"
#include "ui.h"
#include "util.h"

/* The path with each {param} replaced by a value that reads as one. */
static char *fill(const char *templ)
{
    static const struct {
        const char *name, *value;
    } values[] = {{"model", "m"},    {"file", "f.safetensors"}, {"tensor", "t.w"},
                  {"repo", "r"},     {"rev", "main"},           {"path", "p/q.json"},
                  {"asset", "app.js"}, {"digest", "sha256:0"},  {"bucket", "b"},
                  {"key", "k/l"}};
    char *out = xmalloc(strlen(templ) * 4 + 64);
    size_t n = 0;
    for (const char *p = templ; *p;) {
        if (*p != '{') {
            out[n++] = *p++;
            continue;
        }
        const char *end = strchr(p, '}');
        CHECK(end != NULL);
        size_t k = 0;
        while (k < ARRAY_LEN(values) &&
               !(strlen(values[k].name) == (size_t)(end - p - 1) &&
                 memcmp(values[k].name, p + 1, (size_t)(end - p - 1)) == 0))
            k++;
        CHECK(k < ARRAY_LEN(values));
        if (k == ARRAY_LEN(values))
            break;
        n += (size_t)sprintf(out + n, "%s", values[k].value);
        p = end + 1;
    }
    out[n] = '\0';
    return out;
}

/* No repo exists: a dataset's path reads as one, not as a model repo
 * named "datasets/...". */
static int no_repo(void *ctx, const char *id, size_t len)
{
    (void)ctx, (void)id, (void)len;
    return 0;
}

TEST(every_route_described_as_it_answers)
{
    CHECK_EQ_U64(openapi_assets_count, 1);
    json_error_t err;
    json_t *doc = json_loadb((const char *)openapi_assets[0].data, openapi_assets[0].len, 0, &err);
    CHECK(doc != NULL);
    json_t *paths = json_object_get(doc, "paths");
    CHECK(json_is_object(paths) && json_object_size(paths) > 30);
    int covered[ROUTE_KINDS] = {0};
    const char *templ;
    json_t *item;
    json_object_foreach(paths, templ, item) {
        char *path = fill(templ), msg[256];
        struct route r;
        enum route_kind kind = route_parse(path, no_repo, NULL, &r, msg, sizeof(msg));
        route_free(&r);
        if (kind == ROUTE_NOT_FOUND || kind == ROUTE_BAD_PATH || kind == ROUTE_HUB_NOT_FOUND)
            fprintf(stderr, "  %s (%s) answers no endpoint\n", templ, path);
        CHECK(kind != ROUTE_NOT_FOUND && kind != ROUTE_BAD_PATH && kind != ROUTE_HUB_NOT_FOUND);
        covered[kind] = 1;
        /* the operations, as an Allow header writes them; no other method */
        char ops[128] = "";
        static const char *const order[] = {"get", "head", "post", "delete"};
        static const char *const upper[] = {"GET", "HEAD", "POST", "DELETE"};
        for (size_t i = 0; i < ARRAY_LEN(order); i++) {
            size_t o = strlen(ops);
            if (json_object_get(item, order[i]))
                snprintf(ops + o, sizeof(ops) - o, "%s%s", o ? ", " : "", upper[i]);
        }
        const char *key;
        json_t *op;
        json_object_foreach(item, key, op) {
            int known = strcmp(key, "parameters") == 0 || strcmp(key, "summary") == 0 ||
                        strcmp(key, "description") == 0;
            for (size_t i = 0; i < ARRAY_LEN(order); i++)
                known |= strcmp(key, order[i]) == 0;
            CHECK(known);
        }
        if (strcmp(ops, route_allowed_methods(kind)) != 0)
            fprintf(stderr, "  %s: described %s, answers %s\n", templ, ops,
                    route_allowed_methods(kind));
        CHECK_STR(ops, route_allowed_methods(kind));
        free(path);
    }
    for (int k = 0; k < ROUTE_KINDS; k++) {
        if (k == ROUTE_NOT_FOUND || k == ROUTE_BAD_PATH || k == ROUTE_HUB_NOT_FOUND)
            continue;
        if (!covered[k])
            fprintf(stderr, "  route kind %d is not described\n", k);
        CHECK(covered[k]);
    }
    json_decref(doc);
}

int main(void)
{
    RUN(every_route_described_as_it_answers);
    return TEST_SUMMARY();
}
