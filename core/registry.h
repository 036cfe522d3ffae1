/* registry: the models root scanned into an immutable, refcounted snapshot.
 *
 * A snapshot is built once by registry_scan and never changes; lookups are
 * O(1) hash lookups without locks. Reloads build a new snapshot and swap it
 * into a registry_holder; requests that hold the old one finish on it and the
 * last registry_unref frees it (closing its file descriptors). Invalid files
 * and models are recorded with their error, never fatal. */
#ifndef TENSORD_REGISTRY_H
#define TENSORD_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fileio.h"
#include "st_error.h"
#include "st_header.h"

struct reg_file {
    char *name;                /* path relative to the model directory, '/'-separated */
    int fd;                    /* open for the snapshot's lifetime; -1 if it could not be opened */
    struct fileio_stat st;
    char etag[FILEIO_ETAG_MAX];
    int is_safetensors;        /* name ends in ".safetensors" */
    struct st_header *header;  /* parsed header; NULL for plain or invalid files */
    uint64_t data_start;       /* file offset of the data buffer: 8 + header_len */
    struct st_error error;     /* code != ST_OK when this file is invalid */
};

struct reg_tensor {
    const struct st_tensor *t; /* points into file->header */
    const struct reg_file *file;
};

enum model_state { MODEL_READY, MODEL_INVALID };

enum reg_doc_kind { REG_DOC_MODEL, REG_DOC_HEADER, REG_DOC_COUNT };

struct reg_model {
    char *name;                /* relative to the root, '/'-separated; "NAME" for NAME.safetensors at the root */
    int dirfd;                 /* the model's directory (the root for single-file models) */
    enum model_state state;
    struct st_error error;     /* why the model is invalid */
    int sharded;               /* has a *.safetensors.index.json */
    const struct reg_file *index_file; /* the index among files, or NULL */
    size_t n_files;
    struct reg_file *files;    /* sorted by name; every regular file served for this model */
    size_t n_tensors;
    struct reg_tensor *tensors;/* sorted by (file, begin) */
    uint64_t tensor_bytes;     /* sum of tensor sizes */
    struct strmap *by_tensor;  /* name -> struct reg_tensor * */
    struct strmap *by_file;    /* name -> struct reg_file * */
    /* JSON documents derived from the model (the description and the merged
     * header), rendered by the first request that needs one and freed with
     * the snapshot; they cannot change while it lives. */
    struct reg_doc {
        _Atomic(char *) text;
        _Atomic size_t len;    /* valid once text is non-NULL */
    } docs[REG_DOC_COUNT];
};

struct registry {
    atomic_uint refs;
    char *root;                /* realpath of the models root */
    int rootfd;                /* the root directory; single-file models share it as dirfd */
    uint64_t generation;       /* given by the caller, bumps on every reload */
    int64_t scanned_at;        /* wall-clock seconds of the scan */
    uint64_t scan_ns;          /* how long the scan took */
    size_t n_models;
    struct reg_model **models; /* sorted by name */
    struct strmap *by_name;
    size_t n_files, n_tensors, n_invalid;
    uint64_t bytes;            /* sum of served file sizes */
};

struct registry_scan_opts {
    unsigned max_depth;        /* directory levels below the root; 0 means 16, at most 256 */
    int single_model;          /* the root itself is one model, named after its last path
                                  component; nothing below it is scanned (tensord inspect DIR) */
};

/* Model rules (API.md "Models on disk"): a directory below the root that
 * directly holds a *.safetensors file is a model named by its '/'-separated
 * relative path, whose files are all regular files directly in it (it may also
 * have subdirectories that are models of their own); NAME.safetensors directly
 * in the root is model NAME with that one file. Names starting with '.' and
 * names that are not UTF-8 are skipped. A symlink is followed only when its target resolves inside the
 * root; one pointing outside (or dangling) is ignored as if absent. Directory
 * loops are cut by remembering the directories on the current path. FIFOs,
 * sockets and devices are skipped without being opened.
 *
 * Every file is kept open for the snapshot's lifetime: the process needs an
 * RLIMIT_NOFILE above (files + model directories) * 2 to reload without
 * running out (a file that cannot be opened is recorded with ST_ERR_IO).
 *
 * Scans root. Returns a snapshot with one reference the caller owns, or NULL
 * with err set when the root itself cannot be opened. */
struct registry *registry_scan(const char *root, uint64_t generation,
                               const struct registry_scan_opts *opts, struct st_error *err);

/* Returns 1 when the directory at path directly holds a *.safetensors file
 * (so it is a model itself rather than a models root). */
int registry_dir_is_model(const char *path);

const struct reg_model *registry_find_model(const struct registry *r, const char *name, size_t len);
const struct reg_tensor *registry_find_tensor(const struct reg_model *m, const char *name, size_t len);
const struct reg_file *registry_find_file(const struct reg_model *m, const char *name, size_t len);

/* Returns the cached document `kind` of m, rendering it with render(m) (a
 * new NUL-terminated string, or NULL on failure) the first time. Safe from
 * any thread: if two render at once, one copy is kept. The text lives as long
 * as the snapshot; *len gets its length. */
const char *registry_model_doc(const struct reg_model *m, enum reg_doc_kind kind,
                               char *(*render)(const struct reg_model *m), size_t *len);

struct registry *registry_ref(struct registry *r);
void registry_unref(struct registry *r);

/* Holds the current snapshot for concurrent readers. */
struct registry_holder {
    pthread_mutex_t lock;      /* guards cur while a reader takes its reference */
    struct registry *cur;
};

void registry_holder_init(struct registry_holder *h, struct registry *initial);
/* Returns the current snapshot with a new reference (release with registry_unref), or NULL. */
struct registry *registry_holder_acquire(struct registry_holder *h);
/* Installs next (taking over the caller's reference) and drops the holder's reference to the old one. */
void registry_holder_swap(struct registry_holder *h, struct registry *next);
void registry_holder_destroy(struct registry_holder *h);

#endif
