/* daemon: the main thread of `tensord serve`. It scans the models root,
 * starts HTTP and GPU sharing, then waits for signals and inotify events:
 * SIGHUP or a change under the root rescans and swaps the snapshot,
 * SIGINT/SIGTERM drain in-flight requests and exit 0. */
#include "daemon.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "auth.h"
#include "blob_index.h"
#include "s3_auth.h"
#include "conns.h"
#include "doc_cache.h"
#include "gpu_manager.h"
#include "gpu_doc.h"
#include "lease_server.h"
#include "hasher.h"
#include "http.h"
#include "log.h"
#include "http_metrics.h"
#include "metrics.h"
#include "mirror.h"
#include "mirror_start.h"
#include "util.h"
#include "watch.h"

/* Quiet time after the last inotify event before rescanning, so a copy of
 * many shards triggers one rescan, not one per file. */
#define RESCAN_DEBOUNCE_MS 500
#define DRAIN_MS 30000
/* A file written continuously must not postpone the rescan forever. */
#define RESCAN_MAX_DELAY_MS 5000
/* Directories watched below the root: as deep as a scan looks by default. */
#define REGISTRY_WATCH_DEPTH 16

/* sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET. */
static void notify_systemd(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void notify_systemd(const char *fmt, ...)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || (path[0] != '/' && path[0] != '@'))
        return;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (len >= sizeof(sa.sun_path))
        return;
    memcpy(sa.sun_path, path, len);
    if (sa.sun_path[0] == '@')
        sa.sun_path[0] = '\0';
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    sendto(fd, msg, (size_t)n, MSG_NOSIGNAL, (struct sockaddr *)&sa,
           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
    close(fd);
}

/* A snapshot holds one descriptor per .safetensors file; a reload adds
 * those of the models that changed until the old snapshot is released. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* The GPU manager's other reader (gm_options.hold): the hasher. */
static void *hold_for_preload(void *ctx, const struct reg_file *const *files, size_t n,
                              int *needed)
{
    return hasher_hold(ctx, files, n, needed);
}

static void release_for_preload(void *ctx, void *hold)
{
    hasher_release(ctx, hold);
}

/* Warns when the snapshot's descriptors leave too few for the connections. */
static void check_fd_budget(const struct server *srv, const struct reg_snapshot *r)
{
    struct rlimit rl;
    uint64_t need = (uint64_t)r->n_open * 2 + (uint64_t)srv->cfg->max_connections * 2 + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
        log_msg(LOG_WARN, "RLIMIT_NOFILE is %llu: the snapshot holds %zu files open and "
                          "max_connections is %u; raise it to %llu or more (LimitNOFILE=)",
                (unsigned long long)rl.rlim_cur, r->n_open, srv->cfg->max_connections,
                (unsigned long long)need);
}

static void publish_registry_metrics(const struct reg_snapshot *r)
{
    metrics_set_registry(r->n_models, r->n_invalid, r->n_files, r->n_tensors, r->bytes,
                         r->generation);
    metrics_set_open_files(r->n_open);
}

static void log_invalid_models(const struct reg_snapshot *r, const struct reg_snapshot *prev)
{
    for (size_t i = 0; i < r->n_models; i++) {
        const struct reg_model *m = r->models[i];
        const struct reg_model *was = prev ? reg_snapshot_find_model(prev, m->name, strlen(m->name)) : NULL;
        if (m->state != MODEL_READY && m != was) /* reused models were reported already */
            log_msg(LOG_WARN, "model %s is invalid: %s", m->name, m->error.message);
    }
}

/* Scans the root (reusing prev's unchanged models) and hands the heap that
 * header parsing used back to the kernel. */
static struct reg_snapshot *scan_and_trim(const struct config *cfg, uint64_t generation,
                                          const struct reg_snapshot *prev, struct st_error *err)
{
    struct reg_scan_opts opts = {.prev = prev};
    struct reg_snapshot *r = reg_snapshot_scan(cfg->models, generation, &opts, err);
    malloc_trim(0);
    return r;
}

/* The daemon's main loop state. */
struct loop {
    struct server *srv;
    struct watch *watch;       /* NULL without inotify or with watch = false */
    uint64_t generation;
    int pending;               /* a rescan is due once things are quiet */
    uint64_t pending_since;    /* monotonic ns of the first event of the burst */
    uint64_t last_event;       /* ... and of its latest */
    uint64_t retry_at;         /* monotonic ns of the next retry of a scan that met errors; 0 */
    unsigned retry_ms;         /* its back-off */
};

