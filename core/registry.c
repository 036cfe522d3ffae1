/* registry: walks the models root into an immutable snapshot.
 *
 * The walk opens every directory with openat and every served file with
 * fileio_open_regular, so nothing is resolved twice by path except symlinks,
 * whose targets are resolved with realpath and must stay inside the root.
 * Each model is then validated on its own: headers, the index if sharded and
 * the cross-checks between them. Nothing here is fatal except a root that
 * cannot be opened. */
#include "registry.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "st_index.h"
#include "strmap.h"
#include "util.h"

#define REGISTRY_DEFAULT_DEPTH 16
#define REGISTRY_MAX_DEPTH 256 /* larger max_depth values are clamped (PATH_MAX stops sooner) */
#define ST_SUFFIX ".safetensors"
/* A safetensors file's prefix and header are kept in memory up to this size,
 * so reads of them are answered without touching the file (a typical
 * shard's header is 20-200 KB; a huge one is served from the file). */
#define REGISTRY_HEAD_KEEP_MAX (1u << 20)
#define INDEX_SUFFIX ".safetensors.index.json"

enum entry_kind { ENTRY_SKIP, ENTRY_DIR, ENTRY_REG };

/* One directory entry worth keeping. */
struct entry {
    char *name;
    enum entry_kind kind;
    char *target; /* symlinks only: the target relative to the root ("." for the root) */
};

struct dir_id {
    dev_t dev;
    ino_t ino;
};

struct scan {
    const char *root; /* realpath */
    size_t rootlen;
    int rootfd;
    unsigned max_depth;
    struct dir_id *path; /* directories from the root down to the current one */
    struct reg_model **models;
    size_t n_models, cap_models;
};

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && memcmp(s + n - k, suffix, k) == 0;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

static void free_entries(struct entry *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(e[i].name);
        free(e[i].target);
    }
    free(e);
}

static int inside_root(const struct scan *s, const char *real)
{
    if (s->rootlen == 1) /* the root is "/" */
        return 1;
    return strncmp(real, s->root, s->rootlen) == 0 &&
           (real[s->rootlen] == '/' || real[s->rootlen] == '\0');
}

static enum entry_kind kind_of(mode_t mode)
{
    if (S_ISDIR(mode))
        return ENTRY_DIR;
    if (S_ISREG(mode))
        return ENTRY_REG;
    return ENTRY_SKIP; /* FIFOs, sockets, devices: never opened */
}

/* Classifies dirfd/name (rel is the directory's path below the root). A
 * symlink counts as what it points to when realpath keeps it inside the
 * root; then *target is set to that path relative to the root. */
static enum entry_kind classify(const struct scan *s, int dirfd, const char *rel,
                                const char *name, char **target)
{
    struct stat sb;
    *target = NULL;
    if (fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
        return ENTRY_SKIP;
    if (!S_ISLNK(sb.st_mode))
        return kind_of(sb.st_mode);
    char *full = rel[0] ? xasprintf("%s/%s/%s", s->root, rel, name)
                        : xasprintf("%s/%s", s->root, name);
    char *real = realpath(full, NULL);
    free(full);
    if (!real)
        return ENTRY_SKIP; /* dangling or a loop of links */
    enum entry_kind k = ENTRY_SKIP;
    if (inside_root(s, real) && stat(real, &sb) == 0) {
        k = kind_of(sb.st_mode);
        const char *r = real + (s->rootlen == 1 ? 1 : s->rootlen + (real[s->rootlen] == '/'));
        if (k != ENTRY_SKIP)
            *target = xstrdup(r[0] ? r : ".");
    }
    free(real);
    return k;
}

/* Reads dirfd's entries (hidden or non-UTF-8 names and anything not a directory or
 * regular file left out), sorted by name. */
static struct entry *list_dir(const struct scan *s, int dirfd, const char *rel, size_t *n_out)
{
    size_t n = 0, cap = 16;
    struct entry *e = xmalloc(cap * sizeof(*e));
    *n_out = 0;
    int fd = dup(dirfd);
    if (fd < 0)
        return e;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return e;
    }
    rewinddir(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        /* Names go into URLs and JSON verbatim: one that is not UTF-8 could
         * not be addressed or listed, so it is left out like a hidden one. */
        if (de->d_name[0] == '.' || !utf8_valid(de->d_name, strlen(de->d_name)))
            continue;
        char *target;
        enum entry_kind k = classify(s, dirfd, rel, de->d_name, &target);
        if (k == ENTRY_SKIP)
            continue;
        if (n == cap) {
            cap *= 2;
            e = xrealloc(e, cap * sizeof(*e));
        }
        e[n].name = xstrdup(de->d_name);
        e[n].kind = k;
        e[n].target = target;
        n++;
    }
    closedir(d);
    qsort(e, n, sizeof(*e), cmp_entry);
    *n_out = n;
    return e;
}

