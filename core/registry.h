/* registry: the models root scanned into an immutable, refcounted snapshot.
 *
 * A snapshot is built once by reg_snapshot_scan and never changes; lookups are
 * O(1) hash lookups without locks. Reloads build a new snapshot and swap it
 * into the registry (struct registry); requests that hold the old one
 * finish on it and the last reg_snapshot_unref frees it. Models are refcounted too: a rescan reuses
 * every model whose files are the same versions as before (so an unchanged
 * model keeps its descriptors, headers and rendered documents), and an
 * answer or a GPU load pins the one model it reads, not the snapshot.
 * Invalid files and models are recorded with their error, never fatal. */
#ifndef TENSORD_REGISTRY_H
#define TENSORD_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fileio.h"
#include "st_error.h"
#include "st_header.h"

/* The models root: opened once per scan, shared by its snapshot and every
 * model built in it, which open their files below it. */
struct reg_root {
    atomic_uint refs;
    int fd;
    char *path;                /* its real path */
};

struct reg_file {
    char *name;                /* relative to the model directory */
    char *path;                /* relative to the root, '/'-separated */
    int fd;                    /* .safetensors files: open for the model's lifetime; -1 for other
                                * files (opened per answer: reg_model_open_file) and on errors */
    struct fileio_stat st;     /* the version that was validated and is served */
    /* This version's content hashes, once known (the hasher computes them
     * in the background): the one part of a model filled in after it was
     * built, written once (reg_file_set_hashes) and read after `hashed` says
     * REG_HASHED. */
    unsigned char sha256[32];
    char sha256_etag[67];      /* the sha256 in hex between quotes: the file's ETag */
    unsigned char git_sha1[20]; /* the git blob id, when has_git_sha1 */
    unsigned char has_git_sha1;
    atomic_int hashed;         /* 0, REG_HASHING while being written, REG_HASHED */
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

/* The documents a model caches (rendered by server/doc_cache): its
 * description as of some hash progress, the part of the description that
 * hashes do not change (shared by its states), and the merged header. */
enum reg_doc_kind { REG_DOC_MODEL, REG_DOC_MODEL_BODY, REG_DOC_HEADER, REG_DOC_COUNT };

struct shared_doc;

/* One entry of a model directory as a rescan compares it: the model is
 * reused while every entry is still the same version of the same file. */
struct reg_entry_id {
    char *name;
    struct fileio_stat st;
};

struct reg_model {
    atomic_uint refs;
    struct reg_root *root;
    char *name;                /* relative to the root, '/'-separated; "NAME" for NAME.safetensors at the root */
    char *dir;                 /* its directory relative to the root; "" for NAME.safetensors */
    enum model_state state;
    struct st_error error;     /* why the model is invalid */
    int transient;             /* invalid because of an I/O or resource error (out of descriptors
                                * or memory, a failing disk), not because of its files' contents */
    int sharded;               /* has a *.safetensors.index.json */
    const struct reg_file *index_file; /* the index among files, or NULL */
    size_t n_files;
    struct reg_file *files;    /* sorted by name; every regular file served for this model */
    size_t n_tensors;
    struct reg_tensor *tensors;/* sorted by (file, begin) */
    uint64_t tensor_bytes;     /* sum of tensor sizes */
    struct strmap *by_tensor;  /* name -> struct reg_tensor * */
    struct strmap *by_file;    /* name -> struct reg_file * */
    size_t n_ids;
    struct reg_entry_id *ids;  /* what the directory held when the model was built, by name */
    /* JSON documents derived from the model (the description and the merged
     * header), rendered off the HTTP threads (server/doc_cache). Each slot
     * holds one reference to a shared document, dropped when it is replaced
     * (a description with more hashes known) or the model is freed.
     * doc_lock guards the slots; it is held to copy or swap a pointer (and
     * take a reference), never to render. */
    pthread_mutex_t doc_lock;
    struct shared_doc *docs[REG_DOC_COUNT];
};

/* A Hugging Face repo (core/reg_repo.h): a directory of files below the
 * root, under a repo id. */
struct reg_repo_rev;
struct reg_repo {
    atomic_uint refs;
    struct reg_root *root;
    char *id;                  /* "name" or "org/name": its directory relative to the root */
    int transient;             /* an I/O or resource error kept a file from being checked */
    size_t n_files;
    struct reg_file *files;    /* sorted by name (the '/'-separated path below the repo); fd is
                                * always -1: answers open them below the root */
    struct strmap *by_name;    /* name -> struct reg_file * */
    size_t n_ids;
    struct reg_entry_id *ids;  /* the entries it was built from, by name (names below the repo) */
    uint64_t bytes;            /* sum of file sizes */
    _Atomic(struct reg_repo_rev *) rev; /* computed once every hash is known */
    _Atomic(struct shared_doc *) card;  /* README.md's card as JSON (empty: none), made once
                                         * by the Hub's model info (reg_repo_set_card) */
};

struct reg_snapshot {
    atomic_uint refs;
    struct reg_root *root;
    uint64_t generation;       /* given by the caller, bumps on every reload */
    int64_t scanned_at;        /* wall-clock seconds of the scan */
    uint64_t scan_ns;          /* how long the scan took */
    size_t n_models;
    struct reg_model **models; /* sorted by name; each holds a reference */
    struct strmap *by_name;
    size_t n_repos;
    struct reg_repo **repos;   /* sorted by id; each holds a reference */
    struct strmap *by_repo;
    size_t n_repo_files;       /* files of all repos (each also counted in a model's files when
                                * it belongs to one) */
    size_t n_files, n_tensors, n_invalid;
    uint64_t bytes;            /* sum of served file sizes */
    size_t n_open;             /* descriptors its models hold open */
    size_t n_reused;           /* models taken over from the previous snapshot unchanged */
    size_t scan_errors;        /* I/O or resource errors met while scanning; the scan should
                                * be retried (models they hit kept their previous state) */
};

struct reg_scan_opts {
    unsigned max_depth;        /* directory levels below the root; 0 means 16, at most 256 */
    int single_model;          /* the root itself is one model, named after its last path
                                  component; nothing below it is scanned (tensord inspect DIR);
                                  no repos */
    /* The snapshot being replaced: its unchanged models are reused, and its
     * models stand in for ones an I/O error kept from being read again. */
    const struct reg_snapshot *prev;
};

/* Model rules (API.md "Models on disk"): a directory below the root that
 * directly holds a *.safetensors file is a model named by its '/'-separated
 * relative path, whose files are all regular files directly in it (it may also
 * have subdirectories that are models of their own); NAME.safetensors directly
 * in the root is model NAME with that one file. Names starting with '.' and
 * names that are not UTF-8 are skipped. Every file and directory is opened
 * below the root (core/beneath): a symlink is followed only when what it
 * leads to stays inside the root, decided while opening; one that leads
 * outside (or dangles) is ignored as if absent. Directory loops are cut by
 * remembering the directories on the current path. FIFOs, sockets and
 * devices are never served.
 *
 * Descriptors: a snapshot holds one per .safetensors file (other files are
 * opened per answer), and a reload adds only those of models that changed.
 *
 * An I/O or resource error (EMFILE, ENOMEM, EIO, ...) while reading a model
 * or a directory never makes a model vanish or turn invalid when opts->prev
 * has it: the previous model is kept, and scan_errors counts the error so the
 * caller retries. Scans root. Returns a snapshot with one reference the
 * caller owns, or NULL with err set when the root itself cannot be read. */
struct reg_snapshot *reg_snapshot_scan(const char *root, uint64_t generation,
                                       const struct reg_scan_opts *opts, struct st_error *err);

/* Returns 1 when the directory at path directly holds a *.safetensors file
 * (so it is a model itself rather than a models root). */
int registry_dir_is_model(const char *path);

const struct reg_model *reg_snapshot_find_model(const struct reg_snapshot *r, const char *name,
                                                size_t len);
/* The repo with this id ("name" or "org/name"), or NULL. */
const struct reg_repo *reg_snapshot_find_repo(const struct reg_snapshot *r, const char *id,
                                              size_t len);
const struct reg_tensor *reg_model_find_tensor(const struct reg_model *m, const char *name,
                                               size_t len);
const struct reg_file *reg_model_find_file(const struct reg_model *m, const char *name, size_t len);

/* Opens file f of model m again, below the root, with `flags` (e.g. for a
 * plain file, which is not kept open, or O_DIRECT for a GPU load). Returns
 * the descriptor, -ESTALE when the path now leads to another file or another
 * version of it, or another negative errno. */
int reg_model_open_file(const struct reg_model *m, const struct reg_file *f, int flags);
/* The same for a file of any model or repo built in root. */
int reg_open_below(const struct reg_root *root, const struct reg_file *f, int flags);

#define REG_HASHING 1
#define REG_HASHED 2

/* Records f's content hashes (git_sha1 may be NULL). The first call wins;
 * later ones change nothing. Any thread. */
void reg_file_set_hashes(const struct reg_file *f, const unsigned char sha256[32],
                         const unsigned char *git_sha1);
/* Whether f's hashes are known. */
int reg_file_hashed(const struct reg_file *f);
/* How many times any file's hashes became known in this process: a reader
 * that looked at every file's state when it was n need not look again
 * while it is still n. */
uint64_t reg_hashes_recorded(void);
/* Writes f's sha256 as 64 hex digits and a NUL into out (65 bytes) and
 * returns 1 when it is known; returns 0 (out "") otherwise. */
int reg_file_sha256_hex(const struct reg_file *f, char *out);

/* The ETag of file f's content: "<sha256 hex>" once its hash is known,
 * before that W/"<size>-<mtime ns>" (see fileio_etag: a weak tag, which never
 * satisfies If-Range or If-Match). Writes at most REG_ETAG_MAX bytes. */
#define REG_ETAG_MAX 72
void reg_file_etag(const struct reg_file *f, char *out);

/* Whether the ETag reg_file_etag gives f is weak. */
int reg_file_etag_weak(const struct reg_file *f);

/* A new reference to m's cached document `kind` (the caller drops it with
 * shared_doc_unref), or NULL when there is none. Any thread; never waits
 * for more than a pointer copy. */
struct shared_doc *reg_model_doc(const struct reg_model *m, enum reg_doc_kind kind);
/* Makes d (may be NULL) m's document `kind`, taking a reference to it; the
 * one it replaces is dropped (outside the lock). */
void reg_model_set_doc(const struct reg_model *m, enum reg_doc_kind kind, struct shared_doc *d);

struct reg_snapshot *reg_snapshot_ref(struct reg_snapshot *r);
void reg_snapshot_unref(struct reg_snapshot *r);

/* A model outlives every snapshot that lists it while someone holds it. */
struct reg_model *reg_model_ref(const struct reg_model *m);
void reg_model_unref(const struct reg_model *m);

/* The registry: the current snapshot, for concurrent readers; the daemon
 * has one, and swaps a new snapshot in after each rescan. */
struct registry {
    pthread_mutex_t lock;      /* guards cur while a reader takes its reference */
    struct reg_snapshot *cur;
};

void registry_init(struct registry *h, struct reg_snapshot *initial);
/* Returns the current snapshot with a new reference (release with
 * reg_snapshot_unref), or NULL. */
struct reg_snapshot *registry_acquire(struct registry *h);
/* Installs next (taking over the caller's reference) and drops the
 * registry's reference to the old one. */
void registry_swap(struct registry *h, struct reg_snapshot *next);
void registry_destroy(struct registry *h);

#endif
