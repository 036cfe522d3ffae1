#include <stdlib.h>
#include <string.h>

#include "route.h"
#include "test.h"

static enum route_kind parse(const char *path, struct route *r)
{
    char err[256];
    return route_parse(path, NULL, NULL, r, err, sizeof(err));
}

TEST(blob_routes)
{
    struct route r;
    CHECK(parse("/v1/blobs/sha256:ab", &r) == ROUTE_BLOB);
    CHECK_STR(r.name, "sha256:ab");
    route_free(&r);
    CHECK(parse("/v1/blobs/sha256%3Aab", &r) == ROUTE_BLOB);
    CHECK_STR(r.name, "sha256:ab");
    route_free(&r);
    CHECK(parse("/v1/blobs/%00", &r) == ROUTE_BAD_PATH);
    route_free(&r);
    CHECK(parse("/v1/blobs/a/b", &r) != ROUTE_BLOB);
    route_free(&r);
    CHECK(parse("/v1/blobs", &r) != ROUTE_BLOB);
    route_free(&r);
}

static int only_s3_exists(void *ctx, const char *id, size_t len)
{
    (void)ctx;
    return len == 2 && memcmp(id, "s3", 2) == 0;
}

TEST(s3_routes)
{
    struct route r;
    char err[256];
    CHECK(parse("/s3", &r) == ROUTE_S3 && r.model == NULL && r.name == NULL);
    route_free(&r);
    CHECK(parse("/s3/", &r) == ROUTE_S3 && r.model == NULL);
    route_free(&r);
    CHECK(parse("/s3/org--name", &r) == ROUTE_S3 && r.name == NULL);
    CHECK_STR(r.model, "org--name");
    route_free(&r);
    /* Keys keep every component: they are looked up, never opened. */
    CHECK(parse("/s3/b/a/../%2E/x%20y", &r) == ROUTE_S3);
    CHECK_STR(r.name, "a/.././x y");
    route_free(&r);
    CHECK(parse("/s3/b/%zz", &r) == ROUTE_BAD_PATH);
    route_free(&r);
    CHECK(parse("/s3/../k", &r) == ROUTE_BAD_PATH);
    route_free(&r);
    CHECK(parse("/s3/a%2Fb/k", &r) == ROUTE_BAD_PATH);
    route_free(&r);
    /* A repo named "s3" keeps its Hub file URLs; others are the S3 API. */
    CHECK(route_parse("/s3/resolve/main/a.txt", only_s3_exists, NULL, &r, err,
                      sizeof(err)) == ROUTE_HUB_FILE);
    route_free(&r);
    CHECK(route_parse("/s3/resolve/main/a.txt", NULL, NULL, &r, err, sizeof(err)) ==
          ROUTE_S3);
    route_free(&r);
    CHECK_STR(route_origin_form("http://h:1/s3/b?x"), "/s3/b?x");
    CHECK_STR(route_origin_form("https://h"), "/");
    CHECK_STR(route_origin_form("/v1/models"), "/v1/models");
}

TEST(fixed_endpoints)
{
    struct route r;
    CHECK(parse("/healthz", &r) == ROUTE_HEALTHZ);
    CHECK(parse("/readyz", &r) == ROUTE_READYZ);
    CHECK(parse("/metrics", &r) == ROUTE_METRICS_TEXT);
    CHECK(parse("/v1/metrics", &r) == ROUTE_METRICS);
    CHECK(parse("/v1/openapi.json", &r) == ROUTE_OPENAPI);
    CHECK(parse("/v1/openapi.json/x", &r) != ROUTE_OPENAPI);
    CHECK(parse("/v1/models", &r) == ROUTE_MODELS);
    CHECK(parse("/v1/models/", &r) == ROUTE_MODELS);
    CHECK(parse("/", &r) == ROUTE_ROOT);
    CHECK(parse("//", &r) == ROUTE_NOT_FOUND);
    CHECK(parse("/v2/models", &r) == ROUTE_NOT_FOUND);
    CHECK(parse("/v1/other", &r) == ROUTE_NOT_FOUND);
    CHECK(parse("relative", &r) == ROUTE_BAD_PATH);
}

