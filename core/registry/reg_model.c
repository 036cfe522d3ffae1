/* reg_model: one model built from the files of its directory.
 *
 * Each file is opened below the models root (core/base/beneath) by its path from
 * the root, so what is served is what the open found, wherever a symlink on
 * the way pointed; .safetensors files stay open and have their headers
 * validated, the index is read, and the model is cross-checked: the index
 * against its shards, tensor names across files. A model is immutable once
 * built and refcounted, so a rescan can hand an unchanged model to the next
 * snapshot and an answer can pin the one model it reads. */
#include "reg_model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "beneath.h"
#include "digest.h"
#include "shared_doc.h"
#include "st_index.h"
#include "strmap.h"
#include "util.h"

/* A safetensors file's prefix and header are kept in memory up to this size,
 * so reads of them are answered without touching the file (a typical
 * shard's header is 20-200 KB; a huge one is served from the file). */
#define HEAD_KEEP_MAX (1u << 20)
#define INDEX_SUFFIX ".safetensors.index.json"

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
        st_error_fail(&e, code, "%s", f->error.message);
    else
        st_error_fail(&e, code, "%s: %s", f->name, f->error.message);
    set_invalid(m, &e);
}

/* Marks m invalid because the memory for its n tensors (the count its
 * files chose) could not be had: a resource error, so m is transient. The
 * message names `file`, or when that is NULL the file holding the most. */
static void tensors_out_of_memory(struct reg_model *m, const char *file, size_t n)
{
    struct st_error e;
    size_t most = 0;
    for (size_t i = 0; !file && i < m->n_files; i++)
        if (m->files[i].header && m->files[i].header->n_tensors >= most) {
            most = m->files[i].header->n_tensors;
            file = m->files[i].name;
        }
    st_error_fail(&e, ST_ERR_NO_MEMORY, "%s: not enough memory to index the model's %zu tensors",
                  file ? file : m->name, n);
    set_invalid(m, &e);
    m->transient = 1;
}

/* Reads and parses the index file f. On failure f->error holds the reason. */
static struct st_index *load_index(struct reg_file *f)
{
    struct st_index *idx = NULL;
    if (f->fd < 0)
        return NULL;
    if (f->st.size > ST_INDEX_MAX_LEN) {
        st_error_fail(&f->error, ST_ERR_INDEX_JSON,
                      "%s: index is %llu bytes, more than the %llu allowed",
                      f->name, (unsigned long long)f->st.size, (unsigned long long)ST_INDEX_MAX_LEN);
        return NULL;
    }
    char *buf = malloc(f->st.size + 1); /* up to 100 MB, the file's choice: fallible */
    if (!buf) {
        st_error_fail(&f->error, ST_ERR_NO_MEMORY,
                      "%s: not enough memory to read the %llu-byte index",
                      f->name, (unsigned long long)f->st.size);
        return NULL;
    }
    int rc = fileio_pread_full(f->fd, buf, f->st.size, 0);
    if (rc != 0)
        st_error_errno(&f->error, -rc, "%s: read", f->name);
    else
        st_index_parse(buf, f->st.size, f->name, &idx, &f->error);
    free(buf);
    return idx;
}

/* Fills m's tensor table (room for total) with the tensors of every file
 * that has a header, only the shards when shards is not NULL. Files are
 * sorted by name, so they come in (file, begin) order. -ENOMEM when the
 * table cannot be had. */
static int collect_tensors(struct reg_model *m, size_t total, const struct strmap *shards)
{
    size_t n = 0;
    if (!(m->tensors = malloc((total ? total : 1) * sizeof(*m->tensors))))
        return -ENOMEM;
    for (size_t i = 0; i < m->n_files; i++) {
        const struct reg_file *f = &m->files[i];
        if (!f->header || (shards && !strmap_get(shards, f->name, strlen(f->name))))
            continue;
        for (size_t k = 0; k < f->header->n_tensors; k++)
            m->tensors[n++] = (struct reg_tensor){&f->header->tensors[k], f};
    }
    m->n_tensors = n;
    return 0;
}

/* The lookups a sharded model is checked with. Sized by the files, so
 * fallible; each map is sized for all it will hold, so strmap_put never
 * allocates. */
struct shard_maps {
    struct strmap *mapped;             /* tensor -> shard name */
    struct strmap **held;              /* per shard: tensor -> st_tensor */
    const struct reg_file **shard_file;
    struct strmap *shard_no;           /* shard name -> index + 1 */
    size_t n_shards, total;            /* total: tensors the shards hold */
};

