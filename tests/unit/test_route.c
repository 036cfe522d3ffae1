#include <stdlib.h>

#include "route.h"
#include "test.h"

static enum route_kind parse(const char *path, struct route *r)
{
    char err[256];
    return route_parse(path, r, err, sizeof(err));
}

TEST(fixed_endpoints)
{
    struct route r;
    CHECK(parse("/healthz", &r) == ROUTE_HEALTHZ);
    CHECK(parse("/readyz", &r) == ROUTE_READYZ);
    CHECK(parse("/metrics", &r) == ROUTE_METRICS_TEXT);
    CHECK(parse("/v1/metrics", &r) == ROUTE_METRICS);
    CHECK(parse("/v1/models", &r) == ROUTE_MODELS);
    CHECK(parse("/v1/models/", &r) == ROUTE_MODELS);
    CHECK(parse("/", &r) == ROUTE_NOT_FOUND);
    CHECK(parse("/v2/models", &r) == ROUTE_NOT_FOUND);
    CHECK(parse("/v1/other", &r) == ROUTE_NOT_FOUND);
    CHECK(parse("relative", &r) == ROUTE_BAD_PATH);
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

TEST(decode)
{
    size_t n;
    char *d = route_decode("a%41%62+", 8, &n);
    CHECK_STR(d, "aAb+");
    CHECK_EQ_U64(n, 4);
    free(d);
    CHECK(route_decode("%4", 2, &n) == NULL);
    CHECK(route_decode("%00", 3, &n) == NULL);
    CHECK(route_decode("%g0", 3, &n) == NULL);
}

TEST(allowed_methods)
{
    CHECK_STR(route_allowed_methods(ROUTE_TENSOR), "GET, HEAD");
    CHECK_CONTAINS(route_allowed_methods(ROUTE_GPU), "POST");
    CHECK_STR(route_allowed_methods(ROUTE_FETCH), "GET, HEAD, POST");
}

int main(void)
{
    RUN(fixed_endpoints);
    RUN(model_endpoints);
    RUN(tensor_names_keep_slashes_and_decode_once);
    RUN(traversal_refused);
    RUN(decode);
    RUN(allowed_methods);
    return TEST_SUMMARY();
}