TEST(console)
{
    struct route r;
    CHECK(parse("/ui/", &r) == ROUTE_UI);
    CHECK(strcmp(r.name, "") == 0 && !r.raw);
    route_free(&r);
    CHECK(parse("/ui", &r) == ROUTE_UI);
    CHECK(strcmp(r.name, "") == 0 && r.raw); /* redirected to /ui/ */
    route_free(&r);
    CHECK(parse("/ui/app.js", &r) == ROUTE_UI);
    CHECK(strcmp(r.name, "app.js") == 0 && !r.raw);
    route_free(&r);
    /* An asset name is looked up as sent: an escape names no asset. */
    CHECK(parse("/ui/app%2Ejs", &r) == ROUTE_UI);
    CHECK(strcmp(r.name, "app%2Ejs") == 0);
    route_free(&r);
    /* Deeper paths are a Hub repo named "ui", as before. */
    CHECK(parse("/ui/resolve/main/config.json", &r) == ROUTE_HUB_FILE);
    CHECK(strcmp(r.model, "ui") == 0);
    route_free(&r);
}

TEST(model_endpoints)
{
    struct route r;
    CHECK(parse("/v1/models/llama", &r) == ROUTE_MODEL);
    CHECK_STR(r.model, "llama");
    route_free(&r);
    CHECK(parse("/v1/models/org/name/header", &r) == ROUTE_MODEL_HEADER);
    CHECK_STR(r.model, "org/name");
    route_free(&r);
    CHECK(parse("/v1/models/org%2Fname/gpu", &r) == ROUTE_GPU);
    CHECK_STR(r.model, "org/name");
    route_free(&r);
    CHECK(parse("/v1/models/m/files/config.json", &r) == ROUTE_FILE);
    CHECK_STR(r.name, "config.json");
    route_free(&r);
    CHECK(parse("/v1/models/m/files/a.safetensors/header", &r) == ROUTE_FILE_HEADER);
    CHECK_STR(r.name, "a.safetensors");
    route_free(&r);
    CHECK(parse("/v1/models/m/files/a/b", &r) == ROUTE_NOT_FOUND);
    route_free(&r);
}

TEST(tensor_names_keep_slashes_and_decode_once)
{
    struct route r;
    CHECK(parse("/v1/models/m/tensors/layers.0/attn%20q", &r) == ROUTE_TENSOR);
    CHECK_STR(r.name, "layers.0/attn q");
    route_free(&r);
    CHECK(parse("/v1/models/m/tensors/a%252F", &r) == ROUTE_TENSOR);
    CHECK_STR(r.name, "a%2F"); /* decoded exactly once */
    route_free(&r);
    CHECK(parse("/v1/models/m/tensors/gr%C3%B6%C3%9Fe", &r) == ROUTE_TENSOR);
    CHECK_STR(r.name, "gr\xc3\xb6\xc3\x9f" "e");
    route_free(&r);
    CHECK(parse("/v1/models/m/tensors/", &r) == ROUTE_NOT_FOUND);
    route_free(&r);
}

TEST(traversal_refused)
{
    struct route r;
    const char *bad[] = {
        "/v1/models/../etc/header",     "/v1/models/%2e%2e/header",
        "/v1/models/a%2F..%2Fb/header", "/v1/models/m/files/..",
        "/v1/models/m/files/%2e%2e",    "/v1/models/m/files/..%2fetc%2fpasswd",
        "/v1/models/m/files/%2Fetc%2Fpasswd", "/v1/models/./m",
        "/v1/models/a//b/header",       "/v1/models/m%00/header",
        "/v1/models/m/files/a%zz",      "/v1/models/m%/header",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        enum route_kind k = parse(bad[i], &r);
        if (k != ROUTE_BAD_PATH)
            fprintf(stderr, "  %s -> %d\n", bad[i], k);
        CHECK(k == ROUTE_BAD_PATH);
        route_free(&r);
    }
}

TEST(allowed_methods)
{
    CHECK_STR(route_allowed_methods(ROUTE_TENSOR), "GET, HEAD");
    CHECK_CONTAINS(route_allowed_methods(ROUTE_GPU), "POST");
    CHECK_STR(route_allowed_methods(ROUTE_FETCH), "GET, HEAD, POST");
}

static int exists_org_name(void *ctx, const char *id, size_t len)
{
    (void)ctx;
    return (len == 8 && memcmp(id, "org/tree", 8) == 0) || (len == 3 && memcmp(id, "one", 3) == 0);
}

static enum route_kind parse_hub(const char *path, struct route *r)
{
    char err[256];
    return route_parse(path, exists_org_name, NULL, r, err, sizeof(err));
}

