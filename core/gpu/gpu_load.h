/* gpu_load: streams shard bytes from files into backend allocations.
 *
 * Reads go through io_uring (O_DIRECT where the filesystem allows it,
 * buffered otherwise; plain pread when io_uring is unavailable) into the
 * backend's ring of staging buffers. A buffer's copy to the allocation is
 * started as soon as its read completes, while the next reads are in flight,
 * and the buffer is refilled only after stage_wait says that copy is done.
 * The allocation checksum (ipc_tsum) is summed from the staging buffers on
 * the way. */
#ifndef TENSORD_GPU_LOAD_H
#define TENSORD_GPU_LOAD_H

#include <liburing.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu.h"

#define GPU_LOAD_ALIGN 4096   /* O_DIRECT offset/length/buffer alignment */

struct gpu_loader {
    struct gpu_backend *be;
    struct gpu_stage *stage;
    unsigned nbuf;
    size_t chunk;              /* shard bytes per staging buffer (multiple of GPU_LOAD_ALIGN) */
    int have_ring;
    struct io_uring ring;
    const atomic_int *cancel;  /* nonzero: stop at the next chunk */
    _Atomic uint64_t *progress;/* bytes copied so far, for status */
    char io_mode[32];          /* "io_uring+O_DIRECT", "io_uring" or "pread": the last shard's */
    int unsafe;                /* reads may still land in the staging buffers: never free them */
    /* io_uring_wait_cqe, replaceable by tests to inject failures. */
    int (*wait_cqe)(struct io_uring *ring, struct io_uring_cqe **cqe);
};

/* Opens the staging ring (nbuf buffers of chunk bytes plus alignment slack)
 * on device dev and the io_uring. Returns 0 or -errno with err. */
int gpu_loader_init(struct gpu_loader *l, struct gpu_backend *be, int dev, unsigned nbuf,
                    size_t chunk, const atomic_int *cancel, _Atomic uint64_t *progress,
                    struct st_error *err);

/* Copies size bytes at file_off of fd into a[0..size). direct_fd, when not
 * -1, is the same file opened with O_DIRECT and is preferred. Waits for every
 * copy, and on every path for every read it started (an error cancels the
 * reads still in flight and waits for them), before returning: the staging
 * buffers are then the caller's again. Should the ring itself fail so that
 * this cannot be known, l->unsafe is set and gpu_loader_close leaks the
 * buffers rather than free memory the kernel may still write. *checksum
 * gets the ipc_tsum of the bytes. Returns 0, -errno with err, or -ECANCELED
 * when *cancel was set. */
int gpu_loader_shard(struct gpu_loader *l, int fd, int direct_fd, uint64_t file_off,
                     uint64_t size, struct gpu_alloc *a, uint64_t *checksum, struct st_error *err);

/* Compares a[0..size) (read back from the backend) with the file bytes.
 * Returns 0, -ECANCELED, or -errno with err naming the first differing
 * offset (ST_ERR_DEVICE) or the failed read. */
int gpu_loader_verify(struct gpu_loader *l, int fd, uint64_t file_off, uint64_t size,
                      struct gpu_alloc *a, struct st_error *err);

void gpu_loader_close(struct gpu_loader *l);

#endif
