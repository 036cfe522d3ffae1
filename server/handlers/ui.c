/* ui: see ui.h; also "/" and the OpenAPI description, the other files
 * compiled in. */
#include "ui.h"

#include <stdio.h>
#include <string.h>

#include "handlers.h"
#include "server.h"

/* The page runs only its own script and style, talks only to this origin,
 * and cannot be framed: model, tensor and file names come from files on
 * disk, and a name that smuggled markup into the page could do nothing. */
static const char *const security_headers[] = {
    "Content-Security-Policy",
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options", "nosniff",
    "X-Frame-Options", "DENY",
    "Referrer-Policy", "no-referrer",
    NULL,
};

/* A file compiled into the binary: static bytes, no model to hold, no file
 * to check; revalidated with the ETag on every load, so a new binary's
 * files are seen at once. */
static struct answer *send_asset(struct answer *a, const struct ui_asset *u)
{
    struct representation rep = {
        .body = {.prefix = (const char *)u->data, .prefix_len = u->len, .fd = -1},
        .content_type = u->content_type,
        .mtime = -1,
        .document = 1,
        .gzip = (const char *)u->gzip, /* compressed at build time (ui/embed.py) */
        .gzip_len = u->gzip_len,
    };
    snprintf(rep.etag, sizeof(rep.etag), "%s", u->etag);
    return answer_body(a, &rep);
}

struct answer *handle_openapi(const struct request_view *v, struct answer *a)
{
    (void)v;
    answer_header(a, "X-Content-Type-Options", "nosniff");
    return send_asset(a, &openapi_assets[0]);
}

struct answer *handle_ui(const struct request_view *v, struct answer *a, const char *name,
                         int bare)
{
    if (!v->srv->cfg->ui)
        return answer_error(a, HTTP_NOT_FOUND, "not_found", "the web console is off (ui = false)");
    if (bare) {
        answer_headers(a, security_headers);
        return answer_redirect(a, HTTP_MOVED_PERMANENTLY, "/ui/");
    }
    const struct ui_asset *u = ui_assets;
    while (u < ui_assets + ui_assets_count && strcmp(u->name, name) != 0)
        u++;
    if (u == ui_assets + ui_assets_count)
        return answer_error(a, HTTP_NOT_FOUND, "not_found",
                            "the web console has no file \"%.100s\"", name);
    answer_headers(a, security_headers);
    return send_asset(a, u);
}

/* Whether an Accept header asks for HTML (a browser's navigation). */
static int wants_html(const char *accept)
{
    return accept && strstr(accept, "text/html") != NULL;
}

struct answer *handle_root(const struct request_view *v, struct answer *a)
{
    /* the answer depends on Accept: a cache must keep the two apart */
    answer_header(a, "Vary", "Accept");
    if (v->srv->cfg->ui && wants_html(view_header(v, "Accept")))
        return answer_redirect(a, HTTP_FOUND, "/ui/");
    return answer_error(a, HTTP_NOT_FOUND, "not_found",
                        "no endpoint at \"/\": the API is under /v1 (GET /v1/models), described "
                        "by /v1/openapi.json; the Hugging Face API under /api, S3 under /s3/%s",
                        v->srv->cfg->ui ? "; the web console is /ui/" : "");
}