static void shard_maps_free(struct shard_maps *sm)
{
    for (size_t i = 0; sm->held && i < sm->n_shards; i++)
        strmap_free(sm->held[i]);
    free(sm->held);
    free(sm->shard_file);
    strmap_free(sm->shard_no);
    strmap_free(sm->mapped);
}

/* Each shard the index names is a valid .safetensors file of the model;
 * its tensors go into held. -EINVAL (m invalid) or -ENOMEM. */
static int shards_present(struct reg_model *m, const struct st_index *idx, const char *index_name,
                          struct shard_maps *sm)
{
    struct st_error e;
    for (size_t i = 0; i < idx->n_shards; i++) {
        const char *sh = idx->shards[i];
        const struct reg_file *f = strmap_get(m->by_file, sh, strlen(sh));
        if (!f || !f->is_safetensors || !f->header) {
            st_error_fail(&e, ST_ERR_SHARD_MISSING, "%s: shard \"%.200s\" %s", index_name, sh,
                          !f ? "does not exist" : "is not a .safetensors file");
            set_invalid(m, &e);
            return -EINVAL;
        }
        sm->shard_file[i] = f;
        strmap_put(sm->shard_no, sh, strlen(sh), (void *)(uintptr_t)(i + 1));
        sm->held[i] = strmap_try_new(f->header->n_tensors);
        if (!sm->held[i])
            return -ENOMEM;
        for (size_t k = 0; k < f->header->n_tensors; k++) {
            const struct st_tensor *t = &f->header->tensors[k];
            strmap_put(sm->held[i], t->name, t->name_len, (void *)t);
        }
        sm->total += f->header->n_tensors;
    }
    return 0;
}

/* Every index entry is in the shard it names, and every shard tensor is
 * mapped to its own shard. -EINVAL (m invalid) when not. */
static int entries_match(struct reg_model *m, const struct st_index *idx, const char *index_name,
                         struct shard_maps *sm)
{
    struct st_error e;
    for (size_t i = 0; i < idx->n_entries; i++) {
        const struct st_index_entry *en = &idx->entries[i];
        size_t no = (uintptr_t)strmap_get(sm->shard_no, en->shard, strlen(en->shard));
        if (!strmap_get(sm->held[no - 1], en->tensor, strlen(en->tensor))) {
            st_error_fail(&e, ST_ERR_TENSOR_NOT_IN_SHARD,
                          "%s: tensor \"%.200s\" is mapped to shard \"%.200s\" which does not hold it",
                          index_name, en->tensor, en->shard);
            set_invalid(m, &e);
            return -EINVAL;
        }
        strmap_put(sm->mapped, en->tensor, strlen(en->tensor), (void *)en->shard);
    }
    for (size_t i = 0; i < idx->n_shards; i++) {
        const struct st_header *h = sm->shard_file[i]->header;
        for (size_t k = 0; k < h->n_tensors; k++) {
            const char *want = strmap_get(sm->mapped, h->tensors[k].name, h->tensors[k].name_len);
            if (want != idx->shards[i]) {
                st_error_fail(&e, ST_ERR_TENSOR_NOT_IN_INDEX,
                              "%s: shard \"%.200s\" holds tensor \"%.200s\" which the index %s%.200s%s",
                              index_name, idx->shards[i], h->tensors[k].name,
                              want ? "maps to \"" : "does not map",
                              want ? want : "", want ? "\"" : "");
                set_invalid(m, &e);
                return -EINVAL;
            }
        }
    }
    return 0;
}

/* Sharded: the index names the shards, and each tensor's shard must hold it
 * and hold nothing else. Returns 0 or -1 with m invalid. */
static int check_sharded(struct reg_model *m, const struct st_index *idx, const char *index_name)
{
    struct shard_maps sm = {
        .mapped = strmap_try_new(idx->n_entries),
        .held = calloc(idx->n_shards, sizeof(*sm.held)),
        .shard_file = calloc(idx->n_shards, sizeof(*sm.shard_file)),
        .shard_no = strmap_try_new(idx->n_shards),
        .n_shards = idx->n_shards,
    };
    int rc = !sm.mapped || !sm.held || !sm.shard_file || !sm.shard_no ? -ENOMEM : 0;
    if (rc == 0)
        rc = shards_present(m, idx, index_name, &sm);
    if (rc == 0)
        rc = entries_match(m, idx, index_name, &sm);
    /* Every entry found in its shard and every shard tensor mapped to it:
     * the counts agree and names are unique. */
    if (rc == 0)
        rc = collect_tensors(m, sm.total, sm.shard_no);
    if (rc == -ENOMEM)
        tensors_out_of_memory(m, index_name, idx->n_entries);
    shard_maps_free(&sm);
    return rc == 0 ? 0 : -1;
}

