/* Unit tests for server/http/dispatch.c through the loopback driver: the checks
 * every request passes before its handler (the connection limit, the
 * path, the method, the bearer token, the query parameters, a CORS
 * preflight, a preload or evict from another origin) in both error
 * dialects, byte for byte; the route to each
 * handler; the early refusal of a request that announces a body; the body
 * limits by endpoint; the endpoint a request counts under. */
#include "auth.h"
#include "http_metrics.h"
#include "loopback.h"

static char root[64];

#define JSON "Content-Type: application/json\r\n"

static void make_root(void)
{
    lb_new_root(root, sizeof(root));
    lb_write_st(root, "m/model.safetensors",
                "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", "\1\2\3\4", 4);
    lb_write(root, "bad/model.safetensors", "\x05\0\0\0\0\0\0\0{nope", 13);
}

TEST(not_found_and_bad_paths)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    struct lb_answer r = lb_get(&s, "/v2/x", NULL);
    CHECK_ANSWER(r, 404, JSON,
                 "{\"error\":{\"code\":\"not_found\",\"message\":\"no endpoint at this path; see "
                 "/v1/models\"}}\n");
    lb_free(&r);
    r = lb_get(&s, "/api/nothing", NULL); /* the Hub's paths speak its dialect */
    CHECK_ANSWER(r, 404,
                 JSON "X-Error-Message: no such endpoint: this server serves the read-only "
                      "model API\r\n",
                 "{\"error\":\"no such endpoint: this server serves the read-only model API\"}\n");
    lb_free(&r);
    r = lb_get(&s, "/v1/models/a%2F..%2Fb", NULL);
    CHECK_ANSWER(r, 400, JSON,
                 "{\"error\":{\"code\":\"bad_path\",\"message\":\"model name has an empty, "
                 "\\\".\\\" or \\\"..\\\" component\"}}\n");
    lb_free(&r);
    r = lb_get(&s, "/m/resolve/main/%zz", NULL);
    CHECK_ANSWER(r, 400,
                 JSON "X-Error-Message: path name has a malformed percent-escape or a NUL byte\r\n",
                 "{\"error\":\"path name has a malformed percent-escape or a NUL byte\"}\n");
    lb_free(&r);
    r = lb_get(&s, "/v1/models/nope/tensors/w", NULL);
    CHECK_ANSWER(r, 404, JSON,
                 "{\"error\":{\"code\":\"model_not_found\",\"message\":\"no model named "
                 "\\\"nope\\\"\"}}\n");
    lb_free(&r);
    r = lb_get(&s, "/v1/models/m/tensors/x", NULL);
    CHECK_ANSWER(r, 404, JSON,
                 "{\"error\":{\"code\":\"tensor_not_found\",\"message\":\"model \\\"m\\\" has "
                 "no tensor \\\"x\\\"\"}}\n");
    lb_free(&r);
    r = lb_get(&s, "/v1/models/m/files/x.json", NULL);
    CHECK_ANSWER(r, 404, JSON,
                 "{\"error\":{\"code\":\"file_not_found\",\"message\":\"model \\\"m\\\" has no "
                 "file \\\"x.json\\\"\"}}\n");
    lb_free(&r);
    r = lb_get(&s, "/v1/models/bad/header", NULL);
    CHECK_EQ_U64(r.status, 409);
    CHECK(strncmp(r.body, "{\"error\":{\"code\":\"model_invalid\",\"message\":\"model \\\"bad\\\" "
                          "is invalid: ", 70) == 0);
    lb_free(&r);
    lb_stop(&s);
}

TEST(methods)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    struct lb_answer r = lb_request(&s, "PUT", "/v1/models", NULL, NULL);
    CHECK_ANSWER(r, 405, JSON "Allow: GET, HEAD\r\n",
                 "{\"error\":{\"code\":\"method_not_allowed\",\"message\":\"PUT is not allowed "
                 "here; allowed: GET, HEAD\"}}\n");
    lb_free(&r);
    r = lb_request(&s, "DELETE", "/v1/models/m/fetch", NULL, NULL);
    CHECK_STR(lb_header(&r, "Allow"), "GET, HEAD, POST");
    lb_free(&r);
    r = lb_get(&s, "/api/models/m/paths-info/main", NULL);
    CHECK_ANSWER(r, 405,
                 JSON "X-Error-Message: GET is not allowed here; allowed: POST\r\nAllow: POST\r\n",
                 "{\"error\":\"GET is not allowed here; allowed: POST\"}\n");
    lb_free(&r);
    r = lb_request(&s, "OPTIONS", "/v1/models", NULL, NULL); /* CORS off: no preflight */
    CHECK_EQ_U64(r.status, 405);
    lb_free(&r);
    lb_stop(&s);
}

