/* Fuzzes the lease socket's parsers: the input is a byte stream as a client
 * would send it, split into frames (ipc_frame_next) and parsed as requests
 * (ipc_request_parse); each payload also goes through the client's reader of
 * the daemon's answers (client/answer.c and answer_open.c, over json_scan).
 * Oracles: the request parser agrees with the jansson-based one it replaced
 * (tests/ref/ipc_proto_jansson.c) on the outcome, the fields and, for UTF-8
 * input, the message; frames never overrun the input; an accepted "open"
 * has a non-empty model of at most IPC_MAX_NAME bytes and survives a
 * re-encode/re-parse round trip unchanged (its device, rank and
 * prefer_device too); answer_read accepts exactly the objects jansson
 * accepts (with duplicate keys rejected) that nest at most ANSWER_MAX_DEPTH
 * deep and hold no NUL byte, and reads the same "ok" and "lease" from them;
 * an open answer that answer_open accepts has every tensor inside its
 * allocation, with exactly the bytes its dtype and shape make (a DLPack
 * tensor is built from the shape), a world of 1 without a split or of 2 to
 * 2^31 - 1 with one and a rank below it, and each part where the split puts
 * that rank (core/split_bounds.h) and as long as the shape says. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "answer.h"
#include "answer_open.h"
#include "client_int.h"
#include "dtype.h"
#include "ipc_proto.h"
#include "split_bounds.h"
#include "util.h"

#include "../ref/ipc_proto_jansson.c"

static size_t depth_of(const json_t *v)
{
    size_t d = 0, k;
    const char *key;
    json_t *x;
    if (json_is_object(v))
        json_object_foreach((json_t *)v, key, x) {
            k = depth_of(x);
            d = k > d ? k : d;
        }
    else if (json_is_array(v))
        json_array_foreach(v, k, x) {
            size_t e = depth_of(x);
            d = e > d ? e : d;
        }
    else
        return 0;
    return d + 1;
}

/* The refusal answer_read must give for a valid answer that does not say
 * ok: the daemon's code and message (cut as answer.c cuts them), or the
 * defaults. */
static void expected_refusal(json_t *root, char *out, size_t cap)
{
    json_t *e = json_object_get(root, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    snprintf(out, cap, "%.63s: %.511s", code && *code ? code : "error",
             msg && *msg ? msg : "request failed");
}

/* answer_read against jansson on the same bytes. */
static void check_answer(const unsigned char *p, size_t n)
{
    struct answer a;
    char err[512] = "", want[512];
    int rc = answer_read((const char *)p, n, &a, err, sizeof(err));
    if (rc != 0 && err[0] == '\0')
        abort(); /* every refusal explains itself */
    json_error_t je;
    json_t *root = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, &je);
    /* jansson reads some NUL bytes outside strings as nothing; the daemon
     * never writes one, and answer_read refuses them all. */
    int valid = root && json_is_object(root) && depth_of(root) <= ANSWER_MAX_DEPTH &&
                !memchr(p, '\0', n);
    if (!valid && rc == 0)
        abort();
    if (!valid && strncmp(err, "bad answer from tensord: ", 25) != 0 &&
        !strstr(err, "out of memory"))
        abort();
    if (valid) {
        json_t *ok = json_object_get(root, "ok"), *lease = json_object_get(root, "lease");
        int has_lease = json_is_integer(lease) && json_integer_value(lease) >= 0;
        if (a.ok != json_is_true(ok) || (rc == 0) != a.ok || a.has_lease != has_lease ||
            (has_lease && a.lease != (uint64_t)json_integer_value(lease)))
            abort();
        if (!a.ok) {
            expected_refusal(root, want, sizeof(want));
            if (strcmp(err, want) != 0 && !strstr(err, "out of memory"))
                abort();
        }
    }
    json_decref(root);
    if (rc != 0)
        return;
    /* As an open answer with one descriptor (the corpus's have one allocation). */
    struct tensord_model m;
    memset(&m, 0, sizeof(m));
    if (answer_open((const char *)p, n, 1, &m, err, sizeof(err)) == 0) {
        if (m.n_allocs != 1 || !m.name || !m.backend || !m.device || !m.uuid ||
            m.allocs[0].byte_size > m.allocs[0].alloc_size)
            abort();
        if (m.world < 1 || m.world > INT32_MAX || m.rank >= m.world ||
            (m.world > 1) != (m.split != NULL))
            abort();
        for (size_t i = 0; i < m.n_tensors; i++) {
            const struct tensord_tensor *t = &m.tensors[i];
            if (t->alloc != 0 || t->offset > m.allocs[0].byte_size ||
                t->nbytes > m.allocs[0].byte_size - t->offset || t->ndim > 64 || !t->shape ||
                !t->name || !t->dtype)
                abort();
            /* its dtype and shape make exactly its bytes */
            enum dtype dt = dtype_from_name(t->dtype, strlen(t->dtype));
            unsigned __int128 bits = dt == DT_INVALID ? 0 : dtype_info(dt)->bits;
            for (int d = 0; d < t->ndim && bits <= UINT64_MAX; d++)
                bits *= (uint64_t)t->shape[d];
            if (dt == DT_INVALID || bits % 8 != 0 || bits / 8 != t->nbytes)
                abort();
            /* a part lies in its shape and is the rank's */
            uint64_t lo, hi;
            if (t->part_dim >= 0 &&
                (m.world < 2 || t->part_dim >= t->ndim || t->part_start < 0 ||
                 t->part_stop < t->part_start ||
                 t->shape[t->part_dim] != t->part_stop - t->part_start ||
                 t->part_stop > t->part_length))
                abort();
            if (t->part_dim >= 0) {
                fetch_split_bounds((uint64_t)t->part_length, m.world, m.rank, &lo, &hi);
                if ((uint64_t)t->part_start != lo || (uint64_t)t->part_stop != hi)
                    abort();
            }
        }
    } else if (err[0] == '\0') {
        abort();
    }
    answer_open_free(&m);
}

static void one_request(const unsigned char *p, size_t n)
{
    struct ipc_request *req = xmalloc(sizeof(*req)), *again = xmalloc(sizeof(*again));
    struct st_error err = {0};
    char why[1200];
    if (ipc_proto_compare((const char *)p, n, why, sizeof(why))) {
        fprintf(stderr, "ipc_request_parse and jansson disagree: %s\n", why);
        abort();
    }
    if (ipc_request_parse((const char *)p, n, req, &err) == 0) {
        if (req->op == IPC_OP_OPEN) {
            size_t ml = strlen(req->model);
            if (ml == 0 || ml > IPC_MAX_NAME || strlen(req->device) > IPC_MAX_NAME)
                abort();
            if (strlen(req->prefer) > IPC_MAX_NAME || req->rank < -1 || req->rank > INT32_MAX)
                abort();
            json_t *o = json_pack("{s:s,s:s,s:s,s:s}", "op", "open", "model", req->model,
                                  "device", req->device, "prefer_device", req->prefer);
            if (o && req->rank >= 0)
                json_object_set_new(o, "rank", json_integer(req->rank));
            char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
            if (!text || ipc_request_parse(text, strlen(text), again, &err) != 0 ||
                strcmp(again->model, req->model) != 0 || strcmp(again->device, req->device) != 0 ||
                strcmp(again->prefer, req->prefer) != 0 || again->rank != req->rank)
                abort();
            free(text);
            json_decref(o);
        }
    } else if (err.message[0] == '\0' || err.code != ST_ERR_INVALID_ARGUMENT) {
        abort(); /* every refusal explains itself */
    }
    check_answer(p, n);
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
