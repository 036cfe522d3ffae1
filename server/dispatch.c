/* dispatch: see dispatch.h. */
#include "dispatch.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "cors.h"
#include "h_mirror.h"
#include "handlers.h"
#include "http_metrics.h"
#include "metrics.h"
#include "respond.h"
#include "route.h"

/* Largest request body accepted, but for a fetch or a paths-info request
 * (max_fetch_body_bytes). */
#define MAX_UPLOAD 65536

char *handler_query(struct MHD_Connection *conn, const char *key, int form, size_t *len,
                    int *bad)
{
    const char *raw = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, key);
    if (!raw)
        return NULL;
    char *v = (form ? route_decode_form : route_decode)(raw, strlen(raw), len);
    if (!v)
        *bad = 1;
    return v;
}

struct query_check {
    const char *const *allowed;
    const char *bad;
};

static enum MHD_Result check_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    (void)kind, (void)value;
    struct query_check *qc = cls;
    for (const char *const *a = qc->allowed; *a; a++)
        if (strcmp(*a, key) == 0)
            return MHD_YES;
    qc->bad = key;
    return MHD_NO;
}

size_t dispatch_upload_limit(const struct server *srv, const char *url)
{
    char err[256];
    struct route rt;
    url = route_origin_form(url);
    enum route_kind kind = route_parse(url, &rt, err, sizeof(err));
    route_free(&rt);
    /* A paths-info request may list many paths (hub_req.h bounds them). */
    return kind == ROUTE_FETCH || strncmp(url, "/api/", 5) == 0 ? srv->cfg->max_fetch_body_bytes
                                                                 : MAX_UPLOAD;
}

static int repo_exists(void *ctx, const char *id, size_t len)
{
    return reg_snapshot_find_repo(ctx, id, len) != NULL;
}

static int is_hub_route(enum route_kind k)
{
    return k == ROUTE_HUB_FILE || k == ROUTE_HUB_MODELS || k == ROUTE_HUB_INFO ||
           k == ROUTE_HUB_TREE || k == ROUTE_HUB_PATHS_INFO || k == ROUTE_HUB_NOT_FOUND ||
           k == ROUTE_HUB_REFS || k == ROUTE_HUB_COMMITS || k == ROUTE_HUB_NO_REPO ||
           k == ROUTE_HUB_NO_REPOS;
}

static const int endpoint_of_route[] = {
    [ROUTE_NOT_FOUND] = MEP_OTHER,     [ROUTE_BAD_PATH] = MEP_OTHER,
    [ROUTE_HEALTHZ] = MEP_HEALTH,      [ROUTE_READYZ] = MEP_HEALTH,
    [ROUTE_METRICS_TEXT] = MEP_METRICS, [ROUTE_METRICS] = MEP_METRICS,
    [ROUTE_UI] = MEP_UI,
    [ROUTE_MODELS] = MEP_MODELS,       [ROUTE_MODEL] = MEP_MODEL,
    [ROUTE_MODEL_HEADER] = MEP_HEADER, [ROUTE_FILE] = MEP_FILE,
    [ROUTE_FILE_HEADER] = MEP_FILE_HEADER, [ROUTE_TENSOR] = MEP_TENSOR,
    [ROUTE_GPU] = MEP_GPU,             [ROUTE_FETCH] = MEP_FETCH,
    [ROUTE_HUB_FILE] = MEP_HUB_FILE,   [ROUTE_HUB_MODELS] = MEP_HUB_API,
    [ROUTE_HUB_INFO] = MEP_HUB_API,    [ROUTE_HUB_TREE] = MEP_HUB_API,
    [ROUTE_HUB_PATHS_INFO] = MEP_HUB_API, [ROUTE_HUB_NOT_FOUND] = MEP_HUB_API,
    [ROUTE_BLOB] = MEP_BLOB,           [ROUTE_S3] = MEP_S3,
    [ROUTE_HUB_REFS] = MEP_HUB_API,    [ROUTE_HUB_COMMITS] = MEP_HUB_API,
    [ROUTE_HUB_NO_REPO] = MEP_HUB_API, [ROUTE_HUB_NO_REPOS] = MEP_HUB_API,
};

