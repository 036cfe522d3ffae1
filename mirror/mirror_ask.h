/* mirror_ask: the questions the mirror's HTTP answers ask its upstream,
 * through the job queue (mirror/mirror_job.h): what the upstream says
 * about a file (HEAD: its commit, size and hash), and a document passed
 * through (the /api routes), checked to be JSON there, on a job thread.
 *
 * Both are asked once however many identical requests wait for them (the
 * same request with the same Authorization value: the queue's key holds a
 * SHA-256 of the value, never the value).
 *
 * What the upstream says about a file is kept for mirror_auth_ttl seconds
 * under the repo, the revision, the path and a SHA-256 of the caller's
 * Authorization value: within that time the same caller's next request
 * needs no upstream round trip, and another caller is asked about afresh,
 * so content a gated repo keeps is served only to callers the upstream let
 * in within the TTL.
 *
 * When the upstream cannot be reached (no answer, a 5xx, or a pause after
 * failures: mirror_health.h), a question is answered with the last answer
 * the upstream gave to it (mirror_names.h), marked stale with its age,
 * when one is kept for this caller; otherwise it fails. Every answer the
 * upstream gives is kept for that; those given without a token also teach
 * the table of known repos (mirror_repos.h). */
#ifndef TENSORD_MIRROR_ASK_H
#define TENSORD_MIRROR_ASK_H

#include <stddef.h>
#include <stdint.h>

#include "mirror.h"
#include "mirror_job.h"
#include "st_error.h"
#include "upstream.h"

/* What the upstream said about a file of a repo at a revision. */
struct mirror_meta {
    long status;               /* the upstream's: 200 (or a redirect away, for an LFS file on
                                * the Hub) when found; 401, 403, 404, 5xx as it answered */
    char commit[41];           /* the revision's commit (40 lowercase hex), when found */
    struct mirror_id id;       /* the content: sha256 for LFS files, else the git blob id */
    int lfs;                   /* the upstream gave X-Linked-Etag (an LFS file) */
    char error_code[48];       /* X-Error-Code of an error (RepoNotFound, ...) */
    char error_message[256];
    unsigned retry_after;
    int64_t stale;             /* -1: the upstream's answer now; else the age (seconds) of the
                                * one kept, given while it cannot be reached */
};

/* A document passed through: the upstream's status, its headers that
 * clients read, and its body, which the job checked to be JSON (the /api
 * documents all are: anything else, an HTML page above all, is never
 * passed on). */
struct mirror_doc {
    struct upstream_answer a;
    char *body;                /* the job's: freed with it */
    size_t len;
    int json;                  /* the body is one JSON document (core/base/json_scan) */
    char not_json[200];        /* else why not, for the answer's message */
    int64_t stale;             /* as mirror_meta's */
};

/* The answers kept about files (mirror_auth_ttl), made by mirror_new. */
struct mirror_asks *mirror_asks_new(void);
void mirror_asks_free(struct mirror_asks *a);

/* The cached answer about (repo, rev, path) for this Authorization value
 * (may be NULL), when one younger than mirror_auth_ttl is there: 1 and
 * *out; else 0. */
int mirror_meta_cached(struct mirror *m, const char *repo, const char *rev, const char *path,
                       const char *auth, struct mirror_meta *out);
/* Asks the upstream about the file (HEAD) for client; the job's result is
 * mirror_job_meta_result (cached when found). NULL with *why as
 * mirror_job_submit. */
struct mirror_job *mirror_job_meta(struct mirror *m, uint64_t client, const char *repo,
                                   const char *rev, const char *path, const char *auth,
                                   void (*cb)(void *arg), void *arg, int *why);
/* Passes a request through (method, target with its query, body) for
 * client; the job's result is mirror_job_doc_result, bodies up to
 * MIRROR_DOC_MAX bytes. NULL with *why as mirror_job_submit. */
struct mirror_job *mirror_job_doc(struct mirror *m, uint64_t client, const char *method,
                                  const char *target, const char *body, size_t body_len,
                                  const char *content_type, const char *auth,
                                  void (*cb)(void *arg), void *arg, int *why);
/* The results of the two above (valid while the job is held, once its
 * callback came), or NULL for a job of another kind. */
const struct mirror_meta *mirror_job_meta_result(struct mirror_job *j);
const struct mirror_doc *mirror_job_doc_result(struct mirror_job *j);

/* What the job's failure (rc from mirror_job_status) means for the HTTP
 * answer: 1 when the upstream could not be reached (504), 0 when it gave
 * an answer the mirror cannot use (502). */
int mirror_ask_unreachable(int rc);

/* What the names store keeps read back (exposed for the fuzzer: a file of
 * the cache another program may have written): a found file's metadata
 * (its commit, LFS or not, its digest and size, one line) into *mt; a
 * document (its status, X-Repo-Commit, ETag, Cache-Control and Link a line
 * each, an empty line, the body) into a zeroed *doc, which then owns its
 * body and Link (free them with free and upstream_answer_free). Returns 0,
 * or -EINVAL (a 2xx document only). */
int mirror_kept_meta_parse(const char *text, struct mirror_meta *mt);
int mirror_kept_doc_parse(const char *text, size_t len, struct mirror_doc *doc);

/* Turns an upstream answer to a HEAD of a file into *meta (exposed for
 * tests). Returns 0, or -EPROTO with err when a found file's answer lacks
 * a commit, a size, or a hash the mirror can check. */
int mirror_meta_from_answer(const struct upstream_answer *a, struct mirror_meta *meta,
                            struct st_error *err);

#endif
