/* h_hub: the read-only Hugging Face endpoint (API.md "Hugging Face
 * endpoint"): files under /{repo}/resolve|raw/{rev}/{path}, and the
 * /api/models documents, in the Hub's dialect (headers, JSON shapes,
 * X-Error-Code).
 *
 * Every answer about a repo names its revision, which exists only once the
 * content hash of every file of the repo is known. When one is missing the
 * request waits for it without holding a worker thread: the connection is
 * suspended, the hasher moves the repo's files to the front of its queue
 * and calls back when they are hashed or hash_wait seconds have passed,
 * the callback resumes the connection, and the request is dispatched again
 * (http.c) and answers with what it finds then: the document, or 503 with
 * a Retry-After estimated from the bytes left. Never a guessed hash. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "digest.h"
#include "dtype.h"
#include "handlers.h"
#include "hasher.h"
#include "hub_req.h"
#include "jsonw.h"
#include "log.h"
#include "reg_repo.h"
#include "respond.h"
#include "route.h"
#include "strmap.h"
#include "util.h"

/* Commit-addressed answers never change: a cache may keep them a year. */
#define CACHE_IMMUTABLE "public, max-age=31536000, immutable"

/* ---- waiting for a repo's hashes ---------------------------------------- */

static void wait_done(void *arg, enum hasher_result r)
{
    struct request *rq = arg;
    atomic_store(&rq->wait_result, (int)r);
    atomic_store(&rq->wait, WAIT_RESUMED);
    MHD_resume_connection(rq->mhd);
}

/* The revision of repo r, or NULL after answering (or suspending to wait)
 * in *ret. */
static const struct reg_repo_rev *need_revision(struct MHD_Connection *conn, struct request *rq,
                                                const struct reg_repo *r, enum MHD_Result *ret)
{
    const struct reg_file *bad = reg_repo_unreadable(r);
    if (bad) {
        *ret = respond_hub_error(conn, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, 0,
                                 "repo %s: file %s cannot be read: %s", r->id, bad->name,
                                 bad->error.message);
        return NULL;
    }
    const struct reg_repo_rev *rev = reg_repo_revision(r);
    if (rev)
        return rev;
    struct hasher *h = rq->srv->hasher;
    const struct reg_file **missing = xmalloc(r->n_files * sizeof(*missing));
    size_t n = 0;
    for (size_t i = 0; i < r->n_files; i++)
        if (!reg_file_hashed(&r->files[i]))
            missing[n++] = &r->files[i];
    int state = atomic_load(&rq->wait);
    unsigned wait_s = rq->srv->cfg->hash_wait;
    if (state == WAIT_NONE && wait_s > 0 && h) {
        /* Suspended before asking: the callback may come at once. */
        atomic_store(&rq->wait, WAIT_SUSPENDED);
        MHD_suspend_connection(conn);
        enum hasher_state st = hasher_want(h, missing, n, wait_s * 1000u, wait_done, rq);
        if (st != HASHER_PENDING) {
            atomic_store(&rq->wait_result,
                         st == HASHER_KNOWN ? (int)HASHER_DONE : (int)HASHER_GONE);
            atomic_store(&rq->wait, WAIT_RESUMED);
            MHD_resume_connection(conn);
        }
        free(missing);
        *ret = MHD_YES; /* answered when dispatched again */
        return NULL;
    }
    /* Waited already (or may not wait): say when to come back. */
    if (h)
        hasher_want(h, missing, n, 0, NULL, NULL); /* at least to the front of the queue */
    unsigned after = h ? hasher_retry_after(h, missing, n) : 1;
    int result = atomic_load(&rq->wait_result);
    free(missing);
    if (state == WAIT_DONE && result == HASHER_FAILED) {
        *ret = respond_hub_error(conn, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, 0,
                                 "repo %s: a file could not be hashed (a read error, or it keeps "
                                 "changing); see the daemon's log", r->id);
        return NULL;
    }
    *ret = respond_hub_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, NULL, after,
                             "repo %s: the content hashes of its files are being computed; "
                             "retry in %u s", r->id, after);
    return NULL;
}

/* ---- names --------------------------------------------------------------- */

/* Whether revision rev (decoded) names the repo's current revision, and
 * whether it does so by its commit id (an immutable URL). */
