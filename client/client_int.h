/* client_int: what the client library's files share: the connection
 * (client.c), the mapped model (model.c, dlpack.c, client_cuda.c). Names
 * shared between files start with tdc_; none is exported from the .so. */
#ifndef TENSORD_CLIENT_INT_H
#define TENSORD_CLIENT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "tensord_client.h"

struct answer;

struct tensord_client {
    atomic_int refs;           /* the user's + one per model still mapped */
    pthread_mutex_t lock;      /* one request at a time; guards what follows */
    int fd;                    /* -1 after a failed reconnect */
    char *path;                /* to reconnect while no lease is held */
    unsigned leases;           /* leases this connection holds */
    unsigned epoch;            /* bumped by every (re)connection and loss of one */
    char lost[320];            /* why the last connection and its leases were lost, for the next
                                * call to report when the call that lost them could not (a
                                * release); "" when reported */
};

struct tensord_model {
    atomic_int refs;           /* the user's + tensord_model_ref's + one per live DLPack tensor */
    struct tensord_client *c;  /* holds a client reference until unmapped */
    uint64_t lease;            /* the daemon's id for this open's lease; 0 = none held */
    unsigned epoch;            /* the connection (c->epoch) the lease belongs to */
    char *name, *backend, *device, *uuid;
    int dev_index;
    uint64_t generation;
    uint64_t world, rank;      /* 1 and 0: the whole model */
    char *split;               /* a partition's split (JSON), else NULL */
    int is_cuda;
    size_t n_allocs;
    struct tensord_alloc *allocs;
    void **cow;                /* host: per allocation, a private copy-on-write view (DLPack) */
    void *cuda;                /* client_cuda.c's per-model state */
    size_t n_tensors;
    struct tensord_tensor *tensors; /* names, dtypes and shapes owned here */
};

/* answer.c (the library's lowest module that reports errors) */
/* snprintf into err when there is one. */
void tdc_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* client.c */
extern const char tdc_oom[];   /* "out of memory" */
/* Drops a reference on c; the last one closes the connection. */
void tdc_client_unref(struct tensord_client *c);
void tdc_close_fds(int *fds, size_t n);

enum { RT_OK = 0, RT_REFUSED = -1, RT_TRANSPORT = -2 };
/* Sends req on c (c->lock held) and reads the answer into *a, with up to
 * max_fds descriptors into fds (*n_fds of them; closed unless RT_OK) and,
 * when raw is not NULL, the answer's text into *raw (caller frees).
 * Reconnects once when the connection is gone and held no lease. RT_OK
 * when the daemon said ok; RT_REFUSED with err "CODE: message" when it said
 * no or answered nonsense; RT_TRANSPORT when no answer came. */
int tdc_roundtrip(struct tensord_client *c, const char *req, int *fds, size_t max_fds,
                  size_t *n_fds, struct answer *a, char **raw, char *err, size_t errlen);
/* Gives lease back to the daemon, if the connection that took it (epoch) is
 * still the one open. Takes c->lock. */
void tdc_release_lease(struct tensord_client *c, uint64_t lease, unsigned epoch);

/* model.c: drops a reference on m; the last one unmaps it and releases
 * its lease. */
void tdc_model_unref(struct tensord_model *m);

/* client_cuda.c (stubs in model.c without CUDA). fds[i] is allocation i's
 * descriptor; the caller closes them afterwards. They leave the calling
 * thread's current CUDA context as they found it. */
int tdc_cuda_map(struct tensord_model *m, const int *fds, char *err, size_t errlen);
void tdc_cuda_unmap(struct tensord_model *m);
int tdc_cuda_read(struct tensord_model *m, void *dst, uint64_t src, size_t n, char *err,
                  size_t errlen);
/* The UUID of the device of the calling thread's current CUDA context, into
 * uuid ("GPU-..."), when this process has loaded the driver and a context
 * is current: 0; else -1 (nothing to prefer). Never loads the driver into a
 * process that has not. */
int tdc_cuda_current_uuid(char *uuid, size_t len);

#endif