TEST(hub_routes)
{
    struct route r;
    CHECK(parse("/api/models", &r) == ROUTE_HUB_MODELS);
    CHECK(parse("/api/models/", &r) == ROUTE_HUB_MODELS);
    CHECK(parse("/api/other/x", &r) == ROUTE_HUB_NOT_FOUND);
    CHECK(parse("/org/name/resolve/main/unet/config.json", &r) == ROUTE_HUB_FILE);
    CHECK_STR(r.model, "org/name");
    CHECK_STR(r.rev, "main");
    CHECK_STR(r.name, "unet/config.json");
    CHECK(!r.raw);
    route_free(&r);
    CHECK(parse("/one/raw/refs%2Fpr%2F1/a%20b.txt", &r) == ROUTE_HUB_FILE);
    CHECK_STR(r.model, "one");
    CHECK_STR(r.rev, "refs/pr/1");
    CHECK_STR(r.name, "a b.txt");
    CHECK(r.raw);
    route_free(&r);
    CHECK(parse("/api/models/org/name", &r) == ROUTE_HUB_INFO && r.rev == NULL);
    CHECK_STR(r.model, "org/name");
    route_free(&r);
    CHECK(parse("/api/models/one/revision/abc", &r) == ROUTE_HUB_INFO);
    CHECK_STR(r.model, "one");
    CHECK_STR(r.rev, "abc");
    route_free(&r);
    CHECK(parse("/api/models/org/name/tree/main/unet%2Fsub", &r) == ROUTE_HUB_TREE);
    CHECK_STR(r.name, "unet/sub");
    route_free(&r);
    CHECK(parse("/api/models/org/name/tree/main", &r) == ROUTE_HUB_TREE && r.name == NULL);
    route_free(&r);
    CHECK(parse("/api/models/org/name/paths-info/main", &r) == ROUTE_HUB_PATHS_INFO);
    route_free(&r);
    CHECK(parse("/api/models/org/name/other", &r) == ROUTE_HUB_NOT_FOUND);
    route_free(&r);
    /* Both readings parse: the one naming an existing repo wins. */
    CHECK(parse_hub("/api/models/org/tree/tree/main", &r) == ROUTE_HUB_TREE);
    CHECK_STR(r.model, "org/tree");
    CHECK_STR(r.rev, "main");
    route_free(&r);
    CHECK(parse("/api/models/org/tree/tree/main", &r) == ROUTE_HUB_TREE);
    CHECK_STR(r.model, "org"); /* without a snapshot: one segment */
    route_free(&r);
    CHECK(parse_hub("/one/resolve/resolve/main/x", &r) == ROUTE_HUB_FILE);
    CHECK_STR(r.model, "one");
    CHECK_STR(r.rev, "resolve");
    route_free(&r);
    /* /v1 stays tensord's; other paths may be a repo's files. */
    CHECK(parse("/v1/models/x", &r) == ROUTE_MODEL);
    route_free(&r);
    CHECK(parse("/v1/resolve/main/x", &r) == ROUTE_HUB_FILE);
    route_free(&r);
    CHECK(parse("/org/name/blob/main/x", &r) == ROUTE_NOT_FOUND);
    route_free(&r);
    /* Paths in repos follow the model-name rules. */
    CHECK(parse("/one/resolve/main/../x", &r) == ROUTE_BAD_PATH);
    route_free(&r);
    /* A revision is no dot segment (a mirror's upstream URL would climb). */
    const char *dots[] = {"/one/resolve/../x", "/one/resolve/%2e%2e/x", "/one/raw/./x",
                          "/org/name/resolve/%2E/x", "/api/models/one/revision/..",
                          "/api/models/org/name/revision/%2e%2e",
                          "/api/models/org/name/tree/../x", "/api/models/org/name/paths-info/."};
    for (size_t i = 0; i < sizeof(dots) / sizeof(dots[0]); i++) {
        enum route_kind k = parse(dots[i], &r);
        if (k != ROUTE_BAD_PATH)
            fprintf(stderr, "  %s -> %d\n", dots[i], k);
        CHECK(k == ROUTE_BAD_PATH);
        route_free(&r);
    }
    CHECK(parse("/one/resolve/main/a%2F..%2Fb", &r) == ROUTE_BAD_PATH);
    route_free(&r);
    CHECK(parse("/one/resolve/%00/x", &r) == ROUTE_BAD_PATH);
    route_free(&r);
    CHECK(parse("/../resolve/main/x", &r) == ROUTE_BAD_PATH);
    route_free(&r);
    CHECK(parse("/one/resolve/main/x//y", &r) == ROUTE_BAD_PATH);
    route_free(&r);
    CHECK_STR(route_allowed_methods(ROUTE_HUB_PATHS_INFO), "POST");
    CHECK_STR(route_allowed_methods(ROUTE_HUB_NO_REPO), "GET, HEAD, POST");
}

