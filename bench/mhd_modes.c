/* mhd_modes: a bare libmicrohttpd server for the benchmark, to measure what
 * libmicrohttpd's threading modes cost on this machine apart from tensord.
 *
 * usage: mhd_modes MODE PORT THREADS FILE
 *   MODE: pool    internal epoll, THREADS threads, turbo (tensord's mode)
 *         tpc     a thread per connection, internal poll()
 *         select  one thread running the application's own select() loop
 *                 over MHD_get_fdset / MHD_run_from_select, turbo
 *
 * Every GET gets what tensord answers to `Range: bytes=0-7` of FILE: 206
 * with the file's first 8 bytes (read once at start-up), Content-Range,
 * Accept-Ranges, ETag and Last-Modified. It answers on the handler's second
 * call, as tensord does, so libmicrohttpd keeps the connection alive; it
 * does no routing, no lookups and no accounting, so the difference between
 * this server and tensord is tensord's own work per request. */
#include <fcntl.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char body[8];
static char content_range[64], etag[64], last_modified[64];
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_len, void **state)
{
    (void)cls, (void)url, (void)method, (void)version, (void)upload, (void)upload_len;
    static int first_call_marker;
    if (*state == NULL) { /* headers only: answer on the next call */
        *state = &first_call_marker;
        return MHD_YES;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(sizeof(body), body, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_RANGE, content_range);
    MHD_add_response_header(r, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(r, MHD_HTTP_HEADER_LAST_MODIFIED, last_modified);
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_PARTIAL_CONTENT, r);
    MHD_destroy_response(r);
    return ret;
}

static int run_select_loop(struct MHD_Daemon *d)
{
    while (!stop) {
        fd_set rs, ws, es;
        MHD_socket max = 0;
        FD_ZERO(&rs);
        FD_ZERO(&ws);
        FD_ZERO(&es);
        if (MHD_get_fdset(d, &rs, &ws, &es, &max) != MHD_YES)
            return 1;
        struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
        select(max + 1, &rs, &ws, &es, &tv);
        MHD_run_from_select(d, &rs, &ws, &es);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s pool|tpc|select PORT THREADS FILE\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    unsigned port = (unsigned)atoi(argv[2]), threads = (unsigned)atoi(argv[3]);
    int fd = open(argv[4], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || pread(fd, body, sizeof(body), 0) != sizeof(body)) {
        perror(argv[4]);
        return 1;
    }
    close(fd);
    snprintf(content_range, sizeof(content_range), "bytes 0-7/%lld", (long long)st.st_size);
    snprintf(etag, sizeof(etag), "\"%llx-%llx\"", (unsigned long long)st.st_ino,
             (unsigned long long)st.st_size);
    struct tm tm;
    gmtime_r(&st.st_mtime, &tm);
    strftime(last_modified, sizeof(last_modified), "%a, %d %b %Y %H:%M:%S GMT", &tm);

    unsigned flags = MHD_USE_ERROR_LOG;
    struct MHD_OptionItem opts[4] = {{MHD_OPTION_END, 0, NULL}};
    int n = 0;
    if (strcmp(mode, "pool") == 0) {
        flags |= MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_TURBO;
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, threads, NULL};
    } else if (strcmp(mode, "tpc") == 0) {
        flags |= MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                 MHD_USE_POLL | MHD_USE_ITC;
    } else if (strcmp(mode, "select") == 0) {
        flags |= MHD_USE_TURBO;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    /* tensord's connection settings: 32 KiB pool, 10,000 connections. */
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT, 32 * 1024, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, 10000, NULL};
    opts[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};

    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGQUIT, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, answer, NULL,
                                            MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "MHD_start_daemon failed (mode %s, port %u)\n", mode, port);
        return 1;
    }
    int rc = 0;
    if (strcmp(mode, "select") == 0)
        rc = run_select_loop(d);
    else
        while (!stop)
            pause();
    MHD_stop_daemon(d);
    return rc;
}
