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
#include "host_allow.h"
#include "http_metrics.h"
#include "metrics.h"
#include "route.h"

/* Largest request body accepted, but for a fetch or a paths-info request
 * (max_fetch_body_bytes). */
#define MAX_UPLOAD 65536

struct query_check {
    const char *const *allowed;
    const char *bad;
};

static int check_arg(void *arg, const char *key, const char *value)
{
    (void)value;
    struct query_check *qc = arg;
    for (const char *const *a = qc->allowed; *a; a++)
        if (strcmp(*a, key) == 0)
            return 0;
    qc->bad = key;
    return 1;
}

size_t dispatch_upload_limit(const struct server *srv, const char *url)
{
    char err[256];
    struct route rt;
    url = route_origin_form(url);
    enum route_kind kind = route_parse(url, NULL, NULL, &rt, err, sizeof(err));
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
           k == ROUTE_HUB_NO_REPOS || k == ROUTE_HUB_WHOAMI;
}

static const int endpoint_of_route[] = {
    [ROUTE_NOT_FOUND] = MEP_OTHER,     [ROUTE_BAD_PATH] = MEP_OTHER,
    [ROUTE_HEALTHZ] = MEP_HEALTH,      [ROUTE_READYZ] = MEP_HEALTH,
    [ROUTE_METRICS_TEXT] = MEP_METRICS, [ROUTE_METRICS] = MEP_METRICS,
    [ROUTE_UI] = MEP_UI,               [ROUTE_ROOT] = MEP_UI,
    [ROUTE_OPENAPI] = MEP_UI,
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
    [ROUTE_HUB_WHOAMI] = MEP_HUB_API,
};

/* Answers an error in the dialect of the path: the Hub's ({"error": msg},
 * code only in X-Error-Code) on its paths, tensord's otherwise. */