static int revision_matches(const char *rev, const struct reg_repo_rev *cur, int *by_commit)
{
    *by_commit = strcmp(rev, cur->commit) == 0;
    return *by_commit || strcmp(rev, "main") == 0 || strcmp(rev, "HEAD") == 0;
}

static enum MHD_Result revision_not_found(struct MHD_Connection *conn, struct request *rq,
                                          const char *rev)
{
    return respond_hub_error(conn, rq, MHD_HTTP_NOT_FOUND, "RevisionNotFound", NULL, 0,
                             "Invalid rev id: %.300s", rev);
}

/* Appends s percent-encoded, keeping '/' and RFC 3986 unreserved bytes. */
static void put_path(char **buf, size_t *len, size_t *cap, const char *s)
{
    for (; *s; s++) {
        if (*len + 4 > *cap) {
            *cap *= 2;
            *buf = xrealloc(*buf, *cap);
        }
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-._~/", c)) {
            (*buf)[(*len)++] = (char)c;
        } else {
            (*buf)[(*len)++] = '%';
            (*buf)[(*len)++] = hex_upper[c >> 4];
            (*buf)[(*len)++] = hex_upper[c & 15];
        }
    }
    (*buf)[*len] = '\0';
}

static size_t lfs_pointer_size(uint64_t size)
{
    char digits[24];
    /* "version https://git-lfs.github.com/spec/v1\n" "oid sha256:<64>\n" "size <n>\n" */
    return 43 + 76 + 6 + (size_t)snprintf(digits, sizeof(digits), "%" PRIu64, size);
}

static void iso_time(int64_t ns, char *out, size_t len)
{
    time_t t = (time_t)(ns / 1000000000);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || tm.tm_year < -1900 || tm.tm_year > 9999 - 1900)
        memset(&tm, 0, sizeof(tm)), tm.tm_year = 70, tm.tm_mday = 1;
    snprintf(out, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", (tm.tm_year + 1900) % 10000,
             (tm.tm_mon + 1) % 100, tm.tm_mday % 100, tm.tm_hour % 100, tm.tm_min % 100,
             tm.tm_sec % 100, (int)(ns / 1000000 % 1000 + 1000) % 1000);
}

/* ---- files ----------------------------------------------------------------- */

static enum MHD_Result entry_not_found(struct MHD_Connection *conn, struct request *rq,
                                       const struct reg_repo *r, const struct reg_repo_rev *rev,
                                       const char *path)
{
    /* huggingface_hub caches "absent at this commit" from X-Repo-Commit. */
    const char *extra[] = {"X-Repo-Commit", rev->commit, NULL};
    return respond_hub_error(conn, rq, MHD_HTTP_NOT_FOUND, "EntryNotFound", extra, 0,
                             "%.300s does not exist in repo %s at revision %s", path, r->id,
                             rev->commit);
}

static enum MHD_Result serve_file(struct MHD_Connection *conn, struct request *rq,
                                  const struct reg_repo *r, const struct reg_repo_rev *rev,
                                  const struct reg_file *f, int raw)
{
    char etag[80], sha[65], size[24], disp[4 * 256 + 80];
    int lfs = reg_repo_file_is_lfs(f);
    digest_hex(lfs ? f->sha256 : f->git_sha1, lfs ? 32 : 20, sha);
    snprintf(etag, sizeof(etag), "\"%s\"", sha);
    snprintf(size, sizeof(size), "%" PRIu64, f->st.size);
    const char *extra[9] = {"X-Repo-Commit", rev->commit};
    if (lfs) {
        extra[2] = "X-Linked-Etag";
        extra[3] = etag;
        extra[4] = "X-Linked-Size";
        extra[5] = size;
    }
    const char *base = strrchr(f->name, '/');
    base = base ? base + 1 : f->name;
    size_t blen = strlen(base);
    if (blen > 255)
        blen = 255;
    while (blen > 0 && blen < strlen(base) && ((unsigned char)base[blen] & 0xc0) == 0x80)
        blen--;
    int fd = reg_open_below(r->root, f, O_RDONLY);
    if (fd < 0) {
        if (fd == -ESTALE) {
            http_request_rescan(rq->srv);
            return respond_hub_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, NULL, 1,
                                     "%s changed on disk since it was hashed; retry once the "
                                     "daemon has rescanned it", f->name);
        }
        if (fd == -EMFILE || fd == -ENFILE)
            return respond_hub_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, NULL, 1,
                                     "out of file descriptors");
        return respond_hub_error(conn, rq, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, NULL, 0,
                                 "%s could not be opened: %s", f->name, strerror(-fd));
    }
    struct representation rep = {
        .body = {.fd = fd, .data_off = 0, .data_len = f->st.size},
        .content_type = respond_content_type(f->name),
        .mtime = f->st.mtime_ns / 1000000000,
        .file_st = &f->st,
        .cache_control = CACHE_IMMUTABLE,
        .disposition = respond_disposition(disp, sizeof(disp), raw ? "inline" : "attachment",
                                           base, blen),
        .extra = extra,
    };
    snprintf(rep.etag, sizeof(rep.etag), "%s", etag);
    enum MHD_Result ret = respond_body(conn, rq, &rep);
    close(fd); /* the answer holds its own duplicate */
    return ret;
}

