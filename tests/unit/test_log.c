/* Tests for core/runtime/log.c: access-line format, escaping, token scrubbing,
 * truncation, levels, "off", whole lines from concurrent threads, and
 * reopen after rotation. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "test.h"
#include "util.h"

static char tmpdir[] = "/tmp/test_log_XXXXXX";

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return xstrdup("");
    char *buf = xmalloc(1 << 24);
    size_t n = fread(buf, 1, (1 << 24) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The line after the 24-character timestamp and its space. */
static const char *after_time(const char *line)
{
    return strlen(line) > 25 ? line + 25 : "";
}

TEST(access_line_format)
{
    char buf[4096];
    size_t n = log_format_access(buf, sizeof(buf), "GET", "/v1/models/m/tensors/w", 206, 8,
                                 412345, "bytes=0-7");
    CHECK_EQ_U64(n, strlen(buf));
    CHECK(buf[n - 1] == '\n');
    /* 2025-01-02T03:04:05.678Z */
    CHECK(buf[4] == '-' && buf[10] == 'T' && buf[19] == '.' && buf[23] == 'Z' && buf[24] == ' ');
    CHECK_STR(after_time(buf), "GET /v1/models/m/tensors/w 206 8 0.412 bytes=0-7\n");
    log_format_access(buf, sizeof(buf), "HEAD", "/healthz", 200, 0, 0, NULL);
    CHECK_STR(after_time(buf), "HEAD /healthz 200 0 0.000 -\n");
    log_format_access(buf, sizeof(buf), "", NULL, 0, 0, 0, "");
    CHECK_STR(after_time(buf), "- - 0 0 0.000 -\n");
}

TEST(escaping)
{
    char buf[4096];
    log_format_access(buf, sizeof(buf), "GET", "/a b\n\x01\"\\\xc3\xa9%41", 404, 1, 0,
                      "bytes=0-1\r\nX-Evil: 1");
    CHECK_STR(after_time(buf),
              "GET /a%20b%0A%01%22%5C%C3%A9%41 404 1 0.000 bytes=0-1%0D%0AX-Evil:%201\n");
    log_format_access(buf, sizeof(buf), "G T", "/", 400, 0, 0, NULL);
    CHECK_STR(after_time(buf), "G%20T / 400 0 0.000 -\n");
}

TEST(token_scrubbed)
{
    char buf[4096];
    log_format_access(buf, sizeof(buf), "GET", "/v1/models?token=s3cret&x=1&access_token=abc;Token=", 200,
                      0, 0, NULL);
    CHECK_STR(after_time(buf), "GET /v1/models?token=***&x=1&access_token=***;Token=*** 200 0 0.000 -\n");
    CHECK(strstr(buf, "s3cret") == NULL && strstr(buf, "abc") == NULL);
    log_format_access(buf, sizeof(buf), "GET", "/token=x?tokens=1&mytoken", 200, 0, 0, NULL);
    CHECK_STR(after_time(buf), "GET /token=x?tokens=1&mytoken 200 0 0.000 -\n");
}

/* The key is compared after percent-decoding: a client cannot hide a token
 * from the scrubber by escaping its name. */
TEST(token_scrubbed_after_decoding)
{
    char buf[4096];
    log_format_access(buf, sizeof(buf), "GET",
                      "/v1/models?tok%65n=s1&access%5Ftoken=s2&%54%4F%4B%45%4E=s3&x%74oken=s4", 401,
                      0, 0, NULL);
    CHECK_STR(after_time(buf),
              "GET /v1/models?tok%65n=***&access%5Ftoken=***&%54%4F%4B%45%4E=***&x%74oken=*** 401 0 "
              "0.000 -\n");
    CHECK(strstr(buf, "s1") == NULL && strstr(buf, "s2") == NULL && strstr(buf, "s3") == NULL);
    /* A bad escape is taken literally; "tok%6" decodes to nothing that ends in "token". */
    log_format_access(buf, sizeof(buf), "GET", "/m?tok%6=keep&%=k2", 400, 0, 0, NULL);
    CHECK_STR(after_time(buf), "GET /m?tok%6=keep&%=k2 400 0 0.000 -\n");
}

/* A presigned S3 URL's signature reads the object until the URL expires:
 * it is a credential like a token (the access key id and date are not). */
TEST(presigned_signature_scrubbed)
{
    char buf[4096];
    log_format_access(buf, sizeof(buf), "GET",
                      "/s3/b/k?X-Amz-Credential=AKID%2F20240101&X-Amz-Signature=8f6eab68&"
                      "x-amz-signature=s2&X-Amz-Signatur%65=s3&X-Amz-SignedHeaders=host",
                      200, 0, 0, NULL);
    CHECK_STR(after_time(buf), "GET /s3/b/k?X-Amz-Credential=AKID%2F20240101&X-Amz-Signature=***&"
                               "x-amz-signature=***&X-Amz-Signatur%65=***&"
                               "X-Amz-SignedHeaders=host 200 0 0.000 -\n");
}

TEST(long_fields_truncated_below_pipe_buf)
{
    char *path = xmalloc(20000), buf[4096];
    memset(path, '\x7f', 19999); /* every byte escapes to 3 */
    path[0] = '/';
    path[19999] = '\0';
    char range[5000];
    memset(range, 'r', sizeof(range) - 1);
    range[sizeof(range) - 1] = '\0';
    size_t n = log_format_access(buf, sizeof(buf), "GET", path, 200, 1, 1, range);
    CHECK(n < 4096);
    CHECK(buf[n - 1] == '\n' && strchr(buf, '\n') == buf + n - 1);
    CHECK_CONTAINS(buf, "... 200 1 0.000 ");
    CHECK_CONTAINS(buf, "rrr...\n");
    free(path);
    /* A tiny buffer still gets a terminated (if shortened) line. */
    char small[128];
    n = log_format_access(small, sizeof(small), "GET", "/x", 200, 1, 1, range);
    CHECK(n < sizeof(small) && small[n - 1] == '\n');
}