/* refs and commits; a dataset's or a space's routes, whose id is read as
 * far as the path tells (for the message). */
TEST(hub_git_and_other_repo_types)
{
    static const struct {
        const char *path;
        enum route_kind kind;
        const char *model, *rev;
    } cases[] = {
        {"/api/models/org/name/refs", ROUTE_HUB_REFS, "org/name", NULL},
        {"/api/models/one/refs", ROUTE_HUB_REFS, "one", NULL},
        {"/api/models/org/name/commits/main", ROUTE_HUB_COMMITS, "org/name", "main"},
        {"/api/models/one/commits/refs%2Fpr%2F1", ROUTE_HUB_COMMITS, "one", "refs/pr/1"},
        {"/api/models/org/name/refs/x", ROUTE_HUB_NOT_FOUND, NULL, NULL},
        {"/api/models/org/name/commits", ROUTE_HUB_NOT_FOUND, NULL, NULL},
        {"/api/whoami-v2", ROUTE_HUB_WHOAMI, NULL, NULL},
        {"/api/whoami-v2/x", ROUTE_HUB_NOT_FOUND, NULL, NULL},
        {"/api/datasets", ROUTE_HUB_NO_REPOS, NULL, NULL},
        {"/api/spaces/", ROUTE_HUB_NO_REPOS, NULL, NULL},
        {"/api/datasets/x", ROUTE_HUB_NO_REPO, "x", NULL},
        {"/api/datasets/org/x", ROUTE_HUB_NO_REPO, "org/x", NULL},
        {"/api/datasets/x/revision/main", ROUTE_HUB_NO_REPO, "x", NULL},
        {"/api/datasets/org/x/tree/main/a/b", ROUTE_HUB_NO_REPO, "org/x", NULL},
        {"/api/spaces/org/x/paths-info/main", ROUTE_HUB_NO_REPO, "org/x", NULL},
        {"/api/spaces/org/x/anything/else", ROUTE_HUB_NO_REPO, "org/x", NULL},
        {"/datasets/org/x/resolve/main/data.csv", ROUTE_HUB_NO_REPO, "org/x", NULL},
        {"/spaces/org/x/resolve/main/app.py", ROUTE_HUB_NO_REPO, "org/x", NULL},
        {"/datasets/org/x/blob/main/y", ROUTE_NOT_FOUND, NULL, NULL},
        {"/api/datasets/..", ROUTE_BAD_PATH, NULL, NULL},
        /* without a snapshot to ask, a model repo's reading comes first */
        {"/datasets/org/resolve/main/x", ROUTE_HUB_FILE, "datasets/org", "main"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct route r;
        enum route_kind k = parse(cases[i].path, &r);
        if (k != cases[i].kind)
            fprintf(stderr, "  %s: kind %d, not %d\n", cases[i].path, k, cases[i].kind);
        CHECK(k == cases[i].kind);
        if (cases[i].model)
            CHECK_STR(r.model, cases[i].model);
        if (cases[i].rev)
            CHECK_STR(r.rev, cases[i].rev);
        route_free(&r);
    }
    /* with one, the model reading wins only when it names a repo */
    struct route r;
    CHECK(parse_hub("/datasets/x/raw/main/a/b.csv", &r) == ROUTE_HUB_NO_REPO);
    CHECK_STR(r.model, "x");
    route_free(&r);
    CHECK(parse_hub("/spaces/one/resolve/main/app.py", &r) == ROUTE_HUB_NO_REPO);
    route_free(&r);
}

static int exists_datasets_x(void *ctx, const char *id, size_t len)
{
    (void)ctx;
    return len == 10 && memcmp(id, "datasets/x", 10) == 0;
}

TEST(hub_model_repo_named_datasets)
{
    struct route r;
    char err[256];
    CHECK(route_parse("/datasets/x/raw/main/a.csv", exists_datasets_x, NULL, &r, err,
                      sizeof(err)) == ROUTE_HUB_FILE);
    CHECK_STR(r.model, "datasets/x");
    CHECK_STR(r.name, "a.csv");
    route_free(&r);
}

int main(void)
{
    RUN(hub_routes);
    RUN(blob_routes);
    RUN(s3_routes);
    RUN(hub_git_and_other_repo_types);
    RUN(hub_model_repo_named_datasets);
    RUN(fixed_endpoints);
    RUN(console);
    RUN(model_endpoints);
    RUN(tensor_names_keep_slashes_and_decode_once);
    RUN(traversal_refused);
    RUN(allowed_methods);
    return TEST_SUMMARY();
}
