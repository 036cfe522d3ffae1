/* Unit tests for the HTTP front (server/http/http*.c), in process over a real
 * loopback socket: answers as they go out on the wire (the headers the
 * front adds: Connection, CORS), kept-alive connections, every refusal made
 * before dispatch (too many parameters, too many header fields written to
 * the socket directly, a NUL in the target, ambiguous body framing, bodies
 * too large, a request refused before its body is read), an answer that
 * waits (suspended and resumed), a rescan asked for through the eventfd,
 * draining, and the listen address and request limits. */
#include <signal.h>
#include <sys/eventfd.h>

#include "auth.h"
#include "http_request.h"
#include "log.h"
#include "loopback.h"

static char root[64];

/* What the front adds to every answer but the console's. */
#define NOSNIFF_CSP                                                                               \
    "X-Content-Type-Options: nosniff\r\n"                                                          \
    "Content-Security-Policy: default-src 'none'; frame-ancestors 'none'\r\n"

static void make_root(void)
{
    lb_new_root(root, sizeof(root));
    lb_write_st(root, "m/model.safetensors",
                "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", "\1\2\3\4", 4);
}

/* The answer without its Date header (which the front adds). */
static char *undated(char *raw)
{
    char *d = strstr(raw, "\r\nDate: ");
    if (d) {
        char *end = strstr(d + 2, "\r\n");
        memmove(d, end, strlen(end) + 1);
    }
    return raw;
}

static char *ask(unsigned port, const char *request)
{
    size_t len;
    return undated(lb_raw(port, request, &len));
}