TEST(query_parameters)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    struct lb_answer r = lb_get(&s, "/v1/models/m/tensors/w?slice=0&x=1", NULL);
    CHECK_ANSWER(r, 400, JSON,
                 "{\"error\":{\"code\":\"bad_parameter\",\"message\":\"unknown query parameter "
                 "\\\"x\\\"\"}}\n");
    lb_free(&r);
    r = lb_get(&s, "/v1/models?format=json", NULL); /* format is the metrics' only */
    CHECK_EQ_U64(r.status, 400);
    lb_free(&r);
    r = lb_get(&s, "/v1/metrics?format=json", NULL);
    CHECK_EQ_U64(r.status, 200);
    lb_free(&r);
    r = lb_get(&s, "/api/models?expand=x&blobs=true", NULL); /* the Hub's routes take any */
    CHECK_EQ_U64(r.status, 200);
    lb_free(&r);
    lb_stop(&s);
}

static void write_tokens(const char *path)
{
    static const char text[] = "read read-token-0123456789\nadmin admin-token-0123456789\n";
    test_write_file(path, text, sizeof(text) - 1);
}

TEST(tokens)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    char err[256], *tokens = xasprintf("%s.tokens", root);
    write_tokens(tokens);
    CHECK(auth_load(&s.srv, tokens, err, sizeof(err)) == 0);
    struct lb_answer r = lb_get(&s, "/v1/models", NULL);
    CHECK_ANSWER(r, 401, JSON "WWW-Authenticate: Bearer realm=\"tensord\"\r\n",
                 "{\"error\":{\"code\":\"unauthorized\",\"message\":\"a bearer token is "
                 "required\"}}\n");
    lb_free(&r);
    static const char *const read[] = {"Authorization: Bearer read-token-0123456789", NULL};
    static const char *const wrong[] = {"Authorization: Bearer wrong-token-0123456789", NULL};
    r = lb_get(&s, "/v1/models", read);
    CHECK_EQ_U64(r.status, 200);
    lb_free(&r);
    r = lb_request(&s, "DELETE", "/v1/models/m/gpu", read, NULL);
    CHECK_ANSWER(r, 401, JSON "WWW-Authenticate: Bearer realm=\"tensord\"\r\n",
                 "{\"error\":{\"code\":\"unauthorized\",\"message\":\"this endpoint needs the "
                 "admin bearer token\"}}\n");
    lb_free(&r);
    r = lb_get(&s, "/api/models", NULL);
    CHECK_ANSWER(r, 401,
                 JSON "X-Error-Message: a bearer token is required (Authorization: Bearer "
                      "TOKEN)\r\nWWW-Authenticate: Bearer realm=\"tensord\"\r\n",
                 "{\"error\":\"a bearer token is required (Authorization: Bearer TOKEN)\"}\n");
    lb_free(&r);
    r = lb_get(&s, "/api/models", wrong); /* huggingface_hub tells the two apart */
    CHECK_ANSWER(r, 401,
                 JSON "X-Error-Message: Invalid credentials in Authorization header\r\n"
                      "WWW-Authenticate: Bearer realm=\"tensord\"\r\n",
                 "{\"error\":\"Invalid credentials in Authorization header\"}\n");
    lb_free(&r);
    r = lb_get(&s, "/healthz", NULL); /* liveness and the console need none */
    CHECK_EQ_U64(r.status, 200);
    lb_free(&r);
    r = lb_get(&s, "/ui/", NULL);
    CHECK_EQ_U64(r.status, 200);
    lb_free(&r);
    r = lb_get(&s, "/nope/resolve/main/x", NULL); /* the path is checked before the token */
    CHECK_EQ_U64(r.status, 401);
    lb_free(&r);
    r = lb_get(&s, "/v1/x", NULL);
    CHECK_EQ_U64(r.status, 404);
    lb_free(&r);
    /* whoami-v2: each token by its role; none, or a wrong one, is 401 */
    static const char *const admin[] = {"Authorization: Bearer admin-token-0123456789", NULL};
    r = lb_get(&s, "/api/whoami-v2", read);
    CHECK_ANSWER(r, 200,
                 JSON "Accept-Ranges: bytes\r\nCache-Control: private, no-store\r\n",
                 "{\"type\":\"user\",\"id\":\"tensord-read\",\"name\":\"tensord-read\","
                 "\"fullname\":\"tensord read token\",\"isPro\":false,\"canPay\":false,"
                 "\"emailVerified\":false,\"orgs\":[],\"auth\":{\"type\":\"access_token\","
                 "\"accessToken\":{\"displayName\":\"tensord-read\",\"role\":\"read\"}}}\n");
    lb_free(&r);
    r = lb_get(&s, "/api/whoami-v2", admin);
    CHECK_EQ_U64(r.status, 200);
    CHECK_CONTAINS(r.body, "\"displayName\":\"tensord-admin\",\"role\":\"admin\"");
    lb_free(&r);
    r = lb_get(&s, "/api/whoami-v2", wrong);
    CHECK_EQ_U64(r.status, 401);
    CHECK_STR(lb_header(&r, "X-Error-Message"), "Invalid credentials in Authorization header");
    lb_free(&r);
    r = lb_get(&s, "/api/whoami-v2", NULL);
    CHECK_EQ_U64(r.status, 401);
    lb_free(&r);
    unlink(tokens);
    free(tokens);
    lb_stop(&s);
    /* Without tokens every request may do everything: any token is the
     * admin's, and still none is 401. */
    lb_start(&s, root, 0, NULL);
    r = lb_get(&s, "/api/whoami-v2", wrong);
    CHECK_EQ_U64(r.status, 200);
    CHECK_CONTAINS(r.body, "\"role\":\"admin\"");
    lb_free(&r);
    r = lb_get(&s, "/api/whoami-v2", NULL);
    CHECK_ANSWER(r, 401,
                 JSON "X-Error-Message: a bearer token is required (Authorization: Bearer "
                      "TOKEN)\r\nWWW-Authenticate: Bearer realm=\"tensord\"\r\n",
                 "{\"error\":\"a bearer token is required (Authorization: Bearer TOKEN)\"}\n");
    lb_free(&r);
    lb_stop(&s);
}

