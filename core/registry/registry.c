/* registry: walks the models root into an immutable snapshot.
 *
 * Directories are listed, and every directory the walk enters is opened
 * below the root (core/base/beneath): a listing only says which names to try,
 * and what a name is, and whether it may be followed, is decided by opening
 * it. Each directory that directly holds a .safetensors file is a model
 * (core/registry/reg_model builds it). A rescan hands every model whose entries are
 * the same versions as before to the new snapshot unchanged, so a reload
 * costs what changed; and where an I/O or resource error (EMFILE, EIO, ...)
 * keeps a directory or a model from being read, the previous snapshot's
 * models stand in for what could not be read, and scan_errors tells the
 * caller to try again. Nothing here is fatal except a root that cannot be
 * read. */
#include "registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "beneath.h"
#include "reg_model.h"
#include "reg_repo.h"
#include "strmap.h"
#include "util.h"

#define REGISTRY_DEFAULT_DEPTH 16
#define REGISTRY_MAX_DEPTH 256 /* larger max_depth values are clamped (PATH_MAX stops sooner) */
#define ST_SUFFIX ".safetensors"

enum entry_kind { ENTRY_DIR, ENTRY_REG };

/* One directory entry worth trying: what stat says it is now. The open
 * decides; this only chooses which names a model is built from and lets a
 * rescan see that nothing changed without opening anything. */
struct entry {
    char *name;
    enum entry_kind kind;
    struct fileio_stat st;
};

struct dir_id {
    dev_t dev;
    ino_t ino;
};

struct scan {
    struct reg_root *root;
    const struct reg_snapshot *prev; /* the snapshot being replaced, or NULL */
    unsigned max_depth;
    struct dir_id *path;         /* directories from the root down to the current one */
    struct reg_model **models;
    size_t n_models, cap_models;
    int repos;                   /* collect repos (not for single_model) */
    struct reg_repo_walk *repo;  /* the repo the walk is in, or NULL */
    struct reg_repo **repo_list;
    size_t n_repos, cap_repos;
    char **lost;                 /* directories an I/O or resource error kept from being read */
    size_t n_lost, cap_lost;
    size_t errors, reused;
};

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

static void free_entries(struct entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(e[i].name);
    free(e);
}

static void add_model(struct scan *s, struct reg_model *m)
{
    s->models = xgrow(s->models, &s->cap_models, s->n_models, sizeof(*s->models), 64);
    s->models[s->n_models++] = m;
}

static void add_repo(struct scan *s, struct reg_repo *r)
{
    s->repo_list = xgrow(s->repo_list, &s->cap_repos, s->n_repos, sizeof(*s->repo_list), 64);
    s->repo_list[s->n_repos++] = r;
}

/* The walk left the repo's directory id: adds the repo (reg_repo_walk_end
 * says which object). */
static void repo_finish(struct scan *s, const char *id)
{
    const struct reg_repo *old = reg_snapshot_find_repo(s->prev, id, strlen(id));
    int transient = 0;
    struct reg_repo *r = reg_repo_walk_end(s->repo, s->root, old, s->errors, &transient);
    s->repo = NULL;
    s->errors += (size_t)transient;
    if (r)
        add_repo(s, r);
}

/* rel could not be read because of err: keep what the previous snapshot had
 * below it. */
static void lose(struct scan *s, const char *rel)
{
    s->errors++;
    s->lost = xgrow(s->lost, &s->cap_lost, s->n_lost, sizeof(*s->lost), 8);
    s->lost[s->n_lost++] = xstrdup(rel);
}

/* Lists dirfd's entries that are directories or regular files (after
 * following symlinks, which only the open will judge), hidden and non-UTF-8
 * names left out, sorted by name. Returns NULL when the directory could not
 * be read (*err the errno; ENOMEM when its listing did not fit in memory:
 * the directory's size is not ours to choose, so that never aborts). */
static struct entry *list_dir(int dirfd, size_t *n_out, int *err)
{
    size_t n = 0, cap = 16;
    *n_out = 0;
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        *err = errno;
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    rewinddir(d);
    struct entry *e = malloc(cap * sizeof(*e));
    struct dirent *de;
    if (!e) {
        closedir(d);
        *err = ENOMEM;
        return NULL;
    }
    for (;;) {
        errno = 0;
        if (!(de = readdir(d)))
            break;
        /* Names go into URLs and JSON verbatim: one that is not UTF-8 could
         * not be addressed or listed, so it is left out like a hidden one. */
        if (de->d_name[0] == '.' || !utf8_valid(de->d_name, strlen(de->d_name)))
            continue;
        struct stat sb;
        if (fstatat(dirfd, de->d_name, &sb, 0) != 0) {
            if (!reg_errno_transient(errno))
                continue; /* dangling, a loop of links, no permission: as if absent */
            break;
        }
        if (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode))
            continue; /* FIFOs, sockets, devices: never opened */
        struct entry *grown = n == cap ? realloc(e, 2 * cap * sizeof(*e)) : e;
        char *name = grown ? strdup(de->d_name) : NULL;
        if (!name) {
            e = grown ? grown : e;
            errno = ENOMEM;
            break;
        }
        if (n == cap)
            cap *= 2;
        e = grown;
        e[n].name = name;
        e[n].kind = S_ISDIR(sb.st_mode) ? ENTRY_DIR : ENTRY_REG;
        fileio_stat_from(&sb, &e[n].st);
        n++;
    }
    *err = errno;
    closedir(d);
    if (*err) {
        free_entries(e, n);
        return NULL;
    }
    qsort(e, n, sizeof(*e), cmp_entry);
    *n_out = n;
    return e;
}

