/* h_hub_api: the Hugging Face endpoint's /api documents (h_hub.c answers
 * files, waits for hashes and checks the revision, then calls these): a
 * repo's document, its tree and paths-info entries, the repo list, its refs
 * and its one commit; and what h_hub.c and h_mirror.c both use: the errors,
 * the parts of a file's answer. Every document is rendered per
 * request from the repo's revision, and is a function of the content alone
 * where a commit id addresses it (API.md "Replicas"). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "card_yaml.h"
#include "digest.h"
#include "h_hub_int.h"
#include "handlers.h"
#include "hub_req.h"
#include "hub_tags.h"
#include "jsonw.h"
#include "log.h"
#include "model_doc.h"
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

static size_t lfs_pointer_size(uint64_t size)
{
    char digits[24];
    /* "version https://git-lfs.github.com/spec/v1\n" "oid sha256:<64>\n" "size <n>\n" */
    return 43 + 76 + 6 + (size_t)snprintf(digits, sizeof(digits), "%" PRIu64, size);
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

static void lfs_object(struct jsonw *w, const struct reg_file *f, const char *hash_key)
{
    char sha[65];
    digest_hex(f->sha256, 32, sha);
    jsonw_kobj(w, "lfs");
    jsonw_kstr(w, hash_key, sha);
    jsonw_ku64(w, "size", f->st.size);
    jsonw_ku64(w, "pointerSize", lfs_pointer_size(f->st.size));
    jsonw_obj_end(w);
}

/* An entry of a tree or paths-info listing: file f, or directory d when f
 * is NULL; with expand, its last commit (the revision's one: list_repo_tree
 * and get_paths_info with expand=True read it). */
static void tree_entry(struct jsonw *w, const struct reg_repo *r, const struct reg_repo_rev *rev,
                       const struct reg_file *f, const struct reg_repo_dir *d, int expand)
{
    char oid[41];
    digest_hex(f ? rev->blob[f - r->files] : d->tree, 20, oid);
    jsonw_obj(w);
    jsonw_kstr(w, "type", f ? "file" : "directory");
    jsonw_kstr(w, "oid", oid);
    jsonw_ku64(w, "size", f ? f->st.size : 0);
    jsonw_kstr(w, "path", f ? f->name : d->path);
    if (f && reg_repo_file_is_lfs(f))
        lfs_object(w, f, "oid");
    if (expand) {
        jsonw_kobj(w, "lastCommit");
        jsonw_kstr(w, "id", rev->commit);
        jsonw_kstr(w, "title", HUB_COMMIT_TITLE);
        jsonw_kstr(w, "date", HUB_REVISION_DATE);
        jsonw_obj_end(w);
    }
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
    jsonw_kobj(w, "safetensors");
    uint64_t total = model_doc_parameters(w, m);
    jsonw_ku64(w, "total", total);
    jsonw_obj_end(w);
}

/* The fields a repo has in both the list and its own document. */
static void repo_summary(struct jsonw *w, const struct reg_repo *r, const struct reg_repo_rev *rev)
{
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
    jsonw_kstr(w, "lastModified", HUB_REVISION_DATE);
    jsonw_kstr(w, "createdAt", HUB_REVISION_DATE);
    jsonw_kbool(w, "private", 0);
    jsonw_kbool(w, "gated", 0);
    jsonw_kbool(w, "disabled", 0);
    jsonw_ku64(w, "downloads", 0);
    jsonw_ku64(w, "likes", 0);
    int st = 0;
    for (size_t i = 0; i < r->n_files && !st; i++)
        st = r->files[i].is_safetensors;
    jsonw_karr(w, "tags");
    if (st)
        jsonw_str(w, "safetensors");
    jsonw_arr_end(w);
}

/* ---- the model card ---------------------------------------------------------- */

/* A README larger than this has its front matter read from its first
 * CARD_README_MAX bytes. */
#define CARD_README_MAX (1u << 20)

/* The card of f, README.md (its YAML front matter as JSON, see
 * core/card_yaml.h), into *card: a document, empty when the front matter
 * is missing or no mapping. Returns 0, -ESTALE when README.md changed since
 * it was hashed (the card would not be the commit's), or another -errno
 * (nothing to keep: the next request tries again). */
