/* ui: see ui.h. */
#include "ui.h"

#include <stdio.h>
#include <string.h>

#include "handlers.h"
#include "respond.h"

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

const struct ui_asset *ui_find(const char *name, size_t len)
{
    for (size_t i = 0; i < ui_assets_count; i++)
        if (strlen(ui_assets[i].name) == len && memcmp(ui_assets[i].name, name, len) == 0)
            return &ui_assets[i];
    return NULL;
}

enum MHD_Result handle_ui(struct MHD_Connection *conn, struct request *rq, const char *name,
                          int bare)
{
    if (!rq->srv->cfg->ui)
        return respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "not_found",
                             "the web console is off (ui = false)");
    if (bare)
        return respond_redirect(conn, rq, MHD_HTTP_MOVED_PERMANENTLY, "/ui/", security_headers);
    const struct ui_asset *a = ui_find(name, strlen(name));
    if (!a)
        return respond_error(conn, rq, MHD_HTTP_NOT_FOUND, "not_found",
                             "the web console has no file \"%.100s\"", name);
    /* Static bytes: no model to pin, no file to check; revalidated with the
     * ETag on every load, so a new binary's console is seen at once. */
    struct representation rep = {
        .body = {.prefix = (const char *)a->data, .prefix_len = a->len, .fd = -1},
        .content_type = a->content_type,
        .mtime = -1,
        .extra = security_headers,
    };
    snprintf(rep.etag, sizeof(rep.etag), "%s", a->etag);
    return respond_body(conn, rq, &rep);
}
