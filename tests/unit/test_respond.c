/* Unit tests for server/http/respond.c, the filters every answer goes through
 * before the front sends it, byte for byte: preconditions (RFC 9110
 * §13.2.2: If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since)
 * with 304 and 412, Range (§14) with If-Range, 206 and multipart/byteranges
 * (§14.6) and 416, requests that act, small bodies read and checked, both
 * error dialects, documents, redirects and preflights, and compressed
 * documents (gzip to a client that accepts it, never a byte body). */
#include <sys/time.h>
#include <zlib.h>

#include "encoding.h"
#include "loopback.h"

static struct config cfg;
static struct server srv;

/* The reply for a over request (method, headers), as text: the status,
 * the headers ("Name: value\r\n"), then the body. */
struct out {
    unsigned status;
    char *head, *body;
    size_t len;
    uint64_t length;
    int no_body;
};

static struct out run(struct answer *a, const char *method, const char *const *headers)
{
    struct lb_request q;
    struct request_view v = lb_view(&q, &srv, method, "/x", headers);
    struct reply r;
    respond_reply(&v, a, &r);
    struct out o = {.status = r.status, .head = lb_head(a, &r), .length = r.length,
                    .no_body = r.no_body};
    o.body = lb_body(a, &r, NULL, &o.len);
    free(q.query);
    return o;
}

static void out_free(struct out *o)
{
    free(o->head);
    free(o->body);
}

/* A 26-byte representation in memory with both validators. */
static void alphabet(struct answer *a)
{
    answer_init(a);
    struct representation rep = {
        .body = {.prefix = "abcdefghijklmnopqrstuvwxyz", .prefix_len = 26, .fd = -1},
        .content_type = "text/plain",
        .etag = "\"v1\"",
        .mtime = 784111777, /* Sun, 06 Nov 1994 08:49:37 GMT */
    };
    answer_body(a, &rep);
}

#define HEAD_200 "Content-Type: text/plain\r\nAccept-Ranges: bytes\r\nCache-Control: no-cache\r\n" \
                 "ETag: \"v1\"\r\nLast-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
#define VALIDATORS "Cache-Control: no-cache\r\nETag: \"v1\"\r\n" \
                   "Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\n"

static struct out get(const char *method, const char *const *headers)
{
    struct answer a;
    alphabet(&a);
    struct out o = run(&a, method, headers);
    answer_free(&a);
    return o;
}

TEST(plain_and_head)
{
    struct out o = get("GET", NULL);
    CHECK_EQ_U64(o.status, 200);
    CHECK_STR(o.head, HEAD_200);
    CHECK_STR(o.body, "abcdefghijklmnopqrstuvwxyz");
    out_free(&o);
    o = get("HEAD", NULL);
    CHECK_EQ_U64(o.status, 200);
    CHECK_STR(o.head, HEAD_200);
    CHECK_EQ_U64(o.length, 26); /* the Content-Length a GET gets */
    out_free(&o);
}