static enum MHD_Result hub_file(struct MHD_Connection *conn, struct request *rq,
                                const struct reg_repo *r, const struct reg_repo_rev *rev,
                                const struct route *rt)
{
    int by_commit;
    if (!revision_matches(rt->rev, rev, &by_commit))
        return revision_not_found(conn, rq, rt->rev);
    const struct reg_file *f = reg_repo_find_file(r, rt->name, rt->name_len);
    if (!f)
        return entry_not_found(conn, rq, r, rev, rt->name);
    if (by_commit)
        return serve_file(conn, rq, r, rev, f, rt->raw);
    /* A branch name: to the commit's URL, so that a client's metadata
     * request and its download read one version (huggingface_hub downloads
     * from where its HEAD request ended), and caches keep the bytes under a
     * URL that never changes meaning. */
    size_t cap = 256, len = 0;
    char *loc = xmalloc(cap);
    loc[0] = '\0';
    put_path(&loc, &len, &cap, "/");
    put_path(&loc, &len, &cap, r->id);
    put_path(&loc, &len, &cap, rt->raw ? "/raw/" : "/resolve/");
    put_path(&loc, &len, &cap, rev->commit);
    put_path(&loc, &len, &cap, "/");
    put_path(&loc, &len, &cap, f->name);
    const char *extra[] = {"X-Repo-Commit", rev->commit, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache",
                           NULL};
    enum MHD_Result ret = respond_redirect(conn, rq, MHD_HTTP_FOUND, loc, extra);
    free(loc);
    return ret;
}

/* ---- documents ------------------------------------------------------------ */

/* Answers a rendered JSON document (w, consumed) with a validator from its
 * bytes, immutable when it was asked for by commit. */
static enum MHD_Result send_doc(struct MHD_Connection *conn, struct request *rq, struct jsonw *w,
                                int by_commit, const char *commit)
{
    size_t len;
    char *text = jsonw_take(w, &len);
    if (text)
        text = respond_json_line(text, &len);
    if (!text)
        return respond_hub_error(conn, rq, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory", NULL, 1,
                                 "out of memory rendering the answer");
    const char *extra[] = {"X-Repo-Commit", commit, NULL};
    struct representation rep = {
        .body = {.prefix = text, .prefix_len = len, .fd = -1},
        .prefix_buf = text,
        .content_type = "application/json",
        .mtime = -1,
        .cache_control = by_commit ? CACHE_IMMUTABLE : "no-cache",
        .extra = commit ? extra : NULL,
    };
    snprintf(rep.etag, sizeof(rep.etag), "\"h%016" PRIx64 "\"",
             hash_fnv1a(text, len, HASH_FNV_SEED));
    return respond_body(conn, rq, &rep);
}

static void lfs_object(struct jsonw *w, const struct reg_file *f, const char *hash_key)
{
    char sha[65];
    digest_hex(f->sha256, 32, sha);
    jsonw_key(w, "lfs");
    jsonw_obj(w);
    jsonw_kstr(w, hash_key, sha);
    jsonw_ku64(w, "size", f->st.size);
    jsonw_ku64(w, "pointerSize", lfs_pointer_size(f->st.size));
    jsonw_obj_end(w);
}

