/* registry: the models root scanned into an immutable, refcounted snapshot.
 *
 * A snapshot is built once by reg_snapshot_scan and never changes; lookups are
 * O(1) hash lookups without locks. Reloads build a new snapshot and swap it
 * into the registry (struct registry); requests that hold the old one
 * finish on it and the last reg_snapshot_unref frees it. Models are refcounted too: a rescan reuses
 * every model whose files are the same versions as before (so an unchanged
 * model keeps its descriptors, headers and rendered documents), and an
 * answer or a GPU load pins the one model it reads, not the snapshot.
 * Invalid files and models are recorded with their error, never fatal.
 *
 * Its parts depend one way: registry.c (the walk, snapshots, the registry)
 * on reg_repo (repos) on reg_model (models, their files) on reg_common (the
 * types they share and their helpers); this header includes theirs. */
#ifndef TENSORD_REGISTRY_H
#define TENSORD_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "reg_model.h"
#include "reg_repo.h"

struct reg_snapshot {
    atomic_uint refs;
    struct reg_root *root;
    uint64_t generation;       /* given by the caller, bumps on every reload */
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
 * below the root (core/base/beneath): a symlink is followed only when what it
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
struct reg_snapshot *reg_snapshot_ref(struct reg_snapshot *r);
void reg_snapshot_unref(struct reg_snapshot *r); /* NULL: does nothing */

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