static void add_model(struct scan *s, struct reg_model *m)
{
    if (s->n_models == s->cap_models) {
        s->cap_models = s->cap_models ? s->cap_models * 2 : 64;
        s->models = xrealloc(s->models, s->cap_models * sizeof(*s->models));
    }
    s->models[s->n_models++] = m;
}

/* Opens one served file and, for a .safetensors file, validates its header.
 * A failure is recorded in f->error. */
static void open_file(const struct scan *s, struct reg_file *f, int dirfd, const struct entry *e)
{
    memset(f, 0, sizeof(*f));
    f->name = xstrdup(e->name);
    f->is_safetensors = has_suffix(e->name, ST_SUFFIX);
    f->fd = e->target ? fileio_open_regular(s->rootfd, e->target, &f->st)
                      : fileio_open_regular(dirfd, e->name, &f->st);
    if (f->fd < 0) {
        st_error_set(&f->error, ST_ERR_IO, "%s: open: %s", e->name, strerror(-f->fd));
        f->fd = -1;
        return;
    }
    fileio_etag(&f->st, f->etag);
    f->error.code = ST_OK;
    if (f->is_safetensors) {
        if (st_header_read_fd(f->fd, f->name, REGISTRY_HEAD_KEEP_MAX, &f->header, &f->error) == ST_OK)
            f->data_start = ST_PREFIX_LEN + f->header->header_len;
        else
            f->header = NULL;
    }
}

/* Marks m invalid. The first error wins. Users see the message inside JSON,
 * so a message cut short (by "%.200s" or the buffer's end) in the middle of
 * a UTF-8 sequence is shortened to the last whole character. */
static void set_invalid(struct reg_model *m, const struct st_error *e)
{
    if (m->state == MODEL_INVALID)
        return;
    m->state = MODEL_INVALID;
    m->error = *e;
    size_t n = strlen(m->error.message);
    while (n > 0 && !utf8_valid(m->error.message, n))
        m->error.message[--n] = '\0';
}

/* The model's message for an invalid file: the file's own message, which
 * st_header starts with the file's name, prefixed with it if it does not. */
static void shard_invalid(struct reg_model *m, const struct reg_file *f)
{
    struct st_error e;
    size_t n = strlen(f->name);
    /* Out of memory says nothing about the file: the model keeps that code. */
    enum st_status code = f->error.code == ST_ERR_NO_MEMORY ? ST_ERR_NO_MEMORY : ST_ERR_SHARD_INVALID;
    if (strncmp(f->error.message, f->name, n) == 0 && f->error.message[n] == ':')
        st_error_set(&e, code, "%s", f->error.message);
    else
        st_error_set(&e, code, "%s: %s", f->name, f->error.message);
    set_invalid(m, &e);
}

/* Marks m invalid because the memory for its n tensors (the count its
 * files chose) could not be had. The message names `file`, or when that is
 * NULL the file holding the most of them. */
static void tensors_out_of_memory(struct reg_model *m, const char *file, size_t n)
{
    struct st_error e;
    size_t most = 0;
    for (size_t i = 0; !file && i < m->n_files; i++)
        if (m->files[i].header && m->files[i].header->n_tensors >= most) {
            most = m->files[i].header->n_tensors;
            file = m->files[i].name;
        }
    st_error_set(&e, ST_ERR_NO_MEMORY, "%s: not enough memory to index the model's %zu tensors",
                 file ? file : m->name, n);
    set_invalid(m, &e);
}