static void file_entry(struct jsonw *w, const struct reg_repo *r, const struct reg_repo_rev *rev,
                       const struct reg_file *f)
{
    char oid[41];
    digest_hex(rev->blob[f - r->files], 20, oid);
    jsonw_obj(w);
    jsonw_kstr(w, "type", "file");
    jsonw_kstr(w, "oid", oid);
    jsonw_ku64(w, "size", f->st.size);
    jsonw_kstr(w, "path", f->name);
    if (reg_repo_file_is_lfs(f))
        lfs_object(w, f, "oid");
    jsonw_obj_end(w);
}

static void dir_entry(struct jsonw *w, const struct reg_repo_dir *d)
{
    char oid[41];
    digest_hex(d->tree, 20, oid);
    jsonw_obj(w);
    jsonw_kstr(w, "type", "directory");
    jsonw_kstr(w, "oid", oid);
    jsonw_ku64(w, "size", 0);
    jsonw_kstr(w, "path", d->path);
    jsonw_obj_end(w);
}

/* "safetensors": parameters by dtype of the repo's own model (the /v1
 * model in the repo's directory), when there is one and it is valid. */
static void safetensors_info(struct jsonw *w, const struct reg_snapshot *reg,
                             const struct reg_repo *r)
{
    const struct reg_model *m = reg_snapshot_find_model(reg, r->id, strlen(r->id));
    if (!m || m->state != MODEL_READY || m->n_tensors == 0)
        return;
    uint64_t by_dtype[DT_COUNT] = {0}, total = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        by_dtype[m->tensors[i].t->dtype] += m->tensors[i].t->nelems;
        total += m->tensors[i].t->nelems;
    }
    jsonw_key(w, "safetensors");
    jsonw_obj(w);
    jsonw_key(w, "parameters");
    jsonw_obj(w);
    for (int d = 0; d < DT_COUNT; d++)
        if (by_dtype[d])
            jsonw_ku64(w, dtype_info((enum dtype)d)->name, by_dtype[d]);
    jsonw_obj_end(w);
    jsonw_ku64(w, "total", total);
    jsonw_obj_end(w);
}

/* The fields a repo has in both the list and its own document. */
static void repo_summary(struct jsonw *w, const struct reg_repo *r, const struct reg_repo_rev *rev)
{
    char when[40];
    iso_time(reg_repo_mtime_ns(r), when, sizeof(when));
    const char *slash = strchr(r->id, '/');
    jsonw_kstr(w, "_id", r->id);
    jsonw_kstr(w, "id", r->id);
    jsonw_kstr(w, "modelId", r->id);
    if (slash) {
        jsonw_key(w, "author");
        jsonw_strn(w, r->id, (size_t)(slash - r->id));
    }
    if (rev)
        jsonw_kstr(w, "sha", rev->commit);
    jsonw_kstr(w, "lastModified", when);
    jsonw_kstr(w, "createdAt", when);
    jsonw_kbool(w, "private", 0);
    jsonw_kbool(w, "gated", 0);
    jsonw_kbool(w, "disabled", 0);
    jsonw_ku64(w, "downloads", 0);
    jsonw_ku64(w, "likes", 0);
    int st = 0;
    for (size_t i = 0; i < r->n_files && !st; i++)
        st = r->files[i].is_safetensors;
    jsonw_key(w, "tags");
    jsonw_arr(w);
    if (st)
        jsonw_str(w, "safetensors");
    jsonw_arr_end(w);
}

