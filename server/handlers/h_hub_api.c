/* h_hub_api: the Hugging Face endpoint's /api documents (h_hub.c answers
 * files, waits for hashes and checks the revision, then calls these): a
 * repo's document, its tree and paths-info entries, the repo list, its refs
 * and its one commit; and what h_hub.c and h_mirror.c both use: the errors,
 * the parts of a file's answer. The repo's document and its listing are
 * made once per repo, off the HTTP threads (server/handlers/hub_doc.h,
 * server/handlers/doc_cache.h), and every answer holds a reference to one
 * or is a view of the listing; the small ones (refs, commits, the list)
 * are rendered per request. Each is a function of the content alone where
 * a commit id addresses it (API.md "Replicas"). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "doc_cache.h"
#include "h_hub_int.h"
#include "hub_doc.h"
#include "hub_req.h"
#include "hub_tags.h"
#include "jsonw.h"
#include "route.h"
#include "shared_doc.h"
#include "strbuf.h"
#include "strmap.h"
#include "util.h"

/* ---- errors and parts of a file's answer ------------------------------------- */

void hub_linked(struct answer *a, int lfs, const char *etag, uint64_t size)
{
    if (lfs) {
        answer_header(a, "X-Linked-Etag", etag);
        answer_header(a, "X-Linked-Size", answer_printf(a, "%" PRIu64, size));
    }
}

void hub_file_rep(struct answer *a, struct representation *rep, const char *path, int raw,
                  const char *etag)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t blen = strlen(base);
    if (blen > 255)
        blen = 255;
    while (blen > 0 && blen < strlen(base) && ((unsigned char)base[blen] & 0xc0) == 0x80)
        blen--;
    rep->content_type = answer_content_type(path);
    rep->mtime = -1; /* no Last-Modified: a file's mtime is not content (HUB_REVISION_DATE) */
    rep->cache_control = HUB_CACHE_IMMUTABLE;
    rep->disposition = answer_disposition(a, raw ? "inline" : "attachment", base, blen);
    snprintf(rep->etag, sizeof(rep->etag), "%s", etag);
}

struct answer *hub_redirect_to_commit(struct answer *a, const char *repo, int raw,
                                      const char *commit, const char *path, int lfs,
                                      const char *etag, uint64_t size)
{
    struct strbuf loc = STRBUF_INIT;
    strbuf_putc(&loc, '/');
    strbuf_pct_encode(&loc, repo, strlen(repo), 1);
    strbuf_printf(&loc, "/%s/%s/", raw ? "raw" : "resolve", commit);
    strbuf_pct_encode(&loc, path, strlen(path), 1);
    answer_header(a, "X-Repo-Commit", commit);
    answer_header(a, "Cache-Control", "no-cache");
    hub_linked(a, lfs, etag, size);
    if (loc.failed)
        answer_hub_error(a, HTTP_SERVICE_UNAVAILABLE, NULL, 1, "out of memory");
    else
        answer_redirect(a, HTTP_FOUND, loc.buf);
    strbuf_release(&loc);
    return a;
}

struct answer *hub_entry_not_found(struct answer *a, const struct reg_repo *r,
                                   const struct reg_repo_rev *rev, const char *path)
{
    /* huggingface_hub caches "absent at this commit" from X-Repo-Commit. */
    answer_header(a, "X-Repo-Commit", rev->commit);
    return answer_hub_error(a, HTTP_NOT_FOUND, "EntryNotFound", 0,
                            "%.300s does not exist in repo %s at revision %s", path, r->id,
                            rev->commit);
}

/* ---- documents ------------------------------------------------------------ */

/* Answers a rendered JSON document (w, consumed) with a validator from its
 * bytes, immutable when it was asked for by commit. */
