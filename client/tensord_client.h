/* tensord_client: map models that tensord preloaded, without copying.
 *
 * A worker connects to the daemon's lease socket, opens a model, and gets
 * every tensor as a pointer into shared memory: a CUDA device pointer when
 * the model is on a GPU (the allocations are imported from POSIX fds with
 * cuMemImportFromShareableHandle and mapped read-only where the driver
 * allows), a read-only host pointer when it is on the host backend (the
 * sealed memfds are mmap'ed). Every open model holds one lease (lease
 * protocol 2, docs/GPU.md): the daemon keeps the model's memory until the
 * model is closed and unmapped, or this process's connection ends. Mappings
 * stay valid after an evict until this process unmaps them.
 *
 *     char err[256];
 *     struct tensord_client *c = tensord_connect(NULL, err, sizeof err);
 *     struct tensord_model *m = tensord_open(c, "llama", NULL, err, sizeof err);
 *     const struct tensord_tensor *w = tensord_model_find(m, "embed.weight");
 *     ... use w->data (host) or w->device_ptr (cuda) ...
 *     tensord_model_close(m);
 *     tensord_close(c);
 *
 * Lifetimes: a model is unmapped, and its lease released, when it is closed
 * and every reference (tensord_model_ref) and DLPack tensor made from it is
 * gone; the connection closes when the client and every model opened on it
 * are closed. Every function is thread-safe; requests on one client are
 * serialised. Errors: NULL or -1 with a message in err, never an abort (out
 * of memory included).
 *
 * Writes: host models are mapped read-only (`data`); DLPack tensors of a
 * host model point at a private copy-on-write view of the same memory
 * (MAP_PRIVATE), so a consumer that writes in place changes only this
 * process's pages, never the daemon's or other workers'. CUDA mappings are
 * read-only where the driver allows: a kernel writing to them faults
 * (docs/GPU.md, "Writing to shared tensors"). */
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
struct DLManagedTensorVersioned;

/* tensord_tensor_dlpack_ex / _versioned: the tensor's bytes as a 1-D
 * uint8 tensor of nbytes elements, whatever its dtype (the fallback for a
 * dtype the consumer does not know). */
#define TENSORD_DLPACK_RAW 1u

struct tensord_tensor {
    const char *name;
    const char *dtype;         /* safetensors spelling: "F32", "BF16", "U8"... */
    int ndim;
    const int64_t *shape;
    uint32_t alloc;            /* index of the allocation (shard) holding it */
    uint64_t offset, nbytes;   /* within that allocation */
    void *data;                /* host: address in this process (read-only); cuda: NULL */
    uint64_t device_ptr;       /* cuda: CUdeviceptr; host: (uintptr_t)data */
    /* A partition's tensor (tensord_model_world > 1) that a rule of its
     * split cut: `shape` is the part's, which holds [part_start, part_stop)
     * of the part_length entries of dimension part_dim, numpy.array_split's
     * part for the rank (checked when the model was opened). part_dim is -1
     * for a tensor held whole. */
    int part_dim;
    int64_t part_start, part_stop, part_length;
};

struct tensord_alloc {
    uint64_t byte_size;        /* bytes of shard data */
    uint64_t alloc_size;       /* mapped size (granularity-rounded) */
    uint64_t checksum;         /* tsum64 of the allocation, as the daemon summed it once the
                                * preload was ready (has_checksum) */
    void *host_ptr;            /* host backend: the mapping */
    uint64_t device_ptr;       /* cuda: the mapped device address */
    const char *file;          /* the shard's file name within the model */
    int has_checksum;          /* 0 when the open came before the daemon had summed it:
                                * tensord_model_verify asks for it */
};

/* Connects to socket_path (NULL: $TENSORD_SOCKET when set, and only it: a
 * missing one is an error naming it, never a reason to try another
 * daemon; else the first that exists of $XDG_RUNTIME_DIR/tensord.sock and
 * TENSORD_DEFAULT_SOCKET, where a daemon without ipc_socket puts it; err
 * names every path tried when none does)
 * and agrees on lease protocol 2 ("hello"). Fails
 * when the daemon refuses this peer (allow-list) or speaks only protocol 1.
 * A connection that holds no lease may be closed by the daemon when idle
 * (ipc_idle_timeout): the next request reconnects by itself. An answer
 * that cannot be read whole (longer than 64 MiB, cut short) ends the
 * connection and the leases it held: the call that met it fails saying so
 * and how many leases ended (or, when that was a model's release, the next
 * call does, once); the models stay mapped, and later calls reconnect. */
TENSORD_API struct tensord_client *tensord_connect(const char *socket_path, char *err,
                                                   size_t errlen);

