/* mirror_model: see mirror_model.h. */
#include "mirror_model.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "digest.h"
#include "fileio.h"
#include "json_scan.h"
#include "log.h"
#include "mirror_int.h"
#include "mirror_ask.h"
#include "reg_common.h"
#include "reg_model.h"
#include "st_header.h"
#include "util.h"

#define MODEL_FILES_MAX 4096       /* top-level weight files of one model */
#define NAME_MAX_BYTES 1024
#define DOC_MAX_DEPTH 64           /* nesting in a repo document */

struct mirror_model {
    struct mirror *m;
    char commit[41];
    struct reg_root *root;
    struct reg_model *rm;
    size_t n;
    struct mirror_repo_file *repo; /* the model's files (n_repo) ... */
    size_t n_repo;
    struct mirror_file **files;    /* ... and the cache's file of the first n (a reference) */
    char dir[48];                  /* models/<n>, "" when not made */
    uint64_t missing;              /* bytes still to fetch when it was prepared (logged) */
};

/* ---- the repo document ---------------------------------------------------------- */

static int weight_file(const char *name)
{
    return !strchr(name, '/') && name[0] != '.' &&
           (str_has_suffix(name, ".safetensors") ||
            str_has_suffix(name, ".safetensors.index.json"));
}

/* The current string token, decoded into out (cap bytes, NUL-terminated).
 * Returns 0, or -1 when it is not a string or does not fit. */
static int take_string(struct json_scan *s, char *out, size_t cap)
{
    if (s->tok != JSON_TOK_STRING || s->str_nul)
        return -1;
    size_t n = json_scan_decode(s, out, cap - 1);
    if (n >= cap)
        return -1;
    out[n] = '\0';
    return 0;
}

static int take_size(struct json_scan *s, uint64_t *out)
{
    if (s->tok != JSON_TOK_INTEGER || s->integer < 0)
        return -1;
    *out = (uint64_t)s->integer;
    return 0;
}

/* What a sibling {"rfilename", "size", "blobId", "lfs": {"sha256", "size"}}
 * says. */
struct sibling {
    char name[NAME_MAX_BYTES], blob[48], sha[80];
    uint64_t size, lfs_size;
    int has_size, has_lfs_size;
};

static int lfs_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct sibling *sb = ctx;
    if (strcmp(key, "sha256") == 0 || strcmp(key, "oid") == 0)
        return take_string(s, sb->sha, sizeof(sb->sha));
    if (strcmp(key, "size") == 0) {
        sb->has_lfs_size = 1;
        return take_size(s, &sb->lfs_size);
    }
    return json_scan_value(s, depth, DOC_MAX_DEPTH);
}

static int sibling_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct sibling *sb = ctx;
    if (strcmp(key, "rfilename") == 0)
        return take_string(s, sb->name, sizeof(sb->name));
    if (strcmp(key, "blobId") == 0)
        return take_string(s, sb->blob, sizeof(sb->blob));
    if (strcmp(key, "size") == 0) {
        sb->has_size = 1;
        return take_size(s, &sb->size);
    }
    if (strcmp(key, "lfs") == 0 && s->tok == '{')
        return json_scan_each(s, depth, DOC_MAX_DEPTH, lfs_member, sb);
    return json_scan_value(s, depth, DOC_MAX_DEPTH);
}

/* The repo document as it is read. */
struct repo_doc {
    char sha[48];
    struct mirror_repo_file *v;
    size_t n;
    int too_many;              /* more than MODEL_FILES_MAX weight files */
};

/* One element of "siblings": kept when it is a weight file with a hash to
 * check it by (the caller says when none is). */
