/* reg_repo: a repo's files and, once their hashes are known, its revision
 * (design in reg_repo.h).
 *
 * The revision is what Hugging Face clients key their caches on, so it is
 * derived from content alone and two replicas over the same files agree:
 *
 *   commit = SHA-1 over every file, in byte order of its path, of
 *            path NUL size-in-decimal NUL sha256-in-lowercase-hex LF
 *
 * Blob and tree ids are git's, for a repository whose LFS files (see
 * REG_REPO_LFS_MIN) are stored as LFS pointers, as on the Hub: a small
 * file's blob id is its git blob SHA-1, an LFS file's is that of its
 * pointer text, and a directory's is the git tree of its entries (mode
 * 100644 for every file). */
#include "reg_repo.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "digest.h"
#include "reg_model.h"
#include "shared_doc.h"
#include "strmap.h"
#include "util.h"

/* Builds repo `id` from its files ids[0..n) (names relative to the repo
 * directory, sorted or not): each is opened below root to make sure it may
 * be served, and closed. Returns a repo with one reference, or NULL when
 * memory ran out (the number of files is the directory's choice);
 * `transient` is set when an I/O or resource error kept a file from being
 * checked. */
static struct reg_repo *reg_repo_build(struct reg_root *root, const char *id,
                                       const struct reg_entry_id *ids, size_t n)
{
    struct reg_repo *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    atomic_init(&r->refs, 1);
    r->root = reg_root_ref(root);
    r->id = strdup(id);
    r->ids = reg_ids_sorted_copy(ids, n);
    r->n_ids = r->ids ? n : 0;
    r->files = calloc(n ? n : 1, sizeof(*r->files));
    if (!r->id || !r->ids || !r->files)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        struct reg_file *f = &r->files[r->n_files];
        char *path;
        int ok = -1;
        if (asprintf(&path, "%s/%s", id, r->ids[i].name) >= 0)
            ok = reg_file_open(root, path, r->ids[i].name, f, &r->transient);
        if (ok < 0)
            goto oom;
        if (ok == 0)
            continue;
        r->n_files++;
        if (f->fd >= 0) /* answers open it again */
            close(f->fd);
        f->fd = -1;
    }
    if (!(r->by_name = strmap_try_new(r->n_files)))
        goto oom;
    for (size_t i = 0; i < r->n_files; i++) {
        strmap_put(r->by_name, r->files[i].name, strlen(r->files[i].name), &r->files[i]);
        r->bytes += r->files[i].st.size;
    }
    return r;
oom:
    reg_repo_unref(r);
    return NULL;
}

struct reg_repo_walk {
    char *id;
    size_t prefix;               /* strlen(id) + 1: what to cut from a path to get a file's name */
    struct reg_entry_id *ids;    /* every regular file below it so far; names owned */
    size_t n, cap;
    size_t errors_at_start;      /* scan errors before the walk entered it */
    int no_memory;               /* a file could not be added: the repo is not built */
};

struct reg_repo_walk *reg_repo_walk_begin(const char *id, size_t errors)
{
    struct reg_repo_walk *w = xcalloc(1, sizeof(*w));
    w->id = xstrdup(id);
    w->prefix = strlen(id) + 1;
    w->errors_at_start = errors;
    return w;
}

void reg_repo_walk_add(struct reg_repo_walk *w, const char *rel, const char *name,
                       const struct fileio_stat *st)
{
    const char *below = strlen(rel) >= w->prefix ? rel + w->prefix : "";
    if (w->no_memory)
        return;
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        struct reg_entry_id *ids = realloc(w->ids, cap * sizeof(*ids));
        if (!ids) {
            w->no_memory = 1;
            return;
        }
        w->ids = ids;
        w->cap = cap;
    }
    char *full = NULL;
    if (below[0] ? asprintf(&full, "%s/%s", below, name) < 0 : !(full = strdup(name))) {
        w->no_memory = 1;
        return;
    }
    w->ids[w->n].name = full;
    w->ids[w->n].st = *st;
    w->n++;
}