TEST(preconditions)
{
    static const char *const inm[] = {"If-None-Match: W/\"v1\"", NULL};
    struct out o = get("GET", inm); /* weak comparison */
    CHECK_EQ_U64(o.status, 304);
    CHECK_STR(o.head, VALIDATORS);
    CHECK(o.no_body && o.length == 26 && o.len == 0);
    out_free(&o);
    static const char *const ims[] = {"If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT", NULL};
    o = get("GET", ims);
    CHECK_EQ_U64(o.status, 304);
    out_free(&o);
    static const char *const ims_ignored[] = {
        "If-None-Match: \"v2\"", "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT", NULL};
    o = get("GET", ims_ignored); /* If-None-Match decides: §13.2.2 step 4 skips IMS */
    CHECK_EQ_U64(o.status, 200);
    out_free(&o);
    static const char *const im[] = {"If-Match: \"v2\", \"v3\"", NULL};
    o = get("GET", im);
    CHECK_ANSWER(o, 412,
                 "Content-Type: application/json\r\n",
                 "{\"error\":{\"code\":\"precondition_failed\",\"message\":\"If-Match or "
                 "If-Unmodified-Since did not hold\"}}\n");
    out_free(&o);
    static const char *const weak_im[] = {"If-Match: W/\"v1\"", NULL};
    o = get("GET", weak_im); /* If-Match compares strongly */
    CHECK_EQ_U64(o.status, 412);
    out_free(&o);
    static const char *const ius[] = {"If-Unmodified-Since: Sat, 05 Nov 1994 08:49:37 GMT", NULL};
    o = get("HEAD", ius);
    CHECK_EQ_U64(o.status, 412);
    out_free(&o);
    static const char *const ius_ok[] = {"If-Match: \"v1\"",
                                         "If-Unmodified-Since: Sat, 05 Nov 1994 08:49:37 GMT", NULL};
    o = get("GET", ius_ok); /* If-Match holds: If-Unmodified-Since is not looked at */
    CHECK_EQ_U64(o.status, 200);
    out_free(&o);
    /* A method that acts evaluated its preconditions before acting: its
     * answer is neither 304 nor partial. */
    static const char *const star[] = {"If-None-Match: *", "Range: bytes=0-1", NULL};
    o = get("POST", star);
    CHECK_EQ_U64(o.status, 200);
    CHECK_STR(o.body, "abcdefghijklmnopqrstuvwxyz");
    out_free(&o);
}

TEST(ranges)
{
    static const char *const one[] = {"Range: bytes=2-4", NULL};
    struct out o = get("GET", one);
    CHECK_ANSWER(o, 206,
                 "Content-Type: text/plain\r\nContent-Range: bytes 2-4/26\r\n"
                 "Accept-Ranges: bytes\r\n" VALIDATORS,
                 "cde");
    out_free(&o);
    static const char *const suffix[] = {"Range: bytes=-3", NULL};
    o = get("GET", suffix);
    CHECK_EQ_U64(o.status, 206);
    CHECK_STR(o.body, "xyz");
    out_free(&o);
    static const char *const open_end[] = {"Range: bytes=24-99", NULL};
    o = get("GET", open_end); /* clamped to the body */
    CHECK_STR(lb_header(&(struct lb_answer){.head = o.head}, "Content-Range"), "bytes 24-25/26");
    CHECK_STR(o.body, "yz");
    out_free(&o);
    static const char *const unsat[] = {"Range: bytes=26-30", NULL};
    o = get("GET", unsat);
    CHECK_ANSWER(o, 416,
                 "Content-Type: application/json\r\nContent-Range: bytes */26\r\n",
                 "{\"error\":{\"code\":\"range_not_satisfiable\",\"message\":\"no range in "
                 "\\\"bytes=26-30\\\" overlaps the 26-byte body\"}}\n");
    out_free(&o);
    static const char *const bad[] = {"Range: bytes=5-1", NULL};
    o = get("GET", bad); /* malformed: ignored */
    CHECK_EQ_U64(o.status, 200);
    out_free(&o);
    static const char *const other_unit[] = {"Range: items=0-1", NULL};
    o = get("GET", other_unit);
    CHECK_EQ_U64(o.status, 200);
    out_free(&o);
    static const char *const if_range_no[] = {"Range: bytes=0-1", "If-Range: \"v0\"", NULL};
    o = get("GET", if_range_no);
    CHECK_EQ_U64(o.status, 200);
    CHECK_STR(o.body, "abcdefghijklmnopqrstuvwxyz");
    out_free(&o);
    static const char *const if_range_yes[] = {"Range: bytes=0-1", "If-Range: \"v1\"", NULL};
    o = get("GET", if_range_yes);
    CHECK_EQ_U64(o.status, 206);
    CHECK_STR(o.body, "ab");
    out_free(&o);
    static const char *const nm_first[] = {"Range: bytes=0-1", "If-None-Match: \"v1\"", NULL};
    o = get("GET", nm_first); /* preconditions before Range */
    CHECK_EQ_U64(o.status, 304);
    out_free(&o);
}

