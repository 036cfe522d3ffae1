/* gpu_instance: one instance of the GPU manager (gpu/gpu_manager_int.h):
 * built from a registry model (its shards' selections, gpu/gpu_part.h),
 * its references, retiring it, its views, and freeing it; and the table's
 * lookups (the current instance of a model, the bytes promised and held on
 * a device, the refused start-up preloads). It calls nothing else of the
 * manager. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "gpu_manager_int.h"
#include "gpu_part.h"
#include "jsonw.h"
#include "util.h"

void gm_instance_free(struct gm_instance *m)
{
    pthread_mutex_destroy(&m->text_lock);
    for (int i = 0; i < GM_TEXT_COUNT; i++)
        free(m->texts[i]);
    for (size_t i = 0; m->shards && i < m->n_shards; i++) {
        m->be->ops->free(m->be, &m->shards[i].a); /* a no-op where none was made */
        free(m->shards[i].file);
        if (m->shards[i].sel)
            gpu_select_free(m->shards[i].sel);
        free(m->shards[i].sel);
    }
    for (size_t i = 0; m->tensors && i < m->n_tensors; i++) {
        free(m->tensors[i].name);
        free(m->tensors[i].shape);
    }
    reg_model_unref(m->rm);
    if (m->source)
        m->source->release(m->source);
    free(m->shards);
    free(m->tensors);
    free(m->name);
    free(m->split);
    free(m);
}

struct gm_instance *do_gm_instance_unref(struct gpu_manager *gm, struct gm_instance *m)
{
    if (--m->refs > 0)
        return NULL;
    for (struct gm_instance **pp = &gm->models; *pp; pp = &(*pp)->next) {
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    }
    gm->freeing++;
    return m;
}

void gm_dispose(struct gpu_manager *gm, struct gm_instance *dead)
{
    if (!dead)
        return;
    gm_instance_free(dead);
    pthread_mutex_lock(&gm->lock);
    gm->freeing--;
    pthread_cond_broadcast(&gm->cond);
    pthread_mutex_unlock(&gm->lock);
}

uint64_t do_gm_promised(struct gpu_manager *gm, const struct gpu_backend *be, int dev,
                        const struct gm_instance *skip)
{
    uint64_t n = 0;
    for (const struct gm_instance *m = gm->models; m; m = m->next)
        if (m != skip && m->be == be && m->dev == dev && m->state == GM_LOADING &&
            !m->allocated && !m->waiting && !atomic_load(&m->cancel))
            n += m->need;
    return n;
}

uint64_t do_gm_held(struct gpu_manager *gm, const struct gpu_backend *be, int dev,
                    int allocated_only, const struct gm_instance *skip)
{
    uint64_t n = 0;
    for (const struct gm_instance *m = gm->models; m; m = m->next)
        if (m != skip && m->be == be && m->dev == dev && m->state != GM_FAILED &&
            !m->waiting && (m->allocated || (!allocated_only && !atomic_load(&m->cancel))))
            n += m->need;
    return n;
}

static uint64_t round_up(uint64_t n, uint64_t unit)
{
    return unit ? (n + unit - 1) / unit * unit : n;
}

static int is_shard(const struct reg_file *f)
{
    return f->is_safetensors && f->header && f->fd >= 0 && f->error.code == ST_OK;
}

int gm_instance_same_files(const struct gm_instance *m, const struct reg_model *rm)
{
    size_t k = 0;
    for (size_t i = 0; i < rm->n_files; i++) {
        const struct reg_file *f = &rm->files[i];
        if (!is_shard(f))
            continue;
        if (k >= m->n_shards)
            return 0;
        const struct gm_shard *s = &m->shards[k++];
        /* ctime too: a file rewritten in place with its mtime set back
         * (cp -p, rsync -t) is another version, as the registry sees it */
        if (strcmp(s->file, f->name) != 0 || !fileio_same_version(&s->st, &f->st))
            return 0;
    }
    return k == m->n_shards;
}

/* m's shards: one per valid safetensors file of rm (each with a selection
 * to fill when split); shard_of[i] is file i's shard, or SIZE_MAX. Returns 0
 * or -ENOMEM. */