struct reg_repo *reg_repo_walk_end(struct reg_repo_walk *w, struct reg_root *root,
                                   const struct reg_repo *old, size_t errors, int *transient)
{
    struct reg_repo *r = NULL;
    *transient = 0;
    reg_ids_sort(w->ids, w->n);
    if (!w->no_memory && old &&
        (errors > w->errors_at_start ||
         (!old->transient && reg_ids_same(old->ids, old->n_ids, w->ids, w->n)))) {
        r = reg_repo_ref(old);
    } else if (!w->no_memory && w->n && (r = reg_repo_build(root, w->id, w->ids, w->n))) {
        if (r->transient) {
            *transient = 1;
            if (old) {
                reg_repo_unref(r);
                r = reg_repo_ref(old);
            }
        }
        if (!r->n_files) {
            reg_repo_unref(r);
            r = NULL;
        }
    } else if (w->no_memory || w->n) { /* no memory for the list or the repo: as for an I/O
                                        * error, keep the previous one and retry */
        *transient = 1;
        r = old ? reg_repo_ref(old) : NULL;
    }
    reg_ids_free(w->ids, w->n);
    free(w->id);
    free(w);
    return r;
}

static void rev_free(struct reg_repo_rev *rev)
{
    if (!rev)
        return;
    for (size_t i = 0; i < rev->n_dirs; i++)
        free((char *)rev->dirs[i].path);
    free(rev->dirs);
    free(rev->blob);
    strmap_free(rev->by_dir);
    free(rev);
}

struct reg_repo *reg_repo_ref(const struct reg_repo *r)
{
    struct reg_repo *rr = (struct reg_repo *)r;
    if (rr)
        atomic_fetch_add_explicit(&rr->refs, 1, memory_order_relaxed);
    return rr;
}

void reg_repo_unref(const struct reg_repo *cr)
{
    struct reg_repo *r = (struct reg_repo *)cr;
    if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return;
    rev_free(atomic_load(&r->rev));
    for (int k = 0; k < REG_REPO_DOC_COUNT; k++)
        shared_doc_unref(atomic_load(&r->docs[k]));
    reg_files_free(r->files, r->n_files);
    reg_ids_free(r->ids, r->n_ids);
    strmap_free(r->by_name);
    reg_root_unref(r->root);
    free(r->id);
    free(r);
}

const struct reg_file *reg_repo_find_file(const struct reg_repo *r, const char *path, size_t len)
{
    return r ? strmap_get(r->by_name, path, len) : NULL;
}

struct shared_doc *reg_repo_doc(const struct reg_repo *r, enum reg_repo_doc_kind kind)
{
    return atomic_load_explicit(&((struct reg_repo *)r)->docs[kind], memory_order_acquire);
}

struct shared_doc *reg_repo_set_doc(const struct reg_repo *cr, enum reg_repo_doc_kind kind,
                                    struct shared_doc *d)
{
    struct reg_repo *r = (struct reg_repo *)cr;
    struct shared_doc *none = NULL;
    if (atomic_compare_exchange_strong_explicit(&r->docs[kind], &none, d, memory_order_acq_rel,
                                                memory_order_acquire))
        return d;
    shared_doc_unref(d);
    return none; /* the one set first */
}

const struct reg_file *reg_repo_unreadable(const struct reg_repo *r)
{
    for (size_t i = 0; i < r->n_files; i++)
        if (r->files[i].error.code != ST_OK)
            return &r->files[i];
    return NULL;
}

int reg_repo_file_is_lfs(const struct reg_file *f)
{
    return f->is_safetensors || f->st.size > REG_REPO_LFS_MIN || !f->has_git_sha1;
}

/* ---- the revision -------------------------------------------------------- */

