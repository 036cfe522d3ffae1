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
 * and answers with what it finds then: the document, or 503 with
 * a Retry-After estimated from the bytes left. Never a guessed hash. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

#include "digest.h"
#include "h_hub_int.h"
#include "h_mirror.h"
#include "handlers.h"
#include "hasher.h"
#include "reg_repo.h"
#include "route.h"

/* The revision of repo r, or NULL after answering (or waiting) in a. */
static const struct reg_repo_rev *need_revision(const struct request_view *v, struct answer *a,
                                                const struct reg_repo *r)
{
    const struct reg_file *bad = reg_repo_unreadable(r);
    if (bad) {
        answer_hub_error(a, HTTP_INTERNAL_SERVER_ERROR, NULL, 0,
                         "repo %s: file %s cannot be read: %s", r->id, bad->name,
                         bad->error.message);
        return NULL;
    }
    const struct reg_repo_rev *rev = reg_repo_revision(r);
    if (rev)
        return rev;
    struct hasher *h = v->srv->hasher;
    const struct reg_file **missing = answer_alloc(a, r->n_files * sizeof(*missing));
    size_t n = 0;
    for (size_t i = 0; i < r->n_files; i++)
        if (!reg_file_hashed(&r->files[i]))
            missing[n++] = &r->files[i];
    if (answer_wait_hashes(v, a, missing, n))
        return NULL;
    /* Waited already (or may not wait): say when to come back. */
    if (h)
        hasher_want(h, missing, n, 0, NULL, NULL); /* at least to the front of the queue */
    unsigned after = h ? hasher_retry_after(h, missing, n) : 1;
    if (v->waited && v->wait_result == HASHER_FAILED) {
        answer_hub_error(a, HTTP_INTERNAL_SERVER_ERROR, NULL, 0,
                         "repo %s: a file could not be hashed (a read error, or it keeps "
                         "changing); see the daemon's log", r->id);
        return NULL;
    }
    answer_hub_error(a, HTTP_SERVICE_UNAVAILABLE, NULL, after,
                     "repo %s: the content hashes of its files are being computed; "
                     "retry in %u s", r->id, after);
    return NULL;
}

static struct answer *revision_not_found(struct answer *a, const char *rev)
{
    return answer_hub_error(a, HTTP_NOT_FOUND, "RevisionNotFound", 0, "Invalid rev id: %.300s",
                            rev);
}

/* ---- files ----------------------------------------------------------------- */

static struct answer *serve_file(struct answer *a, const struct reg_repo *r,
                                 const struct reg_repo_rev *rev, const struct reg_file *f, int raw,
                                 const char *etag)
{
    int fd = reg_open_below(r->root, f, O_RDONLY);
    if (fd < 0) {
        if (fd == -ESTALE) {
            a->rescan = 1;
            return answer_hub_error(a, HTTP_SERVICE_UNAVAILABLE, NULL, 1,
                                    "%s changed on disk since it was hashed; retry once the "
                                    "daemon has rescanned it", f->name);
        }
        if (fd == -EMFILE || fd == -ENFILE)
            return answer_hub_error(a, HTTP_SERVICE_UNAVAILABLE, NULL, 1,
                                    "out of file descriptors");
        return answer_hub_error(a, HTTP_INTERNAL_SERVER_ERROR, NULL, 0,
                                "%s could not be opened: %s", f->name, strerror(-fd));
    }
    a->fd = fd; /* the response holds its own duplicate */
    answer_header(a, "X-Repo-Commit", rev->commit);
    hub_linked(a, reg_repo_file_is_lfs(f), etag, f->st.size);
    struct representation rep = {
        .body = {.fd = fd, .data_off = 0, .data_len = f->st.size},
        .file_st = &f->st,
    };
    hub_file_rep(a, &rep, f->name, raw, etag);
    return answer_body(a, &rep);
}

static struct answer *hub_file(struct answer *a, const struct reg_repo *r,
                               const struct reg_repo_rev *rev, const struct route *rt,
                               int by_commit)
{
    const struct reg_file *f = reg_repo_find_file(r, rt->name, rt->name_len);
    if (!f)
        return hub_entry_not_found(a, r, rev, rt->name);
    /* The file's ETag: its git blob id, or an LFS file's SHA-256. */
    char etag[80], sha[65];
    int lfs = reg_repo_file_is_lfs(f);
    digest_hex(lfs ? f->sha256 : f->git_sha1, lfs ? 32 : 20, sha);
    snprintf(etag, sizeof(etag), "\"%s\"", sha);
    if (by_commit)
        return serve_file(a, r, rev, f, rt->raw, etag);
    return hub_redirect_to_commit(a, r->id, rt->raw, rev->commit, f->name, lfs, etag,
                                  f->st.size);
}

struct answer *handle_hub(const struct request_view *v, struct answer *a,
                          const struct reg_snapshot *reg, const struct route *rt)
{
    /* A mirror's Hub is its upstream's (server/handlers/h_mirror.c): models only. */
    if (v->srv->mirror && rt->kind != ROUTE_HUB_NO_REPO && rt->kind != ROUTE_HUB_NO_REPOS)
        return handle_mirror_hub(v, a, rt);
    if (rt->kind == ROUTE_HUB_MODELS)
        return hub_models(v, a, reg);
    if (rt->kind == ROUTE_HUB_NO_REPOS)
        return hub_no_repos(a);
    if (rt->kind == ROUTE_HUB_NO_REPO)
        return answer_hub_error(a, HTTP_NOT_FOUND, "RepoNotFound", 0,
                                "Repository not found: %.300s (tensord serves models only: no "
                                "datasets, no spaces)", rt->model);
    const struct reg_repo *r = reg_snapshot_find_repo(reg, rt->model, rt->model_len);
    if (!r)
        return answer_hub_error(a, HTTP_NOT_FOUND, "RepoNotFound", 0,
                                "Repository not found: %.300s", rt->model);
    /* A revision other than main or HEAD is a commit id (an immutable URL):
     * one that can never match needs no hashes to be refused. */
    int by_commit = rt->rev && strcmp(rt->rev, "main") != 0 && strcmp(rt->rev, "HEAD") != 0;
    if (by_commit && !(rt->rev_len == 40 && digest_unhex(rt->rev, 20, (uint8_t[20]){0}) == 0))
        return revision_not_found(a, rt->rev);
    const struct reg_repo_rev *rev = need_revision(v, a, r);
    if (!rev)
        return a;
    if (by_commit && strcmp(rt->rev, rev->commit) != 0)
        return revision_not_found(a, rt->rev);
    switch (rt->kind) {
    case ROUTE_HUB_FILE:
        return hub_file(a, r, rev, rt, by_commit);
    case ROUTE_HUB_INFO:
        return hub_info(v, a, reg, r, rev, by_commit);
    case ROUTE_HUB_TREE:
        return hub_tree(v, a, r, rev, rt, by_commit);
    case ROUTE_HUB_REFS:
        return hub_refs(a, rev);
    case ROUTE_HUB_COMMITS:
        return hub_commits(a, r, rev, by_commit);
    default:
        return hub_paths_info(v, a, r, rev);
    }
}