static enum MHD_Result hub_info(struct MHD_Connection *conn, struct request *rq,
                                const struct reg_snapshot *reg, const struct reg_repo *r,
                                const struct reg_repo_rev *rev, const struct route *rt)
{
    int by_commit = 0;
    if (rt->rev && !revision_matches(rt->rev, rev, &by_commit))
        return revision_not_found(conn, rq, rt->rev);
    struct jsonw w;
    jsonw_init(&w);
    jsonw_obj(&w);
    repo_summary(&w, r, rev);
    jsonw_ku64(&w, "usedStorage", r->bytes);
    safetensors_info(&w, reg, r);
    jsonw_key(&w, "siblings");
    jsonw_arr(&w);
    for (size_t i = 0; i < r->n_files; i++) {
        const struct reg_file *f = &r->files[i];
        char oid[41];
        digest_hex(rev->blob[i], 20, oid);
        jsonw_obj(&w);
        jsonw_kstr(&w, "rfilename", f->name);
        jsonw_ku64(&w, "size", f->st.size);
        jsonw_kstr(&w, "blobId", oid);
        if (reg_repo_file_is_lfs(f))
            lfs_object(&w, f, "sha256");
        jsonw_obj_end(&w);
    }
    jsonw_arr_end(&w);
    jsonw_key(&w, "spaces");
    jsonw_arr(&w);
    jsonw_arr_end(&w);
    jsonw_obj_end(&w);
    return send_doc(conn, rq, &w, by_commit, rev->commit);
}

/* Whether a query flag is set the way Python's str(True) or JS writes it. */
static int query_true(struct MHD_Connection *conn, const char *key)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, key);
    return v && (strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

static enum MHD_Result hub_tree(struct MHD_Connection *conn, struct request *rq,
                                const struct reg_repo *r, const struct reg_repo_rev *rev,
                                const struct route *rt)
{
    int by_commit;
    if (!revision_matches(rt->rev, rev, &by_commit))
        return revision_not_found(conn, rq, rt->rev);
    const char *path = rt->name ? rt->name : "";
    const struct reg_repo_dir *d = reg_repo_find_dir(rev, path, strlen(path));
    if (!d)
        return entry_not_found(conn, rq, r, rev, path);
    int recursive = query_true(conn, "recursive");
    size_t skip = d->len ? d->len + 1 : 0;
    struct jsonw w;
    jsonw_init(&w);
    jsonw_arr(&w);
    /* Files below d are files[first, end) in path order; each directory on
     * the way is listed once, before its contents (only d's children when
     * not recursive). */
    struct strmap *listed = strmap_new(16);
    for (size_t i = d->first; i < d->end; i++) {
        const struct reg_file *f = &r->files[i];
        const char *rest = f->name + skip;
        for (const char *s = rest; (s = strchr(s, '/')) != NULL; s++) {
            size_t len = (size_t)(s - f->name);
            if (strmap_put(listed, f->name, len, (void *)1) == 0)
                dir_entry(&w, reg_repo_find_dir(rev, f->name, len));
            if (!recursive)
                break;
        }
        if (recursive || !strchr(rest, '/'))
            file_entry(&w, r, rev, f);
    }
    strmap_free(listed);
    jsonw_arr_end(&w);
    return send_doc(conn, rq, &w, by_commit, rev->commit);
}

static enum MHD_Result hub_paths_info(struct MHD_Connection *conn, struct request *rq,
                                      const struct reg_repo *r, const struct reg_repo_rev *rev,
                                      const struct route *rt)
{
    int by_commit;
    if (!revision_matches(rt->rev, rev, &by_commit))
        return revision_not_found(conn, rq, rt->rev);
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_TYPE);
    int json = ct && strncasecmp(ct, "application/json", 16) == 0;
    struct hub_paths p;
    struct st_error err;
    if (hub_paths_parse(rq->upload ? rq->upload : "", rq->upload_len, json, &p, &err) != 0)
        return respond_hub_error(conn, rq, err.code == ST_ERR_LIMIT ? MHD_HTTP_CONTENT_TOO_LARGE
                                                                    : MHD_HTTP_BAD_REQUEST,
                                 NULL, NULL, 0, "%.255s", err.message);
    struct jsonw w;
    jsonw_init(&w);
    jsonw_arr(&w);
    struct strmap *seen = strmap_new(p.n);
    for (size_t i = 0; i < p.n; i++) {
        size_t len = strlen(p.paths[i]);
        while (len > 0 && p.paths[i][len - 1] == '/')
            len--;
        if (strmap_put(seen, p.paths[i], len, (void *)1) != 0)
            continue; /* asked twice: listed once */
        const struct reg_file *f = reg_repo_find_file(r, p.paths[i], len);
        const struct reg_repo_dir *d = len ? reg_repo_find_dir(rev, p.paths[i], len) : NULL;
        if (f)
            file_entry(&w, r, rev, f);
        else if (d)
            dir_entry(&w, d);
    }
    strmap_free(seen);
    hub_paths_free(&p);
    jsonw_arr_end(&w);
    return send_doc(conn, rq, &w, 0, rev->commit);
}

