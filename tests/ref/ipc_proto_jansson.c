/* ipc_request_parse as it was with jansson (gpu/ipc_proto.c before it
 * read requests with json_scan): the oracle of fuzz_ipc and test_ipc_proto.
 * Both must accept the same requests with the same fields and refuse the
 * others with the same message, except input that is not UTF-8 or holds a
 * NUL byte, which json_scan's callers refuse before tokenizing (with a
 * message of their own). Included by the tests, never built alone. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc_proto.h"
#include "util.h"

/* Copies the string member `key` into out; missing is fine when optional. */
static int ref_get_name(json_t *o, const char *key, int required, char *out, char *err, size_t errlen)
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
static int ref_get_count(json_t *o, const char *key, uint64_t *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        snprintf(err, errlen, "\"%s\" (a non-negative integer) is required", key);
        return -1;
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int ipc_request_parse_jansson(const char *json, size_t len, struct ipc_request *req,
                                     char *err, size_t errlen)
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
        snprintf(err, errlen, "\"op\" (a string: hello, open, release, checksums, list or "
                 "close) is required");
        goto out;
    }
    if (strcmp(ops, "open") == 0) {
        req->op = IPC_OP_OPEN;
        uint64_t rank = 0;
        req->rank = -1;
        if (ref_get_name(doc, "model", 1, req->model, err, errlen) < 0 ||
            ref_get_name(doc, "device", 0, req->device, err, errlen) < 0 ||
            ref_get_name(doc, "prefer_device", 0, req->prefer, err, errlen) < 0)
            goto out;
        if (json_object_get(doc, "rank")) {
            if (ref_get_count(doc, "rank", &rank, err, errlen) < 0)
                goto out;
            if (rank > INT32_MAX) {
                snprintf(err, errlen, "\"rank\" must be below 2^31");
                goto out;
            }
            req->rank = (int64_t)rank;
        }
    } else if (strcmp(ops, "release") == 0 || strcmp(ops, "checksums") == 0) {
        req->op = strcmp(ops, "release") == 0 ? IPC_OP_RELEASE : IPC_OP_CHECKSUMS;
        if (ref_get_count(doc, "lease", &req->lease, err, errlen) < 0)
            goto out;
    } else if (strcmp(ops, "hello") == 0) {
        req->op = IPC_OP_HELLO;
        if (ref_get_count(doc, "protocol", &req->protocol, err, errlen) < 0)
            goto out;
    } else if (strcmp(ops, "list") == 0) {
        req->op = IPC_OP_LIST;
    } else if (strcmp(ops, "close") == 0) {
        req->op = IPC_OP_CLOSE;
    } else {
        snprintf(err, errlen, "unknown op \"%.64s\" (hello, open, release, checksums, list or "
                 "close)", ops);
        goto out;
    }
    rc = 0;
out:
    json_decref(doc);
    return rc;
}

/* Returns 0 when ipc_request_parse and the jansson parser agree on
 * json[0..len) (the outcome, the message, and the fields of an accepted
 * request), else 1 with what differs in why. Input that is not UTF-8 or
 * holds a NUL only has to be refused by both. */
static int ipc_proto_compare(const char *json, size_t len, char *why, size_t whylen)
{
    struct ipc_request *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    struct st_error sa = {0};
    char eb[512] = "", *ea = sa.message;
    int bad = 0;
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    int ra = ipc_request_parse(json, len, a, &sa) < 0 ? -1 : 0;
    int rb = ipc_request_parse_jansson(json, len, b, eb, sizeof(eb));
    /* Text with a NUL byte or invalid UTF-8 is refused before it is read
     * (jansson's lexer reads some of it): only that it is refused is checked. */
    int plain = !memchr(json, '\0', len) && utf8_valid(json, len);
    if (!plain && ra == 0)
        bad = snprintf(why, whylen, "accepted a request that is not UTF-8 text without NUL") > 0;
    else if (!plain)
        bad = 0;
    else if (ra != rb)
        bad = snprintf(why, whylen, "rc %d vs jansson %d (%s | %s)", ra, rb, ea, eb) > 0;
    else if (ra != 0 && strcmp(ea, eb) != 0)
        bad = snprintf(why, whylen, "message \"%s\" vs jansson \"%s\"", ea, eb) > 0;
    else if (ra == 0 && (a->op != b->op || (a->op == IPC_OP_OPEN && (strcmp(a->model, b->model) ||
                                                                   strcmp(a->device, b->device) ||
                                                                   strcmp(a->prefer, b->prefer) ||
                                                                   a->rank != b->rank)) ||
                         (a->op == IPC_OP_RELEASE && a->lease != b->lease) ||
                         (a->op == IPC_OP_HELLO && a->protocol != b->protocol)))
        bad = snprintf(why, whylen, "fields differ for op %d", a->op) > 0;
    free(a);
    free(b);
    return bad;
}
