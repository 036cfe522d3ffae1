/* Byte endpoints: files, file headers, tensors and slices in every format,
 * and the GPU preload endpoints. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_doc.h"
#include "gpu_req.h"
#include "handlers.h"
#include "metrics.h"
#include "server.h"
#include "tformat.h"
#include "util.h"

/* Bytes of a tensor's name kept in the file name of its download: file
 * names stop at 255 bytes, and the header must fit in the connection's
 * memory. */
#define TENSOR_FILENAME_MAX 200

/* Derives a representation's ETag from its file's, weak when the file's is:
 * "<file tag>-<kind><hash>" inside the same quotes. */
static void derive_etag(char *out, size_t len, const char *file_etag, char kind, uint64_t h)
{
    size_t n = strlen(file_etag);
    snprintf(out, len, "%.*s-%c%016" PRIx64 "\"", (int)(n - 1), file_etag, kind, h);
}

/* A descriptor of f to answer from: its own when the model keeps it open,
 * else f opened again below the root (plain files are not kept open),
 * which the answer then holds until it is rendered. Answers and returns
 * -1 when f cannot be read, or is no longer the version the snapshot
 * validated. */
static int file_fd(struct answer *a, const struct reg_model *m, const struct reg_file *f)
{
    if (f->fd >= 0)
        return f->fd;
    if (f->error.code != ST_OK) {
        answer_error(a, HTTP_INTERNAL_SERVER_ERROR, "io_error",
                     "file \"%.300s\" could not be read: %s", f->name, f->error.message);
        return -1;
    }
    int fd = reg_open_below(m->root, f, O_RDONLY);
    if (fd >= 0)
        return a->fd = fd;
    if (fd == -ESTALE)
        answer_file_changed(a);
    else if (fd == -EMFILE || fd == -ENFILE)
        answer_error(a, HTTP_SERVICE_UNAVAILABLE, "overloaded", "out of file descriptors");
    else
        answer_error(a, HTTP_INTERNAL_SERVER_ERROR, "io_error",
                     "file \"%.300s\" could not be opened: %s", f->name, strerror(-fd));
    return -1;
}

/* The descriptor to read f through: the model's (file_fd), or the one its
 * files' source opened for the answer, which the front then reads as the
 * mirrored file it is (rep->file_st is then NULL: its content is fixed by
 * its hash). */
static int read_fd(const struct request_view *v, struct answer *a, const struct reg_model *m,
                   const struct reg_file *f, const struct model_files *mf, int parts,
                   struct representation *rep)
{
    if (!mf)
        return file_fd(a, m, f);
    struct mirror_read *rd = answer_alloc(a, sizeof(*rd));
    int fd = mf->open(mf, v, a, f, parts, rd);
    if (fd >= 0) {
        rep->file_st = NULL;
        answer_reads_mirrored(rep, rd, 1);
    }
    return fd;
}