static enum MHD_Result dispatch_model(struct MHD_Connection *conn, struct request *rq,
                                      const struct route *rt, const char *method,
                                      const struct reg_snapshot *reg)
{
    enum MHD_Result ret;
    if (!reg) {
        if (is_hub_route(rt->kind))
            return respond_hub_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, NULL, 1,
                                     "the models root has not been scanned yet");
        ret = respond_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                            "the models root has not been scanned yet");
        return ret;
    }
    if (is_hub_route(rt->kind))
        return handle_hub(conn, rq, reg, rt);
    if (rt->kind == ROUTE_BLOB)
        return handle_blob(conn, rq, reg, rt);
    if (rt->kind == ROUTE_S3)
        return handle_s3(conn, rq, reg, rt, method);
    if (rt->kind == ROUTE_MODELS) {
        ret = handle_models(conn, rq, reg);
        goto out;
    }
    const struct reg_model *m = reg_snapshot_find_model(reg, rt->model, rt->model_len);
    if (!m && rt->kind == ROUTE_GPU && rq->srv->mirror) /* a model of the upstream */
        return handle_mirror_gpu(conn, rq, rt->model, method);
    if (!m) {
        ret = respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "model_not_found",
                            "no model named \"%.300s\"", rt->model);
        goto out;
    }
    if (rt->kind == ROUTE_MODEL) {
        ret = handle_model(conn, rq, m);
        goto out;
    }
    if (rt->kind == ROUTE_GPU) {
        ret = handle_gpu(conn, rq, m->name, method);
        goto out;
    }
    if (m->state != MODEL_READY) {
        ret = respond_error(conn, rq, MHD_HTTP_CONFLICT, "model_invalid",
                            "model \"%.300s\" is invalid: %s", m->name, m->error.message);
        goto out;
    }
    switch (rt->kind) {
    case ROUTE_MODEL_HEADER:
        ret = handle_model_header(conn, rq, m);
        break;
    case ROUTE_FILE:
    case ROUTE_FILE_HEADER: {
        const struct reg_file *f = reg_model_find_file(m, rt->name, rt->name_len);
        if (!f)
            ret = respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "file_not_found",
                                "model \"%.300s\" has no file \"%.300s\"", m->name, rt->name);
        else
            ret = handle_file(conn, rq, m, f, rt->kind == ROUTE_FILE_HEADER);
        break;
    }
    case ROUTE_FETCH:
        ret = handle_fetch(conn, rq, m);
        break;
    case ROUTE_TENSOR: {
        const struct reg_tensor *t = reg_model_find_tensor(m, rt->name, rt->name_len);
        if (!t)
            ret = respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "tensor_not_found",
                                "model \"%.300s\" has no tensor \"%.300s\"", m->name, rt->name);
        else
            ret = handle_tensor(conn, rq, m, t);
        break;
    }
    default:
        ret = respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "not_found", "no such endpoint");
    }
out:
    return ret;
}

/* Answers an error in the dialect of the path: the Hub's ({"error": msg},
 * code only in X-Error-Code) on its paths, tensord's otherwise. */
static enum MHD_Result refuse(struct MHD_Connection *conn, struct request *rq, int hub,
                              unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static enum MHD_Result refuse(struct MHD_Connection *conn, struct request *rq, int hub,
                              unsigned status, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (hub)
        return respond_hub_error(conn, rq, status, NULL, NULL, 1, "%s", msg);
    return respond_error(conn, rq, status, code, "%s", msg);
}

/* The token check: the Hub's paths answer 401 as huggingface_hub expects. */
static enum MHD_Result refuse_unauthorized(struct MHD_Connection *conn, struct request *rq,
                                           int hub, int is_admin)
{
    if (hub) {
        /* huggingface_hub reads a 401 as "no such repo" unless the message
         * says the credentials were wrong; both are worth telling apart. */
        int sent = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                               MHD_HTTP_HEADER_AUTHORIZATION) != NULL;
        return respond_hub_error(conn, rq, MHD_HTTP_UNAUTHORIZED, NULL, NULL, 0, "%s",
                                 sent ? "Invalid credentials in Authorization header"
                                      : "a bearer token is required (Authorization: Bearer TOKEN)");
    }
    return respond_error(conn, rq, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                         is_admin ? "this endpoint needs the admin bearer token"
                                  : "a bearer token is required");
}

