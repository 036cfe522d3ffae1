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

/* origin when it may read answers, else NULL. */
static const char *allowed_origin(const struct config *cfg, const char *origin)
{
    if (!origin)
        return NULL;
    if (any_origin(cfg))
        return origin;
    for (unsigned i = 0; i < cfg->n_cors_origins; i++)
        if (strcmp(cfg->cors_origins[i], origin) == 0)
            return origin;
    return NULL;
}

int cors_is_preflight(const struct config *cfg, const char *method, const char *origin,
                      const char *request_method)
{
    return cfg->n_cors_origins && strcmp(method, "OPTIONS") == 0 && request_method &&
           allowed_origin(cfg, origin);
}

size_t cors_headers(const struct config *cfg, const char *origin, const char *methods,
                    const char *out[2 * CORS_MAX_HEADERS])
{
    size_t n = 0;
#define PUT(name, value) (out[2 * n] = (name), out[2 * n + 1] = (value), n++)
    if (!cfg->n_cors_origins)
        return 0;
    int any = any_origin(cfg);
    origin = any ? "*" : allowed_origin(cfg, origin);
    if (!any)
        PUT("Vary", "Origin");
    if (!origin)
        return n;
    PUT("Access-Control-Allow-Origin", origin);
    if (!any)
        PUT("Access-Control-Allow-Credentials", "true");
    if (methods) {
        PUT("Access-Control-Allow-Methods", methods);
        PUT("Access-Control-Allow-Headers", CORS_ALLOW_HEADERS);
        PUT("Access-Control-Max-Age", CORS_MAX_AGE);
    } else {
        PUT("Access-Control-Expose-Headers", CORS_EXPOSE);
    }
#undef PUT
    return n;
}

int cors_refuses_write(const struct config *cfg, const char *origin, const char *host)
{
    if (!origin || (cfg->n_cors_origins && allowed_origin(cfg, origin)))
        return 0;
    /* The daemon's own pages (the console): scheme://HOST, as the browser
     * wrote the Host header. */
    const char *authority = strstr(origin, "://");
    return !(authority && host && host[0] && strcasecmp(authority + 3, host) == 0);
}