static int add_shards(struct gm_instance *m, const struct reg_model *rm, int split,
                      size_t *shard_of)
{
    m->shards = calloc(rm->n_files ? rm->n_files : 1, sizeof(*m->shards));
    if (!m->shards)
        return -ENOMEM;
    for (size_t i = 0; i < rm->n_files; i++) {
        const struct reg_file *f = &rm->files[i];
        shard_of[i] = SIZE_MAX;
        if (!is_shard(f))
            continue;
        struct gm_shard *s = &m->shards[m->n_shards];
        s->a.fd = -1;
        s->file = strdup(f->name);
        if (!s->file || (split && !(s->sel = calloc(1, sizeof(*s->sel)))))
            return -ENOMEM;
        s->data_start = f->data_start;
        s->size = f->header->data_len;
        s->st = f->st;
        s->rf = f;
        shard_of[i] = m->n_shards++;
    }
    return 0;
}

/* Whether split, of a world of 1 (which cuts nothing), may be applied to
 * rt as POST .../fetch checks it: its rules matched within *budget, the
 * dims they name in range. Returns 0, or -errno with err. */
static int whole_split_fits(const struct fetch_req *split, const struct reg_tensor *rt,
                            uint64_t *budget, struct st_error *err)
{
    const struct st_tensor *t = rt->t;
    struct slice_plan plan;
    struct fetch_part part;
    return fetch_req_plan_tensor(split, t->name, t->name_len, NULL, 0, t->dtype, t->ndim,
                                 t->shape, budget, &plan, &part, err);
}

/* m's tensors: those of rm that live in a shard, whole, or (split, a world
 * above 1) the part of each the split cuts, each added to its shard's
 * selection in file order. Returns 0, or -errno with err. */
static int add_tensors(struct gm_instance *m, const struct reg_model *rm, const size_t *shard_of,
                       const struct fetch_req *split, struct st_error *err)
{
    uint64_t budget = FETCH_GLOB_BUDGET;
    m->tensors = calloc(rm->n_tensors ? rm->n_tensors : 1, sizeof(*m->tensors));
    if (!m->tensors)
        return st_error_fail(err, ST_ERR_NO_MEMORY, "no memory for an instance's tensors");
    for (size_t i = 0; i < rm->n_tensors; i++) {
        const struct reg_tensor *rt = &rm->tensors[i];
        size_t fi = (size_t)(rt->file - rm->files);
        if (fi >= rm->n_files || shard_of[fi] == SIZE_MAX)
            continue;
        struct gm_tensor *t = &m->tensors[m->n_tensors++];
        struct gpu_part_tensor pt = {.offset = rt->t->begin, .nbytes = rt->t->end - rt->t->begin,
                                     .ndim = rt->t->ndim};
        memcpy(pt.shape, rt->t->shape, rt->t->ndim * sizeof(pt.shape[0]));
        struct gm_shard *s = &m->shards[shard_of[fi]];
        if (s->sel ? gpu_part_add(s->sel, split, rt, &budget, &pt, err) < 0
                   : split && split->has_split && whole_split_fits(split, rt, &budget, err) < 0)
            return -EINVAL;
        t->name = strndup(rt->t->name, rt->t->name_len);
        t->shape = calloc(pt.ndim ? pt.ndim : 1, sizeof(*t->shape));
        if (!t->name || !t->shape)
            return st_error_fail(err, ST_ERR_NO_MEMORY, "no memory for an instance's tensors");
        t->dtype = rt->t->dtype;
        t->ndim = pt.ndim;
        memcpy(t->shape, pt.shape, pt.ndim * sizeof(*t->shape));
        t->alloc = (uint32_t)shard_of[fi];
        t->offset = pt.offset;
        t->nbytes = pt.nbytes;
        t->part = pt.part;
    }
    return 0;
}

/* split as the canonical JSON an instance keeps: {"world", "rank", "rules":
 * [{"match", "dim"}]}. NULL when memory runs out. */
static char *split_text(const struct fetch_req *split)
{
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    jsonw_ku64(&w, "world", split->world);
    jsonw_ku64(&w, "rank", split->rank);
    jsonw_karr(&w, "rules");
    for (size_t i = 0; i < split->n_rules; i++) {
        jsonw_obj(&w);
        jsonw_key(&w, "match");
        jsonw_strn(&w, split->rules[i].match, split->rules[i].match_len);
        jsonw_ki64(&w, "dim", split->rules[i].dim);
        jsonw_obj_end(&w);
    }
    jsonw_arr_end(&w);
    jsonw_obj_end(&w);
    return jsonw_take(&w, NULL);
}