struct answer *handle_file(const struct request_view *v, struct answer *a,
                           const struct reg_model *m, const struct reg_file *f, int header_only,
                           const struct model_files *mf)
{
    const struct st_header *h = f->header;
    char file_etag[REG_ETAG_MAX];
    struct representation rep = {
        .body = {.fd = -1, .data_off = 0, .data_len = f->st.size},
        .content_type = answer_content_type(f->name),
        .mtime = f->st.mtime_ns / 1000000000,
        .file_st = &f->st,
    };
    if (header_only && !h)
        return answer_error(a, HTTP_BAD_REQUEST, "not_safetensors",
                            "\"%.300s\" is not a valid safetensors file", f->name);
    if (mf && v->is_head) { /* a mirrored file's HEAD opens nothing: headers only */
        rep.no_read = 1;
        rep.file_st = NULL;
    } else if (!(header_only && h->raw)) { /* the header in memory reads no file */
        /* A mirrored file's header, or a Range of it (a client reading its
         * tensors), is read as parts of it: every byte as it arrives; the
         * whole file as a download, its last byte after the hash (a file
         * of the models root is read alike: its Range is not looked up). */
        int parts = mf && (header_only || view_header(v, "Range") != NULL);
        rep.body.fd = read_fd(v, a, m, f, mf, parts, &rep);
        if (rep.body.fd < 0)
            return a;
    }
    reg_file_etag(f, file_etag);
    memcpy(rep.etag, file_etag, strlen(file_etag) + 1);
    if (header_only) {
        rep.content_type = "application/json";
        derive_etag(rep.etag, sizeof(rep.etag), file_etag, 'h', 0);
        if (h->raw) { /* the validated bytes, kept by the model */
            rep.body = (struct body){.prefix = (const char *)h->raw + ST_PREFIX_LEN,
                                     .prefix_len = h->header_len, .fd = -1};
            rep.file_st = NULL;
            answer_hold_model(a, m);
        } else {
            rep.body.data_off = ST_PREFIX_LEN;
            rep.body.data_len = h->header_len;
        }
    } else if (h && h->raw) {
        /* Reads inside the prefix and header (a client sizing the header with
         * bytes=0-7, then fetching it) are answered from memory. */
        rep.mem = (const char *)h->raw;
        rep.mem_len = ST_PREFIX_LEN + h->header_len;
        answer_hold_model(a, m);
    }
    return answer_body(a, &rep);
}

/* What a tensor request asks for besides the tensor: its query parameters. */
struct tensor_query {
    char *spec, *fmt, *npy_dtype; /* decoded values, NULL when absent (owned) */
    enum tformat format;
    int npy_raw;                  /* npy_dtype=raw: dtypes NumPy lacks go out as their bits */
};

static void tensor_query_free(struct tensor_query *q)
{
    free(q->spec);
    free(q->fmt);
    free(q->npy_dtype);
}

/* Reads and checks the query; answers 400 and returns 1 when it is wrong. */
static int tensor_query_read(const struct request_view *v, struct answer *a,
                             struct tensor_query *q)
{
    int bad = 0;
    q->spec = view_query(v, "slice", 0, NULL, &bad);
    q->fmt = view_query(v, "format", 0, NULL, &bad);
    q->npy_dtype = view_query(v, "npy_dtype", 0, NULL, &bad);
    q->format = TFORMAT_RAW;
    if (bad) {
        answer_error(a, HTTP_BAD_REQUEST, "bad_parameter",
                     "a query parameter has a malformed percent-escape");
        return 1;
    }
    if (q->fmt && tformat_parse(q->fmt, &q->format) < 0) {
        answer_error(a, HTTP_BAD_REQUEST, "bad_format",
                     "format must be raw, npy or safetensors, not \"%.100s\"", q->fmt);
        return 1;
    }
    q->npy_raw = q->npy_dtype && strcmp(q->npy_dtype, "raw") == 0;
    if (q->npy_dtype && ((!q->npy_raw && strcmp(q->npy_dtype, "native") != 0) ||
                         q->format != TFORMAT_NPY)) {
        answer_error(a, HTTP_BAD_REQUEST, "bad_parameter",
                     "npy_dtype must be native or raw, with format=npy");
        return 1;
    }
    return 0;
}

/* Narrows rep's body to the slice spec of tensor st: one contiguous run
 * stays a plain span (sendfile), more become a plan. *ndim and *shape get
 * the slice's. Answers 400 and returns 1 when the slice is wrong or too large. */
static int apply_slice(const struct request_view *v, struct answer *a, const struct st_tensor *st,
                       const char *spec, struct representation *rep, uint32_t *ndim,
                       const uint64_t **shape)
{
    struct st_error err;
    metrics_add(MC_SLICE_REQUESTS, 1);
    struct slice_plan *plan = answer_alloc(a, sizeof(*plan));
    if (slice_plan_build(spec, strlen(spec), st->dtype, st->ndim, st->shape, plan, &err) < 0) {
        rep->shape = answer_shape(a, st->shape, st->ndim);
        answer_error(a, HTTP_BAD_REQUEST, "bad_slice", "tensor \"%.200s\" %s [%s]: %s", st->name,
                     rep->dtype, rep->shape, err.message);
        return 1;
    }
    uint64_t limit = v->srv->cfg->max_slice_bytes, nbytes = plan->nbytes;
    if (limit && nbytes > limit) {
        answer_error(a, HTTP_BAD_REQUEST, "slice_too_large",
                     "the slice is %" PRIu64 " bytes; max_slice_bytes is %" PRIu64, nbytes, limit);
        return 1;
    }
    rep->body.data_len = plan->nbytes;
    if (plan->n_runs <= 1)
        rep->body.data_off += plan->base; /* one run (a row block): contiguous */
    else
        rep->body.plan = plan;
    *ndim = plan->ndim;
    *shape = plan->shape;
    return 0;
}

