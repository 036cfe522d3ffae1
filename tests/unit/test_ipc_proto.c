/* Tests for gpu/ipc_proto.c: framing (partial, exact, oversized, back to
 * back), request parsing and its error messages, and the tsum64 checksum's
 * split property that the loader and the client rely on. */
#include <stdlib.h>
#include <string.h>

#include "ipc_proto.h"
#include "test.h"

#include "../ref/ipc_proto_jansson.c"
#include "util.h"

static int parse(const char *json, struct ipc_request *req, struct st_error *err)
{
    return ipc_request_parse(json, strlen(json), req, err);
}

TEST(frame_partial_and_exact)
{
    unsigned char buf[64];
    const unsigned char *p;
    size_t plen, used;
    ipc_put_header(buf, 5);
    memcpy(buf + 4, "hello", 5);
    for (size_t n = 0; n < 9; n++)
        CHECK(ipc_frame_next(buf, n, 100, &p, &plen, &used) == IPC_FRAME_NEED_MORE);
    CHECK(ipc_frame_next(buf, 9, 100, &p, &plen, &used) == IPC_FRAME_READY);
    CHECK_EQ_U64(plen, 5);
    CHECK_EQ_U64(used, 9);
    CHECK(p == buf + 4);
    CHECK(ipc_get_header(buf) == 5);
}

TEST(frame_back_to_back_and_empty)
{
    unsigned char buf[32];
    const unsigned char *p;
    size_t plen, used;
    ipc_put_header(buf, 0);
    ipc_put_header(buf + 4, 2);
    memcpy(buf + 8, "{}", 2);
    CHECK(ipc_frame_next(buf, 10, 100, &p, &plen, &used) == IPC_FRAME_READY);
    CHECK_EQ_U64(plen, 0);
    CHECK_EQ_U64(used, 4);
    CHECK(ipc_frame_next(buf + used, 10 - used, 100, &p, &plen, &used) == IPC_FRAME_READY);
    CHECK_EQ_U64(plen, 2);
    CHECK(memcmp(p, "{}", 2) == 0);
}

TEST(frame_too_large_before_the_body_arrives)
{
    unsigned char buf[4];
    const unsigned char *p;
    size_t plen, used;
    ipc_put_header(buf, IPC_MAX_REQUEST + 1);
    CHECK(ipc_frame_next(buf, 4, IPC_MAX_REQUEST, &p, &plen, &used) == IPC_FRAME_TOO_LARGE);
    ipc_put_header(buf, IPC_MAX_REQUEST);
    CHECK(ipc_frame_next(buf, 4, IPC_MAX_REQUEST, &p, &plen, &used) == IPC_FRAME_NEED_MORE);
    ipc_put_header(buf, 0xFFFFFFFFu);
    CHECK(ipc_get_header(buf) == 0xFFFFFFFFu);
    CHECK(ipc_frame_next(buf, 4, IPC_MAX_REQUEST, &p, &plen, &used) == IPC_FRAME_TOO_LARGE);
}

TEST(parse_requests)
{
    struct ipc_request *r = xcalloc(1, sizeof(*r));
    struct st_error err = {0};
    CHECK(parse("{\"op\":\"open\",\"model\":\"org/m\",\"device\":\"cuda:1\"}", r, &err) == 0);
    CHECK(r->op == IPC_OP_OPEN);
    CHECK_STR(r->model, "org/m");
    CHECK_STR(r->device, "cuda:1");
    CHECK(r->rank == -1);
    CHECK_STR(r->prefer, "");
    CHECK(parse("{\"op\":\"open\",\"model\":\"m\",\"future\":[1]}", r, &err) == 0);
    CHECK_STR(r->device, "");
    CHECK(parse("{\"op\":\"open\",\"model\":\"m\",\"rank\":3,\"prefer_device\":\"GPU-1\"}", r,
                &err) == 0);
    CHECK(r->rank == 3);
    CHECK_STR(r->prefer, "GPU-1");
    CHECK(parse(" {\"op\":\"list\"} ", r, &err) == 0 && r->op == IPC_OP_LIST);
    CHECK(parse("{\"op\":\"close\"}", r, &err) == 0 && r->op == IPC_OP_CLOSE);
    free(r);
}

static void expect_bad(const char *json, const char *msg)
{
    struct ipc_request *r = xcalloc(1, sizeof(*r));
    struct st_error err = {0};
    int rc = ipc_request_parse(json, strlen(json), r, &err);
    if (rc != -EINVAL || err.code != ST_ERR_INVALID_ARGUMENT || !strstr(err.message, msg)) {
        fprintf(stderr, "  for %s: rc %d, \"%s\", want \"%s\"\n", json, rc, err.message, msg);
        test_failed_flag = 1;
    }
    free(r);
}

