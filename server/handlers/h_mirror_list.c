/* h_mirror_list: the mirror's part of GET /v1/models (server/handlers/h_meta.c
 * calls it): a row per repo the mirror knows (mirror/mirror_repos.h) with
 * what its cache holds of it, and the "mirror" object: its upstream, the
 * upstream's health, its cache. */
#include <string.h>

#include "gpu_doc.h"
#include "h_mirror.h"
#include "jsonw.h"
#include "mirror.h"
#include "mirror_health.h"
#include "mirror_repos.h"
#include "mirror_view.h"
#include "model_doc.h"

struct list_ctx {
    struct jsonw *w;
    struct server *srv;
    const struct reg_snapshot *reg;
};

static void repo_row(void *arg, const char *repo, const struct mirror_repo_state *s)
{
    struct list_ctx *c = arg;
    struct jsonw *w = c->w;
    if (reg_snapshot_find_model(c->reg, repo, strlen(repo)))
        return; /* the models root's model of that name is the one served */
    int64_t age;
    struct mirror_view *view = mirror_view_find(c->srv->mirror, repo, &age);
    const struct reg_model *rm = view ? mirror_model_reg(mirror_view_model(view)) : NULL;
    jsonw_obj(w);
    jsonw_kstr(w, "name", repo);
    jsonw_kstr(w, "source", "upstream");
    jsonw_kstr(w, "state", "ready");
    jsonw_kstr(w, "commit", s->commit);
    jsonw_ku64(w, "files", s->files);
    if (rm) {
        jsonw_kbool(w, "sharded", rm->sharded);
        jsonw_ku64(w, "tensors", rm->n_tensors);
        jsonw_ku64(w, "bytes", rm->tensor_bytes);
        model_doc_parameters(w, rm);
    } else {
        jsonw_ku64(w, "bytes", s->bytes);
    }
    jsonw_kobj(w, "cache");
    jsonw_ku64(w, "bytes", s->cached);
    jsonw_ku64(w, "total", s->bytes);
    jsonw_ku64(w, "files_known", s->files_known);
    jsonw_ku64(w, "files_complete", s->files_complete);
    jsonw_obj_end(w);
    jsonw_key(w, "gpu");
    gpu_doc_summary(c->srv->gpu, repo, w);
    jsonw_obj_end(w);
    mirror_view_unref(view);
}

void mirror_list_models(struct jsonw *w, struct server *srv, const struct reg_snapshot *reg)
{
    struct list_ctx c = {w, srv, reg};
    mirror_repos_each(srv->mirror, repo_row, &c);
}

void mirror_status(struct jsonw *w, struct server *srv)
{
    struct mirror *m = srv->mirror;
    struct mirror_stats st;
    struct mirror_health_state h;
    mirror_stats(m, &st);
    mirror_health_get(m, &h);
    jsonw_kobj(w, "mirror");
    jsonw_kstr(w, "upstream", st.upstream);
    jsonw_kbool(w, "upstream_up", h.up);
    jsonw_key(w, "last_success");
    if (h.last_success)
        jsonw_i64(w, h.last_success);
    else
        jsonw_null(w);
    jsonw_ku64(w, "consecutive_failures", h.failures);
    if (h.last_error[0])
        jsonw_kstr(w, "last_error", h.last_error);
    jsonw_ku64(w, "stale_answers", h.stale_answers);
    jsonw_kstr(w, "offline", srv->cfg->mirror_offline);
    jsonw_ku64(w, "stale_max_age", srv->cfg->mirror_stale_max_age);
    jsonw_kobj(w, "cache");
    jsonw_ku64(w, "bytes", st.bytes);
    jsonw_ku64(w, "max_bytes", st.max_bytes);
    jsonw_ku64(w, "in_use_bytes", st.in_use_bytes);
    jsonw_ku64(w, "files", st.files);
    jsonw_ku64(w, "partial_files", st.partial_files);
    jsonw_ku64(w, "hit_bytes", st.hit_bytes);
    jsonw_ku64(w, "miss_bytes", st.miss_bytes);
    jsonw_obj_end(w);
    jsonw_obj_end(w);
}