TEST(multipart)
{
    /* Parts further apart than RANGE_MERGE_GAP stay parts. */
    char text[400];
    for (size_t i = 0; i < sizeof(text); i++)
        text[i] = (char)('a' + i % 26);
    struct answer a;
    answer_init(&a);
    struct representation rep = {
        .body = {.prefix = text, .prefix_len = sizeof(text), .fd = -1},
        .content_type = "text/plain",
        .etag = "\"v1\"",
        .mtime = -1,
    };
    answer_body(&a, &rep);
    static const char *const two[] = {"Range: bytes=0-1,-2", NULL};
    struct out o = run(&a, "GET", two);
    CHECK_EQ_U64(o.status, 206);
    const char *ct = strstr(o.head, "Content-Type: multipart/byteranges; boundary=");
    CHECK(ct == o.head);
    char boundary[64] = "";
    if (ct)
        sscanf(ct + strlen("Content-Type: multipart/byteranges; boundary="), "%63[^\r]",
               boundary);
    CHECK(strncmp(boundary, "tensord-", 8) == 0 && strlen(boundary) == 32);
    char *want = xasprintf("--%s\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/400\r\n"
                           "\r\nab\r\n--%s\r\nContent-Type: text/plain\r\nContent-Range: bytes "
                           "398-399/400\r\n\r\nij\r\n--%s--\r\n",
                           boundary, boundary, boundary);
    CHECK_STR(o.body, want);
    CHECK_EQ_U64(o.length, strlen(want));
    CHECK(strstr(o.head, "Content-Range") == NULL); /* only inside the parts */
    free(want);
    out_free(&o);
    answer_free(&a);
    /* A second answer gets another boundary. */
    answer_init(&a);
    answer_body(&a, &rep);
    struct out o2 = run(&a, "GET", two);
    CHECK(boundary[0] && strstr(o2.head, boundary) == NULL);
    out_free(&o2);
    answer_free(&a);
    /* Close parts are merged into one. */
    answer_init(&a);
    answer_body(&a, &rep);
    static const char *const close_parts[] = {"Range: bytes=0-1,10-11", NULL};
    o = run(&a, "GET", close_parts);
    CHECK_EQ_U64(o.status, 206);
    CHECK_STR(o.body, "abcdefghijkl");
    out_free(&o);
    answer_free(&a);
    /* More parts than max_ranges: the whole body. */
    static const char *const many[] = {"Range: bytes=0-0,100-100,200-200", NULL};
    cfg.max_ranges = 2;
    answer_init(&a);
    answer_body(&a, &rep);
    o = run(&a, "GET", many);
    CHECK_EQ_U64(o.status, 200);
    out_free(&o);
    answer_free(&a);
    cfg.max_ranges = 100;
}

/* A representation of a file's bytes, checked against its validated
 * version. */
