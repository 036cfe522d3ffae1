/* Unit tests for server/handlers/h_meta.c through the loopback driver: a model's
 * merged header and description (rendered off the HTTP thread: the first
 * request waits, then answers from the cache) with their ETag (FNV-1a of
 * the document's bytes) and conditional and Range requests on them, the
 * model list, /healthz, /readyz and /metrics, byte for byte. */
#include "loopback.h"

static char root[64];

#define JSON_200 "Content-Type: application/json\r\nAccept-Ranges: bytes\r\nCache-Control: no-cache\r\n"

static void make_root(void)
{
    lb_new_root(root, sizeof(root));
    lb_write_st(root, "m/model.safetensors",
                "{\"__metadata__\":{\"k\":\"v\"},\"w\":{\"dtype\":\"U8\",\"shape\":[4],"
                "\"data_offsets\":[0,4]}}",
                "\1\2\3\4", 4);
    lb_write(root, "bad/model.safetensors", "\x05\0\0\0\0\0\0\0{nope", 13);
}

TEST(merged_header_waits_then_is_cached)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    const char *doc = "{\"__metadata__\":{\"k\":\"v\"},\"w\":{\"dtype\":\"U8\",\"shape\":[4],"
                      "\"data_offsets\":[0,4],\"file\":\"model.safetensors\"}}\n";
    char *head = xasprintf(JSON_200 "ETag: \"m%016" PRIx64 "\"\r\n", lb_fnv1a(doc, strlen(doc)));
    struct lb_answer r = lb_get(&s, "/v1/models/m/header", NULL);
    CHECK_ANSWER(r, 200, head, doc);
    CHECK(r.waited); /* rendered on the renderer's thread first */
    lb_free(&r);
    r = lb_get(&s, "/v1/models/m/header", NULL);
    CHECK_ANSWER(r, 200, head, doc);
    CHECK(!r.waited); /* from the cache */
    lb_free(&r);
    char *inm = xasprintf("If-None-Match: \"m%016" PRIx64 "\"", lb_fnv1a(doc, strlen(doc)));
    const char *const h304[] = {inm, NULL};
    r = lb_get(&s, "/v1/models/m/header", h304);
    CHECK_EQ_U64(r.status, 304);
    CHECK_STR(r.body, "");
    lb_free(&r);
    static const char *const range[] = {"Range: bytes=2-13", NULL};
    r = lb_get(&s, "/v1/models/m/header", range);
    CHECK_EQ_U64(r.status, 206);
    CHECK_STR(r.body, "__metadata__");
    lb_free(&r);
    r = lb_request(&s, "HEAD", "/v1/models/m/header", NULL, NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK_EQ_U64(r.length, strlen(doc));
    lb_free(&r);
    free(inm);
    free(head);
    lb_stop(&s);
}

TEST(description)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/v1/models/m", NULL);
    CHECK_EQ_U64(r.status, 200);
    char *head = xasprintf(JSON_200 "ETag: \"m%016" PRIx64 "\"\r\n", lb_fnv1a(r.body, r.len));
    CHECK_STR(r.head, head);
    CHECK(strncmp(r.body, "{\"name\":\"m\",\"state\":\"ready\",\"sharded\":false,\"tensor_count\":1,"
                          "\"bytes\":4,\"files\":[{\"name\":\"model.safetensors\",\"size\":",
                  100) == 0);
    CHECK_CONTAINS(r.body, "\"tensors\":{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"file\":"
                           "\"model.safetensors\",\"data_offsets\":[0,4],\"nbytes\":4}}");
    CHECK_CONTAINS(r.body, "\"hashes\":{\"known\":1,\"files\":1,\"complete\":true}}\n");
    free(head);
    lb_free(&r);
    r = lb_get(&s, "/v1/models/bad", NULL); /* an invalid model has a description */
    CHECK_EQ_U64(r.status, 200);
    CHECK_CONTAINS(r.body, "\"state\":\"invalid\"");
    lb_free(&r);
    lb_stop(&s);
}

