/* Fuzzes the lease socket's parsers: the input is a byte stream as a client
 * would send it, split into frames (ipc_frame_next) and parsed as requests
 * (ipc_request_parse); each payload also goes through the client's JSON
 * reader (tjson). Oracles: the parser agrees with the jansson-based one it
 * replaced (tests/ref/ipc_proto_jansson.c) on the outcome, the fields and,
 * for UTF-8 input, the message; frames never overrun the input; an accepted "open"
 * has a non-empty model of at most IPC_MAX_NAME bytes and survives a
 * re-encode/re-parse round trip unchanged; tjson's exact integers agree with
 * the text they came from. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/ipc_proto.h"
#include "tjson.h"
#include "util.h"

#include "../ref/ipc_proto_jansson.c"

static void check_tjson(const struct tjson *v, int depth)
{
    if (depth > TJSON_MAX_DEPTH + 1)
        abort();
    if (v->type == TJ_NUMBER && v->is_uint) {
        char buf[32];
        snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v->u);
        if (strtoull(buf, NULL, 10) != v->u)
            abort();
    }
    if (v->type == TJ_STRING && (!v->str || strlen(v->str) > v->len))
        abort();
    if (v->type == TJ_ARRAY || v->type == TJ_OBJECT)
        for (size_t i = 0; i < v->len; i++) {
            if ((v->type == TJ_OBJECT) != (v->items[i].key != NULL))
                abort();
            check_tjson(&v->items[i], depth + 1);
        }
}

static void one_request(const unsigned char *p, size_t n)
{
    struct ipc_request *req = xmalloc(sizeof(*req)), *again = xmalloc(sizeof(*again));
    char err[512], why[1200];
    if (ipc_proto_compare((const char *)p, n, why, sizeof(why))) {
        fprintf(stderr, "ipc_request_parse and jansson disagree: %s\n", why);
        abort();
    }
    if (ipc_request_parse((const char *)p, n, req, err, sizeof(err)) == 0) {
        if (req->op == IPC_OP_OPEN) {
            size_t ml = strlen(req->model);
            if (ml == 0 || ml > IPC_MAX_NAME || strlen(req->device) > IPC_MAX_NAME)
                abort();
            json_t *o = json_pack("{s:s,s:s,s:s}", "op", "open", "model", req->model, "device",
                                  req->device);
            char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
            if (!text || ipc_request_parse(text, strlen(text), again, err, sizeof(err)) != 0 ||
                strcmp(again->model, req->model) != 0 || strcmp(again->device, req->device) != 0)
                abort();
            free(text);
            json_decref(o);
        }
    } else if (err[0] == '\0') {
        abort(); /* every refusal explains itself */
    }
    struct tjson *v = tjson_parse((const char *)p, n, err, sizeof(err));
    if (v)
        check_tjson(v, 0);
    else if (err[0] == '\0')
        abort();
    tjson_free(v);
    free(req);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    /* Small limit so the fuzzer also reaches the too-large path. */
    size_t max = size > 0 && (data[0] & 1) ? 64 : IPC_MAX_REQUEST;
    while (off < size) {
        const unsigned char *p;
        size_t plen, used;
        enum ipc_frame_status st = ipc_frame_next(data + off, size - off, max, &p, &plen, &used);
        if (st != IPC_FRAME_READY)
            break;
        if (p < data + off || p + plen > data + size || used != plen + IPC_HEADER_BYTES)
            abort();
        one_request(p, plen);
        off += used;
    }
    /* The whole input as one payload too (no framing). */
    one_request(data, size);
    return 0;
}
