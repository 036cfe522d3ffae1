/* reg_common: what the registry's models (reg_model), repos (reg_repo) and
 * walk (registry) share, at the bottom of the registry: the refcounted root
 * directory, a served file, the entries of a directory as a model or repo
 * was built from them, freeing its files, and which errors are worth a
 * rescan. */
#ifndef TENSORD_REG_COMMON_H
#define TENSORD_REG_COMMON_H

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
    dev_t dev;                 /* fd's identity (fstat) */
    ino_t ino;
};

struct reg_file {
    char *name;                /* relative to the model directory */
    char *path;                /* relative to the root, '/'-separated */
    int fd;                    /* .safetensors files: open for the model's lifetime; -1 for other
                                * files (opened per answer: reg_open_below) and on errors */
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

/* One entry of a model directory as a rescan compares it: the model is
 * reused while every entry is still the same version of the same file. */
struct reg_entry_id {
    char *name;
    struct fileio_stat st;
};

/* Whether errno e is an I/O or resource error (a later attempt may succeed)
 * rather than something the files or their permissions say. */
int reg_errno_transient(int e);

/* Opens path (relative to the root; taken over) below root into f, which
 * gets the path, a copy of name (relative to the model or repo) and the
 * descriptor. Returns 0 (path freed) when the file is not to be served: it
 * leads outside the root, dangles, loops, or is not a regular file; -1
 * (path freed) when memory ran out (a directory's size is not ours to
 * choose); else 1. An error that says nothing about the file (out of
 * descriptors, a failing disk, no permission) is kept in f->error with
 * f->fd -1, and sets *transient when a later scan may not meet it. */
int reg_file_open(const struct reg_root *root, char *path, const char *name, struct reg_file *f,
                  int *transient);

/* The models root at `root`, opened: prev (the previous snapshot's root,
 * may be NULL) with a new reference when it is still the same directory,
 * so models built in different scans share one root; NULL with err filled
 * when it cannot be opened. */
struct reg_root *reg_root_open(const char *root, const struct reg_root *prev,
                               struct st_error *err);
struct reg_root *reg_root_ref(struct reg_root *r);
void reg_root_unref(struct reg_root *r);

/* A copy of the entries ids[0..n) (names duplicated) sorted by name, NULL
 * when memory is short (a directory's size is not ours to choose), and
 * freeing it; freeing files[0..n) and what each owns (its descriptor,
 * header, name and path). */
void reg_ids_sort(struct reg_entry_id *ids, size_t n);
struct reg_entry_id *reg_ids_sorted_copy(const struct reg_entry_id *ids, size_t n);
/* Whether a[0..na) and b[0..nb) (both sorted by name) are the same names,
 * each the same version of the same file: a model or repo built from a is
 * reused for b. */
int reg_ids_same(const struct reg_entry_id *a, size_t na, const struct reg_entry_id *b, size_t nb);
void reg_ids_free(struct reg_entry_id *ids, size_t n);
void reg_files_free(struct reg_file *files, size_t n);

#endif
