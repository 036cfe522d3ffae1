/* Unit tests for server/http/stream.c, the bodies the front sends, over a real
 * loopback socket: a file span with sendfile and, with sendfile off,
 * through the reader (which counter each adds to), multipart/byteranges
 * over a file, a shared document larger than one write sent in blocks,
 * and a file written while it is sent: the connection is cut short of its
 * Content-Length, never padded or mixed. */
#include <signal.h>
#include <sys/time.h>

#include "log.h"
#include "loopback.h"
#include "metrics.h"

#define BIG (1u << 20)
#define HUGE_SIZE (64u << 20)

static char root[64];
static char *big;

static void make_root(void)
{
    lb_new_root(root, sizeof(root));
    big = xmalloc(BIG);
    for (size_t i = 0; i < BIG; i++)
        big[i] = (char)(i * 7 + i / 251);
    lb_write(root, "m/data.bin", big, BIG);
    /* 64 MiB of zeros (sparse): far more than socket buffers hold. */
    char *huge = xasprintf("%s/m/huge.bin", root);
    int fd = open(huge, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)HUGE_SIZE) == 0);
    close(fd);
    free(huge);
    /* A model whose description is well over 64 KiB. */
    char *json = xstrdup("{");
    for (int i = 0; i < 2000; i++) {
        char *next = xasprintf("%s%s\"tensor.%04d\":{\"dtype\":\"U8\",\"shape\":[1],"
                               "\"data_offsets\":[%d,%d]}", json, i ? "," : "", i, i, i + 1);
        free(json);
        json = next;
    }
    char *done = xasprintf("%s}", json);
    lb_write_st(root, "m/model.safetensors", done, big, 2000);
    free(done);
    free(json);
}

/* The counter of bytes sent by method, from the metrics text. */
static uint64_t sent_by(const char *method)
{
    char *text = metrics_render_prometheus(), *key = xasprintf(
        "tensord_sent_bytes_total{method=\"%s\"} ", method);
    const char *at = strstr(text, key);
    uint64_t n = at ? strtoull(at + strlen(key), NULL, 10) : 0;
    free(key);
    free(text);
    return n;
}

/* GET target; the body after the headers, and *status. */
static char *get(unsigned port, const char *target, const char *extra, size_t *len,
                 unsigned *status)
{
    char *req = xasprintf("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s\r\n", target,
                          extra ? extra : "");
    size_t n;
    char *raw = lb_raw(port, req, &n);
    free(req);
    *status = 0;
    sscanf(raw, "HTTP/1.1 %u", status);
    char *body = strstr(raw, "\r\n\r\n");
    size_t at = body ? (size_t)(body + 4 - raw) : n;
    *len = n - at;
    char *out = xmalloc(*len + 1);
    memcpy(out, raw + at, *len);
    out[*len] = '\0';
    free(raw);
    return out;
}

TEST(sendfile_and_reader)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    unsigned port = lb_listen(&s), st;
    size_t len;
    uint64_t sf0 = sent_by("sendfile"), cp0;
    char *body = get(port, "/v1/models/m/files/data.bin", NULL, &len, &st);
    CHECK(st == 200 && len == BIG && memcmp(body, big, BIG) == 0);
    free(body);
    /* the counters are added when the request ends, after the client has its bytes */
    WAIT_UNTIL(sent_by("sendfile") - sf0 >= BIG, TEST_WAIT_MS);
    CHECK_EQ_U64(sent_by("sendfile") - sf0, BIG);
    body = get(port, "/v1/models/m/files/data.bin", "Range: bytes=100000-\r\n", &len, &st);
    CHECK(st == 206 && len == BIG - 100000 && memcmp(body, big + 100000, len) == 0);
    free(body);
    lb_stop(&s);

    static const char *const no_sendfile[] = {"sendfile=false", NULL};
    lb_start(&s, root, 0, no_sendfile);
    port = lb_listen(&s);
    sf0 = sent_by("sendfile");
    cp0 = sent_by("copy");
    body = get(port, "/v1/models/m/files/data.bin", NULL, &len, &st);
    CHECK(st == 200 && len == BIG && memcmp(body, big, BIG) == 0);
    free(body);
    WAIT_UNTIL(sent_by("copy") - cp0 >= BIG, TEST_WAIT_MS);
    CHECK_EQ_U64(sent_by("copy") - cp0, BIG);
    CHECK_EQ_U64(sent_by("sendfile"), sf0); /* added with copy's, at the same end */
    lb_stop(&s);
}