/* The checks every endpoint shares, in order: the connection limit, the
 * path, the method, the token, the query parameters. Answers the first that
 * fails and returns 1; returns 0 when the request may go to its handler. */
static int refuse_request(struct MHD_Connection *conn, struct request *rq, enum route_kind kind,
                          int hub, const char *method, const char *path_err,
                          enum MHD_Result *ret)
{
    static const char *const no_args[] = {NULL};
    static const char *const tensor_args[] = {"slice", "format", "npy_dtype", NULL};
    static const char *const metrics_args[] = {"format", NULL};
    static const char *const fetch_args[] = {"q", NULL};
    struct server *srv = rq->srv;
    if (atomic_load(&srv->connections) > srv->cfg->max_connections) {
        metrics_add(MC_CONNECTIONS_REJECTED, 1);
        rq->close_after = 1;
        *ret = refuse(conn, rq, hub, MHD_HTTP_SERVICE_UNAVAILABLE, "overloaded",
                      "more than %u connections are open", srv->cfg->max_connections);
        return 1;
    }
    /* The S3 API checks its own method and signature (server/s3_auth). */
    if (kind == ROUTE_S3 && srv->cfg->s3)
        return 0;
    if (kind == ROUTE_BAD_PATH) {
        *ret = hub ? respond_hub_error(conn, rq, MHD_HTTP_BAD_REQUEST, NULL, NULL, 0, "%s", path_err)
                   : respond_error(conn, rq, MHD_HTTP_BAD_REQUEST, "bad_path", "%s", path_err);
        return 1;
    }
    if (kind == ROUTE_HUB_NOT_FOUND) {
        *ret = respond_hub_error(conn, rq, MHD_HTTP_NOT_FOUND, NULL, NULL, 0,
                                 "no such endpoint: this server serves the read-only model API");
        return 1;
    }
    if (kind == ROUTE_NOT_FOUND || kind == ROUTE_S3) {
        *ret = respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "not_found",
                             "no endpoint at this path; see /v1/models");
        return 1;
    }
    /* A browser's preflight carries no credentials: answered before the token. */
    if (cors_is_preflight(srv->cfg, method,
                          MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"),
                          MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                      "Access-Control-Request-Method"))) {
        *ret = respond_preflight(conn, rq, route_allowed_methods(kind));
        return 1;
    }
    int is_get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || rq->is_head;
    int is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    int is_admin = kind == ROUTE_GPU && (is_post || strcmp(method, MHD_HTTP_METHOD_DELETE) == 0);
    /* A fetch POST only reads: it needs the read token, as its GET form does. */
    int is_fetch_post = kind == ROUTE_FETCH && is_post;
    /* paths-info is a POST that only reads, and only a POST; a dataset's or
     * space's routes (paths-info among them) are all "no such repo". */
    int method_ok = kind == ROUTE_HUB_PATHS_INFO ? is_post
                    : kind == ROUTE_HUB_NO_REPO  ? is_get || is_post
                                                 : is_get || is_admin || is_fetch_post;
    rq->reads_only = is_get || is_fetch_post ||
                     ((kind == ROUTE_HUB_PATHS_INFO || kind == ROUTE_HUB_NO_REPO) && is_post);
    if (!method_ok) {
        rq->allow = route_allowed_methods(kind);
        *ret = refuse(conn, rq, hub, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                      "%s is not allowed here; allowed: %s", method, rq->allow);
        return 1;
    }
    /* The console's page and scripts are the same for everyone and hold no
     * data: they load without a token, and ask for one for what they read.
     * A mirror's Hub routes are its upstream's: the upstream checks the
     * caller's token, which the mirror forwards (server/h_mirror.c). */
    int upstream_checks = hub && srv->mirror && kind != ROUTE_HUB_NO_REPO &&
                          kind != ROUTE_HUB_NO_REPOS;
    if (kind != ROUTE_HEALTHZ && kind != ROUTE_UI && !upstream_checks &&
        !auth_check(srv,
                    MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION),
                    is_admin)) {
        *ret = refuse_unauthorized(conn, rq, hub, is_admin);
        return 1;
    }
    struct query_check qc = {
        .allowed = kind == ROUTE_TENSOR ? tensor_args
                   : kind == ROUTE_FETCH    ? fetch_args
                   : (kind == ROUTE_METRICS || kind == ROUTE_METRICS_TEXT) ? metrics_args
                                                                           : no_args};
    /* Hugging Face clients send parameters the Hub ignores as often as
     * ones it reads (expand, full, blobs, ...): the Hub routes take any. */
    if (!hub)
        MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, check_arg, &qc);
    if (qc.bad) {
        *ret = respond_error(conn, rq, MHD_HTTP_BAD_REQUEST, "bad_parameter",
                             "unknown query parameter \"%.100s\"", qc.bad);
        return 1;
    }
    return 0;
}

