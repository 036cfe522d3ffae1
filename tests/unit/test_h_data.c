/* Unit tests for server/handlers/h_data.c through the loopback driver, byte for
 * byte: a file's bytes, its header from memory, Range and conditional
 * requests on both (the file's ETag is its SHA-256, computed here with
 * OpenSSL); a tensor's bytes, slices, the npy form (NumPy's format
 * specification: magic, version 1.0, the dict padded to 64 bytes) and the
 * safetensors form; every parameter error; a file written after it was
 * validated (503 and a rescan); the GPU endpoint without GPU sharing, and
 * gpu_doc's outcomes as it answers them. */
#include <errno.h>
#include <openssl/sha.h>
#include <sys/time.h>

#include "gpu_req.h"
#include "handlers.h"
#include "loopback.h"

static char root[64];
static const char st_json[] = "{\"w\":{\"dtype\":\"U8\",\"shape\":[3,4],\"data_offsets\":[0,12]},"
                              "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[12,16]}}";
static unsigned char data[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x80, 0x3f, 0, 0x40};
static char file_bytes[8 + sizeof(st_json) - 1 + sizeof(data)];
static char file_sha[65];

static void make_root(void)
{
    lb_new_root(root, sizeof(root));
    lb_write_st(root, "m/model.safetensors", st_json, data, sizeof(data));
    lb_write(root, "m/config.json", "{\"a\": 1}\n", 9);
    lb_write_st(root, "m2/model.safetensors", st_json, data, sizeof(data));
    char *p = xasprintf("%s/m/model.safetensors", root);
    int fd = open(p, O_RDONLY);
    CHECK(read(fd, file_bytes, sizeof(file_bytes)) == (ssize_t)sizeof(file_bytes));
    close(fd);
    /* A fixed mtime, for Last-Modified. */
    struct timeval tv[2] = {{1700000000, 0}, {1700000000, 0}};
    utimes(p, tv);
    free(p);
    p = xasprintf("%s/m/config.json", root);
    utimes(p, tv);
    free(p);
    unsigned char md[32];
    SHA256((const unsigned char *)file_bytes, sizeof(file_bytes), md);
    for (int i = 0; i < 32; i++)
        sprintf(file_sha + 2 * i, "%02x", md[i]);
}