TEST(parse_errors_name_the_problem)
{
    expect_bad("", "not JSON");
    expect_bad("{", "not JSON");
    expect_bad("{\"op\":\"list\"} x", "not JSON");
    expect_bad("[]", "must be a JSON object");
    expect_bad("\"open\"", "must be a JSON object");
    expect_bad("{}", "\"op\"");
    expect_bad("{\"op\":1}", "\"op\"");
    expect_bad("{\"op\":\"fly\"}", "unknown op \"fly\"");
    expect_bad("{\"op\":\"open\"}", "\"model\" is required");
    expect_bad("{\"op\":\"open\",\"model\":3}", "\"model\" must be a string");
    expect_bad("{\"op\":\"open\",\"model\":\"\"}", "\"model\" must not be empty");
    expect_bad("{\"op\":\"open\",\"model\":\"m\",\"device\":null}", "\"device\" must be a string");
    expect_bad("{\"op\":\"open\",\"model\":\"m\",\"rank\":-1}", "\"rank\" (a non-negative");
    expect_bad("{\"op\":\"open\",\"model\":\"m\",\"rank\":\"1\"}", "\"rank\" (a non-negative");
    expect_bad("{\"op\":\"open\",\"model\":\"m\",\"rank\":2147483648}", "below 2^31");
    expect_bad("{\"op\":\"open\",\"model\":\"m\",\"prefer_device\":1}",
               "\"prefer_device\" must be a string");
    expect_bad("{\"op\":\"list\",\"op\":\"list\"}", "not JSON");
    expect_bad("{\"op\":\"open\",\"model\":\"a\\u0000b\"}", "not JSON");
    char *big = xmalloc(IPC_MAX_NAME + 64);
    int n = snprintf(big, 64, "{\"op\":\"open\",\"model\":\"");
    memset(big + n, 'x', IPC_MAX_NAME + 1);
    strcpy(big + n + IPC_MAX_NAME + 1, "\"}");
    expect_bad(big, "at most 4096 bytes");
    big[n + IPC_MAX_NAME] = '"';
    big[n + IPC_MAX_NAME + 1] = '}';
    big[n + IPC_MAX_NAME + 2] = '\0';
    struct ipc_request *r = xcalloc(1, sizeof(*r));
    struct st_error err = {0};
    CHECK(ipc_request_parse(big, strlen(big), r, &err) == 0);
    CHECK_EQ_U64(strlen(r->model), IPC_MAX_NAME);
    free(r);
    free(big);
}

/* Protocol 2's ops: hello names a protocol, release a lease id. */
TEST(parse_hello_and_release)
{
    struct ipc_request r;
    struct st_error err = {0};
    const char *hello = "{\"op\":\"hello\",\"protocol\":2}";
    CHECK(ipc_request_parse(hello, strlen(hello), &r, &err) == 0);
    CHECK(r.op == IPC_OP_HELLO && r.protocol == 2);
    const char *rel = "{\"op\":\"release\",\"lease\":18446744073709551}";
    CHECK(ipc_request_parse(rel, strlen(rel), &r, &err) == 0);
    CHECK(r.op == IPC_OP_RELEASE && r.lease == 18446744073709551ULL);
    const char *bad[] = {"{\"op\":\"release\"}", "{\"op\":\"release\",\"lease\":-1}",
                         "{\"op\":\"release\",\"lease\":\"7\"}", "{\"op\":\"hello\"}",
                         "{\"op\":\"hello\",\"protocol\":1.5}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err.message[0] = '\0';
        CHECK(ipc_request_parse(bad[i], strlen(bad[i]), &r, &err) == -EINVAL);
        CHECK(strstr(err.message, "integer") != NULL);
    }
    /* The largest valid request fits the limit: two names of IPC_MAX_NAME
     * bytes, every byte \u-escaped. */
    CHECK(2 * (6 * IPC_MAX_NAME + 16) + 64 < IPC_MAX_REQUEST);
}

TEST(tsum_pieces_add_up)
{
    unsigned char buf[1000];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i * 7 + 3);
    uint64_t whole = ipc_tsum_final(ipc_tsum_add(0, buf, sizeof(buf), 0), sizeof(buf));
    /* any split at multiples of 8, in any order */
    uint64_t acc = 0;
    acc = ipc_tsum_add(acc, buf + 512, sizeof(buf) - 512, 512);
    acc = ipc_tsum_add(acc, buf, 8, 0);
    acc = ipc_tsum_add(acc, buf + 8, 504, 8);
    CHECK_EQ_U64(ipc_tsum_final(acc, sizeof(buf)), whole);
    /* one flipped bit, two swapped words, a shorter length all change it */
    buf[999] ^= 1;
    CHECK(ipc_tsum_final(ipc_tsum_add(0, buf, sizeof(buf), 0), sizeof(buf)) != whole);
    buf[999] ^= 1;
    unsigned char sw[1000];
    memcpy(sw, buf, sizeof(buf));
    memcpy(sw, buf + 8, 8);
    memcpy(sw + 8, buf, 8);
    CHECK(ipc_tsum_final(ipc_tsum_add(0, sw, sizeof(sw), 0), sizeof(sw)) != whole);
    unsigned char z[16] = {1};
    CHECK(ipc_tsum_final(ipc_tsum_add(0, z, 9, 0), 9) != ipc_tsum_final(ipc_tsum_add(0, z, 16, 0), 16));
    CHECK(ipc_tsum_final(0, 0) == ipc_tsum_final(ipc_tsum_add(0, z + 1, 0, 0), 0));
}