/* Puts the format's prefix (the npy or safetensors header) before the body.
 * Answers 400 and returns 1 when the dtype has no such form (503 when out
 * of memory). */
static int apply_format(struct answer *a, const struct st_tensor *st,
                        const struct tensor_query *q, uint32_t ndim, const uint64_t *shape,
                        struct representation *rep)
{
    struct st_error err;
    char *prefix = NULL;
    if (q->format == TFORMAT_NPY) {
        st_error_fail(&err, ST_ERR_DTYPE, "dtype %s has no npy form", rep->dtype);
        if ((q->npy_raw ? tformat_npy_raw_prefix(st->dtype, ndim, shape, rep->body.data_len,
                                                 &prefix, &rep->body.prefix_len)
                        : tformat_npy_prefix(st->dtype, ndim, shape, &prefix,
                                             &rep->body.prefix_len, &err)) < 0) {
            answer_error(a, HTTP_BAD_REQUEST, "bad_format", "%s", err.message);
            return 1;
        }
        rep->content_type = "application/x-npy";
    } else if (q->format == TFORMAT_SAFETENSORS &&
               tformat_safetensors_prefix(st->name, st->dtype, ndim, shape, rep->body.data_len,
                                          &prefix, &rep->body.prefix_len) < 0) {
        answer_error(a, HTTP_SERVICE_UNAVAILABLE, "out_of_memory",
                     "not enough memory for the safetensors header; try again later");
        return 1;
    }
    if (prefix)
        answer_defer(a, free, prefix);
    rep->body.prefix = prefix;
    return 0;
}

/* A name to save the answer under (curl -OJ, browsers): the tensor's, cut
 * to fit a file name, with the format's extension. */
static const char *tensor_disposition(struct answer *a, const struct st_tensor *st,
                                      enum tformat format)
{
    char fname[TENSOR_FILENAME_MAX + 16];
    size_t cut = st->name_len;
    if (cut > TENSOR_FILENAME_MAX) {
        cut = TENSOR_FILENAME_MAX;
        while (cut > 0 && ((unsigned char)st->name[cut] & 0xc0) == 0x80)
            cut--; /* not inside a UTF-8 sequence */
    }
    int flen = snprintf(fname, sizeof(fname), "%.*s%s", (int)cut, st->name,
                        format == TFORMAT_NPY           ? ".npy"
                        : format == TFORMAT_SAFETENSORS ? ".safetensors"
                                                        : ".bin");
    return answer_disposition(a, "attachment", fname, (size_t)flen);
}

