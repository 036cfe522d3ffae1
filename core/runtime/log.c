/* log: single-write(2) lines, no locks.
 *
 * The access-log descriptor number is fixed once log_init opened it;
 * log_reopen opens the path again and dup2()s the new file onto that number,
 * which atomically swaps the file under concurrent writers (a write goes to
 * either the old or the new file, never to a closed or reused descriptor). */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define LINE_MAX_BYTES 4000 /* < PIPE_BUF (4096): one atomic write */
#define PATH_MAX_ESCAPED 2048
#define RANGE_MAX_ESCAPED 256

static _Atomic int min_level = LOG_INFO;
static _Atomic int access_fd = 2; /* -1 = off */
static char *access_path;         /* NULL for "-" and "off" */
static int journal;               /* stderr is the journal: "<N>" prefixes */

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const int syslog_prio[] = {3, 4, 6, 7};

static int parse_level(const char *s)
{
    for (int i = 0; i < (int)ARRAY_LEN(level_names); i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

/* JOURNAL_STREAM is "DEV:INODE" of the journal socket systemd gave us as
 * stdout/stderr; if stderr was redirected since, it no longer matches. */
static int stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(2, &st) < 0)
        return 0;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

static void write_all(int fd, const char *buf, size_t n)
{
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nowhere to report a logging failure */
        buf += w, n -= (size_t)w;
    }
}

static int open_log(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
}

int log_init(const char *level, const char *access_log)
{
    int lv = parse_level(level ? level : "info");
    if (lv < 0)
        return -EINVAL;
    journal = stderr_is_journal();
    const char *a = access_log ? access_log : "-";
    int fd;
    if (strcmp(a, "off") == 0) {
        fd = -1;
    } else if (strcmp(a, "-") == 0 || a[0] == '\0') {
        fd = 2;
    } else {
        int nfd = open_log(a);
        if (nfd < 0)
            return -errno;
        int old = atomic_load(&access_fd);
        if (old > 2 && access_path) {
            /* Keep the descriptor number: writers may be using it. */
            dup2(nfd, old);
            close(nfd);
            nfd = old;
        }
        fd = nfd;
    }
    int old = atomic_exchange(&access_fd, fd);
    if (old > 2 && old != fd)
        close(old); /* only at start-up or in tests: no concurrent writers */
    free(access_path);
    access_path = fd > 2 ? xstrdup(a) : NULL;
    atomic_store(&min_level, lv);
    return 0;
}

int log_reopen(void)
{
    int fd = atomic_load(&access_fd);
    if (fd <= 2 || !access_path)
        return 0;
    int nfd = open_log(access_path);
    if (nfd < 0) {
        int rc = -errno;
        log_msg(LOG_ERROR, "cannot reopen access log %s: %s", access_path, strerror(-rc));
        return rc;
    }
    int rc = dup2(nfd, fd) < 0 ? -errno : 0;
    close(nfd);
    return rc;
}

/* "2025-01-02T03:04:05.678Z" (24 chars) */
static size_t format_time(char *buf, size_t size)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(buf + n, size - n, ".%03ldZ", ts.tv_nsec / 1000000);
    return n < size ? n : size - 1;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if ((unsigned)level > LOG_DEBUG)
        level = LOG_ERROR;
    if ((int)level > atomic_load_explicit(&min_level, memory_order_relaxed))
        return;
    char buf[LINE_MAX_BYTES];
    size_t n;
    if (journal)
        n = (size_t)snprintf(buf, sizeof(buf), "<%d>", syslog_prio[level]);
    else {
        n = format_time(buf, sizeof(buf));
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, " %s: ", level_names[level]);
    }
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
    va_end(ap);
    if (m > 0)
        n += (size_t)m < sizeof(buf) - n - 1 ? (size_t)m : sizeof(buf) - n - 2;
    /* A message is one line: a newline inside would forge a second one. */
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\n' || buf[i] == '\r')
            buf[i] = ' ';
    while (n && buf[n - 1] == ' ')
        n--;
    buf[n++] = '\n';
    write_all(2, buf, n);
}

static int must_escape(unsigned char c)
{
    return c <= 0x20 || c >= 0x7f || c == '"' || c == '\\';
}

