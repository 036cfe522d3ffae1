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

/* Whether a script may send header name[0..len) (lower case). */
static int header_allowed(const char *name, size_t len)
{
    static const char *const names[] = {
        "authorization", "range", "if-range", "if-match", "if-none-match",
        "if-modified-since", "if-unmodified-since", "content-type", "accept",
        "accept-language", "content-language", "cache-control", NULL};
    static const char *const prefixes[] = {"x-amz-", "amz-sdk-", NULL};
    for (const char *const *n = names; *n; n++)
        if (strlen(*n) == len && memcmp(*n, name, len) == 0)
            return 1;
    for (const char *const *p = prefixes; *p; p++)
        if (len > strlen(*p) && memcmp(*p, name, strlen(*p)) == 0)
            return 1;
    return 0;
}

/* An RFC 9110 token character (what a field name is made of). */
static int tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

char *cors_allow_headers(const char *requested, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (const char *p = requested; p && *p;) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        const char *next = *end ? end + 1 : end;
        /* optional whitespace around the list's commas */
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
            end--;
        char name[64];
        size_t len = (size_t)(end - p);
        int ok = len > 0 && len < sizeof(name);
        for (size_t i = 0; ok && i < len; i++) {
            ok = tchar((unsigned char)p[i]);
            name[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);
        }
        p = next;
        if (!ok || !header_allowed(name, len))
            continue;
        if (n + (n ? 2 : 0) + len + 1 > cap)
            break;
        if (n)
            out[n++] = ',', out[n++] = ' ';
        memcpy(out + n, name, len);
        out[n += len] = '\0';
    }
    return out;
}

size_t cors_headers(const struct config *cfg, const char *origin, const char *methods,
                    const char *allow_headers, const char *out[2 * CORS_MAX_HEADERS])
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
        if (allow_headers && allow_headers[0])
            PUT("Access-Control-Allow-Headers", allow_headers);
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
