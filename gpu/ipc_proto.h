/* ipc_proto: the lease socket's wire format, parsed from memory so it can be
 * fuzzed.
 *
 * Each message is a 4-byte little-endian length followed by that many bytes
 * of JSON (one object). Requests are at most IPC_MAX_REQUEST bytes; a longer
 * length prefix is answered with an error and the connection is closed.
 * Requests: {"op":"hello","protocol":N},
 * {"op":"open","model":M,"device":D?,"rank":R?,"prefer_device":P?},
 * {"op":"release","lease":L}, {"op":"checksums","lease":L}, {"op":"list"},
 * {"op":"close"}. Answers:
 * {"ok":true,...} or {"ok":false,"error":{"code":C,"message":M}}. An "open"
 * answer carries one file descriptor per allocation (SCM_RIGHTS, in
 * allocation order) and the lease's id.
 *
 * Protocol 2 (IPC_PROTOCOL) made a lease belong to one open: "release"
 * ends it while the connection stays; the connection ending still ends
 * every lease it holds, which is all that protocol 1 clients (which never
 * say hello) rely on. "hello" lets a client insist on protocol 2: a daemon
 * without it answers bad_request (unknown op), one with it answers the
 * protocols it speaks. "checksums" (a daemon too old for it answers
 * bad_request) asks for a leased instance's allocation checksums, which
 * the daemon sums after the preload, so an open answer may come before
 * them: {"ok":true,"state":"pending"|"ready"|"unavailable","reason"?,
 * "checksums":[hex, one per allocation, when ready]}.
 *
 * The checksum helpers are inline so the client library, which links
 * nothing of core but util, computes the same sums. */
#ifndef TENSORD_IPC_PROTO_H
#define TENSORD_IPC_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "st_error.h"

#define IPC_HEADER_BYTES 4
/* The largest valid request is an "open" with three names of IPC_MAX_NAME
 * bytes, each \u-escaped in full (6 bytes per byte): about 72 KiB. */
#define IPC_MAX_REQUEST (96u << 10)
#define IPC_MAX_ANSWER (64u << 20)          /* answers carry whole tensor tables */
#define IPC_MAX_NAME 4096                   /* model and device names */
#define IPC_MAX_FDS 250                     /* below the kernel's SCM_MAX_FD (253) */
#define IPC_PROTOCOL 2                      /* the newest protocol; 1 is still served */
#define IPC_MAX_LEASES 1024                 /* leases one connection may hold at once */

enum ipc_op { IPC_OP_OPEN, IPC_OP_LIST, IPC_OP_CLOSE, IPC_OP_HELLO, IPC_OP_RELEASE,
              IPC_OP_CHECKSUMS };

struct ipc_request {
    enum ipc_op op;
    char model[IPC_MAX_NAME + 1];   /* "open" only */
    char device[IPC_MAX_NAME + 1];  /* "open" only; "" = wherever the model is loaded */
    int64_t rank;                   /* "open" only: the partition's rank; -1 = any */
    char prefer[IPC_MAX_NAME + 1];  /* "open"'s prefer_device: the worker's own device,
                                     * chosen among several instances; "" = none */
    uint64_t lease;                 /* "release", "checksums": the id the open answer gave */
    uint64_t protocol;              /* "hello" only: the protocol the client speaks */
};

enum ipc_frame_status { IPC_FRAME_NEED_MORE = 0, IPC_FRAME_READY = 1, IPC_FRAME_TOO_LARGE = -1 };

/* Looks for one whole frame at the start of buf[0..len). On READY sets
 * *payload and *payload_len to the JSON and *consumed to the frame's total size;
 * TOO_LARGE when the prefix announces more than max bytes. */
enum ipc_frame_status ipc_frame_next(const unsigned char *buf, size_t len, size_t max,
                                     const unsigned char **payload, size_t *payload_len,
                                     size_t *consumed);

/* Parses one request's JSON. Returns 0, or -EINVAL with err
 * (ST_ERR_INVALID_ARGUMENT): a message for the client that names the field. */
int ipc_request_parse(const char *json, size_t len, struct ipc_request *req, struct st_error *err);

/* Writes the 4-byte prefix for a payload of n bytes. */
static inline void ipc_put_header(unsigned char hdr[IPC_HEADER_BYTES], uint32_t n)
{
    hdr[0] = (unsigned char)n;
    hdr[1] = (unsigned char)(n >> 8);
    hdr[2] = (unsigned char)(n >> 16);
    hdr[3] = (unsigned char)(n >> 24);
}

static inline uint32_t ipc_get_header(const unsigned char hdr[IPC_HEADER_BYTES])
{
    return (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
           (uint32_t)hdr[3] << 24;
}

/* The allocation checksum ("tsum64") that "open" answers carry: a
 * position-dependent sum over the little-endian 8-byte words of the shard
 * (the last one zero-padded). Being a sum, pieces that start at multiples of
 * 8 can be summed in any order and added: ipc_tsum_add(acc, piece, len, off)
 * for each piece at byte offset off, then ipc_tsum_final(acc, total size). */
static inline uint64_t ipc_tsum_word(uint64_t w, uint64_t i)
{
    return (w ^ (i * 0x9E3779B97F4A7C15ULL)) * 0xBF58476D1CE4E5B9ULL;
}

static inline uint64_t ipc_tsum_add(uint64_t acc, const void *piece, size_t len, uint64_t off)
{
    const unsigned char *p = piece;
    uint64_t i = off / 8;
    size_t n = len / 8;
    for (size_t k = 0; k < n; k++) {
        uint64_t w;
        memcpy(&w, p + 8 * k, 8);
        acc += ipc_tsum_word(w, i + k);
    }
    if (len % 8) {
        uint64_t w = 0;
        memcpy(&w, p + 8 * n, len % 8);
        acc += ipc_tsum_word(w, i + n);
    }
    return acc;
}

static inline uint64_t ipc_tsum_final(uint64_t acc, uint64_t size)
{
    uint64_t h = acc ^ size;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 33;
    return h;
}

#endif