static int doc_sibling(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct repo_doc *d = ctx;
    struct sibling sb = {.name = ""};
    struct mirror_id id = {0};
    (void)key;
    if (s->tok != '{' || json_scan_each(s, depth, DOC_MAX_DEPTH, sibling_member, &sb) < 0)
        return -1;
    if (!weight_file(sb.name))
        return 0;
    if (strlen(sb.sha) == 64 && digest_unhex(sb.sha, 32, id.digest) == 0 &&
        (sb.has_lfs_size || sb.has_size)) {
        id.kind = MIRROR_SHA256;
        id.size = sb.has_lfs_size ? sb.lfs_size : sb.size;
    } else if (strlen(sb.blob) == 40 && digest_unhex(sb.blob, 20, id.digest) == 0 && sb.has_size) {
        id.kind = MIRROR_GIT_SHA1;
        id.size = sb.size;
    } else {
        return 0;
    }
    if (d->n == MODEL_FILES_MAX) {
        d->too_many = 1;
        return -1;
    }
    d->v = xrealloc(d->v, (d->n + 1) * sizeof(*d->v));
    d->v[d->n++] = (struct mirror_repo_file){xstrdup(sb.name), id};
    return 0;
}

static int doc_member(struct json_scan *s, const char *key, unsigned depth, void *ctx)
{
    struct repo_doc *d = ctx;
    if (strcmp(key, "sha") == 0)
        return take_string(s, d->sha, sizeof(d->sha));
    if (strcmp(key, "siblings") == 0 && s->tok == '[')
        return json_scan_each(s, depth, DOC_MAX_DEPTH, doc_sibling, d);
    return json_scan_value(s, depth, DOC_MAX_DEPTH);
}

void mirror_repo_files_free(struct mirror_repo_file *files, size_t n)
{
    for (size_t i = 0; files && i < n; i++)
        free(files[i].name);
    free(files);
}

int mirror_repo_doc_parse(const char *buf, size_t len, char commit[41],
                          struct mirror_repo_file **files, struct st_error *err)
{
    struct json_scan s;
    struct repo_doc d = {.sha = ""};
    *files = NULL;
    commit[0] = '\0';
    if (!utf8_valid(buf, len) || memchr(buf, '\0', len))
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "the upstream's repo document is not "
                             "UTF-8 text");
    json_scan_init(&s, buf, len);
    if (json_scan_next(&s) != '{' || json_scan_each(&s, 0, DOC_MAX_DEPTH, doc_member, &d) < 0 ||
        json_scan_next(&s) != JSON_TOK_EOF) {
        mirror_repo_files_free(d.v, d.n);
        if (d.too_many)
            return st_error_fail(err, ST_ERR_LIMIT, "the repo has more than %d weight files at "
                                 "its top", MODEL_FILES_MAX);
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "the upstream's repo document is "
                             "not the JSON a Hub sends%s%s", s.failed ? ": " : "",
                             s.failed ? s.text : "");
    }
    if (strlen(d.sha) != 40 || strspn(d.sha, "0123456789abcdef") != 40) {
        mirror_repo_files_free(d.v, d.n);
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "the upstream's repo document names "
                             "no commit (\"sha\")");
    }
    memcpy(commit, d.sha, 41);
    *files = d.v;
    return (int)d.n;
}

/* ---- the model -------------------------------------------------------------- */

const struct reg_model *mirror_model_reg(const struct mirror_model *mm)
{
    return mm->rm;
}

static struct mirror_file *file_of(const struct mirror_model *mm, const struct reg_file *rf)
{
    for (size_t i = 0; i < mm->n; i++)
        if (strcmp(mm->repo[i].name, rf->name) == 0)
            return mm->files[i];
    return NULL;
}

int mirror_model_present(struct mirror_model *mm, const struct reg_file *rf, uint64_t off,
                         uint64_t len)
{
    struct mirror_file *f = file_of(mm, rf);
    return f && mirror_readable(mm->m, f, off, len, NULL) == (int64_t)len;
}

int mirror_model_wait(struct mirror_model *mm, const struct reg_file *rf, uint64_t off,
                      uint64_t len, const atomic_int *cancel, struct st_error *err)
{
    struct mirror_file *f = file_of(mm, rf);
    if (!f)
        return st_error_fail(err, ST_ERR_NOT_FOUND, "%s is not a file of the mirrored model",
                             rf->name);
    return mirror_wait_range(mm->m, f, off, len, cancel, err);
}

