/* config: every option in one typed, range-checked table.
 *
 * Precedence: built-in defaults < config file < command line. The parser
 * reads from memory (so it can be fuzzed) and stops at the first bad value
 * with a message naming the file, the line and the option. */
#ifndef TENSORD_CONFIG_H
#define TENSORD_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "st_error.h"

#define CONFIG_MAX_PRELOAD 64
/* The lease socket of a daemon run as root without ipc_socket; the last
 * place a client looks. */
#define TENSORD_SYSTEM_SOCKET "/run/tensord/tensord.sock"
#define CONFIG_MAX_IDS 64
#define CONFIG_MAX_CORS_ORIGINS 64
#define CONFIG_MAX_ALLOWED_HOSTS 64

struct config {
    /* [server] */
    char *models;                   /* models root */
    char *listen;                   /* ADDR:PORT, [v6]:PORT */
    unsigned threads;               /* HTTP worker threads, 0 = one per CPU */
    unsigned max_connections;       /* total; beyond it new connections get 503 */
    unsigned max_connections_per_ip;/* 0 = unlimited */
    unsigned connection_timeout;    /* idle seconds before a connection is closed */
    unsigned header_timeout;        /* seconds to send a request's line and headers (slowloris cap) */
    unsigned max_request_header_bytes; /* URL + headers per request (431 beyond) */
    unsigned max_ranges;            /* parts in one multipart/byteranges answer */
    uint64_t max_slice_bytes;       /* largest slice answer, 400 beyond; 0 = unlimited */
    unsigned max_fetch_body_bytes;  /* request body of a POST fetch, 413 beyond */
    unsigned max_fetch_tensors;     /* tensors in one fetch answer, 413 beyond */
    uint64_t max_fetch_bytes;       /* largest fetch answer, 413 beyond; 0 = unlimited */
    int watch;                      /* rescan on inotify events in the models root */
    int sendfile;                   /* zero-copy contiguous spans; off: copy and verify every block */
    int ui;                         /* serve the web console at /ui/ */
    char *state_dir;                /* state kept across restarts; empty = automatic */
    /* [hash] */
    unsigned hash_threads;          /* background SHA-256 threads */
    uint64_t hash_max_bytes_per_second; /* their combined read rate, 0 = unlimited */
    unsigned hash_wait;             /* seconds a Hugging Face answer waits for a repo's hashes */
    /* [log] */
    char *access_log;               /* "-" = stderr, "off", or a path */
    char *log_level;                /* error, warn, info, debug */
    /* [security] */
    char *auth_token_file;          /* tokens file; empty = no authentication */
    int insecure_listen;            /* beyond loopback without auth_token_file is allowed */
    char *tls_cert, *tls_key;       /* PEM paths; both set = HTTPS */
    unsigned n_cors_origins;        /* 0 = CORS off */
    char *cors_origins[CONFIG_MAX_CORS_ORIGINS]; /* "scheme://host[:port]", or one "*" */
    unsigned n_allowed_hosts;       /* Host names answered without tokens */
    char *allowed_hosts[CONFIG_MAX_ALLOWED_HOSTS]; /* NAME, *.DOMAIN, or one "*" */
    /* [gpu] */
    char *ipc_socket;               /* Unix socket path for leases */
    unsigned n_preload;
    char *preload[CONFIG_MAX_PRELOAD]; /* "MODEL@DEVICE" */
    unsigned n_allow_uids, n_allow_gids;
    uint32_t allow_uids[CONFIG_MAX_IDS], allow_gids[CONFIG_MAX_IDS];
    int legacy_ipc;                 /* also export cudaIpcMemHandle_t per allocation */
    unsigned ipc_idle_timeout;      /* seconds; closes lease-less idle or stalled connections */
    unsigned ipc_max_connections_per_uid; /* lease socket connections of one peer uid; 0 = no limit */
    unsigned ipc_max_leases_per_uid; /* leases held by one peer uid's connections; 0 = no limit */
    int verify;                     /* compare device bytes with the file before ready */
    unsigned staging_buffers;       /* preload disk reads in flight (one staging buffer each) */
    uint64_t staging_buffer_bytes;  /* size of each staging buffer */
    unsigned preload_threads;       /* page-cache copy threads; 0 = from the usable CPUs */
    uint64_t preload_memory_limit;  /* most bytes preloads may hold on one device; 0 = no limit */
    uint64_t staging_memory_limit;  /* most bytes the staging rings hold together; 0 = a quarter
                                     * of the memory this process may use */
    /* [s3] */
    int s3;                         /* serve the read-only S3 API under /s3/ */
    char *s3_access_key;            /* SigV4 access key id; empty = anonymous reads */
    char *s3_secret_key_file;       /* file holding its secret key */
    /* [mirror] */
    char *upstream;                 /* the mirrored endpoint's URL; empty = not a mirror */
    char *mirror_cache_dir;         /* the cache; empty = STATE_DIR/mirror */
    uint64_t mirror_cache_max_bytes;/* the cache's cap */
    uint64_t mirror_block_bytes;    /* one Range request to the upstream */
    unsigned mirror_fetch_threads;  /* blocks fetched at once */
    unsigned mirror_auth_ttl;       /* seconds an upstream answer about a file is reused */
    char *mirror_offline;           /* serve-cached or strict: what an unreachable upstream leaves */
    unsigned mirror_stale_max_age;  /* seconds a name's last answer is served stale */
    char *upstream_token_file;      /* the mirror's own token for its upstream */
    char *upstream_redirect_private;/* auto, yes or no: redirects away from the upstream to
                                     * private addresses */
    uint64_t upstream_max_bytes_per_second; /* 0 = unlimited */
};

