/* mirror_job: the queue of the mirror's questions to its upstream (a
 * file's metadata, a document, a model for a preload: mirror_ask.h,
 * mirror_model.h), run on threads of their own so that an HTTP thread
 * never waits on the upstream (the design is in mirror.h).
 *
 * A question is submitted with a callback; the caller (an HTTP answer)
 * suspends its connection, the question runs on one of the job threads
 * with that thread's upstream connection, and the callback (called once,
 * without any lock held) resumes the connection, whose handler then reads
 * the result. What a submitter holds is a `struct mirror_job`: its hold on
 * the question and its callback.
 *
 * The queue is the upstream's to protect and the clients' to share:
 *   - Bounded: at most MIRROR_JOBS_QUEUED questions wait in all, and
 *     MIRROR_JOBS_PER_CLIENT of one client (a hash of its address); a
 *     question past either is refused at once (the caller answers 503 with
 *     Retry-After) rather than waiting behind all of them.
 *   - Fair: the job threads take the clients that have questions waiting
 *     in turn, one question each, so a client with a thousand questions
 *     delays another's first by one round, not by a thousand.
 *   - Asked once: a question identical to one waiting or running (the same
 *     key: the same request with the same Authorization) is not queued
 *     again; its submitter waits for that one's answer, which both read.
 *   - Builds never take every thread: a question that builds a model
 *     (spec.build: it waits on the fetchers for the weight files' headers,
 *     which an upstream that accepts and never answers makes last its
 *     stall timeout) runs on at most MIRROR_JOB_BUILDS threads at once, so
 *     a file's metadata and the documents always have a thread, whoever
 *     asks for how many models. A client whose turn comes with only builds
 *     waiting while those threads are taken passes its turn on.
 *   - Cancelled when nobody waits: mirror_job_release takes the callback
 *     back (waiting out one that is running), and a question whose last
 *     submitter released it before it ran leaves the queue and never
 *     reaches the upstream (an HTTP answer releases its job when its
 *     request ends: its client left, server/http/conns.h). One that is
 *     running is stopped: the abort flag of its thread's connection is set
 *     (upstream_conn_abort), which ends its request to the upstream and the
 *     waits it polls the flag in, and its thread takes the next question.
 *     Either way its key is forgotten at once: a later identical question
 *     is asked anew, never handed the stopped one's answer. */
#ifndef TENSORD_MIRROR_JOB_H
#define TENSORD_MIRROR_JOB_H

#include <stdint.h>

#include "mirror.h"
#include "st_error.h"
#include "upstream.h"

struct mirror_job;

#define MIRROR_JOB_THREADS 4        /* questions asked at once (each a round trip or a document) */
#define MIRROR_JOB_BUILDS 2         /* of those, model builds (spec.build): below the threads */
#define MIRROR_JOBS_QUEUED 1024     /* questions waiting, in all */
#define MIRROR_JOBS_PER_CLIENT 64   /* of those, one client's */
#define MIRROR_JOB_RETRY_AFTER 1    /* seconds a refused submitter is told to wait */

/* Starts the MIRROR_JOB_THREADS job threads (called by mirror_new). Returns 0 or -errno. */
int mirror_jobs_start(struct mirror *m, struct st_error *err);
/* Completes the queued questions as cancelled (their callbacks run) and
 * stops the threads (a request in flight is cut). */
void mirror_jobs_stop(struct mirror *m);

/* What a question runs on a job thread: 0 or -errno with err, the
 * question's status. c's requests stop (-ECANCELED) when every submitter
 * left or the mirror stops; a wait of its own polls upstream_conn_abort(c)
 * to stop with them. */
typedef int (*mirror_job_fn)(struct mirror *m, struct upstream_conn *c, void *data,
                             struct st_error *err);

/* A question to ask: run(m, conn, data, err) for client, shared with identical
 * ones in flight when key is not NULL (then data must be all the result
 * its submitters read: they read the same). free_data frees data with the
 * question. */
struct mirror_job_spec {
    uint64_t client;            /* who asks: the queue takes clients in turn (0: the mirror) */
    const char *key;            /* the question's identity (copied), or NULL: never shared */
    int build;                  /* it builds a model (MIRROR_JOB_BUILDS at once) */
    mirror_job_fn run;
    void *data;                 /* taken over (freed at once when the question is refused or
                                 * shared: the one in flight answers) */
    void (*free_data)(void *data);
};

/* Submits q; cb(arg) is called once it has an answer. Returns the job (the
 * caller's hold), or NULL with *why: -EAGAIN when the queue or the
 * client's share of it is full (answer at once: Retry-After
 * MIRROR_JOB_RETRY_AFTER), -ECANCELED when the mirror is stopping; cb is
 * then never called. */
struct mirror_job *mirror_job_submit(struct mirror *m, const struct mirror_job_spec *q,
                                     void (*cb)(void *arg), void *arg, int *why);
/* The question's data (read its results once the callback came), and
 * whether it runs fn. */
void *mirror_job_data(struct mirror_job *j);
int mirror_job_runs(const struct mirror_job *j, mirror_job_fn fn);
/* The question's status: 0, or -errno with err (-ECANCELED when the mirror
 * stopped before it ran). Valid once the callback came. */
int mirror_job_status(struct mirror_job *j, struct st_error *err);
/* Drops the caller's hold, taking its callback back first; a question
 * nobody holds any more that has not run leaves the queue unasked. */
void mirror_job_release(struct mirror_job *j);

#endif
