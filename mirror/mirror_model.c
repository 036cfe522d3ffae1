/* mirror_model: see mirror_model.h. */
#include "mirror_model.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "digest.h"
#include "fileio.h"
#include "log.h"
#include "mirror_int.h"
#include "mirror_job.h"
#include "mirror_repos.h"
#include "reg_common.h"
#include "reg_model.h"
#include "st_header.h"
#include "st_index.h"
#include "util.h"

#define MODEL_FILES_MAX 4096       /* weight files of one model */

struct mirror_model {
    struct mirror *m;
    char *repo;
    char commit[41];
    struct reg_root *root;
    struct reg_model *rm;
    size_t n;                      /* the model's files: */
    char **names;                  /* ... named in its directory */
    char **paths;                  /* ... and in the repo */
    struct mirror_id *ids;
    struct mirror_file **files;    /* a reference each while built, and kept by a preload's */
    char dir[48];                  /* models/<n>, "" when not made (or removed) */
    int unconfirmed;               /* a header was read before its file's hash matched ... */
    uint64_t dropped;              /* ... and m->dropped was this before it was read */
    uint64_t missing;              /* bytes a preload still had to fetch when it was built */
};

/* ---- the model -------------------------------------------------------------- */

const struct reg_model *mirror_model_reg(const struct mirror_model *mm)
{
    return mm->rm;
}

const char *mirror_model_commit(const struct mirror_model *mm)
{
    return mm->commit;
}

int mirror_model_current(const struct mirror_model *mm)
{
    return !mm->unconfirmed || atomic_load(&mm->m->dropped) == mm->dropped;
}

static size_t index_of(const struct mirror_model *mm, const struct reg_file *rf)
{
    for (size_t i = 0; i < mm->n; i++)
        if (strcmp(mm->names[i], rf->name) == 0)
            return i;
    return mm->n;
}

struct mirror_file *mirror_model_open(struct mirror_model *mm, const struct reg_file *rf,
                                      const char *auth, struct st_error *err)
{
    size_t i = index_of(mm, rf);
    if (i == mm->n) {
        st_error_fail(err, ST_ERR_NOT_FOUND, "%s is not a file of the mirrored model", rf->name);
        return NULL;
    }
    struct mirror_src src = {mm->repo, mm->commit, mm->paths[i], auth};
    return mirror_open(mm->m, &mm->ids[i], &src, err);
}

int mirror_model_present(struct mirror_model *mm, const struct reg_file *rf, uint64_t off,
                         uint64_t len)
{
    size_t i = index_of(mm, rf);
    return i < mm->n && mm->files &&
           mirror_readable(mm->m, mm->files[i], off, len, MIRROR_WHOLE, NULL) == (int64_t)len;
}

int mirror_model_wait(struct mirror_model *mm, const struct reg_file *rf, uint64_t off,
                      uint64_t len, const atomic_int *cancel, struct st_error *err)
{
    size_t i = index_of(mm, rf);
    if (i == mm->n || !mm->files)
        return st_error_fail(err, ST_ERR_NOT_FOUND, "%s is not a file of the mirrored model",
                             rf->name);
    return mirror_wait_range(mm->m, mm->files[i], off, len, cancel, err);
}

/* Removes models/<n>/ and what it holds. */
static void remove_dir(struct mirror_model *mm)
{
    if (!mm->dir[0])
        return;
    char path[1200];
    for (size_t i = 0; i < mm->n; i++) {
        snprintf(path, sizeof(path), "%s/%s", mm->dir, mm->names[i]);
        unlinkat(mm->m->dirfd, path, 0);
    }
    unlinkat(mm->m->dirfd, mm->dir, AT_REMOVEDIR);
    mm->dir[0] = '\0';
}

static void release_files(struct mirror_model *mm)
{
    for (size_t i = 0; mm->files && i < mm->n; i++)
        mirror_unref(mm->m, mm->files[i]);
    free(mm->files);
    mm->files = NULL;
}

