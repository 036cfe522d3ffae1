/* server: the daemon's state that every part of the HTTP server reads (the
 * configuration, the registry, the hasher, the GPU manager, the mirror,
 * the tokens), made by server/cli/daemon.c at start; only server/http/
 * touches the libmicrohttpd daemon it names. */
#ifndef TENSORD_SERVER_H
#define TENSORD_SERVER_H

#include <stdatomic.h>
#include <stddef.h>

#include "config.h"
#include "registry.h"

struct gpu_manager;
struct conns;
struct hasher;
struct blob_index;
struct doc_cache;
struct mirror;
struct MHD_Daemon;

struct server {
    const struct config *cfg;
    struct registry registry;
    struct gpu_manager *gpu;        /* NULL when GPU sharing is not set up */
    struct hasher *hasher;          /* content hashes of the served files */
    struct blob_index *blobs;       /* which file has a digest (GET /v1/blobs/...) */
    struct doc_cache *docs;         /* renders the model documents off the HTTP threads */
    struct mirror *mirror;          /* the pull-through mirror (upstream = URL), or NULL */
    struct MHD_Daemon *daemon;
    unsigned daemon_flags;          /* the MHD_USE_* flags it was started with */
    struct conns *conns;            /* the open connections: header deadlines, files being sent */
    uint64_t client_seed;           /* hashes peers' addresses (hash_seed): none can pick one
                                     * that counts as another's */
    atomic_uint connections;        /* open HTTP connections */
    atomic_uint in_flight;          /* requests being answered */
    atomic_int ready;               /* first scan done */
    atomic_int draining;            /* stopping: refuse new connections, close after each answer */
    char *read_token, *admin_token; /* bearer tokens; NULL when auth is off */
    char *s3_secret;                /* the S3 API's SigV4 secret key; NULL: anonymous */
    size_t s3_secret_len;
    int rescan_fd;                  /* eventfd the daemon rescans on (an answer's `rescan`); -1 */
};

#endif