/* The watcher saw file (dev, ino) written: no answer may go on sending it. */
static void cut_transfers(uint64_t dev, uint64_t ino, void *arg)
{
    struct loop *l = arg;
    unsigned n = conns_cut_file(l->srv->conns, dev, ino);
    if (n) {
        metrics_add(MC_TRANSFERS_CUT, n);
        log_msg(LOG_INFO, "cut %u transfer%s of a file written on disk", n, n == 1 ? "" : "s");
    }
}

/* The next retry of a scan that failed or met errors, backing off from 1 s
 * to 30 s. */
static void schedule_retry(struct loop *l)
{
    l->retry_ms = l->retry_ms ? (l->retry_ms * 2 > 30000 ? 30000 : l->retry_ms * 2) : 1000;
    l->retry_at = time_mono_ns() + (uint64_t)l->retry_ms * 1000000;
}

static void rescan(struct loop *l)
{
    struct server *srv = l->srv;
    struct st_error err;
    /* Watch before reading: what changes after this is an event, and what
     * changed before it is in the listing. */
    watch_dirs(l->watch, REGISTRY_WATCH_DEPTH);
    struct reg_snapshot *prev = registry_acquire(&srv->registry);
    struct reg_snapshot *next = scan_and_trim(srv->cfg, ++l->generation, prev, &err);
    metrics_add(MC_RELOADS, 1);
    if (!next) {
        metrics_add(MC_RELOAD_ERRORS, 1);
        metrics_add(MC_SCAN_ERRORS, 1);
        schedule_retry(l);
        log_msg(LOG_ERROR, "reload failed, still serving the previous snapshot (retrying in %u "
                           "ms): %s", l->retry_ms, err.message);
        reg_snapshot_unref(prev);
        return;
    }
    log_invalid_models(next, prev);
    log_msg(LOG_INFO, "reloaded %s: %zu models (%zu invalid, %zu unchanged), %zu files, %zu "
                      "tensors in %.1f ms",
            next->root->path, next->n_models, next->n_invalid, next->n_reused, next->n_files,
            next->n_tensors, (double)next->scan_ns / 1e6);
    reg_snapshot_unref(prev);
    if (next->scan_errors) {
        /* Out of descriptors, memory, a failing disk: the models it hit kept
         * their previous state. Try again, backing off. */
        metrics_add(MC_SCAN_ERRORS, next->scan_errors);
        schedule_retry(l);
        log_msg(LOG_WARN, "the rescan met %zu I/O or resource error%s; the models involved keep "
                          "their previous state; retrying in %u ms",
                next->scan_errors, next->scan_errors == 1 ? "" : "s", l->retry_ms);
    } else {
        l->retry_ms = 0;
        l->retry_at = 0;
    }
    publish_registry_metrics(next);
    check_fd_budget(srv, next);
    if (srv->gpu)
        gpu_manager_on_reload(srv->gpu, next);
    hasher_submit(srv->hasher, next);
    registry_swap(&srv->registry, next);
    watch_files(l->watch, next); /* the registry keeps next alive: its descriptors are valid */
    notify_systemd("STATUS=serving %zu models (generation %llu)", next->n_models,
                   (unsigned long long)l->generation);
}

/* Milliseconds until the loop must wake, or -1. */
static int loop_timeout(const struct loop *l)
{
    uint64_t now = time_mono_ns(), due = 0;
    if (l->pending) {
        /* Quiet for the debounce, but never postponed past RESCAN_MAX_DELAY
         * by a file that keeps being written. */
        due = l->pending_since + (uint64_t)RESCAN_MAX_DELAY_MS * 1000000;
        uint64_t quiet = l->last_event + (uint64_t)RESCAN_DEBOUNCE_MS * 1000000;
        if (quiet < due)
            due = quiet;
    }
    if (l->retry_at && (!due || l->retry_at < due))
        due = l->retry_at;
    if (!due)
        return -1;
    return due <= now ? 0 : (int)((due - now + 999999) / 1000000);
}

static void want_rescan(struct loop *l)
{
    l->last_event = time_mono_ns();
    if (!l->pending)
        l->pending_since = l->last_event;
    l->pending = 1;
}

/* Starts the manager's loader (and the config's preloads), then the lease
 * socket over it. Without the socket, preloads and the HTTP side still
 * work. Returns the socket's server, or NULL. */
