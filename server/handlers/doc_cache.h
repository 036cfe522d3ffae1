/* doc_cache: a model's two JSON documents, its description (GET
 * /v1/models/{model}) and its merged header (GET .../header), and a Hub
 * repo's two, its document (/api/models/{repo}) and its listing (every tree
 * and paths-info answer is a view of it: server/handlers/hub_doc.h),
 * rendered on a thread of their own, once per state, and shared by
 * reference between the answers that send them (core/body/shared_doc.h).
 *
 * An HTTP thread never renders and never waits for a render: it takes a
 * reference to the model's cached document when that is fresh enough
 * (doc_cache_get), and otherwise asks the renderer for it (doc_cache_render)
 * and suspends its connection until the renderer calls back. One thread
 * renders, one document at a time, so a burst of first requests for a model
 * with a million tensors (or for many such models) costs one document's
 * memory at a time, and everyone who asked for the same document while it
 * was queued or rendering gets that one rendering.
 *
 * What a client sees while a model's content hashes come in: the
 * description's files and "hashes" show the hashes known when it was
 * rendered, which lags the hasher by at most DOC_REFRESH_MS (a description
 * is rendered again only once that long has passed since the last one, and
 * only when a request asks for it); once every hash is known, the next
 * request gets the complete description, which is then kept for the model's
 * life. The tensors, metadata and errors (the bulk of it) are rendered once
 * per model and shared by each state of its description. Its ETag is a hash
 * of its bytes, so a client revalidating gets each new state. */
#ifndef TENSORD_DOC_CACHE_H
#define TENSORD_DOC_CACHE_H

#include "registry.h"
#include "shared_doc.h"

/* The longest a description may lag its model's hash progress. */
#define DOC_REFRESH_MS 1000

enum doc_kind { DOC_DESCRIPTION, DOC_HEADER, DOC_REPO_INFO, DOC_REPO_LISTING,
                DOC_REPO_LISTING_EXPANDED };

enum doc_result {
    DOC_READY,          /* the document is in the model's (the repo's) cache now */
    DOC_NO_MEMORY,      /* rendering ran out of memory: a condition of the host; retry later */
    DOC_STOPPED,        /* the daemon is stopping */
    DOC_STALE,          /* a repo's README.md changed since it was hashed: rescan, retry */
};

typedef void (*doc_cb)(void *arg, enum doc_result r);

struct doc_cache;

/* Starts the renderer thread. Never NULL. */
struct doc_cache *doc_cache_start(void);
/* Calls every pending callback with DOC_STOPPED, waits for the document
 * being rendered (if any) and stops the thread; doc_cache_render answers -1
 * from then on. Call before the HTTP server stops: it resumes the
 * connections that were waiting. */
void doc_cache_stop(struct doc_cache *dc);
/* doc_cache_stop if needed, then frees dc (may be NULL). */
void doc_cache_free(struct doc_cache *dc);

/* A new reference to m's cached document `kind` (drop it with
 * shared_doc_unref), or NULL when there is none to send: with `fresh` set, a
 * description whose hashes lag the model's by more than the rule above is
 * not returned. Never renders, never waits. Any thread. */
struct shared_doc *doc_cache_get(const struct reg_model *m, enum doc_kind kind, int fresh);

/* A new reference to repo r's document `kind` (DOC_REPO_INFO,
 * DOC_REPO_LISTING, DOC_REPO_LISTING_EXPANDED), or NULL before it was
 * rendered. Any thread. */
struct shared_doc *doc_cache_get_repo(const struct reg_repo *r, enum doc_kind kind);

/* Asks for document `kind` to be rendered (unless it is fresh by the time
 * its turn comes): m's when r is NULL, else repo r's (r's revision must be
 * known; m is r's /v1 model for DOC_REPO_INFO, or NULL). cb(arg, result) is
 * called once, on the renderer's thread, when it is in m's (r's) cache or
 * could not be made. The renderer holds references to m and r meanwhile.
 * Returns 0, or -1 (no callback) once stopped. */
int doc_cache_render(struct doc_cache *dc, const struct reg_model *m, const struct reg_repo *r,
                     enum doc_kind kind, doc_cb cb, void *arg);

#endif