TEST(files)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    char *head = xasprintf("Content-Type: application/octet-stream\r\nAccept-Ranges: bytes\r\n"
                           "Cache-Control: no-cache\r\nETag: \"%s\"\r\n"
                           "Last-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\n",
                           file_sha);
    struct lb_answer r = lb_get(&s, "/v1/models/m/files/model.safetensors", NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK_STR(r.head, head);
    CHECK(r.len == sizeof(file_bytes) && memcmp(r.body, file_bytes, r.len) == 0);
    CHECK(r.counted);
    lb_free(&r);
    /* The prefix from the validated bytes the model keeps. */
    static const char *const prefix[] = {"Range: bytes=0-7", NULL};
    r = lb_get(&s, "/v1/models/m/files/model.safetensors", prefix);
    CHECK_EQ_U64(r.status, 206);
    CHECK(r.len == 8 && memcmp(r.body, file_bytes, 8) == 0);
    CHECK_CONTAINS(r.head, "Content-Range: bytes 0-7/");
    lb_free(&r);
    char *inm = xasprintf("If-None-Match: \"%s\"", file_sha);
    const char *const h304[] = {inm, NULL};
    r = lb_get(&s, "/v1/models/m/files/model.safetensors", h304);
    CHECK_EQ_U64(r.status, 304);
    char *vhead = xasprintf("Cache-Control: no-cache\r\nETag: \"%s\"\r\n"
                            "Last-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\n", file_sha);
    CHECK_STR(r.head, vhead);
    free(vhead);
    lb_free(&r);
    r = lb_get(&s, "/v1/models/m/files/model.safetensors/header", NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK_STR(r.body, st_json); /* as stored: no newline added */
    char *hhead = xasprintf("Content-Type: application/json\r\nAccept-Ranges: bytes\r\n"
                            "Cache-Control: no-cache\r\nETag: \"%s-h0000000000000000\"\r\n"
                            "Last-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\n",
                            file_sha);
    CHECK_STR(r.head, hhead);
    lb_free(&r);
    r = lb_get(&s, "/v1/models/m/files/config.json", NULL);
    CHECK_ANSWER(r, 200,
                 "Content-Type: application/json\r\nAccept-Ranges: bytes\r\n"
                 "Cache-Control: no-cache\r\n"
                 "ETag: \"e8c628edc9968ef0c668f54e0ba2636b35503357eb1aca0ddc828aeace432f67\"\r\n"
                 "Last-Modified: Tue, 14 Nov 2023 22:13:20 GMT\r\n",
                 "{\"a\": 1}\n");
    lb_free(&r);
    r = lb_get(&s, "/v1/models/m/files/config.json/header", NULL);
    CHECK_ANSWER(r, 400, "Content-Type: application/json\r\n",
                 "{\"error\":{\"code\":\"not_safetensors\",\"message\":\"\\\"config.json\\\" is "
                 "not a valid safetensors file\"}}\n");
    lb_free(&r);
    free(hhead);
    free(inm);
    free(head);
    lb_stop(&s);
}

/* The npy preamble of NumPy's format specification, version 1.0: the
 * header dict padded with spaces and a newline so that the data starts at
 * a multiple of 64. */
static char *npy(const char *dict, size_t *len)
{
    size_t total = (10 + strlen(dict) + 1 + 63) / 64 * 64, hlen = total - 10;
    char *p = xmalloc(total + 1);
    memcpy(p, "\x93NUMPY\x01\x00", 8);
    p[8] = (char)(hlen & 0xff);
    p[9] = (char)(hlen >> 8);
    memcpy(p + 10, dict, strlen(dict));
    memset(p + 10 + strlen(dict), ' ', hlen - strlen(dict) - 1);
    p[total - 1] = '\n';
    *len = total;
    return p;
}

TEST(tensors)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/v1/models/m/tensors/w", NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK(r.len == 12 && memcmp(r.body, data, 12) == 0);
    CHECK_STR(lb_header(&r, "X-Tensor-Dtype"), "U8");
    CHECK_STR(lb_header(&r, "X-Tensor-Shape"), "3,4");
    CHECK_STR(lb_header(&r, "Content-Disposition"),
              "attachment; filename=\"w.bin\"; filename*=UTF-8''w.bin");
    char *etag = xstrdup(lb_header(&r, "ETag"));
    CHECK(strlen(etag) == 1 + 64 + 2 + 16 + 1 && strncmp(etag + 1, file_sha, 64) == 0 &&
          strncmp(etag + 65, "-t", 2) == 0);
    lb_free(&r);
    char *inm = xasprintf("If-None-Match: %s", etag);
    const char *const h304[] = {inm, NULL};
    r = lb_get(&s, "/v1/models/m/tensors/w", h304);
    CHECK_EQ_U64(r.status, 304);
    lb_free(&r);
    r = lb_get(&s, "/v1/models/m/tensors/w?slice=1:3,1:3", NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK(r.len == 4 && memcmp(r.body, "\x05\x06\x09\x0a", 4) == 0);
    CHECK_STR(lb_header(&r, "X-Tensor-Shape"), "2,2");
    CHECK(strcmp(lb_header(&r, "ETag"), etag) != 0); /* another representation */
    lb_free(&r);
    r = lb_get(&s, "/v1/models/m/tensors/w?slice=1", NULL); /* one row: contiguous */
    CHECK(r.len == 4 && memcmp(r.body, "\x04\x05\x06\x07", 4) == 0);
    lb_free(&r);
    size_t nlen;
    char *pre = npy("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }", &nlen);
    r = lb_get(&s, "/v1/models/m/tensors/w?slice=1:3,1:3&format=npy", NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK(r.len == nlen + 4 && memcmp(r.body, pre, nlen) == 0 &&
          memcmp(r.body + nlen, "\x05\x06\x09\x0a", 4) == 0);
    CHECK_STR(lb_header(&r, "Content-Type"), "application/x-npy");
    CHECK_STR(lb_header(&r, "Content-Disposition"),
              "attachment; filename=\"w.npy\"; filename*=UTF-8''w.npy");
    lb_free(&r);
    free(pre);
    static const char *const range[] = {"Range: bytes=-2", NULL};
    r = lb_get(&s, "/v1/models/m/tensors/w?slice=1:3,1:3&format=npy", range);
    CHECK_EQ_U64(r.status, 206); /* a range of the whole representation, prefix and all */
    CHECK(r.len == 2 && memcmp(r.body, "\x09\x0a", 2) == 0);
    lb_free(&r);
    r = lb_get(&s, "/v1/models/m/tensors/w?format=safetensors", NULL);
    CHECK_EQ_U64(r.status, 200);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)(unsigned char)r.body[i] << (8 * i);
    CHECK(r.len == 8 + n + 12 && memcmp(r.body + 8 + n, data, 12) == 0);
    char *json = xstrndup(r.body + 8, n);
    while (json[0] && json[strlen(json) - 1] == ' ') /* the format allows padding */
        json[strlen(json) - 1] = '\0';
    CHECK_STR(json, "{\"w\":{\"dtype\":\"U8\",\"shape\":[3,4],\"data_offsets\":[0,12]}}");
    free(json);
    lb_free(&r);
    r = lb_get(&s, "/v1/models/m/tensors/b?format=npy&npy_dtype=raw", NULL);
    CHECK_EQ_U64(r.status, 200);
    CHECK_CONTAINS(r.body + 10, "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), } "
                                "# tensord: dtype=BF16 shape=2");
    lb_free(&r);
    free(inm);
    free(etag);
    lb_stop(&s);
}

TEST(tensor_errors)
{
    struct lb_server s;
    static const char *const opts[] = {"max_slice_bytes=3", NULL};
    lb_start(&s, root, LB_HASHED, opts);
    struct {
        const char *target, *body;
        unsigned status;
    } cases[] = {
        {"/v1/models/m/tensors/w?slice=%zz", "{\"error\":{\"code\":\"bad_parameter\",\"message\":"
         "\"a query parameter has a malformed percent-escape\"}}\n", 400},
        {"/v1/models/m/tensors/w?format=csv", "{\"error\":{\"code\":\"bad_format\",\"message\":"
         "\"format must be raw, npy or safetensors, not \\\"csv\\\"\"}}\n", 400},
        {"/v1/models/m/tensors/w?npy_dtype=raw", "{\"error\":{\"code\":\"bad_parameter\","
         "\"message\":\"npy_dtype must be native or raw, with format=npy\"}}\n", 400},
        {"/v1/models/m/tensors/w?format=npy&npy_dtype=x", "{\"error\":{\"code\":"
         "\"bad_parameter\",\"message\":\"npy_dtype must be native or raw, with format=npy\"}}\n",
         400},
        {"/v1/models/m/tensors/b?format=npy", "{\"error\":{\"code\":\"bad_format\",\"message\":"
         "\"dtype BF16 has no NumPy equivalent; use npy_dtype=raw for its bits as unsigned "
         "integers, or format=raw or format=safetensors\"}}\n", 400},
        {"/v1/models/m/tensors/w?slice=1", "{\"error\":{\"code\":\"slice_too_large\",\"message\":"
         "\"the slice is 4 bytes; max_slice_bytes is 3\"}}\n", 400},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct lb_answer r = lb_get(&s, cases[i].target, NULL);
        CHECK_ANSWER(r, cases[i].status, "Content-Type: application/json\r\n", cases[i].body);
        lb_free(&r);
    }
    struct lb_answer r = lb_get(&s, "/v1/models/m/tensors/w?slice=9", NULL);
    CHECK_ANSWER(r, 400, "Content-Type: application/json\r\n",
                 "{\"error\":{\"code\":\"bad_slice\",\"message\":\"tensor \\\"w\\\" U8 [3,4]: "
                 "dimension 0: index 9 out of range for size 3\"}}\n");
    lb_free(&r);
    lb_stop(&s);
}

TEST(written_after_validation)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    char *p = xasprintf("%s/m2/model.safetensors", root);
    int fd = open(p, O_WRONLY);
    CHECK(pwrite(fd, "\xff", 1, 8 + sizeof(st_json) - 1) == 1); /* in place: mtime moves */
    struct timeval tv[2] = {{1, 0}, {1, 0}};
    futimes(fd, tv);
    close(fd);
    struct lb_answer r = lb_get(&s, "/v1/models/m2/tensors/w", NULL);
    CHECK_ANSWER(r, 503, "Content-Type: application/json\r\nRetry-After: 1\r\n",
                 "{\"error\":{\"code\":\"file_changed\",\"message\":\"the file changed on disk "
                 "since it was validated; retry once the daemon has rescanned it\"}}\n");
    CHECK(r.rescan);
    lb_free(&r);
    free(p);
    lb_stop(&s);
}