static struct lease_server *start_gpu_sharing(struct gpu_manager *gm, struct registry *registry,
                                              const struct config *cfg, char *err, size_t errlen)
{
    struct lease_server *ls = NULL;
    struct st_error serr;
    if (gpu_manager_start(gm, &serr) == 0) {
        char *path = config_ipc_socket_path(cfg);
        ls = lease_server_start(gm, registry, path, cfg, err, errlen);
        free(path);
    } else {
        snprintf(err, errlen, "%s", serr.message);
    }
    if (!ls && cfg->n_preload == 0)
        log_msg(LOG_WARN, "GPU sharing is off: %s", err);
    return ls;
}

/* Blocks the signals this thread takes and returns a signalfd for them.
 * Called before any other thread exists, so every thread inherits the mask. */
static int take_signals(void)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &mask, NULL);
    return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* The first scan of the models root, logged, its I/O errors retried from the
 * loop, its files handed to the hasher. NULL when the root cannot be served. */
static struct reg_snapshot *first_scan(struct loop *l)
{
    const struct config *cfg = l->srv->cfg;
    struct st_error serr;
    struct reg_snapshot *reg = scan_and_trim(cfg, l->generation, NULL, &serr);
    if (!reg) {
        log_msg(LOG_ERROR, "cannot serve models root: %s", serr.message);
        return NULL;
    }
    log_invalid_models(reg, NULL);
    log_msg(LOG_INFO, "scanned %s: %zu models (%zu invalid), %zu files (%zu open), %zu tensors "
                      "in %.1f ms",
            reg->root->path, reg->n_models, reg->n_invalid, reg->n_files, reg->n_open,
            reg->n_tensors, (double)reg->scan_ns / 1e6);
    if (reg->scan_errors) {
        metrics_add(MC_SCAN_ERRORS, reg->scan_errors);
        schedule_retry(l); /* in 1 s: the first retry */
        log_msg(LOG_WARN, "the scan met %zu I/O or resource error%s; retrying in 1 s",
                reg->scan_errors, reg->scan_errors == 1 ? "" : "s");
    }
    publish_registry_metrics(reg);
    hasher_submit(l->srv->hasher, reg);
    return reg;
}

/* Handles one signal; returns 1 when the daemon should stop. */
static int on_signal(struct loop *l, const struct signalfd_siginfo *si)
{
    if (si->ssi_signo == SIGHUP) {
        log_msg(LOG_INFO, "SIGHUP: reloading");
        notify_systemd("RELOADING=1");
        log_reopen();
        l->pending = 0;
        rescan(l);
        notify_systemd("READY=1");
        return 0;
    }
    log_msg(LOG_INFO, "%s: draining %u in-flight requests",
            si->ssi_signo == SIGINT ? "SIGINT" : "SIGTERM", atomic_load(&l->srv->in_flight));
    notify_systemd("STOPPING=1");
    return 1;
}

/* The main thread's loop: signals, the watcher, rescans asked for by
 * requests, debounced and retried rescans. Returns on SIGINT or SIGTERM. */
static void serve_loop(struct loop *l, int sfd)
{
    struct server *srv = l->srv;
    for (;;) {
        struct pollfd pfd[3] = {{.fd = sfd, .events = POLLIN},
                                {.fd = watch_fd(l->watch), .events = POLLIN},
                                {.fd = srv->rescan_fd, .events = POLLIN}};
        int n = poll(pfd, 3, loop_timeout(l));
        if (n < 0 && errno != EINTR)
            return;
        if (pfd[1].revents & POLLIN && watch_read(l->watch, cut_transfers, l) != WATCH_QUIET)
            want_rescan(l);
        if (pfd[2].revents & POLLIN) { /* a request met a file changed on disk */
            uint64_t count;
            if (read(srv->rescan_fd, &count, sizeof(count)) == sizeof(count))
                want_rescan(l);
        }
        if (pfd[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof(si)) != sizeof(si))
                continue;
            if (on_signal(l, &si))
                return;
            continue;
        }
        if (loop_timeout(l) == 0) { /* quiet long enough, or a retry is due */
            l->pending = 0;
            l->retry_at = 0;
            rescan(l);
        }
    }
}

