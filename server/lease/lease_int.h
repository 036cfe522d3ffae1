/* lease_int: what the lease socket's server files share: a connection
 * (lease_server.c serves it) and its outgoing frames (lease_frame.c builds
 * and sends them). lease_server.c calls lease_frame.c, never the other way. */
#ifndef TENSORD_LEASE_INT_H
#define TENSORD_LEASE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ipc_proto.h"
#include "jsonw.h"

struct gpu_lease;

struct conn_lease {
    uint64_t id;                   /* what the open answer told the client */
    struct gpu_lease *l;
};

struct conn {
    struct conn *prev, *next;      /* every open connection (serve thread) */
    struct conn *qnext;            /* the accept thread's hand-off queue */
    int fd;
    unsigned uid, pid;
    unsigned char *in;             /* received bytes not yet consumed */
    size_t in_len, in_cap;         /* in_cap <= IPC_HEADER_BYTES + IPC_MAX_REQUEST */
    unsigned char *out;            /* the answer being sent */
    size_t out_len, out_off;
    int fds[IPC_MAX_FDS];          /* borrowed descriptors to attach to out's first byte */
    size_t n_fds;
    int close_after;               /* close once out is flushed */
    int counted;                   /* counted in its uid's connections (not refused at adoption) */
    struct conn_lease *leases;
    size_t n_leases, cap_leases;
    uint64_t next_lease;           /* the id the next open gets */
    uint64_t active_ns;            /* last request answered or answer byte sent */
    uint64_t partial_ns;           /* when the unfinished request in `in` began */
};

/* Queues the answer w holds (taken: w is empty afterwards) as c's next
 * one, with fds attached. Returns 0, or -1 when a short error answer went
 * instead, without the fds: the writer ran out of memory, there was no
 * memory for its frame, or it was longer than a client reads
 * (answer_too_large: sent, a frame that long would cost the client the
 * connection and every lease on it). The frame of a big answer (its size
 * comes from the model's files) is allocated fallibly; only the short one
 * goes through xmalloc. */
int lease_frame_json(struct conn *c, struct jsonw *w, const int *fds, size_t n_fds);
/* Queues the error answer {"error": {"code", "message"}, "ok": false}. */
void lease_frame_error(struct conn *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Queues {"ok": true}. */
void lease_frame_ok(struct conn *c);
/* Sends what it can of c's answer. Returns 0, or -1 when the connection is
 * gone (or is to close, its answer sent). */
int lease_frame_flush(struct conn *c);

#endif