TEST(gpu_without_sharing)
{
    struct lb_server s;
    lb_start(&s, root, LB_HASHED, NULL);
    struct lb_answer r = lb_get(&s, "/v1/models/m/gpu", NULL);
    CHECK_ANSWER(r, 503, "Content-Type: application/json\r\nRetry-After: 1\r\n",
                 "{\"error\":{\"code\":\"gpu_unavailable\",\"message\":\"GPU sharing is not "
                 "running in this daemon\"}}\n");
    lb_free(&r);
    lb_stop(&s);
    /* gpu_req's outcomes, as the endpoint answers them. */
    struct answer a;
    answer_init(&a);
    struct gpu_req_error e = {.code = "bad_device", .http_status = 400, .message = "no cuda:9"};
    struct jsonw w = JSONW_INIT;
    handle_gpu_answer(&a, -EINVAL, 0, &w, &e);
    CHECK(a.kind == ANSWER_ERROR && a.status == 400);
    CHECK_STR(a.error.code, "bad_device");
    CHECK_STR(a.error.message, "no cuda:9");
    answer_free(&a);
    jsonw_obj(&w);
    jsonw_kstr(&w, "model", "m");
    jsonw_kstr(&w, "state", "loading");
    jsonw_obj_end(&w);
    handle_gpu_answer(&a, 0, 202, &w, &e); /* a load started */
    CHECK(a.kind == ANSWER_DOC && a.status == 202);
    CHECK(a.text_len == 32 && memcmp(a.text, "{\"model\":\"m\",\"state\":\"loading\"}\n", 32) == 0);
    answer_free(&a);
    jsonw_obj(&w);
    jsonw_kstr(&w, "state", "ready");
    jsonw_obj_end(&w);
    handle_gpu_answer(&a, 0, 200, &w, &e); /* a representation: Range applies, no validator */
    CHECK(a.kind == ANSWER_BODY && a.status == 200 && a.rep.etag[0] == '\0');
    CHECK(a.rep.body.prefix_len == 18 &&
          memcmp(a.rep.body.prefix, "{\"state\":\"ready\"}\n", 18) == 0);
    answer_free(&a);
    jsonw_obj(&w);
    jsonw_fail(&w); /* the writer ran out of memory */
    handle_gpu_answer(&a, 0, 200, &w, &e);
    CHECK(a.kind == ANSWER_ERROR && a.status == 503);
    CHECK_STR(a.error.code, "out_of_memory");
    answer_free(&a);
}

int main(void)
{
    make_root();
    RUN(files);
    RUN(tensors);
    RUN(tensor_errors);
    RUN(gpu_without_sharing);
    RUN(written_after_validation); /* last: it writes a file of the root */
    lb_remove_root(root);
    return TEST_SUMMARY();
}