/* Adds model `name` made of the regular files among e[0..n): the previous
 * snapshot's when it was built from the same versions of the same files, or
 * when building it again met an I/O or resource error. */
static void take_model(struct scan *s, const char *name, const char *dir, const struct entry *e,
                       size_t n)
{
    struct reg_entry_id *ids = calloc(n ? n : 1, sizeof(*ids));
    const struct reg_model *old = reg_snapshot_find_model(s->prev, name, strlen(name));
    if (!ids) { /* a resource error: keep the previous model, rescan later */
        s->errors++;
        if (old)
            add_model(s, reg_model_ref(old));
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i].kind == ENTRY_REG)
            ids[k++] = (struct reg_entry_id){.name = e[i].name, .st = e[i].st};
    if (old && !old->transient && reg_ids_same(old->ids, old->n_ids, ids, k)) {
        add_model(s, reg_model_ref(old));
        s->reused++;
    } else {
        struct reg_model *m = reg_model_build(s->root, name, dir, ids, k, NULL);
        if (!m->transient && !reg_model_has_safetensors(m)) {
            /* Every .safetensors entry led outside the root, or was not a
             * regular file once opened: not a model at all. */
            reg_model_unref(m);
            free(ids);
            return;
        }
        if (m->transient) {
            s->errors++;
            if (old && !old->transient) {
                reg_model_unref(m);
                m = reg_model_ref(old);
            }
        }
        add_model(s, m);
    }
    free(ids);
}

static int holds_safetensors(const struct entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (e[i].kind == ENTRY_REG && str_has_suffix(e[i].name, ST_SUFFIX))
            return 1;
    return 0;
}

static int on_path(const struct scan *s, unsigned depth, const struct stat *sb)
{
    for (unsigned i = 0; i <= depth; i++)
        if (s->path[i].dev == sb->st_dev && s->path[i].ino == sb->st_ino)
            return 1;
    return 0;
}

/* Walks the directory dirfd at rel (depth levels below the root). */
static void walk(struct scan *s, int dirfd, const char *rel, unsigned depth)
{
    size_t n;
    int err;
    struct entry *e = list_dir(dirfd, &n, &err);
    if (!e) {
        if (reg_errno_transient(err))
            lose(s, rel);
        return;
    }
    /* Repos (reg_repo.h): a depth-1 directory that directly holds a file,
     * or any directory below a depth-1 directory that holds none. */
    int starts_repo = 0;
    if (s->repos && !s->repo && (depth == 2 || depth == 1)) {
        starts_repo = depth == 2;
        for (size_t i = 0; i < n && !starts_repo; i++)
            starts_repo = e[i].kind == ENTRY_REG;
    }
    if (starts_repo)
        s->repo = reg_repo_walk_begin(rel, s->errors);
    for (size_t i = 0; s->repo && i < n; i++)
        if (e[i].kind == ENTRY_REG)
            reg_repo_walk_add(s->repo, rel, e[i].name, &e[i].st);
    if (depth == 0) {
        for (size_t i = 0; i < n; i++) {
            if (e[i].kind != ENTRY_REG || !str_has_suffix(e[i].name, ST_SUFFIX))
                continue;
            char *name = xstrndup(e[i].name, strlen(e[i].name) - strlen(ST_SUFFIX));
            take_model(s, name, "", &e[i], 1);
            free(name);
        }
    } else if (holds_safetensors(e, n)) {
        take_model(s, rel, rel, e, n);
    }
    for (size_t i = 0; i < n && depth < s->max_depth; i++) {
        if (e[i].kind != ENTRY_DIR)
            continue;
        char *sub = depth == 0 ? xstrdup(e[i].name) : xasprintf("%s/%s", rel, e[i].name);
        int fd = beneath_open(s->root->fd, s->root->path, sub,
                              O_RDONLY | O_DIRECTORY | O_NONBLOCK);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0) {
            int e2 = fd < 0 ? -fd : errno;
            if (reg_errno_transient(e2))
                lose(s, sub);
        } else if (!on_path(s, depth, &sb)) { /* a link back to a directory above: a loop */
            s->path[depth + 1].dev = sb.st_dev;
            s->path[depth + 1].ino = sb.st_ino;
            walk(s, fd, sub, depth + 1);
        }
        if (fd >= 0)
            close(fd);
        free(sub);
    }
    free_entries(e, n);
    if (starts_repo)
        repo_finish(s, rel);
}