/* Reads and parses the index file f. On failure f->error holds the reason. */
static struct st_index *load_index(struct reg_file *f)
{
    struct st_index *idx = NULL;
    if (f->fd < 0)
        return NULL;
    if (f->st.size > ST_INDEX_MAX_LEN) {
        st_error_set(&f->error, ST_ERR_INDEX_JSON, "%s: index is %llu bytes, more than the %llu allowed",
                     f->name, (unsigned long long)f->st.size, (unsigned long long)ST_INDEX_MAX_LEN);
        return NULL;
    }
    char *buf = malloc(f->st.size + 1); /* up to 100 MB, the file's choice: fallible */
    if (!buf) {
        st_error_set(&f->error, ST_ERR_NO_MEMORY, "%s: not enough memory to read the %llu-byte index",
                     f->name, (unsigned long long)f->st.size);
        return NULL;
    }
    int rc = fileio_pread_full(f->fd, buf, f->st.size, 0);
    if (rc != 0)
        st_error_set(&f->error, ST_ERR_IO, "%s: read: %s", f->name, strerror(-rc));
    else
        st_index_parse(buf, f->st.size, f->name, &idx, &f->error);
    free(buf);
    return idx;
}

static void add_tensors(struct reg_model *m, const struct reg_file *f, size_t *n)
{
    for (size_t i = 0; i < f->header->n_tensors; i++) {
        m->tensors[*n].t = &f->header->tensors[i];
        m->tensors[*n].file = f;
        (*n)++;
    }
}

/* Sharded: the index names the shards, and each tensor's shard must hold it
 * and hold nothing else. Returns 0 or -1 with m invalid. */
static int check_sharded(struct reg_model *m, const struct st_index *idx, const char *index_name)
{
    struct st_error e;
    int rc = -1;
    /* Sized by the files, so fallible; each map is sized for all it will
     * hold, so the strmap_put calls below never allocate. */
    struct strmap *mapped = strmap_try_new(idx->n_entries); /* tensor -> shard name */
    struct strmap **held = calloc(idx->n_shards, sizeof(*held)); /* per shard: tensor -> st_tensor */
    const struct reg_file **shard_file = calloc(idx->n_shards, sizeof(*shard_file));
    struct strmap *shard_no = strmap_try_new(idx->n_shards); /* shard name -> index + 1 */
    size_t total = 0;
    if (!mapped || !held || !shard_file || !shard_no)
        goto oom;

    for (size_t i = 0; i < idx->n_shards; i++) {
        const char *sh = idx->shards[i];
        const struct reg_file *f = strmap_get(m->by_file, sh, strlen(sh));
        if (!f || !f->is_safetensors || !f->header) {
            st_error_set(&e, ST_ERR_SHARD_MISSING, "%s: shard \"%.200s\" %s", index_name, sh,
                         !f ? "does not exist" : "is not a .safetensors file");
            set_invalid(m, &e);
            goto done;
        }
        shard_file[i] = f;
        strmap_put(shard_no, sh, strlen(sh), (void *)(uintptr_t)(i + 1));
        held[i] = strmap_try_new(f->header->n_tensors);
        if (!held[i])
            goto oom;
        for (size_t k = 0; k < f->header->n_tensors; k++) {
            const struct st_tensor *t = &f->header->tensors[k];
            strmap_put(held[i], t->name, t->name_len, (void *)t);
        }
        total += f->header->n_tensors;
    }
    for (size_t i = 0; i < idx->n_entries; i++) {
        const struct st_index_entry *en = &idx->entries[i];
        size_t no = (uintptr_t)strmap_get(shard_no, en->shard, strlen(en->shard));
        if (!strmap_get(held[no - 1], en->tensor, strlen(en->tensor))) {
            st_error_set(&e, ST_ERR_TENSOR_NOT_IN_SHARD,
                         "%s: tensor \"%.200s\" is mapped to shard \"%.200s\" which does not hold it",
                         index_name, en->tensor, en->shard);
            set_invalid(m, &e);
            goto done;
        }
        strmap_put(mapped, en->tensor, strlen(en->tensor), (void *)en->shard);
    }
    for (size_t i = 0; i < idx->n_shards; i++) {
        const struct st_header *h = shard_file[i]->header;
        for (size_t k = 0; k < h->n_tensors; k++) {
            const char *want = strmap_get(mapped, h->tensors[k].name, h->tensors[k].name_len);
            if (want != idx->shards[i]) {
                st_error_set(&e, ST_ERR_TENSOR_NOT_IN_INDEX,
                             "%s: shard \"%.200s\" holds tensor \"%.200s\" which the index %s%.200s%s",
                             index_name, idx->shards[i], h->tensors[k].name,
                             want ? "maps to \"" : "does not map",
                             want ? want : "", want ? "\"" : "");
                set_invalid(m, &e);
                goto done;
            }
        }
    }
    /* Every entry found in its shard and every shard tensor mapped to it:
     * the counts agree and names are unique. Files are sorted by name, so
     * walking them in order gives (file, begin) order. */
    m->tensors = malloc((total ? total : 1) * sizeof(*m->tensors));
    if (!m->tensors)
        goto oom;
    size_t n = 0;
    for (size_t i = 0; i < m->n_files; i++) {
        const char *name = m->files[i].name;
        if (m->files[i].header && strmap_get(shard_no, name, strlen(name)))
            add_tensors(m, &m->files[i], &n);
    }
    m->n_tensors = n;
    rc = 0;
    goto done;
oom:
    tensors_out_of_memory(m, index_name, idx->n_entries);
done:
    for (size_t i = 0; held && i < idx->n_shards; i++)
        strmap_free(held[i]);
    free(held);
    free(shard_file);
    strmap_free(shard_no);
    strmap_free(mapped);
    return rc;
}