/* Whether log_msg writes a message at level (stderr, captured). */
static int written(enum log_level level)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/level", tmpdir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600), saved = dup(2);
    dup2(fd, 2);
    log_msg(level, "probe");
    dup2(saved, 2);
    close(saved);
    close(fd);
    char *text = slurp(path);
    int yes = strstr(text, "probe") != NULL;
    free(text);
    return yes;
}

TEST(levels)
{
    CHECK(log_init("loud", "-") == -EINVAL);
    CHECK(log_init("warn", "off") == 0);
    CHECK(written(LOG_ERROR));
    CHECK(written(LOG_WARN));
    CHECK(!written(LOG_INFO));
    CHECK(log_init("DEBUG", "off") == 0);
    CHECK(written(LOG_DEBUG));
    log_access("GET", "/", 200, 0, 0, NULL); /* off: nothing, no crash */
    CHECK(log_init("info", "/nonexistent-dir/x.log") == -ENOENT);
}

TEST(log_msg_to_stderr)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/stderr", tmpdir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600), saved = dup(2);
    unsetenv("JOURNAL_STREAM");
    CHECK(log_init("info", "off") == 0);
    dup2(fd, 2);
    log_msg(LOG_INFO, "hello %d", 42);
    log_msg(LOG_DEBUG, "hidden");
    log_msg(LOG_ERROR, "two\nlines");
    dup2(saved, 2);
    close(saved);
    close(fd);
    char *text = slurp(path);
    CHECK_CONTAINS(text, "Z info: hello 42\n");
    CHECK_CONTAINS(text, "Z error: two lines\n");
    CHECK(strstr(text, "hidden") == NULL);
    free(text);
}

/* A writer writes lines until the log has been reopened, then AFTER more. */
#define AFTER 1000

struct writer {
    int id;
    const atomic_int *reopened;
    atomic_uint lines; /* written so far */
};

static void *write_lines(void *arg)
{
    struct writer *w = arg;
    char p[64];
    snprintf(p, sizeof(p), "/thread/%d/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", w->id);
    unsigned n = 0;
    for (unsigned after = 0; after < AFTER; after += atomic_load(w->reopened) != 0) {
        log_access("GET", p, 200, n, 1000, NULL);
        atomic_store(&w->lines, ++n);
    }
    return NULL;
}

/* Whether every writer has written at least 100 lines. */
static int all_writing(const struct writer *w, int n)
{
    for (int i = 0; i < n; i++)
        if (atomic_load(&w[i].lines) < 100)
            return 0;
    return 1;
}

/* Lines of text that are thread's. */
static size_t lines_of_threads(const char *text)
{
    size_t n = 0;
    for (const char *at = text; at && (at = strstr(at, " GET /thread/")); at++)
        n++;
    return n;
}

TEST(concurrent_lines_whole_and_reopen)
{
    char path[600], rotated[640];
    snprintf(path, sizeof(path), "%s/access.log", tmpdir);
    snprintf(rotated, sizeof(rotated), "%s.1", path);
    CHECK(log_init("info", path) == 0);
    pthread_t t[4];
    atomic_int reopened = 0;
    struct writer w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct writer){.id = i, .reopened = &reopened};
        pthread_create(&t[i], NULL, write_lines, &w[i]);
    }
    /* Rotate while they all write: no line may be lost or torn. */
    WAIT_UNTIL(all_writing(w, 4), TEST_WAIT_MS);
    CHECK(rename(path, rotated) == 0);
    CHECK(log_reopen() == 0);
    atomic_store(&reopened, 1);
    size_t written = 1; /* and /after-reopen */
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        written += atomic_load(&w[i].lines);
    }
    log_access("GET", "/after-reopen", 200, 0, 0, NULL);
    char *a = slurp(rotated), *b = slurp(path);
    CHECK_CONTAINS(b, "/after-reopen");
    /* Before the rename in the old file, after the reopen in the new one
     * (but the line each writer had under way then, which may be in either). */
    CHECK(lines_of_threads(a) >= 4 * 100 && lines_of_threads(b) >= 4 * (AFTER - 1));
    size_t lines = 0;
    for (char *text = a; text; text = text == a ? b : NULL)
        for (char *line = text, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
            lines++;
            *nl = '\0';
            if (!strstr(line, " GET /thread/") && !strstr(line, " GET /after-reopen ")) {
                fprintf(stderr, "  torn line: %s\n", line);
                test_failed_flag = 1;
            }
        }
    CHECK_EQ_U64(lines, written);
    free(a);
    free(b);
    /* log_init again on the same path keeps working; then back to stderr. */
    CHECK(log_init("info", path) == 0);
    CHECK(log_reopen() == 0);
    CHECK(log_init("info", "-") == 0);
    CHECK(log_reopen() == 0); /* stderr: nothing to reopen */
    unlink(path);
    unlink(rotated);
}

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(access_line_format);
    RUN(escaping);
    RUN(token_scrubbed);
    RUN(token_scrubbed_after_decoding);
    RUN(presigned_signature_scrubbed);
    RUN(long_fields_truncated_below_pipe_buf);
    RUN(levels);
    RUN(log_msg_to_stderr);
    RUN(concurrent_lines_whole_and_reopen);
    char p[600];
    snprintf(p, sizeof(p), "%s/stderr", tmpdir);
    unlink(p);
    rmdir(tmpdir);
    return TEST_SUMMARY();
}