TEST(files_read_and_checked)
{
    char path[] = "/tmp/test_respond.XXXXXX";
    int fd = mkstemp(path);
    char data[100000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)('a' + i % 26);
    CHECK(write(fd, data, sizeof(data)) == (ssize_t)sizeof(data));
    struct fileio_stat st;
    CHECK(fileio_regular(fd, &st) == fd);
    struct answer a;
    answer_init(&a);
    struct representation rep = {
        .body = {.fd = fd, .data_len = sizeof(data)},
        .content_type = "application/octet-stream",
        .mtime = -1,
        .file_st = &st,
    };
    answer_body(&a, &rep);
    static const char *const small[] = {"Range: bytes=10-19", NULL};
    struct out o = run(&a, "GET", small);
    CHECK_EQ_U64(o.status, 206);
    CHECK_STR(o.body, "klmnopqrst");
    out_free(&o);
    answer_free(&a);

    /* The whole file is over 64 KiB: a span the front sends (sendfile or a
     * reader), not read here. */
    answer_init(&a);
    answer_body(&a, &rep);
    struct lb_request q;
    struct request_view v = lb_view(&q, &srv, "GET", "/x", NULL);
    struct reply r;
    respond_reply(&v, &a, &r);
    CHECK(r.status == 200 && r.n_pieces == 1 && r.pieces[0].mem == NULL &&
          r.pieces[0].len == sizeof(data) && r.counted);
    free(q.query);
    answer_free(&a);

    /* Written in place since it was validated: 503, and a rescan asked for. */
    struct timeval tv[2] = {{1, 0}, {1, 0}};
    CHECK(futimes(fd, tv) == 0);
    answer_init(&a);
    answer_body(&a, &rep);
    o = run(&a, "GET", small);
    CHECK_ANSWER(o, 503, "Content-Type: application/json\r\nRetry-After: 1\r\n",
                 "{\"error\":{\"code\":\"file_changed\",\"message\":\"the file changed on disk "
                 "since it was validated; retry once the daemon has rescanned it\"}}\n");
    CHECK(a.rescan);
    out_free(&o);
    answer_free(&a);
    answer_init(&a);
    answer_body(&a, &rep);
    o = run(&a, "GET", NULL); /* a large one is checked before its headers */
    CHECK_EQ_U64(o.status, 503);
    CHECK(a.rescan);
    out_free(&o);
    answer_free(&a);
    close(fd);
    unlink(path);
}

TEST(error_dialects)
{
    struct answer a;
    answer_init(&a);
    answer_error(&a, 404, "model_not_found", "no model named \"%s\"", "m\xc3\xbc");
    struct out o = run(&a, "GET", NULL);
    CHECK_ANSWER(o, 404, "Content-Type: application/json\r\n",
                 "{\"error\":{\"code\":\"model_not_found\",\"message\":\"no model named "
                 "\\\"m\xc3\xbc\\\"\"}}\n");
    out_free(&o);
    answer_free(&a);

    answer_init(&a);
    answer_header(&a, "X-Repo-Commit", "c0ffee");
    answer_hub_error(&a, 404, "EntryNotFound", 0, "x.json does not exist");
    o = run(&a, "GET", NULL);
    CHECK_ANSWER(o, 404,
                 "Content-Type: application/json\r\nX-Error-Code: EntryNotFound\r\n"
                 "X-Error-Message: x.json does not exist\r\nX-Repo-Commit: c0ffee\r\n",
                 "{\"error\":\"x.json does not exist\"}\n");
    out_free(&o);
    answer_free(&a);

    /* A message that is not one line of visible ASCII stays out of the header. */
    answer_init(&a);
    answer_hub_error(&a, 503, NULL, 0, "caf\xc3\xa9\nbusy");
    o = run(&a, "GET", NULL);
    CHECK_ANSWER(o, 503, "Content-Type: application/json\r\nRetry-After: 1\r\n",
                 "{\"error\":\"caf\xc3\xa9\\nbusy\"}\n");
    out_free(&o);
    answer_free(&a);

    answer_init(&a);
    answer_hub_error(&a, 503, NULL, 9, "wait");
    o = run(&a, "GET", NULL);
    CHECK_STR(o.head, "Content-Type: application/json\r\nX-Error-Message: wait\r\n"
                      "Retry-After: 9\r\n");
    out_free(&o);
    answer_free(&a);

    answer_init(&a);
    answer_error(&a, 405, "method_not_allowed", "PUT is not allowed here");
    a.error.allow = "GET, HEAD";
    o = run(&a, "PUT", NULL);
    CHECK_STR(o.head, "Content-Type: application/json\r\nAllow: GET, HEAD\r\n");
    out_free(&o);
    answer_free(&a);

    answer_init(&a);
    answer_error(&a, 401, "unauthorized", "a bearer token is required");
    a.close = 1;
    o = run(&a, "GET", NULL);
    CHECK_STR(o.head, "Content-Type: application/json\r\n"
                      "WWW-Authenticate: Bearer realm=\"tensord\"\r\nConnection: close\r\n");
    out_free(&o);
    answer_free(&a);

    answer_init(&a); /* nothing answered: the front's 500 */
    o = run(&a, "GET", NULL);
    CHECK_ANSWER(o, 500, "Content-Type: application/json\r\n",
                 "{\"error\":{\"code\":\"internal\",\"message\":\"the request got no answer\"}}\n");
    out_free(&o);
    answer_free(&a);
}