static int card_read(const struct reg_repo *r, const struct reg_file *f, struct shared_doc **card)
{
    size_t n = f->st.size < CARD_README_MAX ? (size_t)f->st.size : CARD_README_MAX;
    int fd = reg_open_below(r->root, f, O_RDONLY);
    if (fd < 0)
        return fd;
    char *text = malloc(n + 1), *json = NULL;
    const char *yaml;
    size_t yaml_len, json_len = 0;
    struct st_error err = {0};
    int rc = !text ? -ENOMEM : fileio_pread_full(fd, text, n, 0);
    if (rc == 0 && !fileio_unchanged(fd, &f->st))
        rc = -ESTALE;
    close(fd);
    if (rc == 0 && card_yaml_front_matter(text, n, &yaml, &yaml_len)) {
        int made = card_yaml_to_json(yaml, yaml_len, &json, &json_len, &err);
        if (made == -ENOMEM)
            rc = made; /* a condition of the host, not a verdict on the card */
        else if (made < 0)
            log_msg(LOG_DEBUG, "hub: %s/README.md: no cardData: %s", r->id, err.message);
    }
    free(text);
    if (rc == 0)
        *card = shared_doc_new(json ? json : xstrdup(""), json ? json_len : 0, 0);
    else
        free(json);
    return rc;
}

int hub_card(const struct reg_repo *r, const struct shared_doc **out)
{
    *out = NULL;
    const struct reg_file *f = reg_repo_find_file(r, "README.md", 9);
    if (!f)
        return 0;
    const struct shared_doc *card = reg_repo_card(r);
    if (!card) {
        struct shared_doc *made = NULL;
        int rc = card_read(r, f, &made);
        if (rc < 0) {
            log_msg(LOG_DEBUG, "hub: %s/README.md: %s", r->id, strerror(-rc));
            return rc == -ESTALE ? rc : 0;
        }
        card = reg_repo_set_card(r, made);
    }
    *out = card;
    return 0;
}

/* Writes "cardData" into w when the repo's README.md has a card (hub_card).
 * Returns 0, or -ESTALE when README.md changed since it was hashed (the
 * caller answers 503). */
static int card_data(struct jsonw *w, const struct reg_repo *r)
{
    const struct shared_doc *card;
    int rc = hub_card(r, &card);
    if (rc < 0 || !card)
        return rc;
    if (card->len) {
        jsonw_key(w, "cardData");
        jsonw_raw(w, card->seg[0].p, card->len);
    }
    return 0;
}

struct answer *hub_info(struct answer *a, const struct reg_snapshot *reg, const struct reg_repo *r,
                        const struct reg_repo_rev *rev, int by_commit)
{
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    repo_summary(&w, r, rev);
    jsonw_ku64(&w, "usedStorage", r->bytes);
    safetensors_info(&w, reg, r);
    if (card_data(&w, r) == -ESTALE) {
        jsonw_free(&w);
        a->rescan = 1;
        return answer_hub_error(a, HTTP_SERVICE_UNAVAILABLE, NULL, 1,
                                "%s/README.md changed on disk since it was hashed; retry once "
                                "the daemon has rescanned it", r->id);
    }
    jsonw_karr(&w, "siblings");
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
    jsonw_karr(&w, "spaces");
    jsonw_arr_end(&w);
    jsonw_obj_end(&w);
    return send_doc(a, &w, by_commit, rev->commit);
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
    int recursive = query_true(v, "recursive"), expand = query_true(v, "expand");
    size_t skip = d->len ? d->len + 1 : 0;
    struct jsonw w = JSONW_INIT;
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
                tree_entry(&w, r, rev, NULL, reg_repo_find_dir(rev, f->name, len), expand);
            if (!recursive)
                break;
        }
        if (recursive || !strchr(rest, '/'))
            tree_entry(&w, r, rev, f, NULL, expand);
    }
    strmap_free(listed);
    jsonw_arr_end(&w);
    return send_doc(a, &w, by_commit, rev->commit);
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
    struct jsonw w = JSONW_INIT;
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
        if (f || d)
            tree_entry(&w, r, rev, f, d, p.expand);
    }
    strmap_free(seen);
    hub_paths_free(&p);
    jsonw_arr_end(&w);
    return send_doc(a, &w, 0, rev->commit);
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
        if (hub_filters_any(&filters) && hub_card(r, &card) != 0)
            card = NULL; /* a README changed under the list: filtered without it */
        if (hub_filters_any(&filters) &&
            !hub_filters_match(&filters, r, card ? card->seg[0].p : NULL, card ? card->len : 0))
            continue;
        jsonw_obj(&w);
        repo_summary(&w, r, reg_repo_unreadable(r) ? NULL : reg_repo_revision(r));
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
