/* reg_repo: the Hugging Face view of the models root (API.md "Hugging Face
 * endpoint"). A repo is a directory at depth 1 that directly holds a
 * regular file (repo "name"), or any directory below a depth-1 directory
 * that holds only directories (repo "org/name"); its files are every
 * regular file below it, under their '/'-separated paths, with the walk's
 * rules (core/registry/registry.c): hidden and non-UTF-8 names skipped, symlinks
 * followed only inside the root, nothing deeper than max_depth.
 *
 * A repo is immutable and refcounted like a model, and reused by a rescan
 * when its entries are the same versions. Its files are never kept open
 * (an answer opens one below the root, as for a model's plain files), and
 * get their content hashes from the hasher like every served file. Once
 * all of them are known, the repo's revision (its commit id and the git ids
 * of its blobs and trees) is computed once and kept. */
#ifndef TENSORD_REG_REPO_H
#define TENSORD_REG_REPO_H

#include "reg_common.h"

/* Files larger than this, and every .safetensors file, are "LFS" files to
 * Hugging Face clients: their ETag and blob are the SHA-256 (X-Linked-Etag,
 * lfs.oid), and their git blob is the LFS pointer's. Smaller files' ETag and
 * blob id are their git blob SHA-1. The Hub's own 10 MB line. */
#define REG_REPO_LFS_MIN (10ull * 1024 * 1024)

/* The documents a repo keeps, each made once (its content never changes:
 * a new version of a file makes a new repo) by the Hub's handlers and
 * their renderer, and shared by every answer that sends it. */
enum reg_repo_doc_kind {
    REG_REPO_DOC_CARD,          /* README.md's card as JSON (empty: none) */
    REG_REPO_DOC_INFO,          /* the repo's document (/api/models/{repo}) */
    REG_REPO_DOC_LISTING,       /* every tree entry, with the offsets of each directory's */
    REG_REPO_DOC_LISTING_EXPANDED, /* the same, each entry with its lastCommit (expand) */
    REG_REPO_DOC_COUNT
};

/* A repo: a directory of files below the root, under a repo id. */
struct reg_repo_rev;
struct shared_doc;
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
    _Atomic(struct shared_doc *) docs[REG_REPO_DOC_COUNT]; /* made once each, then shared
                                                            * (reg_repo_set_doc) */
};

/* A directory of a repo ("" is the repo itself). */
struct reg_repo_dir {
    const char *path;          /* owned by the revision; "" for the root */
    size_t len;
    uint8_t tree[20];          /* its git tree id */
    size_t first, end;         /* the repo's files below it: files[first .. end) */
};

/* What a repo's content names, once every hash is known. */
struct reg_repo_rev {
    char commit[41];           /* the revision id, 40 lowercase hex digits */
    uint8_t (*blob)[20];       /* per file of the repo, in its order: the git blob id */
    size_t n_dirs;
    struct reg_repo_dir *dirs; /* sorted by path; dirs[0] is the root */
    struct strmap *by_dir;     /* path -> struct reg_repo_dir * */
};

/* Collecting a repo's files while the registry walks below its directory
 * (internal to the registry): begin at the repo's directory (with the scan
 * errors so far), add every regular file of every directory below it, end
 * when the walk leaves it. */
struct reg_repo_walk;
struct reg_repo_walk *reg_repo_walk_begin(const char *id, size_t errors);
/* Adds file `name` of directory rel (relative to the root, at or below the repo's). */
void reg_repo_walk_add(struct reg_repo_walk *w, const char *rel, const char *name,
                       const struct fileio_stat *st);
/* Frees w and returns the repo to list, with a reference, or NULL for none
 * (no file below it): old (the previous snapshot's repo of this id, or NULL)
 * when its files are the same versions, or when scan errors met below the
 * directory (errors is the count now) or while building it again kept it
 * from being read; else a new one. *transient is set when building met an
 * I/O or resource error (the scan should be retried). */
struct reg_repo *reg_repo_walk_end(struct reg_repo_walk *w, struct reg_root *root,
                                   const struct reg_repo *old, size_t errors, int *transient);

struct reg_repo *reg_repo_ref(const struct reg_repo *r);
void reg_repo_unref(const struct reg_repo *r);

/* The file at path (relative to the repo), or NULL. */
const struct reg_file *reg_repo_find_file(const struct reg_repo *r, const char *path, size_t len);

/* The repo's document of that kind, or NULL before one was set. Valid
 * while r is held (take a reference to keep it longer). The repo is
 * immutable, so each is made once, not per request. */
struct shared_doc *reg_repo_doc(const struct reg_repo *r, enum reg_repo_doc_kind kind);
/* Sets r's document of that kind to d (taken over) unless another thread
 * set one first (d is then dropped); returns the document r keeps. */
struct shared_doc *reg_repo_set_doc(const struct reg_repo *r, enum reg_repo_doc_kind kind,
                                    struct shared_doc *d);

/* The first file that could not be opened when the repo was built (no
 * permission, say), or NULL: such a repo has no revision. */
const struct reg_file *reg_repo_unreadable(const struct reg_repo *r);

/* Whether f is an LFS file to Hugging Face clients (see REG_REPO_LFS_MIN). */
int reg_repo_file_is_lfs(const struct reg_file *f);

/* r's revision, computed the first time every file's hash is known (any
 * thread; if two compute it at once one copy is kept). NULL while some hash
 * is missing. Lives as long as r. */
const struct reg_repo_rev *reg_repo_revision(const struct reg_repo *r);

/* The directory at path ("" for the root) of a revision, or NULL. */
const struct reg_repo_dir *reg_repo_find_dir(const struct reg_repo_rev *rev, const char *path,
                                             size_t len);

#endif