TEST(documents_redirects_preflights)
{
    struct answer a;
    answer_init(&a);
    answer_header(&a, "x-amz-bucket-region", "us-east-1");
    answer_doc(&a, 200, "application/xml", "<a/>", 4);
    static const char *const range[] = {"Range: bytes=0-0", "If-None-Match: *", NULL};
    struct out o = run(&a, "GET", range); /* no Range, no preconditions */
    CHECK_ANSWER(o, 200, "Content-Type: application/xml\r\nx-amz-bucket-region: us-east-1\r\n",
                 "<a/>");
    out_free(&o);
    answer_free(&a);

    answer_init(&a);
    answer_header(&a, "X-Repo-Commit", "c0ffee");
    answer_redirect(&a, 302, "/r/resolve/c0ffee/a%20b");
    o = run(&a, "GET", NULL);
    CHECK_ANSWER(o, 302,
                 "Content-Type: text/plain; charset=utf-8\r\n"
                 "Location: /r/resolve/c0ffee/a%20b\r\nX-Repo-Commit: c0ffee\r\n",
                 "Found. Redirecting to /r/resolve/c0ffee/a%20b\n");
    out_free(&o);
    answer_free(&a);

    answer_init(&a);
    answer_preflight(&a, "GET, HEAD", "range, if-none-match");
    static const char *const origin[] = {"Origin: http://a.example", NULL};
    cfg.cors_origins[0] = "http://a.example";
    cfg.n_cors_origins = 1;
    o = run(&a, "OPTIONS", origin);
    CHECK_ANSWER(o, 204,
                 "Vary: Origin\r\nAccess-Control-Allow-Origin: http://a.example\r\n"
                 "Access-Control-Allow-Credentials: true\r\n"
                 "Access-Control-Allow-Methods: GET, HEAD\r\n"
                 "Access-Control-Allow-Headers: range, if-none-match\r\n"
                 "Access-Control-Max-Age: 600\r\n",
                 "");
    cfg.n_cors_origins = 0;
    cfg.cors_origins[0] = NULL;
    out_free(&o);
    answer_free(&a);
}

TEST(tensor_and_document_headers)
{
    struct answer a;
    answer_init(&a);
    struct representation rep = {
        .body = {.prefix = "\x01\x02", .prefix_len = 2, .fd = -1},
        .content_type = "application/octet-stream",
        .mtime = -1,
        .cache_control = "public, max-age=31536000, immutable",
        .disposition = "attachment; filename=\"s.bin\"",
        .dtype = "U8",
        .shape = "",
    };
    answer_header(&a, "X-Extra", "e");
    answer_body(&a, &rep);
    struct out o = run(&a, "GET", NULL);
    CHECK_ANSWER(o, 200,
                 "Content-Type: application/octet-stream\r\nAccept-Ranges: bytes\r\n"
                 "Cache-Control: public, max-age=31536000, immutable\r\n"
                 "Content-Disposition: attachment; filename=\"s.bin\"\r\nX-Extra: e\r\n"
                 "X-Tensor-Dtype: U8\r\nX-Tensor-Shape:  \r\n",
                 "\x01\x02");
    out_free(&o);
    answer_free(&a);
}