/* Unsharded: every .safetensors file contributes its tensors. */
static void collect_unsharded(struct reg_model *m)
{
    size_t total = 0;
    for (size_t i = 0; i < m->n_files; i++)
        if (m->files[i].header)
            total += m->files[i].header->n_tensors;
    m->tensors = malloc((total ? total : 1) * sizeof(*m->tensors));
    if (!m->tensors) {
        tensors_out_of_memory(m, NULL, total);
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < m->n_files; i++)
        if (m->files[i].header)
            add_tensors(m, &m->files[i], &n);
    m->n_tensors = n;
}

/* Builds by_tensor; fails on a name held by two files (unsharded models:
 * the sharded checks already exclude it). */
static int index_tensors(struct reg_model *m)
{
    m->by_tensor = strmap_try_new(m->n_tensors); /* sized: the puts never allocate */
    if (!m->by_tensor) {
        tensors_out_of_memory(m, NULL, m->n_tensors);
        return -1;
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        const struct reg_tensor *t = &m->tensors[i];
        if (strmap_put(m->by_tensor, t->t->name, t->t->name_len, (void *)t) != 0) {
            const struct reg_tensor *o = strmap_get(m->by_tensor, t->t->name, t->t->name_len);
            struct st_error e;
            st_error_set(&e, ST_ERR_DUPLICATE_TENSOR, "tensor \"%.200s\" is in both %.120s and %.120s",
                         t->t->name, o->file->name, t->file->name);
            set_invalid(m, &e);
            return -1;
        }
    }
    return 0;
}

static void drop_tensors(struct reg_model *m)
{
    free(m->tensors);
    m->tensors = NULL;
    m->n_tensors = 0;
    m->tensor_bytes = 0;
    strmap_free(m->by_tensor);
    m->by_tensor = strmap_new(0);
}