/* git's id of an object: SHA-1 of "<type> <size>\0" and the content. */
static void git_object_id(const char *type, const void *p, size_t n, uint8_t out[20])
{
    char head[48];
    int k = snprintf(head, sizeof(head), "%s %zu", type, n);
    struct digest_sha1 *d = digest_sha1_new();
    digest_sha1_update(d, head, (size_t)k + 1);
    digest_sha1_update(d, p, n);
    digest_sha1_final(d, out);
}

static void blob_id(const struct reg_file *f, uint8_t out[20])
{
    if (!reg_repo_file_is_lfs(f)) {
        memcpy(out, f->git_sha1, 20);
        return;
    }
    char hex[65], ptr[200];
    digest_hex(f->sha256, 32, hex);
    int n = snprintf(ptr, sizeof(ptr),
                     "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %" PRIu64 "\n",
                     hex, f->st.size);
    git_object_id("blob", ptr, (size_t)n, out);
}

/* One entry of a git tree being built. */
struct tree_entry {
    const char *name;
    size_t len;
    int is_dir;
    const uint8_t *oid;
};

/* git's order: names compared bytewise, a directory's as if followed by '/'. */
static int cmp_tree_entry(const void *pa, const void *pb)
{
    const struct tree_entry *a = pa, *b = pb;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->name, b->name, n);
    if (c)
        return c;
    unsigned ca = a->len > n ? (unsigned char)a->name[n] : a->is_dir ? '/' : 0;
    unsigned cb = b->len > n ? (unsigned char)b->name[n] : b->is_dir ? '/' : 0;
    return (int)ca - (int)cb;
}

static int cmp_dir(const void *a, const void *b)
{
    return strcmp(((const struct reg_repo_dir *)a)->path, ((const struct reg_repo_dir *)b)->path);
}

/* The git tree id of dirs[d]: its files and its subdirectories (whose ids
 * are computed already: deeper paths come first in the caller's order). */
static void tree_id(const struct reg_repo *r, struct reg_repo_rev *rev, struct reg_repo_dir *d)
{
    size_t n = 0; /* at most one entry per file below d */
    struct tree_entry *e = xmalloc((d->end - d->first + 1) * sizeof(*e));
    size_t skip = d->len ? d->len + 1 : 0;
    for (size_t i = d->first; i < d->end; i++) {
        const char *rest = r->files[i].name + skip;
        const char *slash = strchr(rest, '/');
        if (!slash) {
            e[n++] = (struct tree_entry){rest, strlen(rest), 0, rev->blob[i]};
            continue;
        }
        /* A subdirectory: one entry for all its files, which are adjacent. */
        size_t sublen = (size_t)(slash - r->files[i].name);
        const struct reg_repo_dir *sub = reg_repo_find_dir(rev, r->files[i].name, sublen);
        e[n++] = (struct tree_entry){rest, (size_t)(slash - rest), 1, sub->tree};
        i = sub->end - 1;
    }
    qsort(e, n, sizeof(*e), cmp_tree_entry);
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += (e[i].is_dir ? 6 : 7) + e[i].len + 1 + 20;
    char *buf = xmalloc(total ? total : 1), *p = buf;
    for (size_t i = 0; i < n; i++) {
        memcpy(p, e[i].is_dir ? "40000 " : "100644 ", e[i].is_dir ? 6 : 7);
        p += e[i].is_dir ? 6 : 7;
        memcpy(p, e[i].name, e[i].len);
        p += e[i].len;
        *p++ = '\0';
        memcpy(p, e[i].oid, 20);
        p += 20;
    }
    git_object_id("tree", buf, total, d->tree);
    free(buf);
    free(e);
}

static size_t depth_of(const char *path)
{
    size_t n = path[0] != '\0';
    for (; *path; path++)
        n += *path == '/';
    return n;
}

static int cmp_depth_desc(const void *a, const void *b)
{
    size_t da = depth_of((*(struct reg_repo_dir *const *)a)->path);
    size_t db = depth_of((*(struct reg_repo_dir *const *)b)->path);
    return da < db ? 1 : da > db ? -1 : 0;
}

