/* Machine ceiling: raw loopback sendfile. A sender thread sendfile()s a page-cached
 * file over a TCP loopback connection and a reader thread drains it into a user
 * buffer with read() -- the path, minus HTTP, that a static server and its client
 * take. With STREAMS > 1 that many connections run at once, each with its own
 * sender and reader, and the figure is their aggregate (the servers are measured
 * with several connections too; one stream leaves a core idle part of the time).
 * Each stream sends the file over and over until MiB per run have gone (default:
 * the file once), so a small file measures the cache-hot case a server sees when
 * clients read one tensor again and again. Prints one JSON line with the median
 * GB/s (10^9 bytes/s) over the runs.
 * usage: ceil_sendfile FILE [runs (5)] [read buffer KiB (1024)] [streams (1)] [MiB per run] */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ceil.h"

#define MAX_STREAMS 64

struct stream {
    int tx, rx;                /* the two ends of one loopback connection */
    int fd;                    /* the file, shared */
    off_t size;                /* of the file */
    off_t total;               /* bytes per run: the file, repeated */
    size_t bufsz;              /* reader's read() size */
    int runs;
    pthread_barrier_t *start;  /* every thread passes it before each run ... */
    pthread_barrier_t *end;    /* ... and this one after */
    int err;                   /* errno of a failed call, 0 when all went well */
};

static void *send_runs(void *arg)
{
    struct stream *s = arg;
    for (int r = 0; r < s->runs; r++) {
        pthread_barrier_wait(s->start);
        off_t sent = 0;
        while (sent < s->total && !s->err) {
            off_t off = sent % s->size;
            size_t want = (size_t)(s->size - off);
            if ((off_t)want > s->total - sent)
                want = (size_t)(s->total - sent);
            ssize_t n = sendfile(s->tx, s->fd, &off, want);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                s->err = n < 0 ? errno : EIO;
                shutdown(s->tx, SHUT_RDWR);
            } else {
                sent += n;
            }
        }
        pthread_barrier_wait(s->end);
    }
    return NULL;
}

static void *read_runs(void *arg)
{
    struct stream *s = arg;
    char *buf = malloc(s->bufsz);
    for (int r = 0; r < s->runs; r++) {
        pthread_barrier_wait(s->start);
        off_t got = 0;
        while (buf && got < s->total && !s->err) {
            ssize_t n = read(s->rx, buf, s->bufsz);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                s->err = n < 0 ? errno : EPIPE;
            else
                got += n;
        }
        if (!buf)
            s->err = ENOMEM;
        pthread_barrier_wait(s->end);
    }
    free(buf);
    return NULL;
}

static int connect_pair(int ls, const struct sockaddr_in *a, int *tx, int *rx)
{
    *rx = socket(AF_INET, SOCK_STREAM, 0);
    if (*rx < 0 || connect(*rx, (const struct sockaddr *)a, sizeof(*a)) < 0)
        return -1;
    *tx = accept(ls, NULL, NULL);
    return *tx < 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: ceil_sendfile FILE [runs] [read buffer KiB] [streams] [MiB per run]\n");
        return 2;
    }
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    size_t bufsz = (argc > 3 ? strtoul(argv[3], NULL, 10) : 1024) << 10;
    int nstreams = argc > 4 ? atoi(argv[4]) : 1;
    long long total_mib = argc > 5 ? atoll(argv[5]) : 0;
    if (runs <= 0 || runs > 1000 || bufsz == 0 || nstreams <= 0 || nstreams > MAX_STREAMS) {
        fprintf(stderr, "ceil_sendfile: bad runs, buffer size or streams\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
        fprintf(stderr, "ceil_sendfile: %s: %s\n", argv[1], strerror(errno ? errno : EINVAL));
        return 1;
    }
    off_t total = total_mib > 0 ? (off_t)total_mib << 20 : st.st_size;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, 64) < 0 ||
        getsockname(ls, (struct sockaddr *)&a, &alen) < 0) {
        perror("ceil_sendfile: listen");
        return 1;
    }
    pthread_barrier_t start, end;
    pthread_barrier_init(&start, NULL, (unsigned)(2 * nstreams + 1));
    pthread_barrier_init(&end, NULL, (unsigned)(2 * nstreams + 1));
    struct stream s[MAX_STREAMS];
    pthread_t th[2 * MAX_STREAMS];
    for (int i = 0; i < nstreams; i++) {
        s[i] = (struct stream){.fd = fd, .size = st.st_size, .total = total, .bufsz = bufsz, .runs = runs,
                               .start = &start, .end = &end};
        if (connect_pair(ls, &a, &s[i].tx, &s[i].rx) < 0) {
            perror("ceil_sendfile: connect");
            return 1;
        }
        pthread_create(&th[2 * i], NULL, send_runs, &s[i]);
        pthread_create(&th[2 * i + 1], NULL, read_runs, &s[i]);
    }
    double *gbps = calloc((size_t)runs, sizeof(*gbps));
    for (int r = 0; r < runs; r++) {
        pthread_barrier_wait(&start);
        double t0 = ceil_now();
        pthread_barrier_wait(&end);
        gbps[r] = (double)total * nstreams / (ceil_now() - t0) / 1e9;
    }
    int rc = 0;
    for (int i = 0; i < nstreams; i++) {
        pthread_join(th[2 * i], NULL);
        pthread_join(th[2 * i + 1], NULL);
        if (s[i].err && !rc) {
            fprintf(stderr, "ceil_sendfile: stream %d: %s\n", i, strerror(s[i].err));
            rc = 1;
        }
        close(s[i].tx);
        close(s[i].rx);
    }
    if (rc == 0) {
        printf("{\"file_bytes\":%lld,\"bytes_per_stream\":%lld,\"read_buffer\":%zu,"
               "\"streams\":%d,\"runs\":[",
               (long long)st.st_size, (long long)total, bufsz, nstreams);
        for (int i = 0; i < runs; i++)
            printf("%s%.3f", i ? "," : "", gbps[i]);
        printf("],\"median_gbps\":%.3f}\n", ceil_median(gbps, runs));
    }
    close(ls);
    close(fd);
    free(gbps);
    return rc;
}
