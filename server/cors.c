/* cors: see cors.h. */
#include "cors.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

int cors_check_config(const struct config *cfg, char *err, size_t errlen)
{
    for (unsigned i = 0; i < cfg->n_cors_origins; i++) {
        if (strcmp(cfg->cors_origins[i], "*") == 0 && cfg->n_cors_origins > 1) {
            snprintf(err, errlen, "option cors_origins: \"*\" (any origin, no credentials) must "
                     "be its only entry; list the origins instead");
            return -1;
        }
    }
    return 0;
}

static int any_origin(const struct config *cfg)
{
    return cfg->n_cors_origins == 1 && strcmp(cfg->cors_origins[0], "*") == 0;
}

/* The request's Origin when it may read answers, else NULL. */
static const char *allowed_origin(const struct config *cfg, struct MHD_Connection *conn)
{
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    if (!origin)
        return NULL;
    if (any_origin(cfg))
        return origin;
    for (unsigned i = 0; i < cfg->n_cors_origins; i++)
        if (strcmp(cfg->cors_origins[i], origin) == 0)
            return origin;
    return NULL;
}

int cors_is_preflight(const struct config *cfg, struct MHD_Connection *conn, const char *method)
{
    return cfg->n_cors_origins && strcmp(method, MHD_HTTP_METHOD_OPTIONS) == 0 &&
           MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Method") &&
           allowed_origin(cfg, conn);
}

void cors_add_headers(const struct config *cfg, struct MHD_Connection *conn,
                      struct MHD_Response *resp, const char *methods)
{
    if (!cfg->n_cors_origins)
        return;
    int any = any_origin(cfg);
    const char *origin = any ? "*" : allowed_origin(cfg, conn);
    if (!any)
        MHD_add_response_header(resp, "Vary", "Origin");
    if (!origin)
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin);
    if (!any)
        MHD_add_response_header(resp, "Access-Control-Allow-Credentials", "true");
    if (methods) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", methods);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", CORS_ALLOW_HEADERS);
        MHD_add_response_header(resp, "Access-Control-Max-Age", CORS_MAX_AGE);
    } else {
        MHD_add_response_header(resp, "Access-Control-Expose-Headers", CORS_EXPOSE);
    }
}

int cors_refuses_write(const struct config *cfg, struct MHD_Connection *conn)
{
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!origin || (cfg->n_cors_origins && allowed_origin(cfg, conn)))
        return 0;
    /* The daemon's own pages (the console): scheme://HOST, as the browser
     * wrote the Host header. */
    const char *authority = strstr(origin, "://");
    return !(authority && host && host[0] && strcasecmp(authority + 3, host) == 0);
}