int daemon_run(const struct config *cfg)
{
    struct server srv = {.cfg = cfg, .rescan_fd = -1};
    struct loop l = {.srv = &srv, .generation = 1};
    struct lease_server *leases = NULL;
    char err[1024];
    int rc = 2, sfd = -1; /* could not start (tensord(8), EXIT STATUS) */

    raise_fd_limit();
    signal(SIGPIPE, SIG_IGN);
    http_metrics_init();
    if (auth_load(&srv, cfg->auth_token_file, err, sizeof(err)) < 0) {
        log_msg(LOG_ERROR, "auth_token_file: %s", err);
        return 2;
    }
    if (s3_auth_load(&srv, err, sizeof(err)) < 0) {
        log_msg(LOG_ERROR, "%s", err);
        free_secret(srv.read_token);
        free_secret(srv.admin_token);
        return 2;
    }
    sfd = take_signals();
    srv.rescan_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    /* After take_signals: its threads must block the signals too. */
    int mirror_rc;
    srv.mirror = mirror_start(cfg, &mirror_rc, err, sizeof(err));
    if (mirror_rc < 0) {
        log_msg(LOG_ERROR, "%s", err);
        goto out;
    }

    char *state_dir = config_state_dir_path(cfg);
    struct hasher_opts ho = {.threads = cfg->hash_threads,
                             .max_bytes_per_second = cfg->hash_max_bytes_per_second,
                             .state_dir = state_dir};
    struct st_error herr;
    srv.hasher = hasher_new(&ho, &herr);
    free(state_dir);
    if (!srv.hasher) {
        log_msg(LOG_ERROR, "%s", herr.message);
        goto out;
    }
    srv.blobs = blob_index_new();

    notify_systemd("STATUS=scanning %s", cfg->models);
    if (cfg->watch) {
        char *real = realpath(cfg->models, NULL);
        l.watch = real ? watch_new(real) : NULL;
        free(real);
        watch_dirs(l.watch, REGISTRY_WATCH_DEPTH); /* before the scan: nothing is missed */
    }
    struct reg_snapshot *reg = first_scan(&l);
    if (!reg)
        goto out;
    registry_init(&srv.registry, reg);

    struct gm_options gopt;
    gpu_doc_options(&gopt, cfg);
    /* A preload and the hasher read each file once between them. */
    gopt.hold = hold_for_preload;
    gopt.release = release_for_preload;
    gopt.hold_ctx = srv.hasher;
    srv.gpu = gpu_manager_new(&gopt, &srv.registry);
    srv.docs = doc_cache_start();
    if (http_start(&srv, err, sizeof(err)) < 0) {
        log_msg(LOG_ERROR, "%s", err);
        goto out_registry;
    }
    check_fd_budget(&srv, reg);
    watch_files(l.watch, reg);
    if (srv.gpu)
        leases = start_gpu_sharing(srv.gpu, &srv.registry, cfg, err, sizeof(err));
    /* Preloads are there to be leased: a daemon that cannot serve them
     * stops, rather than look healthy while sharing nothing. */
    if (srv.gpu && !leases && cfg->n_preload > 0) {
        log_msg(LOG_ERROR, "preload is configured but the lease socket cannot be served: %s",
                err);
        hasher_stop(srv.hasher);
        http_stop(&srv, 0);
        goto out_registry;
    }
    atomic_store(&srv.ready, 1);
    log_msg(LOG_INFO, "tensord %s listening on %s", TENSORD_VERSION, cfg->listen);
    notify_systemd("READY=1\nSTATUS=serving %zu models on %s", reg->n_models, cfg->listen);

    serve_loop(&l, sfd);
    /* Within the drain time whatever a save or a file system does: the
     * hasher's stop is bounded (hasher.h) and the HTTP drain gets the rest. */
    uint64_t t_stop = time_mono_ns();
    hasher_stop(srv.hasher); /* first: it resumes anyone waiting for a hash */
    doc_cache_stop(srv.docs); /* ... or for a document */
    uint64_t spent_ms = (time_mono_ns() - t_stop) / 1000000;
    http_stop(&srv, spent_ms < DRAIN_MS ? DRAIN_MS - (unsigned)spent_ms : 0);
    rc = 0;
out_registry:
    lease_server_stop(leases); /* first: it ends leases the manager owns */
    gpu_manager_free(srv.gpu); /* before the mirror: its instances hold mirrored files */
    doc_cache_free(srv.docs);
    registry_destroy(&srv.registry);
out:
    mirror_free(srv.mirror);
    hasher_free(srv.hasher);
    blob_index_free(srv.blobs);
    watch_free(l.watch);
    if (sfd >= 0)
        close(sfd);
    if (srv.rescan_fd >= 0)
        close(srv.rescan_fd);
    free_secret(srv.read_token);
    free_secret(srv.admin_token);
    s3_auth_free(&srv);
    log_msg(LOG_INFO, "stopped");
    return rc;
}
