/* mirror_job: the mirror's requests for metadata, run on threads of their
 * own so that an HTTP thread never waits on the upstream (the design is in
 * mirror.h).
 *
 * A job is submitted with a callback; the caller (an HTTP answer) suspends
 * its connection, the job runs on one of the job threads with that
 * thread's upstream connection, and the callback (called once, without
 * any lock held) resumes the connection, whose handler then reads the
 * job's result. Jobs are refcounted: the submitter's reference and the
 * running thread's. mirror_job_release takes the callback back first (and
 * waits out one that is running), so an answer that is freed, a connection
 * closed while it waited, is never called.
 *
 * What the upstream says about a file (its commit, size and hash) is kept
 * for mirror_auth_ttl seconds under the repo, the revision, the path and
 * a SHA-256 of the caller's Authorization value (never the value itself):
 * within that time the same caller's next request needs no upstream round
 * trip, and another caller is asked about afresh, so content a gated repo
 * keeps is served only to callers the upstream let in within the TTL. */
#ifndef TENSORD_MIRROR_JOB_H
#define TENSORD_MIRROR_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "mirror.h"
#include "st_error.h"
#include "upstream.h"

struct mirror_job;

#define MIRROR_DOC_MAX (64u << 20) /* an upstream document's body (a repo of 100,000 files fits) */

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
};

/* A document passed through: the upstream's status, its headers that
 * clients read, and its body, which the job checked to be JSON (the /api
 * documents all are: anything else, an HTML page above all, is never
 * passed on). */
struct mirror_doc {
    struct upstream_answer a;
    char *body;                /* the job's: freed with it */
    size_t len;
    int json;                  /* the body is one JSON document (core/json_scan) */
    char not_json[200];        /* else why not, for the answer's message */
};

/* Starts the job threads (called by mirror_new). Returns 0 or -errno. */
int mirror_jobs_start(struct mirror *m, unsigned threads, struct st_error *err);
/* Completes the queued jobs as cancelled (their callbacks run), stops the
 * threads (a request in flight is cut) and frees the metadata cache. */
void mirror_jobs_stop(struct mirror *m);

/* A job that runs run(m, conn, data, err) on a job thread, whose return
 * (0 or -errno with err) is the job's status; cb(arg) is called once it
 * returned. free_data frees data with the job. Returns the job with the
 * caller's reference, or NULL when the mirror is stopping (data is then
 * freed, and cb never called). */
typedef int (*mirror_job_fn)(struct mirror *m, struct upstream_conn *c, void *data,
                             struct st_error *err);
struct mirror_job *mirror_job_submit(struct mirror *m, mirror_job_fn run, void *data,
                                     void (*free_data)(void *data), void (*cb)(void *arg),
                                     void *arg);
/* The job's data (read its results once the callback came). */
void *mirror_job_data(struct mirror_job *j);
/* Drops the caller's reference, taking its callback back first. */
void mirror_job_release(struct mirror_job *j);

/* The cached answer about (repo, rev, path) for this Authorization value
 * (may be NULL), when one younger than mirror_auth_ttl is there: 1 and
 * *out; else 0. */
int mirror_meta_cached(struct mirror *m, const char *repo, const char *rev, const char *path,
                       const char *auth, struct mirror_meta *out);
/* A job asking the upstream about the file (HEAD), whose data is a struct
 * mirror_meta (cached when found). */
struct mirror_job *mirror_job_meta(struct mirror *m, const char *repo, const char *rev,
                                   const char *path, const char *auth, void (*cb)(void *arg),
                                   void *arg);
/* A job passing a request through (method, target with its query, body),
 * whose data is a struct mirror_doc; bodies up to MIRROR_DOC_MAX bytes. */
struct mirror_job *mirror_job_doc(struct mirror *m, const char *method, const char *target,
                                  const char *body, size_t body_len, const char *content_type,
                                  const char *auth, void (*cb)(void *arg), void *arg);
/* The job's status: 0, or -errno with err (-ECANCELED when the mirror
 * stopped before it ran). The results of the two above (valid while the
 * job is held): */
int mirror_job_status(struct mirror_job *j, struct st_error *err);
const struct mirror_meta *mirror_job_meta_result(struct mirror_job *j);
const struct mirror_doc *mirror_job_doc_result(struct mirror_job *j);

/* Turns an upstream answer to a HEAD of a file into *meta (exposed for
 * tests). Returns 0, or -EPROTO with err when a found file's answer lacks
 * a commit, a size, or a hash the mirror can check. */
int mirror_meta_from_answer(const struct upstream_answer *a, struct mirror_meta *meta,
                            struct st_error *err);

#endif