static struct answer *send_doc(struct answer *a, struct jsonw *w, int by_commit,
                               const char *commit)
{
    size_t len;
    char *text = jsonw_take(w, &len);
    if (text)
        text = answer_json_line(text, &len);
    if (!text)
        return answer_hub_error(a, HTTP_SERVICE_UNAVAILABLE, "out_of_memory", 1,
                                "out of memory rendering the answer");
    answer_defer(a, free, text);
    if (commit)
        answer_header(a, "X-Repo-Commit", commit);
    struct representation rep = {
        .body = {.prefix = text, .prefix_len = len, .fd = -1},
        .content_type = "application/json",
        .mtime = -1,
        .cache_control = by_commit ? HUB_CACHE_IMMUTABLE : "no-cache",
        .document = 1,
    };
    snprintf(rep.etag, sizeof(rep.etag), "\"h%016" PRIx64 "\"",
             hash_fnv1a(text, len, HASH_FNV_SEED));
    return answer_body(a, &rep);
}

/* ---- the documents made once per repo ------------------------------------------ */

static void unref_doc(void *d)
{
    shared_doc_unref(d);
}

/* r's document `kind` with a reference the answer holds (until the
 * request ends: a reader that does not read holds it, never a copy), or
 * NULL after answering (an error) or waiting for its render in a: the HTTP
 * thread never renders it. */
static struct shared_doc *repo_doc(const struct request_view *v, struct answer *a,
                                   const struct reg_repo *r, const struct reg_model *m,
                                   enum doc_kind kind)
{
    struct shared_doc *d = doc_cache_get_repo(r, kind);
    if (d) {
        answer_defer(a, unref_doc, d);
        return d;
    }
    int result = v->waited ? v->wait_result : DOC_READY;
    if (result == DOC_STALE) {
        a->rescan = 1;
        answer_hub_error(a, HTTP_SERVICE_UNAVAILABLE, NULL, 1,
                         "%s/README.md changed on disk since it was hashed; retry once the "
                         "daemon has rescanned it", r->id);
    } else if (result == DOC_NO_MEMORY) {
        answer_hub_error(a, HTTP_SERVICE_UNAVAILABLE, NULL, 1,
                         "not enough memory to render repo %s's documents; try again later",
                         r->id);
    } else if (result == DOC_STOPPED) {
        answer_hub_error(a, HTTP_SERVICE_UNAVAILABLE, NULL, 1, "the daemon is stopping");
    } else { /* not rendered yet (or, after a wait, a reload brought a new repo) */
        answer_wait_doc(v, a, m, r, kind);
    }
    return NULL;
}

/* Answers with document d, whose FNV-1a is hash (its strong ETag), held by
 * the answer; immutable when asked for by commit. */
static struct answer *send_shared(struct answer *a, struct shared_doc *d, uint64_t hash,
                                  int by_commit, const char *commit)
{
    answer_header(a, "X-Repo-Commit", commit);
    struct representation rep = {
        .body = {.fd = -1, .data_len = d->len, .src = &shared_doc_source, .src_ctx = d},
        .content_type = "application/json",
        .mtime = -1,
        .cache_control = by_commit ? HUB_CACHE_IMMUTABLE : "no-cache",
        .document = 1,
        .gzip = d->gzip, /* the repo's document: made with it, on the renderer's thread */
        .gzip_len = d->gzip_len,
    };
    snprintf(rep.etag, sizeof(rep.etag), "\"h%016" PRIx64 "\"", hash);
    return answer_body(a, &rep);
}

/* A view of the listing (head, its runs, tail), held by the answer. */
static struct answer *send_view(struct answer *a, struct shared_doc *listing,
                                const struct shared_doc_range *runs, size_t n, uint64_t hash,
                                int by_commit, const char *commit)
{
    struct shared_doc *d = shared_doc_view("[", 1, listing, runs, n, "]\n", 2, hash);
    if (!d)
        return answer_hub_error(a, HTTP_SERVICE_UNAVAILABLE, "out_of_memory", 1,
                                "out of memory making the answer");
    answer_defer(a, unref_doc, d);
    return send_shared(a, d, hash, by_commit, commit);
}

struct answer *hub_info(const struct request_view *v, struct answer *a,
                        const struct reg_snapshot *reg, const struct reg_repo *r,
                        const struct reg_repo_rev *rev, int by_commit)
{
    const struct reg_model *m = reg_snapshot_find_model(reg, r->id, strlen(r->id));
    struct shared_doc *d = repo_doc(v, a, r, m, DOC_REPO_INFO);
    return d ? send_shared(a, d, d->hash, by_commit, rev->commit) : a;
}

