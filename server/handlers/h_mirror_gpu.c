/* h_mirror_gpu: POST /v1/models/{repo}/gpu on a mirror, for a repo its
 * models root does not hold: the repo's model prepared by the mirror
 * (mirror/mirror_model.h) on a job, then preloaded as its bytes arrive,
 * the GPU manager's copy threads waiting on the mirror for each chunk. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_manager.h"
#include "gpu_req.h"
#include "h_mirror_int.h"
#include "handlers.h"
#include "mirror_job.h"
#include "mirror_model.h"
#include "util.h"

/* A mirror's model as the GPU manager's source of bytes. */
struct model_source {
    struct gm_source base;     /* first: the manager hands this back */
    struct mirror_model *mm;
};

static int source_present(void *arg, const void *file, uint64_t off, uint64_t len)
{
    return mirror_model_present(arg, file, off, len);
}

static int source_wait(void *arg, const void *file, uint64_t off, uint64_t len,
                       const atomic_int *cancel, struct st_error *err)
{
    return mirror_model_wait(arg, file, off, len, cancel, err);
}

static void source_release(struct gm_source *s)
{
    struct model_source *ms = (struct model_source *)s;
    mirror_model_free(ms->mm);
    free(ms);
}

static struct gm_source *source_new(struct mirror_model *mm)
{
    struct model_source *ms = xcalloc(1, sizeof(*ms));
    ms->mm = mm;
    ms->base.gate = (struct gpu_gate){.present = source_present, .wait = source_wait, .arg = mm};
    ms->base.release = source_release;
    return &ms->base;
}

/* A mirror's POST body: one device, the whole model (its files arrive as
 * the load reads them, so no partition is planned from them). Returns the
 * device name (the caller frees it), or NULL with e. */
static char *mirror_device(const struct request_view *v, struct gpu_req_error *e)
{
    struct gpu_req_preload p;
    if (gpu_req_preload_parse(v->body ? v->body : "", v->body_len, &p, e) < 0)
        return NULL;
    char *device = p.device;
    if (!device || p.split.has_split) {
        *e = (struct gpu_req_error){.code = "bad_request", .http_status = HTTP_BAD_REQUEST,
                                    .message = "a mirrored model is preloaded whole on one "
                                               "device: {\"device\": D}, no \"devices\" or "
                                               "\"split\""};
        device = NULL;
    } else {
        p.device = NULL;
    }
    gpu_req_preload_free(&p);
    return device;
}

static struct answer *mirror_preload(const struct request_view *v, struct answer *a,
                                     const char *model)
{
    struct gpu_manager *gm = v->srv->gpu;
    struct gpu_req_error de;
    struct jsonw w = JSONW_INIT;
    char *device = mirror_device(v, &de);
    int status = 0, rc;
    if (!device)
        return handle_gpu_answer(a, -EINVAL, status, &w, &de);
    if (mirror_answer_refused(v, a, MD_TENSORD)) {
        free(device);
        return a;
    }
    if (!v->wait_job) {
        /* Loaded or loading already: that instance, without asking the upstream. */
        rc = gpu_req_preload_model(gm, model, device, NULL, NULL, &w, &status, &de);
        free(device);
        if (rc == 0 || de.http_status != HTTP_NOT_FOUND)
            return handle_gpu_answer(a, rc, status, &w, &de);
        struct mirror_wait mw = {.m = v->srv->mirror, .client = v->client, .kind = MW_MODEL,
                                 .repo = model};
        return mirror_answer_wait(a, &mw);
    }
    struct mirror_model *mm;
    struct st_error e;
    rc = mirror_job_model_take(v->wait_job, &mm, &e);
    if (rc < 0) {
        free(device);
        if (rc != -ECANCELED && e.code == ST_ERR_NOT_FOUND)
            return answer_error(a, HTTP_NOT_FOUND, "model_not_found", "%s", e.message);
        if (rc != -ECANCELED && e.code == ST_ERR_INVALID_ARGUMENT)
            return answer_error(a, HTTP_CONFLICT, "model_invalid", "%s", e.message);
        return mirror_answer_failed(a, MD_TENSORD, rc, &e);
    }
    struct gm_source *src = source_new(mm);
    rc = gpu_req_preload_model(gm, model, device, mirror_model_reg(mm), &src, &w, &status, &de);
    if (src) /* no new instance took it: the model goes */
        src->release(src);
    free(device);
    return handle_gpu_answer(a, rc, status, &w, &de);
}

struct answer *handle_mirror_gpu(const struct request_view *v, struct answer *a,
                                 const char *model)
{
    if (!v->srv->gpu)
        return answer_error(a, HTTP_SERVICE_UNAVAILABLE, "gpu_unavailable",
                            "GPU sharing is not running in this daemon");
    if (strcmp(v->method, "POST") != 0)
        return handle_gpu(v, a, model); /* GET, DELETE: the instance's by name */
    if (!v->wait_job && !view_preconditions_hold(v))
        return answer_error(a, HTTP_PRECONDITION_FAILED, "precondition_failed",
                            "If-Match or If-None-Match did not hold; nothing was done");
    return mirror_preload(v, a, model);
}
