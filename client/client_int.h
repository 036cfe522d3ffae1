/* client_int: what client.c shares with client_cuda.c. */
#ifndef TENSORD_CLIENT_INT_H
#define TENSORD_CLIENT_INT_H

#include <stdatomic.h>
#include <stddef.h>

#include "tensord_client.h"

struct tensord_model {
    atomic_int refs;           /* the user's + tensord_model_ref's + one per live DLPack tensor */
    struct tensord_client *c;  /* holds a client reference until unmapped */
    uint64_t lease;            /* the daemon's id for this open's lease; 0 = none held */
    unsigned epoch;            /* the connection (c->epoch) the lease belongs to */
    char *name, *backend, *device, *uuid;
    int dev_index;
    uint64_t generation;
    int is_cuda;
    size_t n_allocs;
    struct tensord_alloc *allocs;
    void **cow;                /* host: per allocation, a private copy-on-write view (DLPack) */
    void *cuda;                /* client_cuda.c's per-model state */
    size_t n_tensors;
    struct tensord_tensor *tensors; /* names, dtypes and shapes owned here */
};

/* client_cuda.c (stubs in client.c without CUDA). fds[i] is allocation i's
 * descriptor; the caller closes them afterwards. They leave the calling
 * thread's current CUDA context as they found it. */
int tdc_cuda_map(struct tensord_model *m, const int *fds, char *err, size_t errlen);
void tdc_cuda_unmap(struct tensord_model *m);
int tdc_cuda_read(struct tensord_model *m, void *dst, uint64_t src, size_t n, char *err,
                  size_t errlen);

#endif
