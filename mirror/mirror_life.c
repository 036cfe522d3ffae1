/* mirror_life: the mirror's start and stop (mirror_new, mirror_free), on
 * top of its parts: the cache's directory made, the preloads of a previous
 * run cleared and its files loaded (complete ones, partial ones with their
 * bitmaps, into mirror.c's map), then the fetchers (mirror_fetch.c) and
 * the job threads (mirror_job.c) started; at stop, the threads end before
 * the cache is freed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "log.h"
#include "mirror_int.h"
#include "mirror_ask.h"
#include "mirror_health.h"
#include "mirror_job.h"
#include "mirror_names.h"
#include "mirror_repos.h"
#include "mirror_view.h"
#include "mirror_store.h"
#include "util.h"

#define NBUCKETS 4096

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

/* ---- what a previous run left ------------------------------------------------------ */

struct found {
    struct mirror_file *f;
    int64_t mtime_ns;
};

static int by_mtime(const void *a, const void *b)
{
    const struct found *x = a, *y = b;
    return (x->mtime_ns > y->mtime_ns) - (x->mtime_ns < y->mtime_ns);
}

/* The file of blob `name`, complete or partial, or NULL (removing what
 * cannot be resumed). */
static struct mirror_file *load_blob(struct mirror *m, int blobs, const char *name,
                                     const struct stat *sb)
{
    struct mirror_id id;
    char path[96];
    if (mirror_key_parse(name, strlen(name), &id) < 0)
        return NULL; /* not ours: left alone */
    char *buf = NULL;
    int64_t len = mirror_state_read(m->dirfd, name, &buf);
    if (len == -ENOENT) { /* no state file: complete */
        id.size = (uint64_t)sb->st_size;
        struct mirror_file *f = mirror_file_new(&id, m->opt.block_bytes);
        f->complete = 1;
        f->held = id.size;
        return f;
    }
    uint64_t block;
    const uint8_t *bits;
    struct st_error err;
    if (len < 0 || mirror_state_parse(buf, (size_t)len, name, &id, &block, &bits, &err) < 0 ||
        (uint64_t)sb->st_size != id.size) {
        log_msg(LOG_WARN, "mirror: blobs/%s: %s: starting it over", name,
                len < 0 ? strerror((int)-len) : (uint64_t)sb->st_size != id.size
                              ? "the blob's size is not the state file's" : err.message);
        free(buf);
        snprintf(path, sizeof(path), "%s.state", name);
        unlinkat(blobs, name, 0); /* the blob first, as do_mirror_evict */
        unlinkat(blobs, path, 0);
        return NULL;
    }
    struct mirror_file *f = mirror_file_new(&id, block);
    memcpy(f->present, bits, (size_t)((f->nblocks + 7) / 8));
    for (uint64_t b = 0; b < f->nblocks; b++)
        if (bit_get(f->present, b)) {
            f->n_present++;
            f->held += block_len(f, b);
        }
    free(buf);
    return f;
}

/* Reads blobs/ into the map, least recently used (oldest mtime) first;
 * removes state files whose blob is gone and what cannot be resumed. No
 * thread runs yet. */
static int load_cache(struct mirror *m, struct st_error *err)
{
    int blobs = openat(m->dirfd, "blobs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = blobs >= 0 ? fdopendir(blobs) : NULL;
    if (!d) {
        if (blobs >= 0)
            close(blobs);
        return st_error_errno(err, errno, "mirror cache: %s/blobs", m->opt.cache_dir);
    }
    struct found *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat sb;
        const char *dot = strstr(de->d_name, ".state");
        if (fstatat(blobs, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode))
            continue;
        if (dot && dot[6] == '\0') {
            char blob[96];
            snprintf(blob, sizeof(blob), "%.*s", (int)(dot - de->d_name), de->d_name);
            if (faccessat(blobs, blob, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
                unlinkat(blobs, de->d_name, 0);
            continue;
        }
        struct mirror_file *f = load_blob(m, blobs, de->d_name, &sb);
        if (!f)
            continue;
        v = xgrow(v, &cap, n, sizeof(*v), 64);
        v[n++] = (struct found){f, (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec};
    }
    closedir(d);
    if (n)
        qsort(v, n, sizeof(*v), by_mtime);
    for (size_t i = 0; i < n; i++) {
        do_mirror_insert(m, v[i].f);
        m->used += v[i].f->held;
    }
    free(v);
    /* A smaller cap than last time: the oldest go now. */
    while (m->used > m->opt.max_bytes && m->lru_head)
        do_mirror_evict(m, m->lru_head);
    do_mirror_gauges(m); /* no thread yet: the lock is not needed */
    return 0;
}

/* At stop, the threads gone: closes and frees every file of the map. */
static void files_free(struct mirror *m)
{
    for (size_t i = 0; i < m->nbuckets; i++)
        for (struct mirror_file *f = m->buckets[i], *next; f; f = next) {
            next = f->hnext;
            if (f->fd >= 0)
                close(f->fd);
            if (f->state_fd >= 0)
                close(f->state_fd);
            mirror_file_free(f);
        }
    free(m->buckets);
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
    m->seed = hash_seed(m);
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
    m->asks = mirror_asks_new();
    m->health = mirror_health_new();
    m->views = mirror_views_new();
    m->repos = mirror_repos_new();
    m->up = upstream_new(o->upstream, o->redirect_private); /* the fetchers pace themselves */
    if (!(m->names = mirror_names_new(m->dirfd, err)))
        goto fail;
    clear_models(m);
    if (load_cache(m, err) < 0 || mirror_fetch_start(m, err) < 0 ||
        mirror_jobs_start(m, err) < 0)
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
    mirror_views_free(m->views); /* before the files: a view holds none, but its model's root */
    mirror_asks_free(m->asks);
    mirror_names_free(m->names);
    mirror_repos_free(m->repos);
    mirror_fetch_stop(m);
    files_free(m);
    upstream_free(m->up);
    mirror_health_free(m->health);
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