/* A 4,000-byte JSON document (large enough to compress), with an ETag;
 * gzip (may be NULL) its form made already. */
static char doc_text[4001];

static void document(struct answer *a, int is_document, const char *gzip, size_t gzip_len)
{
    for (size_t i = 0; i < 4000; i++)
        doc_text[i] = "{\"a\":[1,2,3]},"[i % 14];
    answer_init(a);
    struct representation rep = {
        .body = {.prefix = doc_text, .prefix_len = 4000, .fd = -1},
        .content_type = "application/json",
        .etag = "\"d1\"",
        .mtime = -1,
        .document = is_document,
        .gzip = gzip,
        .gzip_len = gzip_len,
    };
    answer_body(a, &rep);
}

static long inflated(const struct out *o, char *buf, size_t cap)
{
    z_stream z = {0};
    CHECK(inflateInit2(&z, 15 + 16) == Z_OK);
    z.next_in = (Bytef *)o->body;
    z.avail_in = (uInt)o->len;
    z.next_out = (Bytef *)buf;
    z.avail_out = (uInt)cap;
    long n = inflate(&z, Z_FINISH) == Z_STREAM_END ? (long)(cap - z.avail_out) : -1;
    inflateEnd(&z);
    return n;
}

TEST(compressed_documents)
{
    static const char *const gz[] = {"Accept-Encoding: gzip, deflate, br", NULL};
    static char back[8192];
    struct answer a;
    document(&a, 1, NULL, 0);
    struct out o = run(&a, "GET", gz);
    CHECK_EQ_U64(o.status, 200);
    CHECK_STR(o.head, "Content-Type: application/json\r\nContent-Encoding: gzip\r\n"
                      "Cache-Control: no-cache\r\nETag: \"d1-gzip\"\r\n"
                      "Vary: Accept-Encoding\r\n");
    CHECK(o.len < 200 && o.length == o.len);
    CHECK(inflated(&o, back, sizeof(back)) == 4000 && memcmp(back, doc_text, 4000) == 0);
    out_free(&o);
    answer_free(&a);
    /* without Accept-Encoding: as it is, and still Vary */
    document(&a, 1, NULL, 0);
    o = run(&a, "GET", NULL);
    CHECK_STR(o.head, "Content-Type: application/json\r\nAccept-Ranges: bytes\r\n"
                      "Cache-Control: no-cache\r\nETag: \"d1\"\r\nVary: Accept-Encoding\r\n");
    CHECK(o.len == 4000);
    out_free(&o);
    answer_free(&a);
    /* a Range reads the stored bytes */
    static const char *const range[] = {"Accept-Encoding: gzip", "Range: bytes=0-3", NULL};
    document(&a, 1, NULL, 0);
    o = run(&a, "GET", range);
    CHECK_EQ_U64(o.status, 206);
    CHECK_STR(o.body, "{\"a\"");
    CHECK(!strstr(o.head, "Content-Encoding"));
    out_free(&o);
    answer_free(&a);
    /* each form has its own validator */
    static const char *const inm_gz[] = {"Accept-Encoding: gzip", "If-None-Match: \"d1-gzip\"",
                                         NULL};
    static const char *const inm_plain[] = {"Accept-Encoding: gzip", "If-None-Match: \"d1\"",
                                            NULL};
    document(&a, 1, NULL, 0);
    o = run(&a, "GET", inm_gz);
    CHECK_EQ_U64(o.status, 304);
    CHECK_CONTAINS(o.head, "ETag: \"d1-gzip\"\r\n");
    CHECK_CONTAINS(o.head, "Vary: Accept-Encoding\r\n");
    out_free(&o);
    answer_free(&a);
    document(&a, 1, NULL, 0);
    o = run(&a, "GET", inm_plain);
    CHECK_EQ_U64(o.status, 200);
    CHECK_CONTAINS(o.head, "Content-Encoding: gzip\r\n");
    out_free(&o);
    answer_free(&a);
    /* HEAD: the compressed form's length */
    document(&a, 1, NULL, 0);
    o = run(&a, "HEAD", gz);
    CHECK_EQ_U64(o.status, 200);
    CHECK(o.length > 0 && o.length < 200 && strstr(o.head, "Content-Encoding: gzip"));
    out_free(&o);
    answer_free(&a);
    /* a form made already is the one sent */
    document(&a, 1, "made-before", 11);
    o = run(&a, "GET", gz);
    CHECK_STR(o.body, "made-before");
    out_free(&o);
    answer_free(&a);
    /* a document over ENCODING_ANSWER_MAX is not compressed for one answer
     * (an HTTP thread's time): as it is, unless its gzip form was kept */
    {
        size_t big = ENCODING_ANSWER_MAX + 1;
        char *text = xmalloc(big);
        memset(text, 'x', big);
        answer_init(&a);
        struct representation rep = {
            .body = {.prefix = text, .prefix_len = big, .fd = -1},
            .content_type = "application/json", .mtime = -1, .document = 1};
        answer_body(&a, &rep);
        o = run(&a, "GET", gz);
        CHECK(o.len == big && !strstr(o.head, "Content-Encoding"));
        CHECK_CONTAINS(o.head, "Vary: Accept-Encoding\r\n");
        out_free(&o);
        answer_free(&a);
        answer_init(&a);
        rep.gzip = "kept", rep.gzip_len = 4;
        answer_body(&a, &rep);
        o = run(&a, "GET", gz);
        CHECK_STR(o.body, "kept");
        out_free(&o);
        answer_free(&a);
        free(text);
    }
    /* a byte body never */
    document(&a, 0, NULL, 0);
    o = run(&a, "GET", gz);
    CHECK(o.len == 4000 && !strstr(o.head, "Content-Encoding") && !strstr(o.head, "Vary"));
    out_free(&o);
    answer_free(&a);
    /* a small document neither, and nothing varies */
    answer_init(&a);
    struct representation small = {
        .body = {.prefix = "{}", .prefix_len = 2, .fd = -1},
        .content_type = "application/json", .mtime = -1, .document = 1};
    answer_body(&a, &small);
    o = run(&a, "GET", gz);
    CHECK_STR(o.head, "Content-Type: application/json\r\nAccept-Ranges: bytes\r\n"
                      "Cache-Control: no-cache\r\n");
    out_free(&o);
    answer_free(&a);
    /* a document sent as it is (S3's XML): compressed too; Vary is one
     * header with CORS's Origin */
    static const char *const origin[] = {"Accept-Encoding: gzip", "Origin: http://a.example",
                                         NULL};
    cfg.cors_origins[0] = "http://a.example";
    cfg.n_cors_origins = 1;
    answer_init(&a);
    answer_doc(&a, 200, "application/xml", doc_text, 4000);
    o = run(&a, "GET", origin);
    CHECK_CONTAINS(o.head, "Content-Encoding: gzip\r\n");
    CHECK_CONTAINS(o.head, "Vary: Accept-Encoding, Origin\r\n");
    CHECK(inflated(&o, back, sizeof(back)) == 4000 && memcmp(back, doc_text, 4000) == 0);
    cfg.n_cors_origins = 0;
    out_free(&o);
    answer_free(&a);
}

int main(void)
{
    config_defaults(&cfg);
    srv.cfg = &cfg;
    RUN(plain_and_head);
    RUN(preconditions);
    RUN(ranges);
    RUN(multipart);
    RUN(files_read_and_checked);
    RUN(error_dialects);
    RUN(documents_redirects_preflights);
    RUN(tensor_and_document_headers);
    RUN(compressed_documents);
    config_free(&cfg);
    return TEST_SUMMARY();
}
