/* ipc_proto: framing and request parsing for the lease socket. */
#include "ipc_proto.h"

#include <jansson.h>
#include <stdio.h>

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

/* Copies the string member `key` into out; missing is fine when optional. */
static int get_name(json_t *o, const char *key, int required, char *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    out[0] = '\0';
    if (!v) {
        if (required)
            snprintf(err, errlen, "\"%s\" is required", key);
        return required ? -1 : 0;
    }
    if (!json_is_string(v)) {
        snprintf(err, errlen, "\"%s\" must be a string", key);
        return -1;
    }
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n > IPC_MAX_NAME || memchr(s, '\0', n)) {
        snprintf(err, errlen, "\"%s\" must be at most %d bytes without NUL", key, IPC_MAX_NAME);
        return -1;
    }
    if (required && n == 0) {
        snprintf(err, errlen, "\"%s\" must not be empty", key);
        return -1;
    }
    memcpy(out, s, n + 1);
    return 0;
}

/* The required non-negative integer member `key`. */
static int get_count(json_t *o, const char *key, uint64_t *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        snprintf(err, errlen, "\"%s\" (a non-negative integer) is required", key);
        return -1;
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

int ipc_request_parse(const char *json, size_t len, struct ipc_request *req, char *err,
                      size_t errlen)
{
    json_error_t jerr;
    int rc = -1;
    json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!doc) {
        snprintf(err, errlen, "not JSON: %s at byte %d", jerr.text, jerr.position);
        return -1;
    }
    if (!json_is_object(doc)) {
        snprintf(err, errlen, "a request must be a JSON object");
        goto out;
    }
    json_t *op = json_object_get(doc, "op");
    const char *ops = json_string_value(op);
    if (!ops) {
        snprintf(err, errlen, "\"op\" (a string: hello, open, release, list or close) is "
                 "required");
        goto out;
    }
    if (strcmp(ops, "open") == 0) {
        req->op = IPC_OP_OPEN;
        if (get_name(doc, "model", 1, req->model, err, errlen) < 0 ||
            get_name(doc, "device", 0, req->device, err, errlen) < 0)
            goto out;
    } else if (strcmp(ops, "release") == 0) {
        req->op = IPC_OP_RELEASE;
        if (get_count(doc, "lease", &req->lease, err, errlen) < 0)
            goto out;
    } else if (strcmp(ops, "hello") == 0) {
        req->op = IPC_OP_HELLO;
        if (get_count(doc, "protocol", &req->protocol, err, errlen) < 0)
            goto out;
    } else if (strcmp(ops, "list") == 0) {
        req->op = IPC_OP_LIST;
    } else if (strcmp(ops, "close") == 0) {
        req->op = IPC_OP_CLOSE;
    } else {
        snprintf(err, errlen, "unknown op \"%.64s\" (hello, open, release, list or close)", ops);
        goto out;
    }
    rc = 0;
out:
    json_decref(doc);
    return rc;
}
