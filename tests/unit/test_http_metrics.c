/* Unit tests for server/http/http_metrics.c: what a request is counted under,
 * its endpoint and its status class, as the metrics text names them. */
#include "http_metrics.h"
#include "metrics.h"
#include "test.h"

static uint64_t requests(const char *endpoint, const char *code)
{
    char *text = metrics_render_prometheus(), key[128];
    snprintf(key, sizeof(key), "tensord_http_requests_total{endpoint=\"%s\",code=\"%s\"} ",
             endpoint, code);
    const char *at = strstr(text, key);
    uint64_t n = at ? strtoull(at + strlen(key), NULL, 10) : UINT64_MAX;
    free(text);
    return n;
}

TEST(endpoints_and_classes)
{
    http_metrics_init();
    uint64_t t2 = requests("tensor", "2xx"), s4 = requests("slice", "4xx");
    uint64_t h5 = requests("hub_api", "5xx"), o = requests("other", "other");
    http_metrics_request_done(MEP_TENSOR, 206, 10, 1000, 500);
    http_metrics_request_done(MEP_SLICE, 416, 0, 1000, 500);
    http_metrics_request_done(MEP_HUB_API, 503, 0, 1000, 500);
    http_metrics_request_done(MEP_COUNT + 3, 0, 0, 1000, 500); /* out of range: other, other */
    CHECK_EQ_U64(requests("tensor", "2xx"), t2 + 1);
    CHECK_EQ_U64(requests("slice", "4xx"), s4 + 1);
    CHECK_EQ_U64(requests("hub_api", "5xx"), h5 + 1);
    CHECK_EQ_U64(requests("other", "other"), o + 1);
    static const char *const names[] = {"models", "model", "header", "file", "file_header",
                                        "tensor", "slice", "gpu", "fetch", "hub_file", "hub_api",
                                        "metrics", "health", "ui", "blob", "s3", "other"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        CHECK(requests(names[i], "1xx") != UINT64_MAX); /* every endpoint is named */
}

int main(void)
{
    RUN(endpoints_and_classes);
    return TEST_SUMMARY();
}