TEST(preflight)
{
    struct lb_server s;
    static const char *const opts[] = {"cors_origins=*", NULL};
    lb_start(&s, root, 0, opts);
    static const char *const pre[] = {"Origin: http://x.example",
                                      "Access-Control-Request-Method: POST",
                                      "Access-Control-Request-Headers: content-type,if-none-match",
                                      NULL};
    struct lb_answer r = lb_request(&s, "OPTIONS", "/v1/models/m/fetch", pre, NULL);
    CHECK_ANSWER(r, 204,
                 "Access-Control-Allow-Origin: *\r\nAccess-Control-Allow-Methods: GET, HEAD, "
                 "POST\r\nAccess-Control-Allow-Headers: content-type, if-none-match\r\n"
                 "Access-Control-Max-Age: 600\r\n",
                 "");
    lb_free(&r);
    /* The S3 API's routes have theirs (before its signature check), with
     * the headers its SDKs send; a header no script may send is left out. */
    static const char *const s3_pre[] = {
        "Origin: http://x.example", "Access-Control-Request-Method: GET",
        "Access-Control-Request-Headers: amz-sdk-invocation-id,amz-sdk-request,authorization,"
        "if-range,x-amz-content-sha256,x-amz-date,x-amz-user-agent,x-forwarded-for",
        NULL};
    r = lb_request(&s, "OPTIONS", "/s3/m/model.safetensors", s3_pre, NULL);
    CHECK_ANSWER(r, 204,
                 "Access-Control-Allow-Origin: *\r\nAccess-Control-Allow-Methods: GET, HEAD\r\n"
                 "Access-Control-Allow-Headers: amz-sdk-invocation-id, amz-sdk-request, "
                 "authorization, if-range, x-amz-content-sha256, x-amz-date, x-amz-user-agent\r\n"
                 "Access-Control-Max-Age: 600\r\n",
                 "");
    lb_free(&r);
    r = lb_request(&s, "OPTIONS", "/s3/", s3_pre, NULL); /* ListBuckets */
    CHECK_EQ_U64(r.status, 204);
    lb_free(&r);
    r = lb_request(&s, "OPTIONS", "/nowhere", s3_pre, NULL); /* no such route: no grant */
    CHECK_EQ_U64(r.status, 404);
    lb_free(&r);
    static const char *const no_method[] = {"Origin: http://x.example", NULL};
    r = lb_request(&s, "OPTIONS", "/v1/models", no_method, NULL); /* not a preflight */
    CHECK_EQ_U64(r.status, 405);
    CHECK_STR(lb_header(&r, "Access-Control-Expose-Headers"), CORS_EXPOSE);
    lb_free(&r);
    lb_stop(&s);
}

