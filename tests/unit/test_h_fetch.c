/* Unit tests for server/handlers/h_fetch.c through the loopback driver: many
 * tensors as one safetensors file (read back here by the format's own
 * rules: an 8-byte little-endian header length, the JSON header, the data
 * at its offsets), by POST and by GET ?q=, with Range and conditional
 * requests, and every error byte for byte. */
#include <sys/time.h>

#include "loopback.h"

static char root[64];
static const unsigned char data[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static void make_root(void)
{
    lb_new_root(root, sizeof(root));
    lb_write_st(root, "m/model.safetensors",
                "{\"a\":{\"dtype\":\"U8\",\"shape\":[2,4],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,16]}}",
                data, sizeof(data));
    lb_write_st(root, "m2/model.safetensors",
                "{\"a\":{\"dtype\":\"U8\",\"shape\":[2,4],\"data_offsets\":[0,8]}}", data, 8);
}

/* The header JSON of a safetensors body (spaces it is padded with cut),
 * and its data after *data_at. */
static char *st_header(const struct lb_answer *r, size_t *data_at)
{
    uint64_t n = 0;
    for (int i = 0; i < 8 && r->len >= 8; i++)
        n |= (uint64_t)(unsigned char)r->body[i] << (8 * i);
    if (r->len < 8 + n)
        return xstrdup("");
    char *json = xstrndup(r->body + 8, n);
    while (json[0] && json[strlen(json) - 1] == ' ')
        json[strlen(json) - 1] = '\0';
    *data_at = 8 + n;
    return json;
}

static const char q_ab[] = "%7B%22tensors%22%3A%5B%22b%22%2C%22a%22%5D%7D"; /* {"tensors":["b","a"]} */

TEST(post_and_get)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_request(&s, "POST", "/v1/models/m/fetch", NULL,
                                    "{\"tensors\": [\"b\", {\"name\": \"a\", \"slice\": \"1\"}]}");
    CHECK_EQ_U64(r.status, 200);
    size_t at = 0;
    char *json = st_header(&r, &at);
    CHECK_CONTAINS(json, "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}");
    CHECK_CONTAINS(json, "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}");
    CHECK(r.len == at + 12 && memcmp(r.body + at, data + 8, 8) == 0 &&
          memcmp(r.body + at + 8, data + 4, 4) == 0);
    CHECK_STR(lb_header(&r, "Content-Type"), "application/octet-stream");
    const char *etag = lb_header(&r, "ETag");
    CHECK(etag && etag[0] == '"' && etag[1] == 'f' && strlen(etag) == 35);
    free(json);
    lb_free(&r);

    char *target = xasprintf("/v1/models/m/fetch?q=%s", q_ab);
    r = lb_get(&s, target, NULL);
    CHECK_EQ_U64(r.status, 200);
    json = st_header(&r, &at);
    CHECK(r.len == at + 16 && memcmp(r.body + at, data + 8, 8) == 0 &&
          memcmp(r.body + at + 8, data, 8) == 0);
    char *inm = xasprintf("If-None-Match: %s", lb_header(&r, "ETag"));
    const char *const h304[] = {inm, NULL};
    struct lb_answer c = lb_get(&s, target, h304);
    CHECK_EQ_U64(c.status, 304);
    lb_free(&c);
    char *range = xasprintf("Range: bytes=%zu-%zu", at + 8, at + 9);
    const char *const hr[] = {range, NULL};
    c = lb_get(&s, target, hr); /* an interrupted fetch resumes */
    CHECK_EQ_U64(c.status, 206);
    CHECK(c.len == 2 && memcmp(c.body, data, 2) == 0);
    lb_free(&c);
    c = lb_request(&s, "POST", "/v1/models/m/fetch", hr, "{\"tensors\":[\"b\",\"a\"]}");
    CHECK_EQ_U64(c.status, 206); /* a POST that only reads: Range applies */
    CHECK(c.len == 2 && memcmp(c.body, data, 2) == 0);
    lb_free(&c);
    c = lb_request(&s, "HEAD", target, NULL, NULL);
    CHECK(c.status == 200 && c.length == r.len && c.len == 0);
    lb_free(&c);
    free(range);
    free(inm);
    free(json);
    free(target);
    lb_free(&r);
    lb_stop(&s);
}

TEST(errors)
{
    struct lb_server s;
    static const char *const opts[] = {"max_fetch_tensors=1", NULL};
    lb_start(&s, root, LB_HASHED, opts);
    struct {
        const char *method, *target, *body, *want;
        unsigned status;
    } cases[] = {
        {"GET", "/v1/models/m/fetch?q=%zz", NULL,
         "{\"error\":{\"code\":\"bad_parameter\",\"message\":\"q has a malformed percent-escape or "
         "a NUL byte\"}}\n", 400},
        {"POST", "/v1/models/m/fetch?q=x", "{}",
         "{\"error\":{\"code\":\"bad_parameter\",\"message\":\"q is the GET form of the request; "
         "a POST sends it as its body\"}}\n", 400},
        {"POST", "/v1/models/m/fetch", "{\"tensors\":[\"nope\"]}",
         "{\"error\":{\"code\":\"tensor_not_found\",\"message\":\"model \\\"m\\\" has no tensor "
         "\\\"nope\\\"\"}}\n", 404},
        {"POST", "/v1/models/m/fetch", "{\"tensors\":[\"a\",\"a\"]}",
         "{\"error\":{\"code\":\"too_many_tensors\",\"message\":\"more than 1 tensors in one "
         "request (max_fetch_tensors)\"}}\n", 413},
        {"POST", "/v1/models/m/fetch", "{}",
         "{\"error\":{\"code\":\"too_many_tensors\",\"message\":\"model \\\"m\\\" has 2 tensors, "
         "more than the 1 one fetch may hold (max_fetch_tensors); list the ones you need\"}}\n",
         413},
        {"POST", "/v1/models/m/fetch", "{\"tensors\":[{\"name\":\"a\",\"slice\":\"7\"}]}",
         "{\"error\":{\"code\":\"bad_slice\",\"message\":\"tensor \\\"a\\\" U8 [2,4]: dimension "
         "0: index 7 out of range for size 2\"}}\n", 400},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct lb_answer r = lb_request(&s, cases[i].method, cases[i].target, NULL, cases[i].body);
        CHECK_ANSWER(r, cases[i].status, "Content-Type: application/json\r\n", cases[i].want);
        lb_free(&r);
    }
    struct lb_answer r = lb_request(&s, "POST", "/v1/models/m/fetch", NULL, "{");
    CHECK_EQ_U64(r.status, 400);
    const char *want = "{\"error\":{\"code\":\"bad_request\",\"message\":\"request is not valid "
                       "JSON: ";
    CHECK(strncmp(r.body, want, strlen(want)) == 0);
    lb_free(&r);
    lb_stop(&s);
}

TEST(written_after_validation)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    char *p = xasprintf("%s/m2/model.safetensors", root);
    struct timeval tv[2] = {{1, 0}, {1, 0}};
    utimes(p, tv);
    struct lb_answer r = lb_request(&s, "POST", "/v1/models/m2/fetch", NULL, "{}");
    CHECK_EQ_U64(r.status, 503);
    CHECK_CONTAINS(r.body, "\"file_changed\"");
    CHECK(r.rescan);
    lb_free(&r);
    free(p);
    lb_stop(&s);
}

int main(void)
{
    make_root();
    RUN(post_and_get);
    RUN(errors);
    RUN(written_after_validation); /* last: it writes a file of the root */
    lb_remove_root(root);
    return TEST_SUMMARY();
}