/* Routes url (over snapshot reg, which tells "name" from "org/name" in a
 * Hub path) into *rt and runs the checks every endpoint shares; returns 1
 * when one refused the request (answered in *ret). */
static int route_and_check(struct MHD_Connection *conn, struct request *rq, const char *url,
                           const char *method, struct reg_snapshot *reg,
                           struct route *rt, enum route_kind *kind, enum MHD_Result *ret)
{
    char err[256];
    url = route_origin_form(url); /* absolute-form targets (the AWS CRT client sends them) */
    *kind = route_parse_with(url, repo_exists, reg, rt, err, sizeof(err));
    /* Errors on the Hub's paths speak its dialect ({"error": "message"}). */
    int hub = is_hub_route(*kind) || (*kind == ROUTE_BAD_PATH && strncmp(url, "/v1/", 4) != 0);
    rq->endpoint = endpoint_of_route[*kind];
    rq->mhd = conn;
    if (*kind == ROUTE_TENSOR && MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "slice"))
        rq->endpoint = MEP_SLICE;
    return refuse_request(conn, rq, *kind, hub, method, err, ret);
}

int dispatch_refuse_early(struct MHD_Connection *conn, struct request *rq, const char *url,
                          const char *method, enum MHD_Result *ret)
{
    struct route rt;
    enum route_kind kind;
    struct reg_snapshot *reg = registry_acquire(&rq->srv->registry);
    int refused = route_and_check(conn, rq, url, method, reg, &rt, &kind, ret);
    route_free(&rt);
    reg_snapshot_unref(reg);
    return refused;
}

enum MHD_Result dispatch_request(struct MHD_Connection *conn, struct request *rq,
                                 const char *url, const char *method)
{
    struct route rt;
    enum route_kind kind;
    enum MHD_Result ret;

    /* One snapshot for the whole request. */
    struct reg_snapshot *reg = registry_acquire(&rq->srv->registry);
    if (route_and_check(conn, rq, url, method, reg, &rt, &kind, &ret))
        goto out;
    switch (kind) {
    case ROUTE_HEALTHZ:
        ret = handle_healthz(conn, rq);
        break;
    case ROUTE_READYZ:
        ret = handle_readyz(conn, rq);
        break;
    case ROUTE_UI:
        ret = handle_ui(conn, rq, rt.name, rt.raw);
        break;
    case ROUTE_METRICS:
    case ROUTE_METRICS_TEXT:
        ret = handle_metrics(conn, rq, kind == ROUTE_METRICS_TEXT);
        break;
    default:
        ret = dispatch_model(conn, rq, &rt, method, reg);
    }
out:
    route_free(&rt);
    reg_snapshot_unref(reg);
    return ret;
}