int gm_instance_split(const struct gm_instance *m, struct fetch_req *out, struct st_error *err)
{
    memset(out, 0, sizeof(*out));
    return m->split ? fetch_req_parse_split(m->split, strlen(m->split), 1, out, err) : 0;
}

struct gm_instance *gm_instance_new(const struct gpu_manager *gm, const struct reg_model *rm,
                                    const struct gm_device *where, const struct fetch_req *split,
                                    struct st_error *err)
{
    /* legacy IPC keeps a second, cuMemAlloc copy of every shard */
    int copies = gm->opt.legacy_ipc && where->be->kind == DEVICE_CUDA ? 2 : 1;
    /* numpy.array_split into a world of 1 is the whole tensor: a split of
     * one rank is the whole model, its instance the whole model's */
    int is_split = split && split->has_split && split->world > 1;
    if (is_split && split->world > GM_MAX_WORLD) {
        st_error_fail(err, ST_ERR_SPLIT, "split.world %llu: a preload's world is at most %d "
                      "(workers name their rank below it)", (unsigned long long)split->world,
                      GM_MAX_WORLD);
        return NULL;
    }
    struct gm_instance *m = calloc(1, sizeof(*m));
    size_t *shard_of = m ? calloc(rm->n_files ? rm->n_files : 1, sizeof(*shard_of)) : NULL;
    if (!shard_of) {
        free(m);
        st_error_fail(err, ST_ERR_NO_MEMORY, "model %.200s: not enough memory for its instance",
                      rm->name);
        return NULL;
    }
    pthread_mutex_init(&m->text_lock, NULL);
    m->be = where->be;
    m->dev = where->dev;
    if (m->be->kind == DEVICE_HOST)
        snprintf(m->device, sizeof(m->device), "host");
    else
        snprintf(m->device, sizeof(m->device), "cuda:%d", m->be->devices[m->dev].index);
    m->state = GM_LOADING;
    m->world = is_split ? (unsigned)split->world : 1;
    m->rank = is_split ? (unsigned)split->rank : 0;
    m->name = strdup(rm->name);
    int rc = !m->name || (is_split && !(m->split = split_text(split))) ||
                     add_shards(m, rm, is_split, shard_of) < 0
                 ? st_error_fail(err, ST_ERR_NO_MEMORY, "model %.200s: not enough memory for "
                                 "its instance", rm->name)
                 : add_tensors(m, rm, shard_of, split, err);
    free(shard_of);
    if (rc < 0) {
        gm_instance_free(m);
        return NULL;
    }
    for (size_t i = 0; i < m->n_shards; i++) {
        struct gm_shard *s = &m->shards[i];
        s->bytes = s->sel ? s->sel->bytes : s->size;
        m->total += s->bytes;
        m->need += round_up(s->bytes ? s->bytes : 1, m->be->alloc_round);
    }
    m->need *= (uint64_t)copies;
    m->rm = reg_model_ref(rm);
    return m;
}

/* Takes m out of the checksum queue when it waits there (not when the
 * thread is summing it: that one sees `retired` and lets go itself). */
static void do_sums_unqueue(struct gpu_manager *gm, struct gm_instance *m)
{
    if (m->sums != GM_SUMS_PENDING || gm->summing == m)
        return;
    struct gm_instance *prev = NULL;
    for (struct gm_instance *q = gm->shead; q; prev = q, q = q->qnext) {
        if (q != m)
            continue;
        if (prev)
            prev->qnext = m->qnext;
        else
            gm->shead = m->qnext;
        if (gm->stail == m)
            gm->stail = prev;
        m->qnext = NULL;
        m->sums = GM_SUMS_UNAVAILABLE;
        snprintf(m->sums_error, sizeof(m->sums_error), "retired before they were summed");
        m->refs--;
        return;
    }
}