/* Whether path (a model's directory or a repo's id) is one of the
 * directories that could not be read, or below one. */
static int lost_below(const struct scan *s, const char *path)
{
    for (size_t k = 0; k < s->n_lost; k++) {
        size_t n = strlen(s->lost[k]);
        if (n == 0 || (strncmp(path, s->lost[k], n) == 0 && (path[n] == '\0' || path[n] == '/')))
            return 1;
    }
    return 0;
}

static int cmp_model(const void *a, const void *b)
{
    return strcmp((*(const struct reg_model *const *)a)->name,
                  (*(const struct reg_model *const *)b)->name);
}

static int cmp_repo(const void *a, const void *b)
{
    return strcmp((*(const struct reg_repo *const *)a)->id, (*(const struct reg_repo *const *)b)->id);
}

/* The previous snapshot's models and repos below directories that could not
 * be read are kept, unless one of that name was found anyway. */
static void keep_lost(struct scan *s)
{
    if (!s->prev || !s->n_lost)
        return;
    struct strmap *seen = strmap_new(s->n_repos);
    for (size_t i = 0; i < s->n_repos; i++)
        strmap_put(seen, s->repo_list[i]->id, strlen(s->repo_list[i]->id), s->repo_list[i]);
    for (size_t i = 0; i < s->prev->n_repos; i++) {
        const struct reg_repo *r = s->prev->repos[i];
        if (!strmap_get(seen, r->id, strlen(r->id)) && lost_below(s, r->id))
            add_repo(s, reg_repo_ref(r));
    }
    strmap_free(seen);
    seen = strmap_new(s->n_models);
    for (size_t i = 0; i < s->n_models; i++)
        strmap_put(seen, s->models[i]->name, strlen(s->models[i]->name), s->models[i]);
    for (size_t i = 0; i < s->prev->n_models; i++) {
        const struct reg_model *m = s->prev->models[i];
        if (!strmap_get(seen, m->name, strlen(m->name)) && lost_below(s, m->dir))
            add_model(s, reg_model_ref(m));
    }
    strmap_free(seen);
}

/* Sorts the models and resolves NAME.safetensors at the root against a
 * directory model NAME: one invalid model NAME with the directory's files,
 * built afresh (the two may be reused, shared with the previous snapshot,
 * which must not change). Names are otherwise unique (distinct paths,
 * distinct root file names), so equal names come in pairs of one root file
 * model (dir "") and one directory model. */
static void settle_names(struct scan *s, struct reg_snapshot *r)
{
    if (s->n_models > 1)
        qsort(s->models, s->n_models, sizeof(*s->models), cmp_model);
    size_t out = 0;
    for (size_t i = 0; i < s->n_models; i++) {
        struct reg_model *m = s->models[i];
        if (out > 0 && strcmp(s->models[out - 1]->name, m->name) == 0) {
            struct reg_model *a = s->models[out - 1];
            struct reg_model *dirm = a->dir[0] ? a : m;
            struct st_error e;
            st_error_fail(&e, ST_ERR_NAME_CONFLICT,
                          "model \"%.200s\": both %.200s.safetensors at the root and directory %.200s/ hold a model",
                          m->name, m->name, m->name);
            s->models[out - 1] = reg_model_build(s->root, dirm->name, dirm->dir, dirm->ids,
                                                 dirm->n_ids, &e);
            reg_model_unref(a);
            reg_model_unref(m);
            continue;
        }
        s->models[out++] = m;
    }
    r->n_models = out;
    r->models = s->models;
    r->by_name = strmap_new(out);
    if (s->n_repos > 1)
        qsort(s->repo_list, s->n_repos, sizeof(*s->repo_list), cmp_repo);
    r->n_repos = s->n_repos;
    r->repos = s->repo_list;
    r->by_repo = strmap_new(s->n_repos);
    for (size_t i = 0; i < s->n_repos; i++) {
        strmap_put(r->by_repo, r->repos[i]->id, strlen(r->repos[i]->id), r->repos[i]);
        r->n_repo_files += r->repos[i]->n_files;
    }
    for (size_t i = 0; i < out; i++) {
        struct reg_model *m = r->models[i];
        strmap_put(r->by_name, m->name, strlen(m->name), m);
        r->n_files += m->n_files;
        r->n_tensors += m->n_tensors;
        r->n_invalid += m->state != MODEL_READY;
        for (size_t k = 0; k < m->n_files; k++) {
            r->bytes += m->files[k].st.size;
            r->n_open += m->files[k].fd >= 0;
        }
    }
}

