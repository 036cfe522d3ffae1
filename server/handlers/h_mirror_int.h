/* h_mirror_int: what a mirror's answers share (server/handlers/h_mirror_job.c):
 * waiting for a job of the upstream's queue (mirror/mirror_job.h), the
 * answers when it cannot be had, the files an answer holds, and the mark
 * of an answer made from what the mirror kept while its upstream fails.
 * Used by h_mirror.c (the Hub routes), h_mirror_gpu.c (preloads),
 * h_mirror_v1.c (the /v1 routes) and h_mirror_s3.c (the S3 API). */
#ifndef TENSORD_H_MIRROR_INT_H
#define TENSORD_H_MIRROR_INT_H

#include <stdint.h>

#include "h_answer.h"
#include "h_mirror.h"
#include "st_error.h"

struct mirror;

enum mirror_wait_kind {
    MW_META,                   /* a file's metadata: repo, rev, path, auth */
    MW_DOC,                    /* a document passed through: method, target, body, ctype, auth */
    MW_MODEL,                  /* a preload's model: repo */
    MW_VIEW,                   /* a /v1 model: repo is the model's name */
    MW_SNAP,                   /* a repo's main (S3): repo */
};

/* The job a request waits for, submitted when the wait starts; its
 * strings are copied into the answer's arena. */
struct mirror_wait {
    struct mirror *m;
    uint64_t client;
    enum mirror_wait_kind kind;
    const char *repo, *rev, *path, *auth;
    const char *method, *target, *body, *ctype;
    size_t body_len;
};

/* The dialect an answer speaks. */
enum mirror_dialect { MD_TENSORD, MD_HUB, MD_S3 };

/* "Wait for this job": the request is dispatched again with v->wait_job
 * (or, when the queue refused it, without: mirror_answer_refused). */
struct answer *mirror_answer_wait(struct answer *a, const struct mirror_wait *w);
/* A request dispatched again without the job it waited for: the queue
 * refused it (503 at once, never after a wait). Returns NULL when v is no
 * such request. */
struct answer *mirror_answer_refused(const struct request_view *v, struct answer *a,
                                     enum mirror_dialect d);
/* A job that failed (rc, e): the mirror is stopping (503), the upstream
 * cannot be reached and nothing is kept (504; S3: 503), it gave an answer
 * the mirror cannot use (502). */
struct answer *mirror_answer_failed(struct answer *a, enum mirror_dialect d, int rc,
                                    const struct st_error *e);
/* Marks an answer made from what the mirror kept while its upstream cannot
 * be reached, age seconds after the upstream gave it (no mark for age < 0):
 * Age and X-Tensord-Stale. */
void mirror_answer_stale(struct answer *a, int64_t age);

#endif
