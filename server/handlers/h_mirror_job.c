/* h_mirror_job: see h_mirror_int.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "h_mirror_int.h"
#include "mirror.h"
#include "mirror_ask.h"
#include "mirror_job.h"
#include "mirror_model.h"
#include "mirror_view.h"

static void job_done(void *arg)
{
    answer_resume(arg, 0);
}

static void job_release(void *job)
{
    mirror_job_release(job);
}

/* Submits the job on the HTTP thread once the request is suspended; when
 * the queue refuses it, the request is dispatched again at once with no
 * job and the reason as its wait's result. */
static void *start_job(struct answer *a)
{
    const struct mirror_wait *w = a->wait.ctx;
    int why = 0;
    struct mirror_job *j = NULL;
    switch (w->kind) {
    case MW_META:
        j = mirror_job_meta(w->m, w->client, w->repo, w->rev, w->path, w->auth, job_done, a, &why);
        break;
    case MW_DOC:
        j = mirror_job_doc(w->m, w->client, w->method, w->target, w->body, w->body_len, w->ctype,
                           w->auth, job_done, a, &why);
        break;
    case MW_MODEL:
        j = mirror_job_model(w->m, w->client, w->repo, "main", job_done, a, &why);
        break;
    case MW_VIEW:
        j = mirror_job_view(w->m, w->client, w->repo, job_done, a, &why);
        break;
    case MW_SNAP:
        j = mirror_job_snap(w->m, w->client, w->repo, job_done, a, &why);
        break;
    }
    if (!j)
        answer_resume(a, why);
    return j;
}

static const char *copy(struct answer *a, const char *s)
{
    return s ? answer_strdup(a, s) : NULL;
}

struct answer *mirror_answer_wait(struct answer *a, const struct mirror_wait *w)
{
    struct mirror_wait *c = answer_alloc(a, sizeof(*c));
    *c = *w;
    c->repo = copy(a, w->repo);
    c->rev = copy(a, w->rev);
    c->path = copy(a, w->path);
    c->auth = copy(a, w->auth);
    c->method = copy(a, w->method);
    c->target = copy(a, w->target);
    c->ctype = copy(a, w->ctype);
    /* The body is the request's, which lives as long as the answer. */
    return answer_wait(a, start_job, job_release, c);
}

struct answer *mirror_answer_refused(const struct request_view *v, struct answer *a,
                                     enum mirror_dialect d)
{
    /* A refusal resumes with a negative errno; another wait (a document's
     * render) with its own result, never negative. */
    if (!v->waited || v->wait_job || v->wait_result >= 0)
        return NULL;
    int full = v->wait_result == -EAGAIN;
    const char *why = full ? "too many questions to the mirror's upstream wait: retry"
                           : "the mirror is stopping";
    if (d == MD_HUB)
        answer_hub_error(a, HTTP_SERVICE_UNAVAILABLE, NULL, 0, "%s", why);
    else if (d == MD_S3)
        answer_s3_error(a, HTTP_SERVICE_UNAVAILABLE, "SlowDown", NULL, "%s", why);
    else
        answer_error(a, HTTP_SERVICE_UNAVAILABLE, full ? "busy" : "stopping", "%s", why);
    a->error.retry_after = MIRROR_JOB_RETRY_AFTER;
    return a;
}

struct answer *mirror_answer_failed(struct answer *a, enum mirror_dialect d, int rc,
                                    const struct st_error *e)
{
    int gone = mirror_ask_unreachable(rc);
    unsigned status = rc == -ECANCELED ? HTTP_SERVICE_UNAVAILABLE
                      : gone           ? HTTP_GATEWAY_TIMEOUT
                                       : HTTP_BAD_GATEWAY;
    const char *msg = rc == -ECANCELED ? "the mirror is stopping" : e->message;
    if (d == MD_HUB)
        return answer_hub_error(a, status, NULL, 1, "%s%s", rc == -ECANCELED ? "" : "upstream: ",
                                msg);
    if (d == MD_S3)
        return answer_s3_error(a, status == HTTP_BAD_GATEWAY ? HTTP_BAD_GATEWAY
                                                             : HTTP_SERVICE_UNAVAILABLE,
                               status == HTTP_BAD_GATEWAY ? "InternalError" : "ServiceUnavailable",
                               NULL, "%s", msg);
    return answer_error(a, status, rc == -ECANCELED ? "stopping"
                                   : gone           ? "upstream_unreachable"
                                                    : "upstream_error",
                        "%s", msg);
}

/* A mirrored file an answer holds. */
struct held_file {
    struct mirror *m;
    struct mirror_file *f;
};

static void unref_held(void *arg)
{
    struct held_file *h = arg;
    mirror_unref(h->m, h->f);
}

void mirror_answer_hold(struct answer *a, struct mirror *m, struct mirror_file *f)
{
    struct held_file *h = answer_alloc(a, sizeof(*h));
    *h = (struct held_file){m, f};
    answer_defer(a, unref_held, h);
}

void mirror_answer_stale(struct answer *a, int64_t age)
{
    if (age < 0)
        return;
    char text[24];
    snprintf(text, sizeof(text), "%" PRId64, age);
    answer_header(a, "Age", text);
    answer_header(a, "X-Tensord-Stale", text);
}
