/* reg_model: one model, built from the files of its directory (the
 * registry's walk decides which directories are models and when a model can
 * be reused), and its files: lookups, opening one again, content hashes,
 * ETags, cached documents, references. */
#ifndef TENSORD_REG_MODEL_H
#define TENSORD_REG_MODEL_H

#include <pthread.h>

#include "reg_common.h"

struct reg_tensor {
    const struct st_tensor *t; /* points into file->header */
    const struct reg_file *file;
};

enum model_state { MODEL_READY, MODEL_INVALID };

/* The documents a model caches (rendered by server/handlers/doc_cache): its
 * description as of some hash progress, the part of the description that
 * hashes do not change (shared by its states), and the merged header. */
enum reg_doc_kind { REG_DOC_MODEL, REG_DOC_MODEL_BODY, REG_DOC_HEADER, REG_DOC_COUNT };

struct shared_doc;

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
     * header), rendered off the HTTP threads (server/handlers/doc_cache). Each slot
     * holds one reference to a shared document, dropped when it is replaced
     * (a description with more hashes known) or the model is freed.
     * doc_lock guards the slots; it is held to copy or swap a pointer (and
     * take a reference), never to render. */
    pthread_mutex_t doc_lock;
    struct shared_doc *docs[REG_DOC_COUNT];
};

/* Builds model `name` from the entries ids[0..n) of its directory `dir`
 * (relative to the root; "" for a file directly in it): each is opened below
 * root, .safetensors headers are validated, the index is read and checked.
 * With `forced` set the model is invalid for that reason whatever its files
 * say. Returns a model with one reference, never NULL. */
struct reg_model *reg_model_build(struct reg_root *root, const char *name, const char *dir,
                                  const struct reg_entry_id *ids, size_t n_ids,
                                  const struct st_error *forced);

/* Closes the descriptors m keeps open: its files are read through ones
 * its builder gives each reader from then on (a mirror's model, whose
 * files are the mirror cache's, opened per answer: mirror/mirror_model.h).
 * For the builder, before anyone else holds m. */
void reg_model_close_files(struct reg_model *m);

/* Whether m has a .safetensors file (one that opened below the root). */
int reg_model_has_safetensors(const struct reg_model *m);

const struct reg_tensor *reg_model_find_tensor(const struct reg_model *m, const char *name,
                                               size_t len);
const struct reg_file *reg_model_find_file(const struct reg_model *m, const char *name, size_t len);

/* Opens file f of a model or repo built in root again, below the root,
 * with `flags` (e.g. for a plain file, which is not kept open, or O_DIRECT
 * for a GPU load). Returns the descriptor, -ESTALE when the path now leads
 * to another file or another version of it, or another negative errno. */
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

/* A new reference to m's cached document `kind` (the caller drops it with
 * shared_doc_unref), or NULL when there is none. Any thread; never waits
 * for more than a pointer copy. */
struct shared_doc *reg_model_doc(const struct reg_model *m, enum reg_doc_kind kind);
/* Makes d (may be NULL) m's document `kind`, taking a reference to it; the
 * one it replaces is dropped (outside the lock). */
void reg_model_set_doc(const struct reg_model *m, enum reg_doc_kind kind, struct shared_doc *d);

/* A model outlives every snapshot that lists it while someone holds it. */
struct reg_model *reg_model_ref(const struct reg_model *m);
void reg_model_unref(const struct reg_model *m); /* NULL: does nothing */

#endif