/* Unsharded: every .safetensors file contributes its tensors. */
static void collect_unsharded(struct reg_model *m)
{
    size_t total = 0;
    for (size_t i = 0; i < m->n_files; i++)
        if (m->files[i].header)
            total += m->files[i].header->n_tensors;
    if (collect_tensors(m, total, NULL) != 0)
        tensors_out_of_memory(m, NULL, total);
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
            st_error_fail(&e, ST_ERR_DUPLICATE_TENSOR,
                          "tensor \"%.200s\" is in both %.120s and %.120s",
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
        if (str_has_suffix(m->files[i].name, INDEX_SUFFIX)) {
            if (n_index++ == 0)
                index = &m->files[i];
            else {
                st_error_fail(&e, ST_ERR_MULTIPLE_INDEXES,
                              "%s and %s are both indexes", index->name,
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
        if (!idx) {
            set_invalid(m, &index->error);
            m->transient |= index->error.code == ST_ERR_NO_MEMORY || index->error.code == ST_ERR_IO;
        }
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

/* Opens the file `name` of m (its directory is dir below the root) and
 * reads a .safetensors file's header. Returns 1 with f filled, or 0 when it
 * is not to be served (reg_file_open), or memory for it ran out (m is then
 * transient). */
static int open_file(struct reg_model *m, const char *dir, const char *name, struct reg_file *f)
{
    char *path = dir[0] ? xasprintf("%s/%s", dir, name) : xstrdup(name);
    int ok = reg_file_open(m->root, path, name, f, &m->transient);
    m->transient |= ok < 0;
    if (ok <= 0)
        return 0;
    if (f->fd >= 0 && f->is_safetensors) {
        if (st_header_read_fd(f->fd, f->name, HEAD_KEEP_MAX, &f->header, &f->error) == 0) {
            f->data_start = ST_PREFIX_LEN + f->header->header_len;
        } else {
            f->header = NULL;
            /* not a verdict on the file either: a later scan may read it */
            m->transient |= f->error.code == ST_ERR_IO || f->error.code == ST_ERR_NO_MEMORY;
        }
    }
    return 1;
}

struct reg_model *reg_model_build(struct reg_root *root, const char *name, const char *dir,
                                  const struct reg_entry_id *ids, size_t n_ids,
                                  const struct st_error *forced)
{
    struct reg_model *m = xcalloc(1, sizeof(*m));
    atomic_init(&m->refs, 1);
    pthread_mutex_init(&m->doc_lock, NULL);
    m->root = reg_root_ref(root);
    m->name = xstrdup(name);
    m->dir = xstrdup(dir);
    m->state = MODEL_READY;
    m->ids = reg_ids_sorted_copy(ids, n_ids);
    m->n_ids = m->ids ? n_ids : 0;
    m->files = m->ids ? calloc(n_ids ? n_ids : 1, sizeof(*m->files)) : NULL;
    for (size_t i = 0; m->files && i < n_ids; i++)
        m->n_files += (size_t)open_file(m, dir, m->ids[i].name, &m->files[m->n_files]);
    m->by_file = strmap_try_new(m->n_files);
    for (size_t i = 0; m->by_file && i < m->n_files; i++)
        strmap_put(m->by_file, m->files[i].name, strlen(m->files[i].name), &m->files[i]);
    if (!m->files || !m->by_file) { /* the directory chose how many: a resource error */
        struct st_error e;
        st_error_fail(&e, ST_ERR_NO_MEMORY, "%s: not enough memory to list the model's %zu files",
                      name, n_ids);
        set_invalid(m, &e);
        m->transient = 1;
    } else {
        validate_model(m);
    }
    if (forced) {
        m->state = MODEL_READY; /* so the forced reason, not an earlier one, is given */
        set_invalid(m, forced);
        drop_tensors(m);
    }
    /* Only .safetensors files stay open; the rest are opened per answer. */
    for (size_t i = 0; i < m->n_files; i++) {
        struct reg_file *f = &m->files[i];
        if (f->fd >= 0 && (!f->is_safetensors || !f->header)) {
            close(f->fd);
            f->fd = -1;
        }
    }
    return m;
}

void reg_model_close_files(struct reg_model *m)
{
    for (size_t i = 0; i < m->n_files; i++)
        if (m->files[i].fd >= 0) {
            close(m->files[i].fd);
            m->files[i].fd = -1;
        }
}

int reg_model_has_safetensors(const struct reg_model *m)
{
    for (size_t i = 0; i < m->n_files; i++)
        if (m->files[i].is_safetensors)
            return 1;
    return 0;
}

struct reg_model *reg_model_ref(const struct reg_model *m)
{
    struct reg_model *mm = (struct reg_model *)m;
    if (mm)
        atomic_fetch_add_explicit(&mm->refs, 1, memory_order_relaxed);
    return mm;
}

void reg_model_unref(const struct reg_model *cm)
{
    struct reg_model *m = (struct reg_model *)cm;
    if (!m || atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (int k = 0; k < REG_DOC_COUNT; k++)
        shared_doc_unref(m->docs[k]);
    pthread_mutex_destroy(&m->doc_lock);
    reg_files_free(m->files, m->n_files);
    reg_ids_free(m->ids, m->n_ids);
    free(m->tensors);
    strmap_free(m->by_tensor);
    strmap_free(m->by_file);
    reg_root_unref(m->root);
    free(m->dir);
    free(m->name);
    free(m);
}

int reg_open_below(const struct reg_root *root, const struct reg_file *f, int flags)
{
    int fd = beneath_open(root->fd, root->path, f->path, flags | O_NONBLOCK | O_NOCTTY);
    struct fileio_stat now;
    if (fd < 0)
        return fd == -EXDEV || fd == -ENOENT || fd == -ELOOP || fd == -ENOTDIR ? -ESTALE : fd;
    /* O_DIRECT descriptors keep O_NONBLOCK: it means nothing for a regular file. */
    fd = fileio_regular(fd, &now);
    if (fd == -EINVAL)
        return -ESTALE;
    if (fd >= 0 && !fileio_same_version(&now, &f->st)) {
        close(fd);
        return -ESTALE;
    }
    return fd;
}

static atomic_uint_fast64_t hashes_recorded;

void reg_file_set_hashes(const struct reg_file *cf, const unsigned char sha256[32],
                         const unsigned char *git_sha1)
{
    struct reg_file *f = (struct reg_file *)cf;
    int none = 0;
    if (!atomic_compare_exchange_strong_explicit(&f->hashed, &none, REG_HASHING,
                                                 memory_order_acquire, memory_order_relaxed))
        return;
    memcpy(f->sha256, sha256, sizeof(f->sha256));
    f->sha256_etag[0] = '"';
    digest_hex(sha256, 32, f->sha256_etag + 1);
    f->sha256_etag[65] = '"';
    f->sha256_etag[66] = '\0';
    if (git_sha1) {
        memcpy(f->git_sha1, git_sha1, sizeof(f->git_sha1));
        f->has_git_sha1 = 1;
    }
    atomic_store_explicit(&f->hashed, REG_HASHED, memory_order_release);
    atomic_fetch_add_explicit(&hashes_recorded, 1, memory_order_release);
}

uint64_t reg_hashes_recorded(void)
{
    return atomic_load_explicit(&hashes_recorded, memory_order_acquire);
}

int reg_file_hashed(const struct reg_file *f)
{
    return atomic_load_explicit(&((struct reg_file *)f)->hashed, memory_order_acquire) ==
           REG_HASHED;
}

int reg_file_sha256_hex(const struct reg_file *f, char *out)
{
    out[0] = '\0';
    if (!reg_file_hashed(f))
        return 0;
    memcpy(out, f->sha256_etag + 1, 64);
    out[64] = '\0';
    return 1;
}

void reg_file_etag(const struct reg_file *f, char *out)
{
    if (reg_file_hashed(f))
        memcpy(out, f->sha256_etag, sizeof(f->sha256_etag));
    else
        fileio_etag(&f->st, out);
}

const struct reg_tensor *reg_model_find_tensor(const struct reg_model *m, const char *name, size_t len)
{
    return m ? strmap_get(m->by_tensor, name, len) : NULL;
}

const struct reg_file *reg_model_find_file(const struct reg_model *m, const char *name, size_t len)
{
    return m ? strmap_get(m->by_file, name, len) : NULL;
}

struct shared_doc *reg_model_doc(const struct reg_model *m, enum reg_doc_kind kind)
{
    /* The model is otherwise immutable; its documents are the part filled
     * in (and replaced) after it was built. */
    struct reg_model *mm = (struct reg_model *)m;
    pthread_mutex_lock(&mm->doc_lock);
    struct shared_doc *d = shared_doc_ref(mm->docs[kind]);
    pthread_mutex_unlock(&mm->doc_lock);
    return d;
}

void reg_model_set_doc(const struct reg_model *m, enum reg_doc_kind kind, struct shared_doc *d)
{
    struct reg_model *mm = (struct reg_model *)m;
    shared_doc_ref(d);
    pthread_mutex_lock(&mm->doc_lock);
    struct shared_doc *old = mm->docs[kind];
    mm->docs[kind] = d;
    pthread_mutex_unlock(&mm->doc_lock);
    shared_doc_unref(old);
}