/* A preload or evict from a page of another origin is refused before the
 * token and the handler (a browser posts text/plain cross-site without a
 * preflight); the daemon's own origin, a listed one, no Origin at all, and
 * a request that only reads go on (to the handler: 503, no GPU sharing
 * here). */
TEST(cross_origin_writes)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    static const char *const foreign[] = {"Host: 127.0.0.1:8077", "Origin: http://evil.example",
                                          NULL};
    const char *body = "{\"device\":\"host\"}";
    struct lb_answer r = lb_request(&s, "POST", "/v1/models/m/gpu", foreign, body);
    CHECK_ANSWER(r, 403, JSON,
                 "{\"error\":{\"code\":\"cross_origin\",\"message\":\"a page of another origin "
                 "may not preload or evict; list it in cors_origins to allow it\"}}\n");
    lb_free(&r);
    r = lb_request(&s, "DELETE", "/v1/models/m/gpu", foreign, NULL);
    CHECK_EQ_U64(r.status, 403);
    CHECK_CONTAINS(r.body, "\"cross_origin\"");
    lb_free(&r);
    r = lb_request(&s, "GET", "/v1/models/m/gpu", foreign, NULL); /* reads: not refused */
    CHECK_EQ_U64(r.status, 503);
    lb_free(&r);
    static const char *const own[] = {"Host: 127.0.0.1:8077", "Origin: http://127.0.0.1:8077",
                                      NULL};
    static const char *const other_port[] = {"Host: 127.0.0.1:8077",
                                             "Origin: http://127.0.0.1:8078", NULL};
    static const char *const no_host[] = {"Origin: http://127.0.0.1:8077", NULL};
    static const char *const none[] = {"Host: 127.0.0.1:8077", NULL};
    r = lb_request(&s, "POST", "/v1/models/m/gpu", own, body);
    CHECK_EQ_U64(r.status, 503);
    CHECK_CONTAINS(r.body, "\"gpu_unavailable\"");
    lb_free(&r);
    r = lb_request(&s, "POST", "/v1/models/m/gpu", none, body);
    CHECK_EQ_U64(r.status, 503);
    lb_free(&r);
    r = lb_request(&s, "POST", "/v1/models/m/gpu", other_port, body);
    CHECK_EQ_U64(r.status, 403);
    lb_free(&r);
    r = lb_request(&s, "POST", "/v1/models/m/gpu", no_host, body);
    CHECK_EQ_U64(r.status, 403);
    lb_free(&r);
    lb_stop(&s);
    static const char *const listed[] = {"cors_origins=http://evil.example", NULL};
    lb_start(&s, root, 0, listed);
    r = lb_request(&s, "POST", "/v1/models/m/gpu", foreign, body);
    CHECK_EQ_U64(r.status, 503);
    lb_free(&r);
    static const char *const unlisted[] = {"Host: 127.0.0.1:8077", "Origin: http://b.example",
                                           NULL};
    r = lb_request(&s, "DELETE", "/v1/models/m/gpu", unlisted, NULL);
    CHECK_EQ_U64(r.status, 403);
    lb_free(&r);
    lb_stop(&s);
}

/* Without tokens, a Host that is no address, no localhost and not listed
 * is refused before anything else (a DNS-rebinding page sends its own
 * name), in each route's dialect; with tokens, every Host goes on. */
