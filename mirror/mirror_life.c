/* mirror_life: the mirror's start and stop (mirror_new, mirror_free), on
 * top of its parts: the cache's directory made, the preloads of a previous
 * run cleared and its files loaded (mirror.c), then the fetchers
 * (mirror_fetch.c) and the job threads (mirror_job.c) started; at stop,
 * the threads end before the cache is freed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "log.h"
#include "mirror_int.h"
#include "mirror_job.h"
#include "util.h"

#define NBUCKETS 4096
#define JOB_THREADS 2          /* metadata requests at once (each a round trip, a few ms) */

/* Removes what models/ holds (preloads of a previous run). */
static void clear_models(struct mirror *m)
{
    int fd = openat(m->dirfd, "models", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        int sub = openat(fd, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        DIR *sd = sub >= 0 ? fdopendir(sub) : NULL;
        struct dirent *e;
        while (sd && (e = readdir(sd)))
            if (e->d_name[0] != '.')
                unlinkat(sub, e->d_name, 0);
        if (sd)
            closedir(sd);
        else if (sub >= 0)
            close(sub);
        unlinkat(fd, de->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

struct mirror *mirror_new(const struct mirror_options *o, struct st_error *err)
{
    struct mirror *m = xcalloc(1, sizeof(*m));
    m->opt = *o;
    m->s_upstream = xstrdup(o->upstream);
    m->s_cache_dir = xstrdup(o->cache_dir);
    m->s_own_auth = o->own_auth ? xstrdup(o->own_auth) : NULL;
    m->opt.upstream = m->s_upstream;
    m->opt.cache_dir = m->s_cache_dir;
    m->opt.own_auth = m->s_own_auth;
    m->dirfd = -1;
    m->nbuckets = NBUCKETS;
    m->buckets = xcalloc(m->nbuckets, sizeof(*m->buckets));
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->work, NULL);
    pthread_cond_init(&m->changed, NULL);
    pthread_mutex_init(&m->pace_lock, NULL);
    int rc = fileio_mkdirs(o->cache_dir, 0755);
    if (rc == 0 && (m->dirfd = open(o->cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        rc = -errno;
    if (rc == 0 && ((mkdirat(m->dirfd, "blobs", 0755) < 0 && errno != EEXIST) ||
                    (mkdirat(m->dirfd, "models", 0755) < 0 && errno != EEXIST)))
        rc = -errno;
    if (rc < 0) {
        st_error_errno(err, -rc, "mirror cache directory %s", o->cache_dir);
        goto fail;
    }
    m->up = upstream_new(o->upstream); /* the fetchers pace themselves, all together */
    clear_models(m);
    if (mirror_load_cache(m, err) < 0 || mirror_fetch_start(m, err) < 0 ||
        mirror_jobs_start(m, JOB_THREADS, err) < 0)
        goto fail;
    log_msg(LOG_INFO, "mirror of %s: cache %s holds %" PRIu64 " files (%" PRIu64 " partial), "
            "%" PRIu64 " of %" PRIu64 " bytes", o->upstream, o->cache_dir, m->n_files,
            m->n_partial, m->used, o->max_bytes);
    return m;
fail:
    mirror_free(m);
    return NULL;
}

void mirror_free(struct mirror *m)
{
    if (!m)
        return;
    /* Transfers and waits end at once; then the jobs (one may wait on the
     * fetchers: a model's headers), then the fetchers. */
    pthread_mutex_lock(&m->lock);
    m->stopping = 1;
    atomic_store(&m->stop_flag, 1);
    pthread_cond_broadcast(&m->work);
    pthread_cond_broadcast(&m->changed);
    pthread_mutex_unlock(&m->lock);
    mirror_jobs_stop(m);
    mirror_fetch_stop(m);
    mirror_files_free(m);
    upstream_free(m->up);
    if (m->dirfd >= 0)
        close(m->dirfd);
    free(m->s_upstream);
    free(m->s_cache_dir);
    free_secret(m->s_own_auth);
    pthread_cond_destroy(&m->work);
    pthread_cond_destroy(&m->changed);
    pthread_mutex_destroy(&m->pace_lock);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