/* Validates m (files already opened and headers read) and fills its tensors. */
static void validate_model(struct reg_model *m)
{
    struct st_error e;
    struct reg_file *index = NULL;
    size_t n_index = 0;
    for (size_t i = 0; i < m->n_files; i++) {
        if (has_suffix(m->files[i].name, INDEX_SUFFIX)) {
            if (n_index++ == 0)
                index = &m->files[i];
            else {
                st_error_set(&e, ST_ERR_MULTIPLE_INDEXES, "%s and %s are both indexes", index->name,
                             m->files[i].name);
                set_invalid(m, &e);
            }
        }
    }
    m->sharded = n_index > 0;
    struct st_index *idx = NULL;
    if (n_index == 1) {
        m->index_file = index;
        idx = load_index(index);
        if (!idx)
            set_invalid(m, &index->error);
    }
    for (size_t i = 0; i < m->n_files; i++)
        if (m->files[i].is_safetensors && m->files[i].error.code != ST_OK)
            shard_invalid(m, &m->files[i]);
    if (m->state == MODEL_READY) {
        if (idx) {
            if (check_sharded(m, idx, index->name) == 0)
                index_tensors(m);
        } else {
            collect_unsharded(m);
            index_tensors(m);
        }
    }
    st_index_free(idx);
    if (m->state != MODEL_READY) {
        drop_tensors(m);
        return;
    }
    for (size_t i = 0; i < m->n_tensors; i++)
        m->tensor_bytes += m->tensors[i].t->end - m->tensors[i].t->begin;
}

/* A model from entries of dirfd (only the regular files among them are
 * used). dirfd is owned by the model from now on. */
static struct reg_model *build_model(const struct scan *s, const char *name, int dirfd,
                                     const struct entry *e, size_t n)
{
    struct reg_model *m = xcalloc(1, sizeof(*m));
    m->name = xstrdup(name);
    m->dirfd = dirfd;
    m->state = MODEL_READY;
    m->files = xcalloc(n ? n : 1, sizeof(*m->files));
    for (size_t i = 0; i < n; i++)
        if (e[i].kind == ENTRY_REG)
            open_file(s, &m->files[m->n_files++], dirfd, &e[i]);
    m->by_file = strmap_new(m->n_files);
    for (size_t i = 0; i < m->n_files; i++)
        strmap_put(m->by_file, m->files[i].name, strlen(m->files[i].name), &m->files[i]);
    validate_model(m);
    return m;
}

static int on_path(const struct scan *s, unsigned depth, const struct stat *sb)
{
    for (unsigned i = 0; i <= depth; i++)
        if (s->path[i].dev == sb->st_dev && s->path[i].ino == sb->st_ino)
            return 1;
    return 0;
}

/* Walks the directory dirfd at rel (depth levels below the root). Takes
 * ownership of dirfd: a model keeps it, otherwise it is closed. */