TEST(host_names)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    static const char *const evil[] = {"Host: evil.example:8077", NULL};
    static const char *const local[] = {"Host: localhost:8077", NULL};
    static const char *const v6[] = {"Host: [::1]:8077", NULL};
    static const char *const box[] = {"Host: gpu-box-1:8077", NULL};
    const char *msg = "Host \"evil.example:8077\" is not answered without a token: add it to "
                      "allowed_hosts, or set auth_token_file (a page whose name was made to "
                      "resolve here sends its own)";
    struct lb_answer r = lb_get(&s, "/v1/models", evil);
    char *want = xasprintf("{\"error\":{\"code\":\"host_not_allowed\",\"message\":\"%s\"}}\n",
                           "Host \\\"evil.example:8077\\\" is not answered without a token: add "
                           "it to allowed_hosts, or set auth_token_file (a page whose name was "
                           "made to resolve here sends its own)");
    CHECK_ANSWER(r, 403, JSON, want);
    free(want);
    lb_free(&r);
    r = lb_get(&s, "/api/models", evil); /* the Hub's dialect */
    CHECK_EQ_U64(r.status, 403);
    CHECK_CONTAINS(r.head, msg); /* X-Error-Message */
    CHECK_CONTAINS(r.body, "{\"error\":\"Host \\\"evil.example:8077\\\" is not answered");
    lb_free(&r);
    r = lb_get(&s, "/s3/m/model.safetensors", evil); /* S3's */
    CHECK_EQ_U64(r.status, 403);
    CHECK_CONTAINS(r.head, "Content-Type: application/xml");
    CHECK_CONTAINS(r.body, "<Code>AccessDenied</Code>");
    lb_free(&r);
    r = lb_request(&s, "OPTIONS", "/v1/models", evil, NULL);
    CHECK_EQ_U64(r.status, 403);
    lb_free(&r);
    r = lb_get(&s, "/v1/models", local);
    CHECK_EQ_U64(r.status, 200);
    lb_free(&r);
    r = lb_get(&s, "/v1/models", v6);
    CHECK_EQ_U64(r.status, 200);
    lb_free(&r);
    r = lb_get(&s, "/v1/models", NULL); /* no Host: HTTP/1.0 */
    CHECK_EQ_U64(r.status, 200);
    lb_free(&r);
    lb_stop(&s);
    static const char *const listed[] = {"allowed_hosts=gpu-box-1", NULL};
    lb_start(&s, root, 0, listed);
    r = lb_get(&s, "/v1/models", box);
    CHECK_EQ_U64(r.status, 200);
    lb_free(&r);
    r = lb_get(&s, "/v1/models", evil);
    CHECK_EQ_U64(r.status, 403);
    lb_free(&r);
    lb_stop(&s);
    lb_start(&s, root, 0, NULL);
    char err[256], *tokens = xasprintf("%s.tokens", root);
    write_tokens(tokens);
    CHECK(auth_load(&s.srv, tokens, err, sizeof(err)) == 0);
    static const char *const evil_token[] = {"Host: evil.example",
                                             "Authorization: Bearer read-token-0123456789", NULL};
    r = lb_get(&s, "/v1/models", evil_token);
    CHECK_EQ_U64(r.status, 200);
    lb_free(&r);
    r = lb_get(&s, "/v1/models", evil); /* the token is what is asked for */
    CHECK_EQ_U64(r.status, 401);
    lb_free(&r);
    unlink(tokens);
    free(tokens);
    lb_stop(&s);
}

/* Errors on S3 paths that the front or the dispatcher answer (not the S3
 * handler) are S3's XML too: a failed precondition, a malformed key. */
TEST(s3_paths_answer_in_xml)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    static const char *const if_match[] = {"If-Match: \"nope\"", NULL};
    struct lb_answer r = lb_get(&s, "/s3/m/model.safetensors", if_match);
    CHECK_ANSWER(r, 412, "Content-Type: application/xml\r\n",
                 "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>PreconditionFailed"
                 "</Code><Message>If-Match or If-Unmodified-Since did not hold</Message>"
                 "<RequestId>tensord</RequestId></Error>\n");
    lb_free(&r);
    r = lb_get(&s, "/s3/m/a%00b", NULL);
    CHECK_EQ_U64(r.status, 400);
    CHECK_CONTAINS(r.head, "Content-Type: application/xml");
    CHECK_CONTAINS(r.body, "<Code>InvalidURI</Code>");
    lb_free(&r);
    r = lb_get(&s, "/s3/%2e%2e/x", NULL);
    CHECK_EQ_U64(r.status, 400);
    CHECK_CONTAINS(r.body, "<Code>InvalidURI</Code>");
    lb_free(&r);
    r = lb_get(&s, "/v1/models/m/files/model.safetensors", if_match); /* tensord's own paths */
    CHECK_EQ_U64(r.status, 412);
    CHECK_CONTAINS(r.head, "Content-Type: application/json");
    lb_free(&r);
    lb_stop(&s);
}