TEST(multipart_over_a_file)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    unsigned port = lb_listen(&s), st;
    size_t len;
    char *req = xasprintf("GET /v1/models/m/files/data.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Connection: close\r\nRange: bytes=10-19,500000-500009\r\n\r\n");
    char *raw = lb_raw(port, req, &len);
    free(req);
    char boundary[64] = "";
    const char *b = strstr(raw, "boundary=");
    CHECK(b != NULL);
    if (b)
        sscanf(b + 9, "%63[^\r]", boundary);
    char *body = strstr(raw, "\r\n\r\n") + 4;
    /* The parts' bytes are binary: compare the framing and the bytes apart. */
    size_t blen = len - (size_t)(body - raw);
    char *expect = xmalloc(blen + 1);
    size_t n = (size_t)snprintf(expect, blen + 1,
                                "--%s\r\nContent-Type: application/octet-stream\r\nContent-Range: "
                                "bytes 10-19/%u\r\n\r\n", boundary, BIG);
    CHECK(blen > n && memcmp(body, expect, n) == 0 && memcmp(body + n, big + 10, 10) == 0);
    char *second = xasprintf("\r\n--%s\r\nContent-Type: application/octet-stream\r\n"
                             "Content-Range: bytes 500000-500009/%u\r\n\r\n", boundary, BIG);
    CHECK(memcmp(body + n + 10, second, strlen(second)) == 0);
    CHECK(memcmp(body + n + 10 + strlen(second), big + 500000, 10) == 0);
    char *end = xasprintf("\r\n--%s--\r\n", boundary);
    CHECK(blen == n + 10 + strlen(second) + 10 + strlen(end));
    CHECK(memcmp(body + blen - strlen(end), end, strlen(end)) == 0);
    free(end);
    free(second);
    free(expect);
    free(raw);
    (void)st;
    lb_stop(&s);
}

TEST(large_document_in_blocks)
{
    struct lb_server s;
    lb_start(&s, root, 0, NULL);
    struct lb_answer want = lb_get(&s, "/v1/models/m", NULL); /* the loopback's reading */
    CHECK(want.status == 200 && want.len > 3 * 65536);
    unsigned port = lb_listen(&s), st;
    size_t len;
    char *body = get(port, "/v1/models/m", NULL, &len, &st);
    CHECK(st == 200 && len == want.len && memcmp(body, want.body, len) == 0);
    free(body);
    body = get(port, "/v1/models/m", "Range: bytes=70000-70009\r\n", &len, &st);
    CHECK(st == 206 && len == 10 && memcmp(body, want.body + 70000, 10) == 0);
    free(body);
    lb_free(&want);
    lb_stop(&s);
}

TEST(written_while_sent)
{
    struct lb_server s;
    static const char *const no_sendfile[] = {"sendfile=false", NULL};
    lb_start(&s, root, 0, no_sendfile);
    unsigned port = lb_listen(&s);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)); /* the server gets ahead little */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    const char *req = "GET /v1/models/m/files/huge.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Connection: close\r\n\r\n";
    CHECK(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req));
    char buf[4096];
    CHECK(recv(fd, buf, sizeof(buf), MSG_WAITALL) == (ssize_t)sizeof(buf));
    lb_touch(root, "m/huge.bin"); /* its mtime moves: another version */
    size_t len;
    char *rest = lb_read_all(fd, &len);
    close(fd);
    CHECK(sizeof(buf) + len < HUGE_SIZE / 2); /* cut short */
    free(rest);
    lb_stop(&s);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    log_init("warn", "off");
    make_root();
    RUN(sendfile_and_reader);
    RUN(multipart_over_a_file);
    RUN(large_document_in_blocks);
    RUN(written_while_sent); /* last: it writes a file of the root */
    lb_remove_root(root);
    free(big);
    return TEST_SUMMARY();
}