TEST(documents_while_stopping)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    doc_cache_stop(s.srv.docs); /* the renderer is gone: the wait ends at once */
    struct lb_answer r = lb_get(&s, "/v1/models/m/header", NULL);
    CHECK_ANSWER(r, 503, "Content-Type: application/json\r\nRetry-After: 1\r\n",
                 "{\"error\":{\"code\":\"stopping\",\"message\":\"the daemon is stopping\"}}\n");
    CHECK(r.waited);
    lb_free(&r);
    lb_stop(&s);
}

TEST(model_list)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/v1/models", NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK_STR(r.head, JSON_200); /* no validator: GPU states and hashes change without a reload */
    CHECK(strncmp(r.body, "{\"models\":[{\"name\":\"bad\",\"source\":\"local\",\"state\":"
                          "\"invalid\",", 60) == 0);
    CHECK_CONTAINS(r.body, "{\"name\":\"m\",\"source\":\"local\",\"state\":\"ready\",\"sharded\":false,\"files\":1,"
                           "\"tensors\":1,\"bytes\":4,\"parameters\":{\"U8\":4},\"gpu\":{\"state\":"
                           "\"none\"},\"hashes\":{\"known\":1,\"files\":1,\"complete\":true}}],"
                           "\"generation\":1,\"gpu\":{\"available\":false,\"reason\":\"GPU sharing "
                           "is not running\"},\"hashing\":{\"state\":\"idle\",");
    CHECK(r.body[r.len - 1] == '\n');
    lb_free(&r);
    lb_stop(&s);
}

TEST(health_and_readiness)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/healthz", NULL);
    CHECK_ANSWER(r, 200, JSON_200, "{\"status\":\"ok\"}\n");
    lb_free(&r);
    r = lb_get(&s, "/readyz", NULL);
    CHECK_ANSWER(r, 200, JSON_200, "{\"status\":\"ready\"}\n");
    lb_free(&r);
    atomic_store(&s.srv.ready, 0);
    r = lb_get(&s, "/readyz", NULL);
    CHECK_ANSWER(r, 503, "Content-Type: application/json\r\nRetry-After: 1\r\n",
                 "{\"error\":{\"code\":\"not_ready\",\"message\":\"the models root is being "
                 "scanned\"}}\n");
    lb_free(&r);
    lb_stop(&s);
}

TEST(metrics)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/metrics", NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK_STR(r.head, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                      "Accept-Ranges: bytes\r\nCache-Control: no-cache\r\n"
                      "Vary: Accept-Encoding\r\n");
    CHECK_CONTAINS(r.body, "# TYPE tensord_");
    lb_free(&r);
    static const char *const gzip[] = {"Accept-Encoding: gzip", NULL};
    r = lb_get(&s, "/metrics", gzip); /* Prometheus asks for it */
    CHECK_STR(r.head, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                      "Content-Encoding: gzip\r\nCache-Control: no-cache\r\n"
                      "Vary: Accept-Encoding\r\n");
    CHECK((unsigned char)r.body[0] == 0x1f && (unsigned char)r.body[1] == 0x8b);
    lb_free(&r);
    r = lb_get(&s, "/v1/metrics", NULL);
    CHECK_STR(r.head, JSON_200 "Vary: Accept-Encoding\r\n");
    CHECK(r.body[0] == '{' && r.body[r.len - 1] == '\n');
    lb_free(&r);
    static const char *const accept[] = {"Accept: text/plain", NULL};
    r = lb_get(&s, "/v1/metrics", accept);
    CHECK_CONTAINS(r.head, "text/plain; version=0.0.4");
    lb_free(&r);
    r = lb_get(&s, "/metrics?format=json", NULL);
    CHECK_CONTAINS(r.head, "application/json");
    lb_free(&r);
    r = lb_get(&s, "/metrics?format=xml", NULL);
    CHECK_ANSWER(r, 400, "Content-Type: application/json\r\n",
                 "{\"error\":{\"code\":\"bad_parameter\",\"message\":\"format must be \\\"json\\\" "
                 "or \\\"prometheus\\\"\"}}\n");
    lb_free(&r);
    lb_stop(&s);
}

int main(void)
{
    make_root();
    RUN(merged_header_waits_then_is_cached);
    RUN(description);
    RUN(documents_while_stopping);
    RUN(model_list);
    RUN(health_and_readiness);
    RUN(metrics);
    lb_remove_root(root);
    return TEST_SUMMARY();
}