struct gm_instance *do_gm_instance_retire(struct gpu_manager *gm, struct gm_instance *m)
{
    m->current = 0;
    atomic_store(&m->retired, 1);
    do_sums_unqueue(gm, m);
    pthread_cond_broadcast(&gm->cond); /* the checksum thread, if it sums m */
    if (m->state == GM_LOADING)
        atomic_store(&m->cancel, 1);
    if (m->state != GM_FAILED)
        m->state = GM_DRAINING;
    if (m->waiting) { /* parked: no loader will drop its reference */
        m->waiting = 0;
        m->refs--;
    }
    return do_gm_instance_unref(gm, m);
}

/* The reload of the current instance m, as its view shows it. */
static void do_reload_view(const struct gm_instance *m, struct gm_reload_view *r)
{
    const struct gm_instance *n = m->next_gen;
    if (n) {
        *r = (struct gm_reload_view){.present = 1, .generation = n->generation,
                                     .state = GM_LOADING, .waiting = n->waiting,
                                     .leases = m->leases, .done = atomic_load(&n->done),
                                     .total = n->total, .need = n->need,
                                     .available = n->avail_seen};
    } else if (m->reload_failed_gen) {
        *r = (struct gm_reload_view){.present = 1, .generation = m->reload_failed_gen,
                                     .state = GM_FAILED};
        snprintf(r->error, sizeof(r->error), "%s", m->reload_error.message);
    }
}

void do_gm_view(struct gm_instance *m, struct gm_view *v)
{
    memset(v, 0, sizeof(*v));
    if (!m)
        return;
    m->refs++;
    v->inst = m;
    v->name = m->name;
    v->device = m->device;
    v->be = m->be;
    v->dev = m->dev;
    v->generation = m->generation;
    v->world = m->world;
    v->rank = m->rank;
    v->split = m->split;
    v->total = m->total;
    v->n_shards = m->n_shards;
    v->shards = m->shards;
    v->n_tensors = m->n_tensors;
    v->tensors = m->tensors;
    v->state = m->state;
    v->leases = m->leases;
    v->published = m->published;
    v->done = atomic_load(&m->done);
    v->t_start_ns = m->t_start_ns;
    v->t_end_ns = m->t_end_ns;
    if (m->t_end_ns) {
        v->verified = m->verified;
        v->io = m->io;
        for (int p = 0; p < GM_PHASE_COUNT; p++)
            v->phases[p] = (double)m->phase_ns[p] / 1e9;
    }
    v->sums = m->sums;
    memcpy(v->sums_error, m->sums_error, sizeof(v->sums_error));
    if (m->state == GM_FAILED)
        memcpy(v->error, m->error.message, sizeof(v->error));
    do_reload_view(m, &v->reload);
}

struct gm_instance *do_gm_find_current(struct gpu_manager *gm, const char *name,
                                       const struct gpu_backend *be, int dev, unsigned world,
                                       unsigned rank)
{
    for (struct gm_instance *m = gm->models; m; m = m->next)
        if (m->current && m->be == be && m->dev == dev && m->world == world &&
            m->rank == rank && strcmp(m->name, name) == 0)
            return m;
    return NULL;
}

int gm_instance_is(const struct gm_instance *m, const struct gm_which *which)
{
    return gm_which_holds(which, m->be, m->dev, m->world, m->rank);
}

void do_gm_refused_clear(struct gpu_manager *gm, const char *model)
{
    for (struct gm_refused **pp = &gm->refused; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->model, model) == 0) {
            struct gm_refused *r = *pp;
            *pp = r->next;
            free(r->model);
            free(r);
            return;
        }
    }
}

void do_gm_refused_set(struct gpu_manager *gm, const char *model, const char *device,
                       const char *reason)
{
    do_gm_refused_clear(gm, model);
    struct gm_refused *r = xcalloc(1, sizeof(*r));
    r->model = xstrdup(model);
    snprintf(r->device, sizeof(r->device), "%s", device);
    snprintf(r->reason, sizeof(r->reason), "%s", reason);
    r->next = gm->refused;
    gm->refused = r;
}

const struct gm_refused *do_gm_refused_find(struct gpu_manager *gm, const char *model)
{
    for (const struct gm_refused *r = gm->refused; r; r = r->next)
        if (strcmp(r->model, model) == 0)
            return r;
    return NULL;
}