/* /api/models: every repo, filtered by search (a case-insensitive
 * substring of the id) and author (the namespace), at most limit. One
 * page: no Link header to follow. Revisions are given where already
 * known; the list never waits for hashes. */
static enum MHD_Result hub_models(struct MHD_Connection *conn, struct request *rq,
                                  const struct reg_snapshot *reg)
{
    int bad = 0;
    char *search = handler_query(conn, "search", 1, NULL, &bad), *author = handler_query(conn, "author", 1, NULL, &bad);
    const char *limit_s = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "limit");
    int full = query_true(conn, "full");
    uint64_t limit = UINT64_MAX;
    enum MHD_Result ret;
    if (bad) {
        ret = respond_hub_error(conn, rq, MHD_HTTP_BAD_REQUEST, NULL, NULL, 0,
                                "a query parameter has a malformed percent-escape");
        goto out;
    }
    if (limit_s) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(limit_s, &end, 10);
        if (!limit_s[0] || *end || errno || limit_s[0] == '-') {
            ret = respond_hub_error(conn, rq, MHD_HTTP_BAD_REQUEST, NULL, NULL, 0,
                                    "limit must be a non-negative integer, not \"%.50s\"",
                                    limit_s);
            goto out;
        }
        limit = v;
    }
    struct jsonw w;
    jsonw_init(&w);
    jsonw_arr(&w);
    uint64_t n = 0;
    for (size_t i = 0; i < reg->n_repos && n < limit; i++) {
        const struct reg_repo *r = reg->repos[i];
        const char *slash = strchr(r->id, '/');
        if (author && !(slash && strlen(author) == (size_t)(slash - r->id) &&
                        strncmp(author, r->id, (size_t)(slash - r->id)) == 0))
            continue;
        if (search && search[0] && !strcasestr(r->id, search))
            continue;
        jsonw_obj(&w);
        repo_summary(&w, r, reg_repo_unreadable(r) ? NULL : reg_repo_revision(r));
        if (full) {
            jsonw_key(&w, "siblings");
            jsonw_arr(&w);
            for (size_t k = 0; k < r->n_files; k++) {
                jsonw_obj(&w);
                jsonw_kstr(&w, "rfilename", r->files[k].name);
                jsonw_obj_end(&w);
            }
            jsonw_arr_end(&w);
        }
        jsonw_obj_end(&w);
        n++;
    }
    jsonw_arr_end(&w);
    ret = send_doc(conn, rq, &w, 0, NULL);
out:
    free(search);
    free(author);
    return ret;
}

enum MHD_Result handle_hub(struct MHD_Connection *conn, struct request *rq,
                           const struct reg_snapshot *reg, const struct route *rt)
{
    enum MHD_Result ret = MHD_YES;
    if (rt->kind == ROUTE_HUB_MODELS)
        return hub_models(conn, rq, reg);
    const struct reg_repo *r = reg_snapshot_find_repo(reg, rt->model, rt->model_len);
    if (!r)
        return respond_hub_error(conn, rq, MHD_HTTP_NOT_FOUND, "RepoNotFound", NULL, 0,
                                 "Repository not found: %.300s", rt->model);
    /* A revision that can never match needs no hashes to be refused. */
    if (rt->rev && strcmp(rt->rev, "main") != 0 && strcmp(rt->rev, "HEAD") != 0 &&
        !(rt->rev_len == 40 && digest_unhex(rt->rev, 20, (uint8_t[20]){0}) == 0))
        return revision_not_found(conn, rq, rt->rev);
    const struct reg_repo_rev *rev = need_revision(conn, rq, r, &ret);
    if (!rev)
        return ret;
    switch (rt->kind) {
    case ROUTE_HUB_FILE:
        return hub_file(conn, rq, r, rev, rt);
    case ROUTE_HUB_INFO:
        return hub_info(conn, rq, reg, r, rev, rt);
    case ROUTE_HUB_TREE:
        return hub_tree(conn, rq, r, rev, rt);
    default:
        return hub_paths_info(conn, rq, r, rev, rt);
    }
}
