/* mirror_start: see mirror_start.h. */
#include "mirror_start.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "mirror.h"
#include "st_error.h"
#include "upstream.h"
#include "util.h"

/* "Bearer <first line of path>", or NULL with errbuf. */
static char *read_token(const char *path, char *errbuf, size_t errlen)
{
    struct st_error e;
    size_t n;
    char *token;
    if (fileio_read_secret("upstream_token_file", path, &token, &n, &e) < 0) {
        snprintf(errbuf, errlen, "%s", e.message);
        return NULL;
    }
    char *auth = xasprintf("Bearer %s", token);
    free_secret(token);
    return auth;
}

struct mirror *mirror_start(const struct config *cfg, int *rc, char *errbuf, size_t errlen)
{
    *rc = 0;
    if (!cfg->upstream || !cfg->upstream[0])
        return NULL;
    *rc = -1;
    if (upstream_global_init() < 0) {
        snprintf(errbuf, errlen, "upstream: libcurl could not start");
        return NULL;
    }
    char *dir = NULL, *auth = NULL;
    if (cfg->mirror_cache_dir && cfg->mirror_cache_dir[0]) {
        dir = xstrdup(cfg->mirror_cache_dir);
    } else {
        char *state = config_state_dir_path(cfg);
        if (!state) {
            snprintf(errbuf, errlen, "mirror_cache_dir is empty and there is no state directory "
                                     "to put the cache in: set mirror_cache_dir");
            return NULL;
        }
        dir = xasprintf("%s/mirror", state);
        free(state);
    }
    if (cfg->upstream_token_file && cfg->upstream_token_file[0] &&
        !(auth = read_token(cfg->upstream_token_file, errbuf, errlen))) {
        free(dir);
        return NULL;
    }
    struct mirror_options o = {
        .upstream = cfg->upstream,
        .cache_dir = dir,
        .max_bytes = cfg->mirror_cache_max_bytes,
        .block_bytes = (cfg->mirror_block_bytes + 4095) / 4096 * 4096,
        .fetch_threads = cfg->mirror_fetch_threads,
        .max_bps = cfg->upstream_max_bytes_per_second,
        .auth_ttl = cfg->mirror_auth_ttl,
        .own_auth = auth,
        .serve_stale = strcmp(cfg->mirror_offline, "strict") != 0,
        .redirect_private = (enum upstream_private)upstream_private_mode(
            cfg->upstream_redirect_private),
        .stale_max_age = cfg->mirror_stale_max_age,
    };
    struct st_error err;
    struct mirror *m = mirror_new(&o, &err);
    if (!m)
        snprintf(errbuf, errlen, "mirror: %s", err.message);
    else
        *rc = 0;
    free_secret(auth);
    free(dir);
    return m;
}
