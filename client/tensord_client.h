/* tensord_client: map models that tensord preloaded, without copying.
 *
 * A worker connects to the daemon's lease socket, opens a model, and gets
 * every tensor as a pointer into shared memory: a CUDA device pointer when
 * the model is on a GPU (the allocations are imported from POSIX fds with
 * cuMemImportFromShareableHandle and mapped read-only where the driver
 * allows), a read-only host pointer when it is on the host backend (the
 * sealed memfds are mmap'ed). The connection is the lease: the daemon keeps
 * the model's memory while it is open. Mappings stay valid after an evict
 * until this process unmaps them.
 *
 *     char err[256];
 *     struct tensord_client *c = tensord_connect(NULL, err, sizeof err);
 *     struct tensord_model *m = tensord_open(c, "llama", NULL, err, sizeof err);
 *     const struct tensord_tensor *w = tensord_model_find(m, "embed.weight");
 *     ... use w->data (host) or w->device_ptr (cuda) ...
 *     tensord_model_close(m);
 *     tensord_close(c);
 *
 * Lifetimes: the connection closes (and the lease ends) when the client and
 * every model opened on it are closed; a model is unmapped when it is closed
 * and every DLManagedTensor made from it has been deleted. Functions are
 * thread-safe except that one client must not run two requests at once.
 * Errors: NULL or -1 with a message in err. */
#ifndef TENSORD_CLIENT_H
#define TENSORD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TENSORD_API __attribute__((visibility("default")))
#define TENSORD_DEFAULT_SOCKET "/run/tensord/tensord.sock"

struct tensord_client;
struct tensord_model;
struct DLManagedTensor;

struct tensord_tensor {
    const char *name;
    const char *dtype;         /* safetensors spelling: "F32", "BF16", "U8"... */
    int ndim;
    const int64_t *shape;
    uint32_t alloc;            /* index of the allocation (shard) holding it */
    uint64_t offset, nbytes;   /* within that allocation */
    void *data;                /* host: address in this process (read-only); cuda: NULL */
    uint64_t device_ptr;       /* cuda: CUdeviceptr; host: (uintptr_t)data */
};

struct tensord_alloc {
    uint64_t byte_size;        /* bytes of shard data */
    uint64_t alloc_size;       /* mapped size (granularity-rounded) */
    uint64_t checksum;         /* tsum64 the daemon computed while loading */
    void *host_ptr;            /* host backend: the mapping */
    uint64_t device_ptr;       /* cuda: the mapped device address */
    const char *file;          /* the shard's file name within the model */
};

/* Connects to socket_path (NULL: $TENSORD_SOCKET, else
 * TENSORD_DEFAULT_SOCKET). The daemon refuses peers not on its allow-list;
 * that refusal shows up at the first request. */
TENSORD_API struct tensord_client *tensord_connect(const char *socket_path, char *err,
                                                   size_t errlen);

/* Opens model on device (NULL or "": wherever it is loaded; "host",
 * "cuda:N" or a GPU UUID to insist) and maps every allocation. */
TENSORD_API struct tensord_model *tensord_open(struct tensord_client *c, const char *model,
                                               const char *device, char *err, size_t errlen);

/* The daemon's list of preloaded models as JSON text
 * ({"ok":true,"models":[{"name","state","device","generation"}]}); caller
 * frees with free(). */
TENSORD_API char *tensord_list(struct tensord_client *c, char *err, size_t errlen);

TENSORD_API const char *tensord_model_name(const struct tensord_model *m);
TENSORD_API const char *tensord_model_backend(const struct tensord_model *m); /* "host", "cuda" */
TENSORD_API const char *tensord_model_device(const struct tensord_model *m);  /* "host", "cuda:0" */
TENSORD_API const char *tensord_model_device_uuid(const struct tensord_model *m);
TENSORD_API int tensord_model_device_index(const struct tensord_model *m);
TENSORD_API uint64_t tensord_model_generation(const struct tensord_model *m);

TENSORD_API size_t tensord_model_tensor_count(const struct tensord_model *m);
/* Tensors in the daemon's order (by file, then offset); NULL past the end. */
TENSORD_API const struct tensord_tensor *tensord_model_tensor(const struct tensord_model *m,
                                                              size_t i);
TENSORD_API const struct tensord_tensor *tensord_model_find(const struct tensord_model *m,
                                                            const char *name);
TENSORD_API size_t tensord_model_alloc_count(const struct tensord_model *m);
TENSORD_API const struct tensord_alloc *tensord_model_alloc(const struct tensord_model *m,
                                                            size_t i);

/* Recomputes every allocation's checksum from the mapped memory (cuda:
 * copied back through a host buffer) and compares it with the daemon's.
 * Returns 0, or -1 naming the first allocation that differs. */
TENSORD_API int tensord_model_verify(const struct tensord_model *m, char *err, size_t errlen);

/* Copies tensor i's bytes into dst (nbytes of them; from the device for
 * cuda models). Returns 0 or -1 with err. */
TENSORD_API int tensord_tensor_read(const struct tensord_model *m, size_t i, void *dst, char *err,
                                    size_t errlen);

/* Tensor i as a DLPack DLManagedTensor (kDLCPU or kDLCUDA), zero-copy. It
 * holds a reference on the model: the memory stays mapped until its deleter
 * runs. NULL for dtypes DLPack cannot express (F8, F6, F4). */
TENSORD_API struct DLManagedTensor *tensord_tensor_dlpack(struct tensord_model *m, size_t i);

TENSORD_API void tensord_model_close(struct tensord_model *m);
TENSORD_API void tensord_close(struct tensord_client *c);

#ifdef __cplusplus
}
#endif

#endif
