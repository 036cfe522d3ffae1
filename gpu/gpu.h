/* gpu: the memory backends that preloads fill and workers map.
 *
 * Two backends share one interface. `host` keeps each shard in a sealed
 * memfd (shared memory for CPU workers, and what the tests exercise where no
 * GPU exists); `cuda` keeps each shard in one cuMemCreate allocation exported
 * as a POSIX file descriptor, with the driver loaded at run time so the same
 * binary runs on hosts without a GPU. Both hand workers one fd per shard.
 *
 * Copies to a device go through a ring of staging buffers owned by the
 * backend (pinned host memory for cuda), one copy queue (stream) per
 * buffer: a loader fills buffer i, starts its copy with stage_copy, and
 * calls stage_wait before it fills buffer i again. Several threads may
 * each own some of the buffers. A backend whose memory the CPU can write
 * (host) also takes plain synchronous writes from any memory (write). */
#ifndef TENSORD_GPU_H
#define TENSORD_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "device_name.h"
#include "st_error.h"

#define GPU_LEGACY_HANDLE_BYTES 64 /* sizeof(CUipcMemHandle) */

/* What mem_available keeps back. On a GPU: room for the daemon's own
 * context and a worker's (kernels, cuBLAS workspaces), which a preload
 * that takes every free byte would leave without memory (a sixteenth of
 * the device on one smaller than 4 GiB). On the host: a
 * sixteenth of the memory this process may use, at least 256 MiB and at
 * most 4 GiB, for everything else the machine runs (the page cache the
 * preload reads from, workers, the daemon). */
#define GPU_RESERVE_DEVICE (256ull << 20)
#define GPU_RESERVE_HOST_MIN (256ull << 20)
#define GPU_RESERVE_HOST_MAX (4ull << 30)

/* One device; a backend's devices[i] is always ordinal i. */
struct gpu_device {
    int index;                 /* the ordinal (= its position in devices[]) */
    char uuid[DEVICE_NAME_UUID_MAX];   /* "GPU-...", "MIG-..." (as nvidia-smi -L prints), or "host";
                                * "" when it could not be read */
    char name[128];
    uint64_t memory_bytes;
    int numa_node;             /* the host NUMA node it is attached to; -1: unknown, or none
                                * (one node, the host backend) */
    char error[192];           /* why the device cannot be used; "" when it can */
};

/* One shard's memory. The fd stays owned by the allocation: senders dup it
 * (SCM_RIGHTS does), never close it. */
struct gpu_alloc {
    uint64_t size;             /* bytes of shard data */
    uint64_t alloc_size;       /* size of the allocation: size rounded up to the granularity */
    int fd;                    /* shareable handle (memfd, or CUDA POSIX fd); -1 before alloc */
    uint64_t legacy_size;      /* size of the legacy cuMemAlloc copy, 0 when none */
    unsigned char legacy_handle[GPU_LEGACY_HANDLE_BYTES]; /* its CUipcMemHandle */
    void *priv;                /* backend state */
};

struct gpu_backend;
struct gpu_stage;

struct gpu_backend_ops {
    /* Creates an allocation of at least size bytes on device dev (legacy: also
     * a cuMemAlloc copy with an IPC handle). `label` names it (memfd name).
     * Returns 0, or -errno with err (ST_ERR_DEVICE_MEMORY when the memory is not there) and *a left freeable. */
    int (*alloc)(struct gpu_backend *b, int dev, uint64_t size, int legacy, const char *label,
                 struct gpu_alloc *a, struct st_error *err);
    /* Releases the backend's hold on the memory; mappings that workers
     * imported keep it alive until they unmap. Safe on a failed alloc. */
    void (*free)(struct gpu_backend *b, struct gpu_alloc *a);
    /* A ring of nbuf staging buffers of bytes each (page-aligned), each with
     * its own copy queue, for copies to device dev. NULL with err on
     * failure. Buffers may be used from several threads, one thread per
     * buffer at a time. */
    struct gpu_stage *(*stage_open)(struct gpu_backend *b, int dev, unsigned nbuf, size_t bytes,
                                    struct st_error *err);
    void *(*stage_buf)(struct gpu_stage *s, unsigned i);
    /* Starts copying len bytes at src (inside buffer i) to a at offset off. */
    int (*stage_copy)(struct gpu_stage *s, unsigned i, struct gpu_alloc *a, uint64_t off,
                      const void *src, size_t len, struct st_error *err);
    /* Returns once buffer i's last copy completed (the buffer may be refilled). */
    int (*stage_wait)(struct gpu_stage *s, unsigned i, struct st_error *err);
    void (*stage_close)(struct gpu_stage *s);
    /* Copies len bytes from any memory to a at offset off and returns when
     * they are there; NULL for backends that copy only from their staging
     * buffers (cuda). Safe from several threads on disjoint ranges. */
    int (*write)(struct gpu_backend *b, struct gpu_alloc *a, uint64_t off, const void *src,
                 size_t len, struct st_error *err);
    /* All copies into a landed: make it read-only for sharing (host: seal
     * the memfd; cuda: fill the legacy copy). Returns 0 or -errno with err. */
    int (*finish)(struct gpu_backend *b, struct gpu_alloc *a, struct st_error *err);
    /* Copies len bytes at off of a into dst (verification, checksums). */
    int (*read_back)(struct gpu_backend *b, struct gpu_alloc *a, uint64_t off, void *dst,
                     size_t len, struct st_error *err);
    /* Bytes a new preload may take on device dev now: the device's free
     * memory (cuda), or what the machine and this process's cgroups can
     * still give (host), less the backend's reserve (GPU_RESERVE_*).
     * Returns 0 with *bytes, or -errno with err when it cannot tell. */
    int (*mem_available)(struct gpu_backend *b, int dev, uint64_t *bytes, struct st_error *err);
    void (*destroy)(struct gpu_backend *b);
};

struct gpu_backend {
    const struct gpu_backend_ops *ops;
    const char *name;          /* "host" or "cuda" */
    enum device_kind kind;
    const char *handle_type;   /* as workers see it: "memfd" or "posix_fd" */
    uint64_t alloc_round;      /* allocations are made in multiples of this (admission
                                * counts them so) */
    size_t n_devices;
    struct gpu_device devices[DEVICE_NAME_MAX_DEVICES];
    void *priv;
};

/* The memfd backend; never fails. Caller destroys with b->ops->destroy. */
struct gpu_backend *gpu_host_new(void);

/* The CUDA backend when a driver and at least one device are usable, else
 * NULL with err (ST_ERR_NO_DEVICE) saying why: no libcuda.so.1, cuInit
 * error, no devices, built without CUDA support. */
struct gpu_backend *gpu_cuda_probe(struct st_error *err);

/* Index (= ordinal) of the device named by index or uuid in b, or -1.
 * The device may be one that cannot be used (its error is set). */
int gpu_find_device(const struct gpu_backend *b, int index, const char *uuid);

#endif