static struct answer *refuse(struct answer *a, int hub, unsigned status, const char *code,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static struct answer *refuse(struct answer *a, int hub, unsigned status, const char *code,
                             const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (hub)
        return answer_hub_error(a, status, NULL, 1, "%s", msg);
    return answer_error(a, status, code, "%s", msg);
}

static struct answer *dispatch_model(const struct request_view *v, struct answer *a,
                                     const struct route *rt, const struct reg_snapshot *reg)
{
    /* Who a token is needs no models (a mirror's is its upstream's). */
    if (rt->kind == ROUTE_HUB_WHOAMI && !v->srv->mirror) {
        const char *authorization = view_header(v, "Authorization");
        return handle_hub_whoami(v, a, authorization != NULL, auth_role(v->srv, authorization));
    }
    if (!reg)
        return refuse(a, is_hub_route(rt->kind), HTTP_SERVICE_UNAVAILABLE, "not_ready",
                      "the models root has not been scanned yet");
    if (is_hub_route(rt->kind))
        return handle_hub(v, a, reg, rt);
    if (rt->kind == ROUTE_BLOB)
        return handle_blob(v, a, reg, rt);
    if (rt->kind == ROUTE_S3)
        return handle_s3(v, a, reg, rt);
    if (rt->kind == ROUTE_MODELS)
        return handle_models(v, a, reg);
    const struct reg_model *m = reg_snapshot_find_model(reg, rt->model, rt->model_len);
    if (!m && rt->kind == ROUTE_GPU && v->srv->mirror) /* a model of the upstream */
        return handle_mirror_gpu(v, a, rt->model);
    if (!m && v->srv->mirror)
        return handle_mirror_model(v, a, rt);
    if (!m)
        return answer_error(a, HTTP_NOT_FOUND, "model_not_found", "no model named \"%.300s\"",
                            rt->model);
    if (rt->kind == ROUTE_GPU)
        return handle_gpu(v, a, m->name);
    return handle_model_route(v, a, rt, m, NULL);
}

/* The token check: the Hub's paths answer 401 as huggingface_hub expects. */
static struct answer *refuse_unauthorized(const struct request_view *v, struct answer *a,
                                          int hub, int is_admin)
{
    if (hub) {
        /* huggingface_hub reads a 401 as "no such repo" unless the message
         * says the credentials were wrong; both are worth telling apart. */
        int sent = view_header(v, "Authorization") != NULL;
        return answer_hub_error(a, HTTP_UNAUTHORIZED, NULL, 0, "%s",
                                sent ? "Invalid credentials in Authorization header"
                                     : "a bearer token is required (Authorization: Bearer TOKEN)");
    }
    return answer_error(a, HTTP_UNAUTHORIZED, "unauthorized",
                        is_admin ? "this endpoint needs the admin bearer token"
                                 : "a bearer token is required");
}

/* The checks every endpoint shares, in order: the connection limit, the
 * path, the method, the token, the query parameters. Answers the first that
 * fails and returns 1; returns 0 when the request may go to its handler. */
static int refuse_request(const struct request_view *v, struct answer *a, enum route_kind kind,
                          int hub, const char *path_err)
{
    static const char *const no_args[] = {NULL};
    static const char *const tensor_args[] = {"slice", "format", "npy_dtype", NULL};
    static const char *const metrics_args[] = {"format", NULL};
    static const char *const fetch_args[] = {"q", NULL};
    static const char *const gpu_args[] = {"device", "rank", "world", NULL};
    const struct server *srv = v->srv;
    const char *method = v->method;
    if (atomic_load(&srv->connections) > srv->cfg->max_connections) {
        metrics_add(MC_CONNECTIONS_REJECTED, 1);
        a->close = 1;
        refuse(a, hub, HTTP_SERVICE_UNAVAILABLE, "overloaded", "more than %u connections are open",
               srv->cfg->max_connections);
        return 1;
    }
    /* Before anything is read or acted on: a DNS-rebinding page's name. */
    const char *host = view_header(v, "Host");
    if (!host_allowed(srv->cfg, auth_on(srv), host)) {
        refuse(a, hub, HTTP_FORBIDDEN, "host_not_allowed",
               "Host \"%.100s\" is not answered without a token: add it to allowed_hosts, or "
               "set auth_token_file (a page whose name was made to resolve here sends its own)",
               host);
        return 1;
    }
    /* A browser's preflight carries no credentials: answered before the
     * token, on every route that exists (the S3 API's too). */
    int s3 = kind == ROUTE_S3 && srv->cfg->s3;
    int exists = kind != ROUTE_BAD_PATH && kind != ROUTE_HUB_NOT_FOUND &&
                 kind != ROUTE_NOT_FOUND && (kind != ROUTE_S3 || s3);
    if (exists && cors_is_preflight(srv->cfg, method, view_header(v, "Origin"),
                                    view_header(v, "Access-Control-Request-Method"))) {
        char headers[512];
        cors_allow_headers(view_header(v, "Access-Control-Request-Headers"), headers,
                           sizeof(headers));
        answer_preflight(a, route_allowed_methods(kind), headers);
        return 1;
    }
    /* The S3 API checks its own method and signature (server/handlers/s3_auth). */
    if (s3)
        return 0;
    if (kind == ROUTE_BAD_PATH) {
        if (hub && !a->s3)
            answer_hub_error(a, HTTP_BAD_REQUEST, NULL, 0, "%s", path_err);
        else
            answer_error(a, HTTP_BAD_REQUEST, "bad_path", "%s", path_err);
        return 1;
    }
    if (kind == ROUTE_HUB_NOT_FOUND) {
        answer_hub_error(a, HTTP_NOT_FOUND, NULL, 0,
                         "no such endpoint: this server serves the read-only model API");
        return 1;
    }
    if (kind == ROUTE_NOT_FOUND || kind == ROUTE_S3) {
        answer_error(a, HTTP_NOT_FOUND, "not_found", "no endpoint at this path; see /v1/models");
        return 1;
    }
    int is_get = strcmp(method, "GET") == 0 || v->is_head;
    int is_post = strcmp(method, "POST") == 0;
    int is_admin = kind == ROUTE_GPU && (is_post || strcmp(method, "DELETE") == 0);
    /* A fetch POST only reads: it needs the read token, as its GET form does. */
    int is_fetch_post = kind == ROUTE_FETCH && is_post;
    /* paths-info is a POST that only reads, and only a POST; a dataset's or
     * space's routes (paths-info among them) are all "no such repo". */
    int method_ok = kind == ROUTE_HUB_PATHS_INFO ? is_post
                    : kind == ROUTE_HUB_NO_REPO  ? is_get || is_post
                                                 : is_get || is_admin || is_fetch_post;
    a->reads_only = is_get || is_fetch_post ||
                    ((kind == ROUTE_HUB_PATHS_INFO || kind == ROUTE_HUB_NO_REPO) && is_post);
    if (!method_ok) {
        const char *allow = route_allowed_methods(kind);
        refuse(a, hub, HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
               "%s is not allowed here; allowed: %s", method, allow);
        a->error.allow = allow;
        return 1;
    }
    if (is_admin &&
        cors_refuses_write(srv->cfg, view_header(v, "Origin"), view_header(v, "Host"))) {
        answer_error(a, HTTP_FORBIDDEN, "cross_origin",
                     "a page of another origin may not preload or evict; list it in "
                     "cors_origins to allow it");
        return 1;
    }
    /* The console's page and scripts are the same for everyone and hold no
     * data: they load without a token, and ask for one for what they read.
     * A mirror's Hub routes are its upstream's: the upstream checks the
     * caller's token, which the mirror forwards (server/handlers/h_mirror.c). */
    int upstream_checks = hub && srv->mirror && kind != ROUTE_HUB_NO_REPO &&
                          kind != ROUTE_HUB_NO_REPOS;
    int public = kind == ROUTE_HEALTHZ || kind == ROUTE_UI || kind == ROUTE_ROOT ||
                 kind == ROUTE_OPENAPI;
    if (!public && !upstream_checks &&
        !auth_check(srv, view_header(v, "Authorization"), is_admin)) {
        refuse_unauthorized(v, a, hub, is_admin);
        return 1;
    }
    struct query_check qc = {
        .allowed = kind == ROUTE_TENSOR ? tensor_args
                   : kind == ROUTE_FETCH    ? fetch_args
                   : kind == ROUTE_GPU      ? gpu_args
                   : (kind == ROUTE_METRICS || kind == ROUTE_METRICS_TEXT) ? metrics_args
                                                                           : no_args};
    /* Hugging Face clients send parameters the Hub ignores as often as
     * ones it reads (expand, full, blobs, ...): the Hub routes take any. */
    if (!hub)
        v->each_query(v, check_arg, &qc);
    if (qc.bad) {
        answer_error(a, HTTP_BAD_REQUEST, "bad_parameter", "unknown query parameter \"%.100s\"",
                     qc.bad);
        return 1;
    }
    return 0;
}

/* Routes the request's path (over snapshot reg, which tells "name" from
 * "org/name" in a Hub path) into *rt and runs the checks every endpoint
 * shares; returns 1 when one refused the request (answered in a). */
static int route_and_check(const struct request_view *v, struct answer *a,
                           struct reg_snapshot *reg, struct route *rt)
{
    char err[256];
    /* absolute-form targets (the AWS CRT client sends them) */
    const char *url = route_origin_form(v->path);
    enum route_kind kind = route_parse(url, repo_exists, reg, rt, err, sizeof(err));
    /* Errors on the Hub's paths speak its dialect ({"error": "message"}),
     * and on the S3 API's, S3's XML (whoever answers them: respond.c). */
    int hub = is_hub_route(kind) || (kind == ROUTE_BAD_PATH && strncmp(url, "/v1/", 4) != 0);
    a->s3 = v->srv->cfg->s3 && strncmp(url, "/s3", 3) == 0 && strchr("/?", url[3]) &&
            (kind == ROUTE_S3 || kind == ROUTE_BAD_PATH);
    a->endpoint = endpoint_of_route[kind];
    if (kind == ROUTE_TENSOR && v->query(v, "slice"))
        a->endpoint = MEP_SLICE;
    return refuse_request(v, a, kind, hub, err);
}

int dispatch_refuse_early(const struct request_view *v, struct answer *a)
{
    struct route rt;
    struct reg_snapshot *reg = registry_acquire(&v->srv->registry);
    int refused = route_and_check(v, a, reg, &rt);
    route_free(&rt);
    reg_snapshot_unref(reg);
    return refused;
}

struct answer *dispatch_request(const struct request_view *v, struct answer *a)
{
    struct route rt;
    /* One snapshot for the whole request, held by its answer until it is
     * rendered. */
    struct reg_snapshot *reg = registry_acquire(&v->srv->registry);
    a->snapshot = reg;
    if (route_and_check(v, a, reg, &rt))
        goto out;
    switch (rt.kind) {
    case ROUTE_HEALTHZ:
        handle_healthz(v, a);
        break;
    case ROUTE_READYZ:
        handle_readyz(v, a);
        break;
    case ROUTE_UI:
        handle_ui(v, a, rt.name, rt.raw);
        break;
    case ROUTE_ROOT:
        handle_root(v, a);
        break;
    case ROUTE_OPENAPI:
        handle_openapi(v, a);
        break;
    case ROUTE_METRICS:
    case ROUTE_METRICS_TEXT:
        handle_metrics(v, a, rt.kind == ROUTE_METRICS_TEXT);
        break;
    default:
        dispatch_model(v, a, &rt, reg);
    }
out:
    route_free(&rt);
    return a;
}