static void walk(struct scan *s, int dirfd, const char *rel, unsigned depth)
{
    size_t n;
    struct entry *e = list_dir(s, dirfd, rel, &n);
    int is_model = 0;
    if (depth == 0) {
        for (size_t i = 0; i < n; i++) {
            if (e[i].kind != ENTRY_REG || !has_suffix(e[i].name, ST_SUFFIX))
                continue;
            char *name = xstrndup(e[i].name, strlen(e[i].name) - strlen(ST_SUFFIX));
            add_model(s, build_model(s, name, s->rootfd, &e[i], 1));
            free(name);
        }
    } else {
        for (size_t i = 0; i < n && !is_model; i++)
            is_model = e[i].kind == ENTRY_REG && has_suffix(e[i].name, ST_SUFFIX);
        if (is_model)
            add_model(s, build_model(s, rel, dirfd, e, n));
    }
    for (size_t i = 0; i < n && depth < s->max_depth; i++) {
        if (e[i].kind != ENTRY_DIR)
            continue;
        int fd = e[i].target
                     ? openat(s->rootfd, e[i].target, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK)
                     : openat(dirfd, e[i].name,
                              O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
        if (fd < 0)
            continue;
        struct stat sb;
        if (fstat(fd, &sb) != 0 || on_path(s, depth, &sb)) {
            close(fd); /* a symlink back to a directory above: a loop */
            continue;
        }
        s->path[depth + 1].dev = sb.st_dev;
        s->path[depth + 1].ino = sb.st_ino;
        char *sub = depth == 0 ? xstrdup(e[i].name) : xasprintf("%s/%s", rel, e[i].name);
        walk(s, fd, sub, depth + 1);
        free(sub);
    }
    free_entries(e, n);
    if (depth > 0 && !is_model)
        close(dirfd);
}

static void free_model(struct reg_model *m, int rootfd)
{
    for (int k = 0; k < REG_DOC_COUNT; k++)
        free(atomic_load(&m->docs[k].text));
    for (size_t i = 0; i < m->n_files; i++) {
        if (m->files[i].fd >= 0)
            close(m->files[i].fd);
        st_header_free(m->files[i].header);
        free(m->files[i].name);
    }
    free(m->files);
    free(m->tensors);
    strmap_free(m->by_tensor);
    strmap_free(m->by_file);
    if (m->dirfd >= 0 && m->dirfd != rootfd)
        close(m->dirfd);
    free(m->name);
    free(m);
}

static int cmp_model(const void *a, const void *b)
{
    return strcmp((*(const struct reg_model *const *)a)->name,
                  (*(const struct reg_model *const *)b)->name);
}

/* Sorts the models and resolves NAME.safetensors at the root against a
 * directory model NAME: one invalid model NAME with the directory's files.
 * Names are otherwise unique (distinct paths, distinct root file names), so
 * equal names come in pairs of one root file model (dirfd == rootfd) and one
 * directory model. */
static void settle_names(struct scan *s, struct registry *r)
{
    if (s->n_models > 1)
        qsort(s->models, s->n_models, sizeof(*s->models), cmp_model);
    size_t out = 0;
    for (size_t i = 0; i < s->n_models; i++) {
        struct reg_model *m = s->models[i];
        if (out > 0 && strcmp(s->models[out - 1]->name, m->name) == 0) {
            struct reg_model *keep = s->models[out - 1];
            if (keep->dirfd == s->rootfd) {
                s->models[out - 1] = m;
                m = keep;
                keep = s->models[out - 1];
            }
            struct st_error e;
            st_error_set(&e, ST_ERR_NAME_CONFLICT,
                         "model \"%.200s\": both %.200s.safetensors at the root and directory %.200s/ hold a model",
                         m->name, m->name, m->name);
            keep->state = MODEL_READY; /* so the conflict, not an earlier error, is the reason */
            set_invalid(keep, &e);
            drop_tensors(keep);
            free_model(m, s->rootfd);
            continue;
        }
        s->models[out++] = m;
    }
    s->n_models = out;
    r->n_models = out;
    r->models = s->models;
    r->by_name = strmap_new(out);
    for (size_t i = 0; i < out; i++) {
        struct reg_model *m = r->models[i];
        strmap_put(r->by_name, m->name, strlen(m->name), m);
        r->n_files += m->n_files;
        r->n_tensors += m->n_tensors;
        r->n_invalid += m->state != MODEL_READY;
        for (size_t k = 0; k < m->n_files; k++)
            r->bytes += m->files[k].st.size;
    }
}

struct registry *registry_scan(const char *root, uint64_t generation,
                               const struct registry_scan_opts *opts, struct st_error *err)
{
    uint64_t t0 = time_mono_ns();
    char *real = realpath(root, NULL);
    if (!real) {
        st_error_set(err, ST_ERR_IO, "models root \"%.300s\": %s", root, strerror(errno));
        return NULL;
    }
    int rootfd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
    struct stat sb;
    if (rootfd < 0 || fstat(rootfd, &sb) != 0) {
        st_error_set(err, ST_ERR_IO, "models root \"%.300s\": %s", root, strerror(errno));
        if (rootfd >= 0)
            close(rootfd);
        free(real);
        return NULL;
    }
    struct registry *r = xcalloc(1, sizeof(*r));
    atomic_init(&r->refs, 1);
    r->root = real;
    r->rootfd = rootfd;
    r->generation = generation;

    struct scan s = {
        .root = real,
        .rootlen = strlen(real),
        .rootfd = rootfd,
        .max_depth = opts && opts->max_depth ? opts->max_depth : REGISTRY_DEFAULT_DEPTH,
    };
    if (s.max_depth > REGISTRY_MAX_DEPTH)
        s.max_depth = REGISTRY_MAX_DEPTH;
    s.path = xcalloc((size_t)s.max_depth + 1, sizeof(*s.path));
    s.path[0].dev = sb.st_dev;
    s.path[0].ino = sb.st_ino;
    if (opts && opts->single_model) {
        size_t n;
        struct entry *e = list_dir(&s, rootfd, "", &n);
        const char *base = strrchr(real, '/');
        base = base && base[1] ? base + 1 : real;
        add_model(&s, build_model(&s, base, rootfd, e, n));
        free_entries(e, n);
    } else {
        walk(&s, rootfd, "", 0);
    }
    free(s.path);
    settle_names(&s, r);
    r->scanned_at = (int64_t)time(NULL);
    r->scan_ns = time_mono_ns() - t0;
    if (err)
        st_error_set(err, ST_OK, "%s", "");
    return r;
}

int registry_dir_is_model(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 0;
    }
    int found = 0;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL) {
        struct stat sb;
        found = de->d_name[0] != '.' && has_suffix(de->d_name, ST_SUFFIX) &&
                fstatat(fd, de->d_name, &sb, 0) == 0 && S_ISREG(sb.st_mode);
    }
    closedir(d);
    return found;
}