void mirror_model_free(struct mirror_model *mm)
{
    if (!mm)
        return;
    reg_model_unref(mm->rm); /* closes its descriptors first */
    if (mm->root)
        reg_root_unref(mm->root);
    remove_dir(mm);
    release_files(mm);
    for (size_t i = 0; i < mm->n; i++) {
        free(mm->names[i]);
        free(mm->paths[i]);
    }
    free(mm->names);
    free(mm->paths);
    free(mm->ids);
    free(mm->repo);
    free(mm);
}

/* ---- building --------------------------------------------------------------- */

/* Waits for the bytes a model's build reads: an index whole, a
 * safetensors file's length prefix and header; -ECANCELED once *cancel is
 * set (its job lost its submitters: an upstream that never answers holds
 * no job thread for a client that left). */
static int fetch_heads(struct mirror_model *mm, const atomic_int *cancel, struct st_error *err)
{
    for (size_t i = 0; i < mm->n; i++) {
        struct mirror_file *f = mm->files[i];
        uint64_t size = mirror_file_size(f);
        int st = str_has_suffix(mm->names[i], ".safetensors");
        uint64_t want = st && size > 8 ? 8 : size;
        int rc = mirror_wait_range(mm->m, f, 0, want, cancel, err);
        if (rc == 0 && st && size > 8) {
            uint8_t le[8];
            uint64_t n = 0;
            rc = fileio_pread_full(mirror_file_fd(f), le, 8, 0);
            for (int k = 7; rc == 0 && k >= 0; k--)
                n = n << 8 | le[k];
            /* A length the file cannot hold is the validation's to refuse. */
            uint64_t end = n <= ST_MAX_HEADER_LEN && 8 + n <= size ? 8 + n : 8;
            if (rc == 0)
                rc = mirror_wait_range(mm->m, f, 0, end, cancel, err);
            else
                st_error_errno(err, -rc, "reading %s from the cache", mm->names[i]);
        }
        if (rc == -ECANCELED)
            st_error_fail(err, ST_ERR_IO, "the build of %s at %s was stopped (nobody waits for it, "
                          "or the mirror is stopping)", mm->repo, mm->commit);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The SHA-256 of a complete file of the cache (a small file's content is
 * named by its git blob id: the description shows its SHA-256 too). */
static int sha256_of(struct mirror_file *f, uint8_t out[32])
{
    struct digest_result d;
    char *buf = xmalloc(DIGEST_BLOCK);
    int rc = digest_fd(mirror_file_fd(f), mirror_file_size(f), buf, DIGEST_BLOCK, NULL, NULL, &d);
    if (rc == 0)
        memcpy(out, d.sha256, 32);
    free(buf);
    return rc;
}

/* models/<n>/: a symlink per file to its blob, and the registry model. */
static int build(struct mirror_model *mm, const char *name, const char *dir,
                 struct st_error *err)
{
    struct mirror *m = mm->m;
    pthread_mutex_lock(&m->lock);
    uint64_t seq = ++m->model_seq;
    pthread_mutex_unlock(&m->lock);
    snprintf(mm->dir, sizeof(mm->dir), "models/%" PRIu64, seq);
    if (mkdirat(m->dirfd, mm->dir, 0755) < 0) {
        int e = errno;
        mm->dir[0] = '\0';
        return st_error_errno(err, e, "mirror cache: models/%" PRIu64, seq);
    }
    struct reg_entry_id *ids = xcalloc(mm->n, sizeof(*ids));
    char path[1200], target[128];
    int rc = 0;
    for (size_t i = 0; i < mm->n && rc == 0; i++) {
        struct stat sb;
        snprintf(path, sizeof(path), "%s/%s", mm->dir, mm->names[i]);
        snprintf(target, sizeof(target), "../../blobs/%s", mm->files[i]->key);
        if (symlinkat(target, m->dirfd, path) < 0 || fstatat(m->dirfd, path, &sb, 0) < 0)
            rc = st_error_errno(err, errno, "mirror cache: %s", path);
        ids[i].name = mm->names[i];
        fileio_stat_from(&sb, &ids[i].st);
    }
    if (rc == 0 && !(mm->root = reg_root_open(m->opt.cache_dir, NULL, err)))
        rc = -EIO;
    if (rc == 0) {
        mm->rm = reg_model_build(mm->root, name, mm->dir, ids, mm->n, NULL);
        if (mm->rm->state != MODEL_READY)
            rc = st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "%s at %s%s%s is not a valid "
                               "model: %s", mm->repo, mm->commit, dir[0] ? ", " : "", dir,
                               mm->rm->error.message);
    }
    for (size_t i = 0; rc == 0 && i < mm->rm->n_files; i++) {
        const struct reg_file *rf = &mm->rm->files[i];
        size_t k = index_of(mm, rf);
        uint8_t sha[32];
        if (k == mm->n)
            continue;
        if (mm->ids[k].kind == MIRROR_SHA256)
            reg_file_set_hashes(rf, mm->ids[k].digest, NULL);
        else if (mirror_file_complete(m, mm->files[k]) && sha256_of(mm->files[k], sha) == 0)
            reg_file_set_hashes(rf, sha, mm->ids[k].digest);
    }
    free(ids);
    return rc;
}

/* Whether path (in the repo) is a weight file directly in dir; its name
 * there in *name. */
static int in_dir(const char *path, const char *dir, const char **name)
{
    size_t dl = strlen(dir);
    if (dl && (strncmp(path, dir, dl) != 0 || path[dl] != '/'))
        return 0;
    *name = dl ? path + dl + 1 : path;
    return !strchr(*name, '/') && (*name)[0] != '.' && mirror_repo_is_weight(*name);
}

int mirror_model_build(struct mirror *m, const char *name, const char *repo,
                       const struct mirror_repo *doc, const char *dir, int keep,
                       const atomic_int *cancel, struct mirror_model **out, struct st_error *err)
{
    struct mirror_model *mm = xcalloc(1, sizeof(*mm));
    mm->m = m;
    mm->repo = xstrdup(repo);
    memcpy(mm->commit, doc->commit, 41);
    size_t cap = 0;
    int rc = 0, any = 0;
    for (size_t i = 0; i < doc->n && rc == 0; i++) {
        const char *fname;
        if (!doc->files[i].has_id || !in_dir(doc->files[i].name, dir, &fname))
            continue;
        /* An index is read whole: never fetch more than its parser takes. */
        if (!str_has_suffix(fname, ".safetensors") && doc->files[i].id.size > ST_INDEX_MAX_LEN) {
            rc = st_error_fail(err, ST_ERR_LIMIT, "the upstream's %s at %s lists %s at %" PRIu64
                               " bytes, over the %llu bytes a safetensors index may have: "
                               "not fetched", repo, doc->commit, doc->files[i].name,
                               doc->files[i].id.size, (unsigned long long)ST_INDEX_MAX_LEN);
            break;
        }
        if (mm->n == MODEL_FILES_MAX) {
            rc = st_error_fail(err, ST_ERR_LIMIT, "%s has more than %d weight files in one "
                               "directory", repo, MODEL_FILES_MAX);
            break;
        }
        if (mm->n == cap) {
            cap = cap ? 2 * cap : 16;
            mm->names = xrealloc(mm->names, cap * sizeof(*mm->names));
            mm->paths = xrealloc(mm->paths, cap * sizeof(*mm->paths));
            mm->ids = xrealloc(mm->ids, cap * sizeof(*mm->ids));
            mm->files = xrealloc(mm->files, cap * sizeof(*mm->files));
        }
        struct mirror_src src = {repo, doc->commit, doc->files[i].name, m->opt.own_auth};
        mm->names[mm->n] = xstrdup(fname);
        mm->paths[mm->n] = xstrdup(doc->files[i].name);
        mm->ids[mm->n] = doc->files[i].id;
        mm->files[mm->n] = mirror_open(m, &doc->files[i].id, &src, err);
        if (!mm->files[mm->n]) {
            free(mm->names[mm->n]);
            free(mm->paths[mm->n]);
            rc = -EIO;
            break;
        }
        any |= str_has_suffix(fname, ".safetensors");
        mm->n++;
    }
    if (rc == 0 && !any)
        rc = st_error_fail(err, ST_ERR_NOT_FOUND, "the upstream's repo %s has no .safetensors "
                           "file %s%s (with a hash the mirror can check)", repo,
                           dir[0] ? "in " : "at its top", dir);
    mm->dropped = atomic_load(&m->dropped);
    if (rc == 0)
        rc = fetch_heads(mm, cancel, err);
    if (rc == 0)
        rc = build(mm, name, dir, err);
    /* A file complete now was complete, or matched its hash, after its
     * header was read: else m->dropped moved. */
    for (size_t i = 0; rc == 0 && i < mm->n; i++)
        mm->unconfirmed |= !mirror_file_complete(m, mm->files[i]);
    if (rc == 0 && keep) { /* every block from here on: a preload reads them as they come */
        for (size_t i = 0; i < mm->n; i++) {
            uint64_t size = mirror_file_size(mm->files[i]);
            mm->missing += size - mirror_want(m, mm->files[i], 0, size, MIRROR_WHOLE);
        }
    } else if (rc == 0) { /* nothing of the cache: its answers open what they read */
        reg_model_close_files(mm->rm);
        remove_dir(mm);
        release_files(mm);
    }
    if (rc < 0) {
        mirror_model_free(mm);
        return rc;
    }
    *out = mm;
    return 0;
}

/* ---- a preload's job ------------------------------------------------------------ */

struct model_job {
    char *repo, *rev;
    struct mirror_model *mm;
};

static void model_job_free(void *p)
{
    struct model_job *d = p;
    mirror_model_free(d->mm);
    free(d->repo);
    free(d->rev);
    free(d);
}

static int model_job_run(struct mirror *m, struct upstream_conn *c, void *data,
                         struct st_error *err)
{
    struct model_job *d = data;
    struct mirror_repo doc;
    int64_t age;
    int rc = mirror_repo_fetch(m, c, d->repo, d->rev, &doc, &age, err);
    if (rc < 0)
        return rc;
    mirror_repos_learn(m, d->repo, &doc, (int64_t)time(NULL) - (age > 0 ? age : 0));
    rc = mirror_model_build(m, d->repo, d->repo, &doc, "", 1, upstream_conn_abort(c), &d->mm,
                            err);
    if (rc == 0)
        log_msg(LOG_INFO, "mirror: model %s at %s prepared for a preload: %zu files, %" PRIu64
                " bytes to fetch", d->repo, doc.commit, d->mm->n, d->mm->missing);
    mirror_repo_clear(&doc);
    return rc;
}

struct mirror_job *mirror_job_model(struct mirror *m, uint64_t client, const char *repo,
                                    const char *rev, void (*cb)(void *arg), void *arg, int *why)
{
    struct model_job *d = xcalloc(1, sizeof(*d));
    d->repo = xstrdup(repo);
    d->rev = xstrdup(rev);
    /* Never shared: its submitter takes the model it makes. */
    struct mirror_job_spec spec = {.client = client, .build = 1, .run = model_job_run,
                                   .data = d, .free_data = model_job_free};
    return mirror_job_submit(m, &spec, cb, arg, why);
}

int mirror_job_model_take(struct mirror_job *j, struct mirror_model **out, struct st_error *err)
{
    struct model_job *d = mirror_job_data(j);
    int rc = mirror_job_status(j, err);
    *out = rc < 0 ? NULL : d->mm;
    d->mm = NULL;
    return rc;
}