static struct reg_repo_rev *rev_compute(const struct reg_repo *r)
{
    struct reg_repo_rev *rev = xcalloc(1, sizeof(*rev));
    rev->blob = xcalloc(r->n_files ? r->n_files : 1, sizeof(*rev->blob));
    struct digest_sha1 *c = digest_sha1_new();
    struct strmap *seen = strmap_new(16);
    size_t cap = 16;
    rev->dirs = xcalloc(cap, sizeof(*rev->dirs));
    rev->dirs[rev->n_dirs++] = (struct reg_repo_dir){.path = xstrdup(""), .end = r->n_files};
    for (size_t i = 0; i < r->n_files; i++) {
        const struct reg_file *f = &r->files[i];
        char hex[65], size[24];
        digest_hex(f->sha256, 32, hex);
        int k = snprintf(size, sizeof(size), "%" PRIu64, f->st.size);
        digest_sha1_update(c, f->name, strlen(f->name) + 1);
        digest_sha1_update(c, size, (size_t)k + 1);
        digest_sha1_update(c, hex, 64);
        digest_sha1_update(c, "\n", 1);
        blob_id(f, rev->blob[i]);
        /* Every directory on its path: the files below one are adjacent in
         * byte order, from the first seen to the last. */
        for (const char *s = f->name; (s = strchr(s, '/')) != NULL; s++) {
            size_t len = (size_t)(s - f->name);
            size_t no = (uintptr_t)strmap_get(seen, f->name, len);
            if (!no) {
                rev->dirs = xgrow(rev->dirs, &cap, rev->n_dirs, sizeof(*rev->dirs), 16);
                rev->dirs[rev->n_dirs] = (struct reg_repo_dir){.path = xstrndup(f->name, len),
                                                               .len = len, .first = i};
                no = ++rev->n_dirs;
                strmap_put(seen, f->name, len, (void *)(uintptr_t)no);
            }
            rev->dirs[no - 1].end = i + 1;
        }
    }
    strmap_free(seen);
    uint8_t commit[20];
    digest_sha1_final(c, commit);
    digest_hex(commit, 20, rev->commit);
    qsort(rev->dirs, rev->n_dirs, sizeof(*rev->dirs), cmp_dir);
    rev->by_dir = strmap_new(rev->n_dirs);
    for (size_t i = 0; i < rev->n_dirs; i++)
        strmap_put(rev->by_dir, rev->dirs[i].path, rev->dirs[i].len, &rev->dirs[i]);
    /* Trees bottom-up: a directory's id needs its subdirectories'. */
    struct reg_repo_dir **order = xmalloc(rev->n_dirs * sizeof(*order));
    for (size_t i = 0; i < rev->n_dirs; i++)
        order[i] = &rev->dirs[i];
    qsort(order, rev->n_dirs, sizeof(*order), cmp_depth_desc);
    for (size_t i = 0; i < rev->n_dirs; i++)
        tree_id(r, rev, order[i]);
    free(order);
    return rev;
}

const struct reg_repo_rev *reg_repo_revision(const struct reg_repo *cr)
{
    struct reg_repo *r = (struct reg_repo *)cr;
    struct reg_repo_rev *rev = atomic_load_explicit(&r->rev, memory_order_acquire);
    if (rev)
        return rev;
    for (size_t i = 0; i < r->n_files; i++)
        if (!reg_file_hashed(&r->files[i]))
            return NULL;
    struct reg_repo_rev *mine = rev_compute(r), *expected = NULL;
    if (atomic_compare_exchange_strong_explicit(&r->rev, &expected, mine, memory_order_acq_rel,
                                                memory_order_acquire))
        return mine;
    rev_free(mine);
    return expected;
}

const struct reg_repo_dir *reg_repo_find_dir(const struct reg_repo_rev *rev, const char *path,
                                             size_t len)
{
    return rev ? strmap_get(rev->by_dir, path, len) : NULL;
}