const struct reg_model *registry_find_model(const struct registry *r, const char *name, size_t len)
{
    return r ? strmap_get(r->by_name, name, len) : NULL;
}

const struct reg_tensor *registry_find_tensor(const struct reg_model *m, const char *name, size_t len)
{
    return m ? strmap_get(m->by_tensor, name, len) : NULL;
}

const struct reg_file *registry_find_file(const struct reg_model *m, const char *name, size_t len)
{
    return m ? strmap_get(m->by_file, name, len) : NULL;
}

struct registry *registry_ref(struct registry *r)
{
    if (r)
        atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    return r;
}

void registry_unref(struct registry *r)
{
    if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (size_t i = 0; i < r->n_models; i++)
        free_model(r->models[i], r->rootfd);
    free(r->models);
    strmap_free(r->by_name);
    if (r->rootfd >= 0)
        close(r->rootfd);
    free(r->root);
    free(r);
}

void registry_holder_init(struct registry_holder *h, struct registry *initial)
{
    pthread_mutex_init(&h->lock, NULL);
    h->cur = initial;
}

struct registry *registry_holder_acquire(struct registry_holder *h)
{
    pthread_mutex_lock(&h->lock);
    struct registry *r = registry_ref(h->cur);
    pthread_mutex_unlock(&h->lock);
    return r;
}

void registry_holder_swap(struct registry_holder *h, struct registry *next)
{
    pthread_mutex_lock(&h->lock);
    struct registry *old = h->cur;
    h->cur = next;
    pthread_mutex_unlock(&h->lock);
    registry_unref(old); /* outside the lock: freeing closes many fds */
}

void registry_holder_destroy(struct registry_holder *h)
{
    registry_unref(h->cur);
    h->cur = NULL;
    pthread_mutex_destroy(&h->lock);
}

const char *registry_model_doc(const struct reg_model *m, enum reg_doc_kind kind,
                               char *(*render)(const struct reg_model *m), size_t *len)
{
    /* The snapshot is otherwise immutable; the cache is its one lazily
     * filled part, published with a compare-and-swap. */
    struct reg_doc *d = (struct reg_doc *)&m->docs[kind];
    char *text = atomic_load_explicit(&d->text, memory_order_acquire);
    if (!text) {
        char *mine = render(m);
        if (!mine)
            return NULL;
        size_t n = strlen(mine);
        char *expected = NULL;
        /* Every renderer stores the same length: the document is deterministic. */
        atomic_store_explicit(&d->len, n, memory_order_relaxed);
        if (atomic_compare_exchange_strong_explicit(&d->text, &expected, mine,
                                                    memory_order_acq_rel, memory_order_acquire)) {
            text = mine;
        } else {
            free(mine);
            text = expected;
        }
    }
    *len = atomic_load_explicit(&d->len, memory_order_relaxed);
    return text;
}
