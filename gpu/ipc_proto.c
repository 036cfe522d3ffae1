/* ipc_proto: framing and request parsing for the lease socket. Requests
 * come from workers, so they are read with json_scan (the project's
 * bounded, strict tokenizer), building no tree. */
#include "ipc_proto.h"

#include <stddef.h>

#include "json_scan.h"
#include "util.h"

enum ipc_frame_status ipc_frame_next(const unsigned char *buf, size_t len, size_t max,
                                     const unsigned char **payload, size_t *payload_len,
                                     size_t *consumed)
{
    if (len < IPC_HEADER_BYTES)
        return IPC_FRAME_NEED_MORE;
    uint32_t n = ipc_get_header(buf);
    if (n > max)
        return IPC_FRAME_TOO_LARGE;
    if (len - IPC_HEADER_BYTES < n)
        return IPC_FRAME_NEED_MORE;
    *payload = buf + IPC_HEADER_BYTES;
    *payload_len = n;
    *consumed = IPC_HEADER_BYTES + (size_t)n;
    return IPC_FRAME_READY;
}

/* One member of a request the parser looks at: its value's kind and, for
 * strings, its decoded text (cut to the buffer; len is the whole length). */
struct member {
    int tok;                   /* 0: absent; else the value's first token */
    char *str;                 /* where a string value is decoded */
    size_t cap, len;
    int64_t integer;
};

struct fields {
    struct member op, model, device, lease, protocol, rank, prefer;
    char op_text[72];          /* enough to name an unknown op (64 bytes) and tell it apart */
};

/* One member of the request object (at depth 2): kept when f wants it. */
static int read_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    static const char *const names[] = {"op", "model", "device", "lease", "protocol", "rank",
                                        "prefer_device"};
    struct fields *f = ctx;
    struct member *members[] = {&f->op, &f->model, &f->device, &f->lease, &f->protocol,
                                &f->rank, &f->prefer};
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        struct member *m = members[i];
        if (strcmp(key, names[i]) != 0)
            continue;
        m->tok = s->tok;
        m->integer = s->integer;
        m->len = s->tok == JSON_TOK_STRING ? s->str_len : 0;
        if (s->tok == JSON_TOK_STRING && m->str) {
            size_t n = json_scan_decode(s, m->str, m->cap);
            m->str[n < m->cap ? n : m->cap] = '\0';
        }
    }
    return json_scan_value(s, depth, JSON_SCAN_MAX_DEPTH);
}

/* Fills err for a request the daemon cannot read; returns -EINVAL. */
#define BAD(...) st_error_fail(err, ST_ERR_INVALID_ARGUMENT, __VA_ARGS__)

/* The string member m (`key`); absent is fine when optional. */
static int check_name(const struct member *m, const char *key, int required,
                      struct st_error *err)
{
    if (!m->tok)
        return required ? BAD("\"%s\" is required", key) : 0;
    if (m->tok != JSON_TOK_STRING)
        return BAD("\"%s\" must be a string", key);
    if (m->len > IPC_MAX_NAME)
        return BAD("\"%s\" must be at most %d bytes without NUL", key, IPC_MAX_NAME);
    if (required && m->len == 0)
        return BAD("\"%s\" must not be empty", key);
    return 0;
}

/* The required non-negative integer member m (`key`). */
static int check_count(const struct member *m, const char *key, uint64_t *out,
                       struct st_error *err)
{
    if (m->tok != JSON_TOK_INTEGER || m->integer < 0)
        return BAD("\"%s\" (a non-negative integer) is required", key);
    *out = (uint64_t)m->integer;
    return 0;
}

/* Whether the op member names op. */
static int op_is(const struct fields *f, const char *op)
{
    return f->op.len == strlen(op) && strcmp(f->op_text, op) == 0;
}

/* The request's meaning, once the text is known to be one JSON object. */
static int check_request(const struct fields *f, struct ipc_request *req, struct st_error *err)
{
    if (f->op.tok != JSON_TOK_STRING)
        return BAD("\"op\" (a string: hello, open, release, checksums, list or close) is "
                   "required");
    if (op_is(f, "open")) {
        req->op = IPC_OP_OPEN;
        int rc = check_name(&f->model, "model", 1, err);
        if (rc == 0)
            rc = check_name(&f->device, "device", 0, err);
        if (rc == 0)
            rc = check_name(&f->prefer, "prefer_device", 0, err);
        if (rc < 0 || !f->rank.tok)
            return rc;
        uint64_t rank = 0;
        rc = check_count(&f->rank, "rank", &rank, err);
        if (rc == 0 && rank > INT32_MAX)
            return BAD("\"rank\" must be below 2^31");
        req->rank = (int64_t)rank;
        return rc;
    }
    if (op_is(f, "release") || op_is(f, "checksums")) {
        req->op = op_is(f, "release") ? IPC_OP_RELEASE : IPC_OP_CHECKSUMS;
        return check_count(&f->lease, "lease", &req->lease, err);
    }
    if (op_is(f, "hello")) {
        req->op = IPC_OP_HELLO;
        return check_count(&f->protocol, "protocol", &req->protocol, err);
    }
    if (op_is(f, "list") || op_is(f, "close")) {
        req->op = op_is(f, "list") ? IPC_OP_LIST : IPC_OP_CLOSE;
        return 0;
    }
    return BAD("unknown op \"%.64s\" (hello, open, release, checksums, list or close)",
               f->op_text);
}

int ipc_request_parse(const char *json, size_t len, struct ipc_request *req, struct st_error *err)
{
    struct fields f;
    memset(&f, 0, sizeof(f));
    f.op = (struct member){.str = f.op_text, .cap = sizeof(f.op_text) - 1};
    f.model = (struct member){.str = req->model, .cap = IPC_MAX_NAME};
    f.device = (struct member){.str = req->device, .cap = IPC_MAX_NAME};
    f.prefer = (struct member){.str = req->prefer, .cap = IPC_MAX_NAME};
    req->model[0] = req->device[0] = req->prefer[0] = '\0';
    req->rank = -1;
    if (memchr(json, '\0', len) || !utf8_valid(json, len))
        return BAD("not JSON: the request is not UTF-8 text without NUL bytes");
    struct json_scan s;
    json_scan_init(&s, json, len);
    int rc, tok = json_scan_next(&s);
    if (tok == '{')
        rc = json_scan_each(&s, 1, JSON_SCAN_MAX_DEPTH, read_member, &f);
    else
        rc = json_scan_value_start(&s) == 0 ? json_scan_value(&s, 1, JSON_SCAN_MAX_DEPTH) : -1;
    if (rc == 0 && json_scan_next(&s) != JSON_TOK_EOF)
        rc = json_scan_fail(&s, JSON_ERR_TRAILING);
    if (rc != 0)
        return BAD("not JSON: %s at byte %zu", s.text, s.position);
    if (tok != '{')
        return BAD("a request must be a JSON object");
    return check_request(&f, req, err);
}