struct reg_snapshot *reg_snapshot_scan(const char *root, uint64_t generation,
                                       const struct reg_scan_opts *opts, struct st_error *err)
{
    uint64_t t0 = time_mono_ns();
    const struct reg_snapshot *prev = opts ? opts->prev : NULL;
    struct reg_root *rr = reg_root_open(root, prev ? prev->root : NULL, err);
    if (!rr)
        return NULL;
    struct scan s = {
        .root = rr,
        .prev = prev,
        .max_depth = opts && opts->max_depth ? opts->max_depth : REGISTRY_DEFAULT_DEPTH,
        .repos = !(opts && opts->single_model),
    };
    if (s.max_depth > REGISTRY_MAX_DEPTH)
        s.max_depth = REGISTRY_MAX_DEPTH;
    s.path = xcalloc((size_t)s.max_depth + 1, sizeof(*s.path));
    s.path[0].dev = rr->dev;
    s.path[0].ino = rr->ino;
    if (opts && opts->single_model) {
        size_t n;
        int lerr;
        struct entry *e = list_dir(rr->fd, &n, &lerr);
        const char *base = strrchr(rr->path, '/');
        base = base && base[1] ? base + 1 : rr->path;
        if (e)
            take_model(&s, base, "", e, n);
        else
            lose(&s, "");
        free_entries(e, n);
    } else {
        walk(&s, rr->fd, "", 0);
    }
    free(s.path);
    if (s.n_lost == 1 && s.lost[0][0] == '\0' && !prev) {
        /* The root itself could not be listed and there is nothing to keep. */
        st_error_fail(err, ST_ERR_IO, "models root \"%.300s\": cannot list it", root);
    }
    keep_lost(&s);
    for (size_t i = 0; i < s.n_lost; i++)
        free(s.lost[i]);
    free(s.lost);

    struct reg_snapshot *r = xcalloc(1, sizeof(*r));
    atomic_init(&r->refs, 1);
    r->root = rr;
    r->generation = generation;
    r->scan_errors = s.errors;
    r->n_reused = s.reused;
    settle_names(&s, r);
    r->scan_ns = time_mono_ns() - t0;
    st_error_fail(err, ST_OK, "%s", ""); /* err may be NULL */
    return r;
}

int registry_dir_is_model(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
    int err;
    size_t n = 0;
    struct entry *e = fd >= 0 ? list_dir(fd, &n, &err) : NULL;
    int found = e && holds_safetensors(e, n);
    free_entries(e, n);
    if (fd >= 0)
        close(fd);
    return found;
}

const struct reg_model *reg_snapshot_find_model(const struct reg_snapshot *r, const char *name,
                                                size_t len)
{
    return r ? strmap_get(r->by_name, name, len) : NULL;
}

const struct reg_repo *reg_snapshot_find_repo(const struct reg_snapshot *r, const char *id,
                                              size_t len)
{
    return r && r->by_repo ? strmap_get(r->by_repo, id, len) : NULL;
}

struct reg_snapshot *reg_snapshot_ref(struct reg_snapshot *r)
{
    if (r)
        atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    return r;
}

void reg_snapshot_unref(struct reg_snapshot *r)
{
    if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (size_t i = 0; i < r->n_models; i++)
        reg_model_unref(r->models[i]);
    free(r->models);
    strmap_free(r->by_name);
    for (size_t i = 0; i < r->n_repos; i++)
        reg_repo_unref(r->repos[i]);
    free(r->repos);
    strmap_free(r->by_repo);
    reg_root_unref(r->root);
    free(r);
}

void registry_init(struct registry *h, struct reg_snapshot *initial)
{
    pthread_mutex_init(&h->lock, NULL);
    h->cur = initial;
}

struct reg_snapshot *registry_acquire(struct registry *h)
{
    pthread_mutex_lock(&h->lock);
    struct reg_snapshot *r = reg_snapshot_ref(h->cur);
    pthread_mutex_unlock(&h->lock);
    return r;
}

void registry_swap(struct registry *h, struct reg_snapshot *next)
{
    pthread_mutex_lock(&h->lock);
    struct reg_snapshot *old = h->cur;
    h->cur = next;
    pthread_mutex_unlock(&h->lock);
    reg_snapshot_unref(old); /* outside the lock: freeing closes many fds */
}

void registry_destroy(struct registry *h)
{
    reg_snapshot_unref(h->cur);
    h->cur = NULL;
    pthread_mutex_destroy(&h->lock);
}