/* Opens model on device (NULL or "": wherever it is loaded, as
 * tensord_open_ex chooses; "host", "cuda:N" or a GPU UUID to insist), takes
 * a lease and maps every
 * allocation. On failure no lease stays held. While the model is being
 * reloaded in place (its new generation loads where the old one was, both
 * not fitting at once: the daemon answers "reloading"), it waits for the
 * new generation, up to TENSORD_RELOAD_WAIT_MS. */
#define TENSORD_RELOAD_WAIT_MS 120000
TENSORD_API struct tensord_model *tensord_open(struct tensord_client *c, const char *model,
                                               const char *device, char *err, size_t errlen);

/* Which instance tensord_open_ex opens, where the model is on several
 * devices or held as a tensor-parallel split (docs/GPU.md). Start from
 * TENSORD_OPEN_OPTIONS_INIT: later versions add fields at the end, and
 * `size` says which ones the caller knows. */
struct tensord_open_options {
    size_t size;               /* sizeof(struct tensord_open_options) */
    const char *device;        /* "host", "cuda:N" or a GPU UUID; NULL or "": the model's one
                                * instance, or among several the one on the device of the
                                * calling thread's current CUDA context (PyTorch's current
                                * device), when this process uses CUDA */
    int rank;                  /* the partition's rank; -1: any */
};
#define TENSORD_OPEN_OPTIONS_INIT {sizeof(struct tensord_open_options), NULL, -1}

/* tensord_open with options (NULL: TENSORD_OPEN_OPTIONS_INIT's). A device
 * or rank that matches no instance, or several instances that it cannot
 * choose between ("ambiguous": name the device or the rank), fail with the
 * instances the model has in err. */
TENSORD_API struct tensord_model *tensord_open_ex(struct tensord_client *c, const char *model,
                                                  const struct tensord_open_options *opts,
                                                  char *err, size_t errlen);

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
/* A tensor-parallel partition's world and rank (1 and 0 for a whole model),
 * and the split it was cut by as JSON text ({"world", "rank", "rules"}, as
 * POST .../gpu took it; NULL for a whole model). */
TENSORD_API int tensord_model_world(const struct tensord_model *m);
TENSORD_API int tensord_model_rank(const struct tensord_model *m);
TENSORD_API const char *tensord_model_split(const struct tensord_model *m);

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
 * The daemon sums them after a preload is ready, off its critical path:
 * when the open came first, this asks the daemon for them, waiting up to
 * TENSORD_SUMS_WAIT_MS while it sums. Returns 0, or -1 naming the first
 * allocation that differs (or why the daemon's sums could not be had). */
#define TENSORD_SUMS_WAIT_MS 600000
TENSORD_API int tensord_model_verify(const struct tensord_model *m, char *err, size_t errlen);

/* Copies tensor i's bytes into dst (nbytes of them; from the device for
 * cuda models). Returns 0 or -1 with err. */
TENSORD_API int tensord_tensor_read(const struct tensord_model *m, size_t i, void *dst, char *err,
                                    size_t errlen);

/* Tensor i as a DLPack (0.x, unversioned) DLManagedTensor (kDLCPU or
 * kDLCUDA), zero-copy. It holds a reference on the model: the memory stays
 * mapped until its deleter runs. Host models: it points at this process's
 * private copy-on-write view (legacy DLPack cannot say read-only, and
 * consumers write). BOOL is kDLBool and the F8 types have DLPack 1.1's
 * codes; NULL for F6 and F4 (DLPack has no packed sub-byte layout): use
 * TENSORD_DLPACK_RAW. */
TENSORD_API struct DLManagedTensor *tensord_tensor_dlpack(struct tensord_model *m, size_t i);
/* The same with flags (TENSORD_DLPACK_RAW); NULL with err on failure. */
TENSORD_API struct DLManagedTensor *tensord_tensor_dlpack_ex(struct tensord_model *m, size_t i,
                                                             unsigned flags, char *err,
                                                             size_t errlen);
/* Tensor i as a DLPack 1.x DLManagedTensorVersioned with the read-only
 * flag set, for consumers that honour it (__dlpack__(max_version=(1, x))).
 * Host models: also over the copy-on-write view, so that a consumer that
 * ignores the flag still cannot write into the daemon's pages. */
TENSORD_API struct DLManagedTensorVersioned *
tensord_tensor_dlpack_versioned(struct tensord_model *m, size_t i, unsigned flags, char *err,
                                size_t errlen);

/* Another reference on m (for bindings whose arrays outlive the handle the
 * user closes); each is dropped with tensord_model_close. Returns m. */
TENSORD_API struct tensord_model *tensord_model_ref(struct tensord_model *m);

/* Drops a reference; the last one unmaps the model and releases its lease. */
TENSORD_API void tensord_model_close(struct tensord_model *m);
TENSORD_API void tensord_close(struct tensord_client *c);

#ifdef __cplusplus
}
#endif

#endif