struct answer *handle_tensor(const struct request_view *v, struct answer *a,
                             const struct reg_model *m, const struct reg_tensor *t,
                             const struct model_files *mf)
{
    const struct st_tensor *st = t->t;
    const struct reg_file *f = t->file;
    struct tensor_query q = {0};
    struct representation rep = {
        .body = {.fd = f->fd, .data_off = f->data_start + st->begin, .data_len = st->end - st->begin},
        .content_type = "application/octet-stream",
        .mtime = f->st.mtime_ns / 1000000000,
        .file_st = &f->st,
        .dtype = dtype_info(st->dtype)->name,
    };
    uint32_t ndim = st->ndim;
    const uint64_t *shape = st->shape;
    if (tensor_query_read(v, a, &q) ||
        (q.spec && apply_slice(v, a, st, q.spec, &rep, &ndim, &shape)))
        goto out;
    rep.shape = answer_shape(a, shape, ndim);
    if (apply_format(a, st, &q, ndim, shape, &rep))
        goto out;
    if (rep.body.data_len == 0)
        rep.body.fd = -1;
    else if (mf && v->is_head) { /* a mirrored tensor's HEAD opens nothing: headers only */
        rep.no_read = 1;
        rep.file_st = NULL;
    } else if (mf && (rep.body.fd = read_fd(v, a, m, f, mf, 1, &rep)) < 0)
        goto out;

    /* The representation depends on the file, the tensor, the slice and the format. */
    uint64_t h = hash_fnv1a(st->name, st->name_len + 1, HASH_FNV_SEED);
    h = hash_fnv1a(q.spec ? q.spec : "", q.spec ? strlen(q.spec) + 1 : 1, h);
    h = hash_fnv1a(&q.format, sizeof(q.format), h);
    h = hash_fnv1a(&q.npy_raw, sizeof(q.npy_raw), h);
    char file_etag[REG_ETAG_MAX];
    reg_file_etag(f, file_etag);
    derive_etag(rep.etag, sizeof(rep.etag), file_etag, 't', h);
    rep.disposition = tensor_disposition(a, st, q.format);
    answer_body(a, &rep);
out:
    tensor_query_free(&q);
    return a;
}

struct answer *handle_gpu_answer(struct answer *a, int rc, int status, struct jsonw *w,
                                 const struct gpu_req_error *e)
{
    if (rc < 0)
        return answer_error(a, (unsigned)e->http_status, e->code, "%s", e->message);
    /* The state changes as loading goes on: no validator. */
    return answer_jsonw(a, (unsigned)status, w);
}

/* GET and DELETE's ?device=, &rank= and &world=: the instances they name. */
static int gpu_which(const struct request_view *v, struct gm_which *which,
                     struct gm_device *where, struct gpu_req_error *e)
{
    int bad = 0;
    char *device = view_query(v, "device", 0, NULL, &bad);
    char *rank = view_query(v, "rank", 0, NULL, &bad);
    char *world = view_query(v, "world", 0, NULL, &bad);
    int rc = bad ? -EINVAL : gpu_req_which(v->srv->gpu, device, rank, world, which, where, e);
    if (bad)
        *e = (struct gpu_req_error){.code = "bad_request", .http_status = HTTP_BAD_REQUEST,
                                    .message = "device=, rank= or world= is not percent-encoded "
                                               "text"};
    free(device);
    free(rank);
    free(world);
    return rc;
}

struct answer *handle_gpu(const struct request_view *v, struct answer *a, const char *model)
{
    struct gpu_manager *gm = v->srv->gpu;
    const char *method = v->method;
    struct gpu_req_error e;
    struct jsonw w = JSONW_INIT;
    struct gm_which which;
    struct gm_device where;
    int status = HTTP_OK, rc = 0;
    if (!gm)
        return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "gpu_unavailable",
                            "GPU sharing is not running in this daemon");
    if (strcmp(method, "GET") != 0 && !v->is_head && !view_preconditions_hold(v))
        return answer_error(a, HTTP_PRECONDITION_FAILED, "precondition_failed",
                            "If-Match or If-None-Match did not hold; nothing was done");
    if (strcmp(method, "POST") == 0) {
        struct gpu_req_preload p;
        rc = gpu_req_preload_parse(v->body ? v->body : "", v->body_len, &p, &e);
        if (rc == 0)
            rc = gpu_req_preload(gm, model, &p, &w, &status, &e);
        gpu_req_preload_free(&p);
    } else if ((rc = gpu_which(v, &which, &where, &e)) < 0) {
        /* answered below */
    } else if (strcmp(method, "DELETE") == 0) {
        rc = gpu_req_evict(gm, model, &which, &w, &status, &e);
    } else {
        int named = which.where || which.rank >= 0 || which.world;
        gpu_doc_model(gm, model, named ? &which : NULL, &w);
    }
    return handle_gpu_answer(a, rc, status, &w, &e);
}