TEST(overloaded_and_not_ready)
{
    struct lb_server s;
    static const char *const opts[] = {"max_connections=1", NULL};
    lb_start(&s, root, 0, opts);
    atomic_store(&s.srv.connections, 2);
    struct lb_answer r = lb_get(&s, "/v1/models", NULL);
    CHECK_ANSWER(r, 503, JSON "Retry-After: 1\r\nConnection: close\r\n",
                 "{\"error\":{\"code\":\"overloaded\",\"message\":\"more than 1 connections are "
                 "open\"}}\n");
    lb_free(&r);
    r = lb_get(&s, "/api/models", NULL);
    CHECK_ANSWER(r, 503,
                 JSON "X-Error-Message: more than 1 connections are open\r\nRetry-After: 1\r\n"
                      "Connection: close\r\n",
                 "{\"error\":\"more than 1 connections are open\"}\n");
    lb_free(&r);
    atomic_store(&s.srv.connections, 0);
    /* Before the first scan the registry holds no snapshot. */
    struct reg_snapshot *reg = registry_acquire(&s.srv.registry);
    registry_swap(&s.srv.registry, NULL);
    r = lb_get(&s, "/v1/models/m", NULL);
    CHECK_ANSWER(r, 503, JSON "Retry-After: 1\r\n",
                 "{\"error\":{\"code\":\"not_ready\",\"message\":\"the models root has not been "
                 "scanned yet\"}}\n");
    lb_free(&r);
    r = lb_get(&s, "/api/models/m", NULL);
    CHECK_ANSWER(r, 503,
                 JSON "X-Error-Message: the models root has not been scanned yet\r\n"
                      "Retry-After: 1\r\n",
                 "{\"error\":\"the models root has not been scanned yet\"}\n");
    lb_free(&r);
    registry_swap(&s.srv.registry, reg);
    lb_stop(&s);
}

TEST(early_refusal_and_limits)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    struct lb_request q;
    struct answer a;
    answer_init(&a);
    struct request_view v = lb_view(&q, &s.srv, "POST", "/v1/models/m/tensors/w", NULL);
    v.path = "/v1/models/m/tensors/w";
    CHECK(dispatch_refuse_early(&v, &a) == 1);
    CHECK(a.kind == ANSWER_ERROR && a.status == 405 && a.snapshot == NULL);
    answer_free(&a);
    free(q.query);
    v = lb_view(&q, &s.srv, "POST", "/v1/models/m/fetch", NULL);
    CHECK(dispatch_refuse_early(&v, &a) == 0);
    CHECK(a.kind == ANSWER_NONE && a.endpoint == MEP_FETCH);
    answer_free(&a);
    free(q.query);
    v = lb_view(&q, &s.srv, "GET", "/v1/models/m/tensors/w?slice=0", NULL);
    v.path = "/v1/models/m/tensors/w";
    CHECK(dispatch_refuse_early(&v, &a) == 0);
    CHECK(a.endpoint == MEP_SLICE);
    answer_free(&a);
    free(q.query);
    CHECK_EQ_U64(dispatch_upload_limit(&s.srv, "/v1/models/m/fetch"), s.cfg.max_fetch_body_bytes);
    CHECK_EQ_U64(dispatch_upload_limit(&s.srv, "/api/models/m/paths-info/main"),
                 s.cfg.max_fetch_body_bytes);
    CHECK_EQ_U64(dispatch_upload_limit(&s.srv, "http://h/v1/models/m/fetch"),
                 s.cfg.max_fetch_body_bytes); /* absolute-form */
    CHECK_EQ_U64(dispatch_upload_limit(&s.srv, "/v1/models/m/gpu"), 65536);
    lb_stop(&s);
}

TEST(snapshot_held_until_rendered)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    struct lb_request q;
    struct answer a;
    answer_init(&a);
    struct request_view v = lb_view(&q, &s.srv, "GET", "/v1/models/m/tensors/w", NULL);
    dispatch_request(&v, &a);
    CHECK(a.kind == ANSWER_BODY && a.snapshot != NULL);
    /* A reload meanwhile frees nothing the answer points into. */
    struct st_error e;
    registry_swap(&s.srv.registry, reg_snapshot_scan(root, 2, NULL, &e));
    CHECK(a.rep.file_st->size == 65 && a.rep.body.fd >= 0);
    answer_rendered(&a);
    CHECK(a.snapshot == NULL);
    answer_free(&a);
    free(q.query);
    lb_stop(&s);
}

int main(void)
{
    make_root();
    RUN(not_found_and_bad_paths);
    RUN(methods);
    RUN(query_parameters);
    RUN(tokens);
    RUN(preflight);
    RUN(cross_origin_writes);
    RUN(host_names);
    RUN(s3_paths_answer_in_xml);
    RUN(overloaded_and_not_ready);
    RUN(early_refusal_and_limits);
    RUN(snapshot_held_until_rendered);
    lb_remove_root(root);
    return TEST_SUMMARY();
}