/* Appends s, escaped, to buf[*n..cap); stops (with "...") at max bytes. */
static void put_escaped(char *buf, size_t *n, size_t cap, const char *s, size_t max)
{
    size_t start = *n;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        size_t need = must_escape(*p) ? 3 : 1;
        if (*n - start + need > max || *n + need + 4 > cap) {
            memcpy(buf + *n, "...", 3);
            *n += 3;
            return;
        }
        if (need == 3) {
            buf[(*n)++] = '%';
            buf[(*n)++] = hex_upper[*p >> 4];
            buf[(*n)++] = hex_upper[*p & 15];
        } else {
            buf[(*n)++] = (char)*p;
        }
    }
}

/* Returns 1 when the query key raw[0, len) ends in "token" or "signature"
 * once its percent-escapes are decoded (so "tok%65n" is caught too): a
 * bearer token, or a presigned URL's X-Amz-Signature, which reads the
 * object as anyone who has it until the URL expires (up to 7 days). */
static int key_is_secret(const char *raw, size_t len)
{
    static const char *const suffixes[] = {"token", "signature"};
    char tail[9];
    size_t n = 0;
    /* Decode from the end: the last nine decoded characters are all that matter. */
    for (size_t i = len; i > 0 && n < sizeof(tail);) {
        char c = raw[--i];
        int hi, lo;
        if (i >= 2 && raw[i - 2] == '%' && (hi = hex_digit_value((unsigned char)raw[i - 1])) >= 0 &&
            (lo = hex_digit_value((unsigned char)c)) >= 0) {
            c = (char)(hi * 16 + lo);
            i -= 2;
        } else if (c == '+') {
            c = ' ';
        }
        tail[sizeof(tail) - 1 - n++] = c;
    }
    for (size_t k = 0; k < ARRAY_LEN(suffixes); k++) {
        size_t sl = strlen(suffixes[k]);
        if (n >= sl && strncasecmp(tail + sizeof(tail) - sl, suffixes[k], sl) == 0)
            return 1;
    }
    return 0;
}

/* Copies the path, replacing the value of every query parameter whose name
 * ends in "token" or "signature" (token=, access_token=, tok%65n=,
 * X-Amz-Signature=...) with "***". Caller frees. */
static char *scrub_query(const char *path)
{
    const char *q = strchr(path, '?');
    if (!q)
        return NULL;
    size_t len = strlen(path);
    char *out = xmalloc(len + 4 * (len / 2 + 1)), *o = out;
    memcpy(o, path, (size_t)(q - path) + 1);
    o += q - path + 1;
    for (const char *p = q + 1;;) {
        size_t plen = strcspn(p, "&;");
        const char *eq = memchr(p, '=', plen);
        size_t klen = eq ? (size_t)(eq - p) : plen;
        if (eq && key_is_secret(p, klen)) {
            memcpy(o, p, klen + 1);
            o += klen + 1;
            memcpy(o, "***", 3);
            o += 3;
        } else {
            memcpy(o, p, plen);
            o += plen;
        }
        if (!p[plen])
            break;
        *o++ = p[plen];
        p += plen + 1;
    }
    *o = '\0';
    return out;
}

size_t log_format_access(char *buf, size_t size, const char *method, const char *path,
                         unsigned status, uint64_t bytes, uint64_t duration_ns,
                         const char *range)
{
    if (size < 128) {
        if (size)
            buf[0] = '\0';
        return 0;
    }
    size_t n = format_time(buf, size);
    buf[n++] = ' ';
    put_escaped(buf, &n, size, method && *method ? method : "-", 32);
    buf[n++] = ' ';
    char *scrubbed = path ? scrub_query(path) : NULL;
    put_escaped(buf, &n, size - 96, scrubbed ? scrubbed : path && *path ? path : "-",
                PATH_MAX_ESCAPED);
    free(scrubbed);
    n += (size_t)snprintf(buf + n, size - n, " %u %llu %.3f ", status,
                          (unsigned long long)bytes, (double)duration_ns / 1e6);
    if (n >= size - 8)
        n = size - 8;
    if (range && *range)
        put_escaped(buf, &n, size - 2, range, RANGE_MAX_ESCAPED);
    else
        buf[n++] = '-';
    buf[n++] = '\n';
    buf[n] = '\0';
    return n;
}

void log_access(const char *method, const char *path, unsigned status, uint64_t bytes,
                uint64_t duration_ns, const char *range)
{
    int fd = atomic_load_explicit(&access_fd, memory_order_relaxed);
    if (fd < 0)
        return;
    char buf[LINE_MAX_BYTES];
    size_t n = log_format_access(buf, sizeof(buf), method, path, status, bytes, duration_ns,
                                 range);
    write_all(fd, buf, n);
}