/* Fills cfg with the built-in defaults (strings are heap copies). */
void config_defaults(struct config *cfg);
/* Applies the INI text buf[0..len) labelled `file`. Returns 0, or -EINVAL
 * with err (ST_ERR_INVALID_ARGUMENT): "FILE:LINE: option NAME: reason". */
int config_load_buffer(struct config *cfg, const char *buf, size_t len, const char *file,
                       struct st_error *err);
/* Reads path and applies it as config_load_buffer does; -errno with err
 * (ST_ERR_IO: "PATH: strerror") when it cannot be read. */
int config_load_file(struct config *cfg, const char *path, struct st_error *err);
/* Sets one option by its name (command-line overrides). Returns 0 or -EINVAL
 * with err. */
int config_set(struct config *cfg, const char *name, const char *value, struct st_error *err);
/* Prints the effective configuration as a loadable INI file: every option,
 * under its section, with its one-line doc as a comment. */
void config_print(const struct config *cfg, FILE *out);
void config_free(struct config *cfg);

/* The Unix socket for GPU leases: ipc_socket when set, else $TENSORD_SOCKET,
 * else $RUNTIME_DIRECTORY/tensord.sock (systemd's RuntimeDirectory=; the
 * first of several ':'-separated paths), else, when not running as root,
 * $XDG_RUNTIME_DIR/tensord.sock, else /run/tensord/tensord.sock. Caller
 * frees. Clients look for it the same way (config_ipc_socket_candidates). */
char *config_ipc_socket_path(const struct config *cfg);
/* The paths a client tries, in order, to find the daemon's socket. A
 * socket someone named (cfg's ipc_socket when cfg is not NULL and it is
 * set, else $TENSORD_SOCKET) is the only one: a missing one is an error
 * naming it, never a reason to talk to whatever daemon another place
 * holds; *named is then the name of where it came from ("ipc_socket",
 * "$TENSORD_SOCKET"), else NULL and the paths are
 * $XDG_RUNTIME_DIR/tensord.sock and /run/tensord/tensord.sock, without
 * duplicates. Returns how many were written to paths[0..max), each a heap
 * string the caller frees. */
size_t config_ipc_socket_candidates(const struct config *cfg, char **paths, size_t max,
                                    const char **named);
/* 1 when the listen address reaches only the local host: a loopback
 * address (127.0.0.0/8, ::1) or a name that resolves only to those. */
int config_listen_is_loopback(const char *listen);
/* 1 when name is a boolean option (so `--name` alone means true). */
int config_option_is_bool(const char *name);
/* The state directory: state_dir when set, else $STATE_DIRECTORY
 * (systemd's StateDirectory=; the first of several ':'-separated paths),
 * else /var/lib/tensord when running as root, else
 * $XDG_STATE_HOME/tensord, else $HOME/.local/state/tensord. NULL when none
 * of these can be had (no HOME): state is then kept in memory only. Caller
 * frees. */
char *config_state_dir_path(const struct config *cfg);
/* threads, with 0 resolved to the number of online CPUs (at least 1). */
unsigned config_effective_threads(const struct config *cfg);

#endif
