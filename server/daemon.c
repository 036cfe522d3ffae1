/* daemon: the main thread of `tensord serve`. It scans the models root,
 * starts HTTP and GPU sharing, then waits for signals and inotify events:
 * SIGHUP or a change under the root rescans and swaps the snapshot,
 * SIGINT/SIGTERM drain in-flight requests and exit 0. */
#include "daemon.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "auth.h"
#include "gpu_manager.h"
#include "hasher.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

/* Quiet time after the last inotify event before rescanning, so a copy of
 * many shards triggers one rescan, not one per file. */
#define RESCAN_DEBOUNCE_MS 500
#define DRAIN_MS 30000
#define WATCH_MAX_DEPTH 16

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

/* Serving keeps one descriptor per file of the snapshot (two during a swap). */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Watches dir and every directory below it (not following symlinks). */
static void watch_tree(int ifd, const char *dir, unsigned depth)
{
    /* IN_MODIFY catches truncate(2) and in-place writes, which send no
     * IN_CLOSE_WRITE; the debounce folds a long copy into one rescan. */
    const uint32_t mask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE |
                          IN_MODIFY |
                          IN_ATTRIB | IN_DELETE_SELF | IN_ONLYDIR;
    if (inotify_add_watch(ifd, dir, mask) < 0 || depth >= WATCH_MAX_DEPTH)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || e->d_type != DT_DIR)
            continue;
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < sizeof(path))
            watch_tree(ifd, path, depth + 1);
    }
    closedir(d);
}

/* A fresh inotify instance for the current tree (directories come and go). */
static int rewatch(int old_fd, const char *root)
{
    if (old_fd >= 0)
        close(old_fd);
    int ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ifd < 0) {
        log_msg(LOG_WARN, "inotify unavailable (%s); reload with SIGHUP", strerror(errno));
        return -1;
    }
    watch_tree(ifd, root, 0);
    return ifd;
}

static void publish_registry_metrics(const struct registry *r)
{
    metrics_set_registry(r->n_models, r->n_invalid, r->n_files, r->n_tensors, r->bytes,
                         r->generation);
}

static void log_invalid_models(const struct registry *r)
{
    for (size_t i = 0; i < r->n_models; i++)
        if (r->models[i]->state != MODEL_READY)
            log_msg(LOG_WARN, "model %s is invalid: %s", r->models[i]->name,
                    r->models[i]->error.message);
}

/* Scans the root and hands the heap that header parsing used back to the
 * kernel: jansson's tree for a 500k-tensor header is ~500 MB of small blocks
 * that glibc would otherwise keep, while the snapshot itself needs ~50 MB. */
static struct registry *scan_and_trim(const char *root, uint64_t generation, struct st_error *err)
{
    struct registry *r = registry_scan(root, generation, NULL, err);
    malloc_trim(0);
    return r;
}

static int rescan(struct server *srv, uint64_t generation)
{
    struct st_error err;
    struct registry *next = scan_and_trim(srv->cfg->models, generation, &err);
    metrics_add(MC_RELOADS, 1);
    if (!next) {
        metrics_add(MC_RELOAD_ERRORS, 1);
        log_msg(LOG_ERROR, "reload failed, still serving the previous snapshot: %s", err.message);
        return -1;
    }
    log_invalid_models(next);
    log_msg(LOG_INFO, "reloaded %s: %zu models (%zu invalid), %zu files, %zu tensors in %.1f ms",
            next->root, next->n_models, next->n_invalid, next->n_files, next->n_tensors,
            (double)next->scan_ns / 1e6);
    publish_registry_metrics(next);
    if (srv->gpu)
        gpu_manager_on_reload(srv->gpu, next);
    hasher_submit(srv->hasher, next);
    registry_holder_swap(&srv->registry, next);
    notify_systemd("STATUS=serving %zu models (generation %llu)", next->n_models,
                   (unsigned long long)generation);
    return 0;
}