/* The json_scan parser answers every request exactly as the jansson one
 * it replaced (tests/ref/ipc_proto_jansson.c): the outcome, the fields, and
 * for UTF-8 input the whole message, syntax errors with their byte. */
TEST(parse_agrees_with_jansson)
{
    static const char *const inputs[] = {
        "", " ", "{", "}", "[", "[]", "[1,2", "1", "-0", "1e5", "\"open\"", "null", "true",
        "{}", "{\"op\":\"list\"}", "{\"op\":\"list\"} x", "{\"op\":\"list\"}  \n",
        "{\"op\":\"list\",}", "{\"op\" \"list\"}", "{op:1}", "{\"op\":\"li\\u0073t\"}",
        "{\"\\u006fp\":\"close\"}", "{\"op\":\"list\",\"op\":\"list\"}",
        "{\"op\":\"list\",\"o\\u0070\":\"list\"}", "{\"op\":1}", "{\"op\":null}", "{\"op\":[]}",
        "{\"op\":\"fly\"}", "{\"op\":\"openx\"}", "{\"op\":\"ope\"}",
        "{\"op\":\"open\"}", "{\"op\":\"open\",\"model\":3}", "{\"op\":\"open\",\"model\":\"\"}",
        "{\"op\":\"open\",\"model\":\"m\",\"device\":null}",
        "{\"op\":\"open\",\"model\":\"m\",\"device\":\"\"}",
        "{\"op\":\"open\",\"model\":\"m\",\"rank\":0}", "{\"op\":\"open\",\"model\":\"m\",\"rank\":-1}",
        "{\"op\":\"open\",\"model\":\"m\",\"rank\":2147483647}",
        "{\"op\":\"open\",\"model\":\"m\",\"rank\":2147483648}",
        "{\"op\":\"open\",\"model\":\"m\",\"rank\":1.5}", "{\"op\":\"open\",\"model\":\"m\",\"rank\":null}",
        "{\"op\":\"open\",\"model\":\"m\",\"prefer_device\":\"GPU-x\",\"device\":\"cuda:0\"}",
        "{\"op\":\"open\",\"model\":\"m\",\"prefer_device\":[]}",
        "{\"op\":\"open\",\"model\":\"a\\u0000b\"}", "{\"op\":\"open\",\"model\":\"\\ud800\"}",
        "{\"op\":\"open\",\"model\":\"\\u00e9\\ud83d\\ude00/x\",\"device\":\"cuda:1\",\"x\":{}}",
        "{\"op\":\"release\"}", "{\"op\":\"release\",\"lease\":-1}", "{\"op\":\"release\",\"lease\":1.0}",
        "{\"op\":\"release\",\"lease\":9223372036854775807}",
        "{\"op\":\"release\",\"lease\":9223372036854775808}", "{\"op\":\"release\",\"lease\":01}",
        "{\"op\":\"checksums\",\"lease\":3}", "{\"op\":\"checksums\"}",
        "{\"op\":\"hello\",\"protocol\":2}", "{\"op\":\"hello\",\"protocol\":\"2\"}",
        "{\"op\":\"close\",\"nested\":[[[{\"a\":[1,{\"b\":null}]}]]]}", "{\"op\":\"close\",\"n\":NaN}",
        "{\"op\":\"\\u0000\"}", "{\"a\\u0000\":1}", "{\"op\":\"x\x01\"}", "\xef\xbb\xbf{}",
        "{\"op\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
    };
    char why[1200];
    for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
        if (ipc_proto_compare(inputs[i], strlen(inputs[i]), why, sizeof(why))) {
            fprintf(stderr, "  %s: %s\n", inputs[i], why);
            test_failed_flag = 1;
        }
    }
    /* Nesting at jansson's limit and one past it. */
    for (int depth = 2046; depth <= 2049; depth++) {
        char *doc = xmalloc((size_t)depth * 2 + 64);
        int n = sprintf(doc, "{\"op\":\"list\",\"x\":");
        for (int d = 1; d < depth; d++)
            doc[n++] = '[';
        for (int d = 1; d < depth; d++)
            doc[n++] = ']';
        strcpy(doc + n, "}");
        if (ipc_proto_compare(doc, strlen(doc), why, sizeof(why))) {
            fprintf(stderr, "  depth %d: %s\n", depth, why);
            test_failed_flag = 1;
        }
        free(doc);
    }
}

int main(void)
{
    RUN(frame_partial_and_exact);
    RUN(frame_back_to_back_and_empty);
    RUN(frame_too_large_before_the_body_arrives);
    RUN(parse_requests);
    RUN(parse_hello_and_release);
    RUN(parse_errors_name_the_problem);
    RUN(parse_agrees_with_jansson);
    RUN(tsum_pieces_add_up);
    return TEST_SUMMARY();
}