/* Whether a query flag is set the way Python's str(True) or JS writes it. */
static int query_true(const struct request_view *v, const char *key)
{
    const char *s = v->query(v, key);
    return s && (strcasecmp(s, "true") == 0 || strcmp(s, "1") == 0);
}

struct answer *hub_tree(const struct request_view *v, struct answer *a, const struct reg_repo *r,
                        const struct reg_repo_rev *rev, const struct route *rt, int by_commit)
{
    const char *path = rt->name ? rt->name : "";
    const struct reg_repo_dir *d = reg_repo_find_dir(rev, path, strlen(path));
    if (!d)
        return hub_entry_not_found(a, r, rev, path);
    struct shared_doc *listing = repo_doc(v, a, r, NULL, query_true(v, "expand")
                                                             ? DOC_REPO_LISTING_EXPANDED
                                                             : DOC_REPO_LISTING);
    if (!listing)
        return a;
    struct shared_doc_range run;
    uint64_t hash;
    hub_doc_tree(listing, rev, d, query_true(v, "recursive"), &run, &hash);
    return send_view(a, listing, &run, run.len ? 1 : 0, hash, by_commit, rev->commit);
}

struct answer *hub_paths_info(const struct request_view *v, struct answer *a,
                              const struct reg_repo *r, const struct reg_repo_rev *rev)
{
    const char *ct = view_header(v, "Content-Type");
    int json = ct && strncasecmp(ct, "application/json", 16) == 0;
    struct hub_paths p;
    struct st_error err;
    if (hub_paths_parse(v->body ? v->body : "", v->body_len, json, &p, &err) != 0)
        return answer_hub_error(a, err.code == ST_ERR_LIMIT ? HTTP_CONTENT_TOO_LARGE
                                                            : HTTP_BAD_REQUEST,
                                NULL, 0, "%.255s", err.message);
    struct shared_doc *listing =
        repo_doc(v, a, r, NULL, p.expand ? DOC_REPO_LISTING_EXPANDED : DOC_REPO_LISTING);
    if (!listing) {
        hub_paths_free(&p);
        return a;
    }
    /* The entries asked for, each once, in the order asked: runs of the
     * listing (the first without its ','), hashed as the answer is. */
    struct shared_doc_range *runs = answer_alloc(a, (p.n ? p.n : 1) * sizeof(*runs));
    size_t n = 0;
    uint64_t hash = hash_fnv1a("[", 1, HASH_FNV_SEED);
    struct strmap *seen = strmap_new(p.n);
    for (size_t i = 0; i < p.n; i++) {
        size_t len = strlen(p.paths[i]);
        while (len > 0 && p.paths[i][len - 1] == '/')
            len--;
        if (strmap_put(seen, p.paths[i], len, (void *)1) != 0)
            continue; /* asked twice: listed once */
        const struct reg_file *f = reg_repo_find_file(r, p.paths[i], len);
        const struct reg_repo_dir *d = len ? reg_repo_find_dir(rev, p.paths[i], len) : NULL;
        if (!f && !d)
            continue;
        struct shared_doc_range e = f ? hub_doc_file_entry(listing, (size_t)(f - r->files))
                                      : hub_doc_dir_entry(listing, rev, d);
        if (n == 0) {
            e.off++;
            e.len--;
        }
        hash = hash_fnv1a(listing->seg[0].p + e.off, e.len, hash);
        runs[n++] = e;
    }
    strmap_free(seen);
    hub_paths_free(&p);
    hash = hash_fnv1a("]\n", 2, hash);
    return send_view(a, listing, runs, n, hash, 0, rev->commit);
}

/* /api/models: every repo, filtered by search (a case-insensitive
 * substring of the id), author (the namespace) and the Hub's filters
 * (server/handlers/hub_tags.h), at most limit. One page: no Link header to
 * follow. Revisions are given where already known; the list never waits
 * for hashes. */