int daemon_run(const struct config *cfg)
{
    struct server srv = {.cfg = cfg};
    char err[1024];
    int rc = 1, sfd = -1, ifd = -1;
    uint64_t generation = 1;

    raise_fd_limit();
    signal(SIGPIPE, SIG_IGN);
    metrics_init();
    if (auth_load(&srv, cfg->auth_token_file, err, sizeof(err)) < 0) {
        log_msg(LOG_ERROR, "auth_token_file: %s", err);
        return 1;
    }

    /* Signals are taken synchronously by this thread only: block them before
     * any other thread exists so every thread inherits the mask. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &mask, NULL);
    sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

    char *state_dir = config_state_dir_path(cfg);
    struct hasher_opts ho = {.threads = cfg->hash_threads,
                             .max_bytes_per_second = cfg->hash_max_bytes_per_second,
                             .state_dir = state_dir};
    srv.hasher = hasher_new(&ho);
    free(state_dir);

    notify_systemd("STATUS=scanning %s", cfg->models);
    struct st_error serr;
    struct registry *reg = scan_and_trim(cfg->models, generation, &serr);
    if (!reg) {
        log_msg(LOG_ERROR, "cannot serve models root: %s", serr.message);
        goto out;
    }
    log_invalid_models(reg);
    log_msg(LOG_INFO, "scanned %s: %zu models (%zu invalid), %zu files, %zu tensors in %.1f ms",
            reg->root, reg->n_models, reg->n_invalid, reg->n_files, reg->n_tensors,
            (double)reg->scan_ns / 1e6);
    publish_registry_metrics(reg);
    hasher_submit(srv.hasher, reg);
    registry_holder_init(&srv.registry, reg);

    srv.gpu = gpu_manager_new(cfg, &srv.registry);
    if (http_start(&srv, err, sizeof(err)) < 0) {
        log_msg(LOG_ERROR, "%s", err);
        goto out_registry;
    }
    if (srv.gpu && gpu_manager_start(srv.gpu, err, sizeof(err)) < 0)
        log_msg(LOG_WARN, "GPU sharing is off: %s", err);
    atomic_store(&srv.ready, 1);
    log_msg(LOG_INFO, "tensord %s listening on %s", TENSORD_VERSION, cfg->listen);
    notify_systemd("READY=1\nSTATUS=serving %zu models on %s", reg->n_models, cfg->listen);

    if (cfg->watch)
        ifd = rewatch(-1, cfg->models);
    int pending = 0;
    for (;;) {
        struct pollfd pfd[2] = {{.fd = sfd, .events = POLLIN}, {.fd = ifd, .events = POLLIN}};
        int n = poll(pfd, 2, pending ? RESCAN_DEBOUNCE_MS : -1);
        if (n < 0 && errno != EINTR)
            break;
        if (n == 0 && pending) { /* quiet for the debounce interval */
            pending = 0;
            rescan(&srv, ++generation);
            ifd = rewatch(ifd, cfg->models);
            continue;
        }
        if (pfd[1].revents & POLLIN) {
            char buf[16384];
            while (read(ifd, buf, sizeof(buf)) > 0)
                ;
            pending = 1;
        }
        if (pfd[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof(si)) != sizeof(si))
                continue;
            if (si.ssi_signo == SIGHUP) {
                log_msg(LOG_INFO, "SIGHUP: reloading");
                notify_systemd("RELOADING=1");
                log_reopen();
                rescan(&srv, ++generation);
                if (cfg->watch)
                    ifd = rewatch(ifd, cfg->models);
                notify_systemd("READY=1");
                continue;
            }
            log_msg(LOG_INFO, "%s: draining %u in-flight requests",
                    si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM", atomic_load(&srv.in_flight));
            notify_systemd("STOPPING=1");
            break;
        }
    }
    hasher_stop(srv.hasher); /* first: it resumes anyone waiting for a hash */
    http_stop(&srv, DRAIN_MS);
    rc = 0;
out_registry:
    if (srv.gpu)
        gpu_manager_free(srv.gpu);
    registry_holder_destroy(&srv.registry);
out:
    hasher_free(srv.hasher);
    if (ifd >= 0)
        close(ifd);
    if (sfd >= 0)
        close(sfd);
    free(srv.read_token);
    free(srv.admin_token);
    log_msg(LOG_INFO, "stopped");
    return rc;
}