/* Removes models/<n>/ and what it holds. */
static void remove_dir(struct mirror_model *mm)
{
    if (!mm->dir[0])
        return;
    char path[NAME_MAX_BYTES + 64];
    for (size_t i = 0; i < mm->n; i++) {
        snprintf(path, sizeof(path), "%s/%s", mm->dir, mm->repo[i].name);
        unlinkat(mm->m->dirfd, path, 0);
    }
    unlinkat(mm->m->dirfd, mm->dir, AT_REMOVEDIR);
}

void mirror_model_free(struct mirror_model *mm)
{
    if (!mm)
        return;
    reg_model_unref(mm->rm); /* closes its descriptors first */
    if (mm->root)
        reg_root_unref(mm->root);
    remove_dir(mm);
    for (size_t i = 0; i < mm->n; i++)
        mirror_unref(mm->m, mm->files[i]);
    mirror_repo_files_free(mm->repo, mm->n_repo);
    free(mm->files);
    free(mm);
}

/* Waits for the bytes a model's build reads: an index whole, a
 * safetensors file's length prefix and header. */
static int fetch_heads(struct mirror *m, struct mirror_model *mm, struct st_error *err)
{
    for (size_t i = 0; i < mm->n; i++) {
        struct mirror_file *f = mm->files[i];
        uint64_t size = mirror_file_size(f);
        int st = str_has_suffix(mm->repo[i].name, ".safetensors");
        uint64_t want = st && size > 8 ? 8 : size;
        int rc = mirror_wait_range(m, f, 0, want, NULL, err);
        if (rc == 0 && st && size > 8) {
            uint8_t le[8];
            uint64_t n = 0;
            rc = fileio_pread_full(mirror_file_fd(f), le, 8, 0);
            for (int k = 7; rc == 0 && k >= 0; k--)
                n = n << 8 | le[k];
            /* A length the file cannot hold is the validation's to refuse. */
            uint64_t end = n <= ST_MAX_HEADER_LEN && 8 + n <= size ? 8 + n : 8;
            if (rc == 0)
                rc = mirror_wait_range(m, f, 0, end, NULL, err);
            else
                st_error_errno(err, -rc, "reading %s from the cache", mm->repo[i].name);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* models/<n>/: a symlink per file to its blob, and the registry model. */
static int build(struct mirror *m, struct mirror_model *mm, const char *repo,
                 struct st_error *err)
{
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
    char path[NAME_MAX_BYTES + 64], target[128];
    int rc = 0;
    for (size_t i = 0; i < mm->n && rc == 0; i++) {
        struct stat sb;
        snprintf(path, sizeof(path), "%s/%s", mm->dir, mm->repo[i].name);
        snprintf(target, sizeof(target), "../../blobs/%s", mm->files[i]->key);
        if (symlinkat(target, m->dirfd, path) < 0 || fstatat(m->dirfd, path, &sb, 0) < 0)
            rc = st_error_errno(err, errno, "mirror cache: %s", path);
        ids[i].name = mm->repo[i].name;
        fileio_stat_from(&sb, &ids[i].st);
    }
    if (rc == 0 && !(mm->root = reg_root_open(m->opt.cache_dir, NULL, err)))
        rc = -EIO;
    if (rc == 0) {
        mm->rm = reg_model_build(mm->root, repo, mm->dir, ids, mm->n, NULL);
        if (mm->rm->state != MODEL_READY)
            rc = st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "%s at %s is not a valid model: %s",
                               repo, mm->commit, mm->rm->error.message);
    }
    for (size_t i = 0; rc == 0 && i < mm->rm->n_files; i++) {
        const struct reg_file *rf = &mm->rm->files[i];
        struct mirror_file *f = file_of(mm, rf);
        if (f && f->id.kind == MIRROR_SHA256)
            reg_file_set_hashes(rf, f->id.digest, NULL);
    }
    free(ids);
    return rc;
}

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

/* The repo document at rev: its commit and weight files. */
static int resolve(struct mirror *m, struct upstream_conn *c, struct model_job *d,
                   struct mirror_repo_file **files, char commit[41], struct st_error *err)
{
    char target[3 * NAME_MAX_BYTES + 96];
    size_t len = 0;
    if (upstream_encode(target, sizeof(target), &len, "/api/models/", 1) < 0 ||
        upstream_encode(target, sizeof(target), &len, d->repo, 1) < 0 ||
        upstream_encode(target, sizeof(target), &len, "/revision/", 1) < 0 ||
        upstream_encode(target, sizeof(target), &len, d->rev, 0) < 0 ||
        len + 12 >= sizeof(target))
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "repo name too long");
    strcat(target, "?blobs=true");
    struct upstream_answer a;
    char *body = NULL;
    size_t blen = 0;
    int rc = upstream_request(c, "GET", target, NULL, 0, NULL, m->opt.own_auth, MIRROR_DOC_MAX,
                              &body, &blen, &a, err);
    if (rc == 0 && (a.status == 404 || a.status == 401 || a.status == 403))
        rc = st_error_fail(err, ST_ERR_NOT_FOUND, "the upstream has no repo %s at %s "
                           "(%ld%s%s%s%s)", d->repo, d->rev, a.status,
                           a.error_code[0] ? " " : "", a.error_code,
                           a.error_message[0] ? ": " : "", a.error_message);
    else if (rc == 0 && a.status != 200)
        rc = st_error_fail(err, ST_ERR_IO, "the upstream answered %ld for %s", a.status,
                           target);
    if (rc == 0)
        rc = mirror_repo_doc_parse(body, blen, commit, files, err);
    free(body);
    upstream_answer_free(&a);
    return rc;
}

static int model_job_run(struct mirror *m, struct upstream_conn *c, void *data,
                         struct st_error *err)
{
    struct model_job *d = data;
    struct mirror_repo_file *files = NULL;
    char commit[41];
    int n = resolve(m, c, d, &files, commit, err);
    if (n < 0)
        return n;
    struct mirror_model *mm = xcalloc(1, sizeof(*mm));
    mm->m = m;
    memcpy(mm->commit, commit, 41);
    mm->repo = files;
    mm->n_repo = (size_t)n;
    mm->files = xcalloc((size_t)n + 1, sizeof(*mm->files));
    int rc = 0, any = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        struct mirror_src src = {d->repo, commit, files[i].name, m->opt.own_auth};
        struct mirror_file *f = mirror_open(m, &files[i].id, &src, err);
        if (!f) {
            rc = -EIO;
            break;
        }
        mm->files[mm->n++] = f;
        any |= strstr(files[i].name, ".index.json") == NULL;
    }
    if (rc == 0 && !any)
        rc = st_error_fail(err, ST_ERR_NOT_FOUND, "the upstream's repo %s has no "
                           ".safetensors file at its top (with a hash the mirror can check)",
                           d->repo);
    if (rc == 0)
        rc = fetch_heads(m, mm, err);
    /* Every block from here on: the preload reads them as they come. */
    for (size_t i = 0; rc == 0 && i < mm->n; i++) {
        uint64_t size = mirror_file_size(mm->files[i]);
        mm->missing += size;
        int64_t have = mirror_readable(m, mm->files[i], 0, size, NULL);
        mm->missing -= have > 0 ? (uint64_t)have : 0;
        mirror_want(m, mm->files[i], 0, size);
    }
    if (rc == 0)
        rc = build(m, mm, d->repo, err);
    if (rc < 0) {
        mirror_model_free(mm);
        return rc;
    }
    log_msg(LOG_INFO, "mirror: model %s at %s prepared for a preload: %zu files, %" PRIu64
            " bytes to fetch", d->repo, mm->commit, mm->n, mm->missing);
    d->mm = mm;
    return 0;
}

struct mirror_job *mirror_job_model(struct mirror *m, uint64_t client, const char *repo,
                                    const char *rev, void (*cb)(void *arg), void *arg, int *why)
{
    struct model_job *d = xcalloc(1, sizeof(*d));
    d->repo = xstrdup(repo);
    d->rev = xstrdup(rev);
    /* Never shared: its submitter takes the model it makes. */
    struct mirror_job_spec spec = {client, NULL, model_job_run, d, model_job_free};
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