struct answer *hub_models(const struct request_view *v, struct answer *a,
                          const struct reg_snapshot *reg)
{
    int bad = 0;
    char *search = view_query(v, "search", 1, NULL, &bad);
    char *author = view_query(v, "author", 1, NULL, &bad);
    const char *limit_s = v->query(v, "limit");
    int full = query_true(v, "full");
    uint64_t limit = UINT64_MAX;
    struct hub_filters filters;
    char why[512];
    if (hub_filters_read(v, &filters, why, sizeof(why)) != 0) {
        answer_hub_error(a, HTTP_BAD_REQUEST, NULL, 0, "%s", why);
        goto out;
    }
    if (bad) {
        answer_hub_error(a, HTTP_BAD_REQUEST, NULL, 0,
                         "a query parameter has a malformed percent-escape");
        goto out;
    }
    if (limit_s) {
        char *end;
        errno = 0;
        unsigned long long parsed = strtoull(limit_s, &end, 10);
        if (!limit_s[0] || *end || errno || limit_s[0] == '-') {
            answer_hub_error(a, HTTP_BAD_REQUEST, NULL, 0,
                             "limit must be a non-negative integer, not \"%.50s\"", limit_s);
            goto out;
        }
        limit = parsed;
    }
    struct jsonw w = JSONW_INIT;
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
        const struct shared_doc *card = NULL;
        if (hub_filters_any(&filters) && hub_doc_card(r, &card) != 0)
            card = NULL; /* a README changed under the list: filtered without it */
        if (hub_filters_any(&filters) &&
            !hub_filters_match(&filters, r, card ? card->seg[0].p : NULL, card ? card->len : 0))
            continue;
        jsonw_obj(&w);
        hub_doc_repo_summary(&w, r, reg_repo_unreadable(r) ? NULL : reg_repo_revision(r));
        if (full) {
            jsonw_karr(&w, "siblings");
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
    send_doc(a, &w, 0, NULL);
out:
    hub_filters_free(&filters);
    free(search);
    free(author);
    return a;
}

struct answer *hub_no_repos(struct answer *a)
{
    struct jsonw w = JSONW_INIT;
    jsonw_arr(&w);
    jsonw_arr_end(&w);
    return send_doc(a, &w, 0, NULL);
}

/* ---- refs and commits -------------------------------------------------------- */

/* /api/models/{repo}/refs: one branch, main, at the current commit (the
 * content has no tags, conversions or pull requests). */
struct answer *hub_refs(struct answer *a, const struct reg_repo_rev *rev)
{
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    jsonw_karr(&w, "branches");
    jsonw_obj(&w);
    jsonw_kstr(&w, "name", "main");
    jsonw_kstr(&w, "ref", "refs/heads/main");
    jsonw_kstr(&w, "targetCommit", rev->commit);
    jsonw_obj_end(&w);
    jsonw_arr_end(&w);
    static const char *const empty[] = {"converts", "tags", "pullRequests"};
    for (size_t i = 0; i < ARRAY_LEN(empty); i++) {
        jsonw_karr(&w, empty[i]);
        jsonw_arr_end(&w);
    }
    jsonw_obj_end(&w);
    return send_doc(a, &w, 0, rev->commit);
}

/* /api/models/{repo}/commits/{rev}: the history of rev, which is one
 * commit: tensord keeps no history, and a commit id names one content
 * state (a function of the content alone: no author, the epoch's date). */
struct answer *hub_commits(struct answer *a, const struct reg_repo *r,
                           const struct reg_repo_rev *rev, int by_commit)
{
    char *message = xasprintf("The files of %s as tensord serves them. tensord keeps no "
                              "history: this commit's id is a hash of the content.", r->id);
    struct jsonw w = JSONW_INIT;
    jsonw_arr(&w);
    jsonw_obj(&w);
    jsonw_kstr(&w, "id", rev->commit);
    jsonw_kstr(&w, "title", HUB_COMMIT_TITLE);
    jsonw_kstr(&w, "message", message);
    free(message);
    jsonw_karr(&w, "authors");
    jsonw_arr_end(&w);
    jsonw_kstr(&w, "date", HUB_REVISION_DATE);
    jsonw_obj_end(&w);
    jsonw_arr_end(&w);
    return send_doc(a, &w, by_commit, rev->commit);
}