TEST(answers_on_the_wire)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    unsigned port = lb_listen(&s);
    char *a = ask(port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    CHECK_STR(a, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: application/json\r\n"
                 "Accept-Ranges: bytes\r\nCache-Control: no-cache\r\n" NOSNIFF_CSP
                 "Content-Length: 16\r\n\r\n"
                 "{\"status\":\"ok\"}\n");
    free(a);
    a = ask(port, "HEAD /v1/models/m/tensors/w HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    CHECK(strncmp(a, "HTTP/1.1 200 OK\r\n", 17) == 0);
    CHECK_CONTAINS(a, "\r\nContent-Length: 4\r\n\r\n");
    CHECK(strstr(a, "\r\n\r\n")[4] == '\0'); /* no body */
    free(a);
    a = ask(port, "GET /v1/models/m/tensors/w HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    CHECK(memcmp(strstr(a, "\r\n\r\n") + 4, "\1\2\3\4", 4) == 0);
    free(a);
    /* Two requests on one connection: the first answer keeps it open. */
    size_t len;
    char *two = lb_raw(port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                             "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                       &len);
    CHECK_CONTAINS(two, "{\"status\":\"ok\"}\n");
    CHECK_CONTAINS(two, "{\"status\":\"ready\"}\n");
    free(two);
    /* A document rendered on the renderer's thread: the request waits
     * suspended and is answered once resumed. */
    a = ask(port, "GET /v1/models/m/header HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    CHECK(strncmp(a, "HTTP/1.1 200 OK\r\n", 17) == 0);
    CHECK_CONTAINS(a, "\"data_offsets\":[0,4],\"file\":\"model.safetensors\"}}\n");
    free(a);
    /* The console sets its own policy, which is the only one it carries. */
    a = ask(port, "GET /ui/ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    CHECK(strncmp(a, "HTTP/1.1 200 OK\r\n", 17) == 0);
    CHECK_CONTAINS(a, "\r\nContent-Security-Policy: default-src 'none'; script-src 'self'");
    CHECK(strstr(strstr(a, "Content-Security-Policy") + 1, "Content-Security-Policy") == NULL);
    CHECK(strstr(strstr(a, "nosniff") + 1, "nosniff") == NULL);
    free(a);
    /* Draining: a connection made now is closed without an answer. */
    atomic_store(&s.srv.draining, 1);
    a = ask(port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    CHECK_STR(a, "");
    free(a);
    atomic_store(&s.srv.draining, 0);
    lb_stop(&s);
}

TEST(cors_on_the_wire)
{
    struct lb_server s;
    static const char *const opts[] = {"cors_origins=http://a.example", NULL};
    lb_start(&s, root, 0, opts);
    unsigned port = lb_listen(&s);
    char *a = ask(port, "GET /v1/models/nope HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://a.example\r\n"
                        "Connection: close\r\n\r\n");
    /* the CORS headers (respond.c) before the front's own two */
    CHECK_CONTAINS(a, "\r\nConnection: close\r\nContent-Type: application/json\r\n"
                      "Vary: Origin\r\n"
                      "Access-Control-Allow-Origin: http://a.example\r\n"
                      "Access-Control-Allow-Credentials: true\r\n"
                      "Access-Control-Expose-Headers: " CORS_EXPOSE "\r\n" NOSNIFF_CSP);
    free(a);
    lb_stop(&s);
}

TEST(refused_before_dispatch)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    unsigned port = lb_listen(&s);
    char *req = xstrdup("GET /healthz?a0=1");
    for (int i = 1; i < 40; i++) {
        char *next = xasprintf("%s&a%d=1", req, i);
        free(req);
        req = next;
    }
    char *full = xasprintf("%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", req);
    char *a = ask(port, full);
    CHECK_STR(a, "HTTP/1.1 414 URI Too Long\r\nConnection: close\r\n"
                 "Content-Type: application/json\r\n" NOSNIFF_CSP "Content-Length: 84\r\n\r\n"
                 "{\"error\":{\"code\":\"uri_too_long\",\"message\":\"the query has more than 32 "
                 "parameters\"}}\n");
    free(a);
    free(full);
    free(req);
    /* Too many fields: answered on the socket directly, whole. */
    char *many = xstrdup("GET /healthz HTTP/1.1\r\n");
    for (int i = 0; i < 101; i++) {
        char *next = xasprintf("%sX-F%d: 1\r\n", many, i);
        free(many);
        many = next;
    }
    full = xasprintf("%s\r\n", many);
    a = ask(port, full);
    CHECK_STR(a, "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: application/json\r\n"
                 NOSNIFF_CSP "Content-Length: 100\r\nConnection: close\r\n\r\n"
                 "{\"error\":{\"code\":\"headers_too_large\",\"message\":\"the request has 101 header "
                 "fields, more than 100\"}}\n");
    free(a);
    free(full);
    free(many);
    struct {
        const char *request, *status, *message;
    } framing[] = {
        {"GET /heal\0thz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", "400 Bad Request",
         "the request target contains a NUL byte"},
        {"POST /v1/models/m/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
         "Transfer-Encoding: chunked\r\n\r\n", "400 Bad Request",
         "a request must not carry both Content-Length and Transfer-Encoding"},
        {"POST /v1/models/m/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n",
         "501 Not Implemented", "the only transfer coding accepted is a single \\\"chunked\\\""},
        {"POST /v1/models/m/fetch HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
         "400 Bad Request", "Transfer-Encoding is not allowed in an HTTP/1.0 request"},
        {"POST /v1/models/m/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
         "Content-Length: 3\r\n\r\n",
         "400 Bad Request", "Content-Length must be one decimal number"},
        {"POST /v1/models/m/gpu HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 70000\r\n\r\n",
         "413 Content Too Large", "request bodies are limited to 65536 bytes here"},
        {"POST /v1/models/m/tensors/w HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello",
         "405 Method Not Allowed", "POST is not allowed here; allowed: GET, HEAD"},
    };
    for (size_t i = 0; i < ARRAY_LEN(framing); i++) {
        size_t n = strlen(framing[i].request);
        if (i == 0)
            n = sizeof("GET /heal\0thz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") - 1;
        int fd = lb_connect(port);
        CHECK(send(fd, framing[i].request, n, MSG_NOSIGNAL) == (ssize_t)n);
        size_t len;
        char *got = undated(lb_read_all(fd, &len)); /* the server closes */
        close(fd);
        char *line = xasprintf("HTTP/1.1 %s\r\n", framing[i].status);
        CHECK(strncmp(got, line, strlen(line)) == 0);
        CHECK_CONTAINS(got, "\r\nConnection: close\r\n");
        CHECK_CONTAINS(got, framing[i].message);
        free(line);
        free(got);
    }
    /* A chunked body found too large as it arrives. */
    char *big = xmalloc(70000);
    memset(big, 'x', 70000);
    int fd = lb_connect(port);
    const char *head = "POST /v1/models/m/gpu HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                       "\r\n11170\r\n";
    CHECK(send(fd, head, strlen(head), MSG_NOSIGNAL) == (ssize_t)strlen(head));
    CHECK(send(fd, big, 70000, MSG_NOSIGNAL) == 70000);
    CHECK(send(fd, "\r\n0\r\n\r\n", 7, MSG_NOSIGNAL) == 7);
    size_t len;
    char *got = lb_read_all(fd, &len);
    close(fd);
    CHECK(strncmp(got, "HTTP/1.1 413 Content Too Large\r\n", 32) == 0);
    CHECK_CONTAINS(got, "request bodies are limited to 65536 bytes here");
    free(got);
    free(big);
    lb_stop(&s);
}

TEST(token_refused_before_the_body)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    char err[256], *tokens = xasprintf("%s/../test_http.tokens.%d", root, getpid());
    test_write_file(tokens, "read read-token-0123456789\n", 27);
    CHECK(auth_load(&s.srv, tokens, err, sizeof(err)) == 0);
    unsigned port = lb_listen(&s);
    /* The headers promise a megabyte that never comes: the 401 is sent
     * before any of it is read, and the connection closed. */
    int fd = lb_connect(port);
    const char *req = "POST /v1/models/m/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\n"
                      "\r\n";
    CHECK(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req));
    size_t len;
    char *got = undated(lb_read_all(fd, &len));
    close(fd);
    CHECK_STR(got, "HTTP/1.1 401 Unauthorized\r\nConnection: close\r\n"
                   "Content-Type: application/json\r\n"
                   "WWW-Authenticate: Bearer realm=\"tensord\"\r\n" NOSNIFF_CSP
                   "Content-Length: 73\r\n\r\n"
                   "{\"error\":{\"code\":\"unauthorized\",\"message\":\"a bearer token is "
                   "required\"}}\n");
    free(got);
    unlink(tokens);
    free(tokens);
    lb_stop(&s);
}

TEST(rescan_asked_for)
{
    char r2[64];
    lb_new_root(r2, sizeof(r2));
    lb_write(r2, "m/config.json", "{}\n", 3);
    lb_write_st(r2, "m/model.safetensors",
                "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", "\1\2\3\4", 4);
    struct lb_server s;
    lb_start(&s, r2, 0, NULL);
    s.srv.rescan_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    unsigned port = lb_listen(&s);
    lb_touch(r2, "m/config.json"); /* written since the scan */
    char *a = ask(port, "GET /v1/models/m/files/config.json HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Connection: close\r\n\r\n");
    CHECK(strncmp(a, "HTTP/1.1 503 Service Unavailable\r\n", 34) == 0);
    CHECK_CONTAINS(a, "\"file_changed\"");
    uint64_t count = 0;
    CHECK(read(s.srv.rescan_fd, &count, sizeof(count)) == sizeof(count) && count == 1);
    free(a);
    close(s.srv.rescan_fd);
    lb_stop(&s);
    lb_remove_root(r2);
}

TEST(listen_addresses_and_limits)
{
    struct sockaddr_storage ss;
    unsigned len;
    CHECK(http_parse_listen("127.0.0.1:8077", &ss, &len) == 0 && ss.ss_family == AF_INET &&
          ntohs(((struct sockaddr_in *)&ss)->sin_port) == 8077);
    CHECK(http_parse_listen("[::1]:80", &ss, &len) == 0 && ss.ss_family == AF_INET6);
    CHECK(http_parse_listen(":9", &ss, &len) == 0);
    CHECK(http_parse_listen("127.0.0.1", &ss, &len) == -1);
    CHECK(http_parse_listen("127.0.0.1:", &ss, &len) == -1);
    CHECK(http_parse_listen("127.0.0.1:65536", &ss, &len) == -1);
    CHECK(http_parse_listen("127.0.0.1:8x", &ss, &len) == -1);
    struct config cfg;
    config_defaults(&cfg);
    cfg.max_request_header_bytes = 32768;
    CHECK_EQ_U64(http_request_limit(&cfg), 32768 - 8192);
    cfg.max_request_header_bytes = 4096;
    CHECK_EQ_U64(http_request_limit(&cfg), 4096 - 1024);
    config_free(&cfg);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    log_init("warn", "off");
    make_root();
    RUN(answers_on_the_wire);
    RUN(cors_on_the_wire);
    RUN(refused_before_dispatch);
    RUN(token_refused_before_the_body);
    RUN(rescan_asked_for);
    RUN(listen_addresses_and_limits);
    lb_remove_root(root);
    return TEST_SUMMARY();
}
