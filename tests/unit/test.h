/* Minimal unit-test harness: each tests/unit/test_*.c defines tests with
 * TEST(name) and lists them in main via RUN(name); the binary prints
 * "N passed, N failed" and exits non-zero on any failure. */
#ifndef TENSORD_TEST_H
#define TENSORD_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "st_error.h"

static int test_failed_flag;
static int tests_passed, tests_failed;

#define TEST(name) static void test_##name(void)

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                      \
            test_failed_flag = 1;                                                \
        }                                                                        \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                       \
    do {                                                                         \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                         \
        if (a_ != b_) {                                                          \
            fprintf(stderr, "  %s:%d: %s == %s failed: %" PRIu64 " != %" PRIu64 \
                    "\n", __FILE__, __LINE__, #a, #b, a_, b_);                   \
            test_failed_flag = 1;                                                \
        }                                                                        \
    } while (0)

#define CHECK_STR(a, b)                                                          \
    do {                                                                         \
        const char *a_ = (a), *b_ = (b);                                         \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                 \
            fprintf(stderr, "  %s:%d: %s == %s failed: \"%s\" != \"%s\"\n",     \
                    __FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)",              \
                    b_ ? b_ : "(null)");                                         \
            test_failed_flag = 1;                                                \
        }                                                                        \
    } while (0)

/* Passes when needle occurs in haystack. */
#define CHECK_CONTAINS(haystack, needle)                                         \
    do {                                                                         \
        const char *h_ = (haystack), *n_ = (needle);                             \
        if (!h_ || !strstr(h_, n_)) {                                            \
            fprintf(stderr, "  %s:%d: \"%s\" does not contain \"%s\"\n",         \
                    __FILE__, __LINE__, h_ ? h_ : "(null)", n_);                 \
            test_failed_flag = 1;                                                \
        }                                                                        \
    } while (0)

/* Waiting for what another thread, or the kernel, does: a fixed sleep and
 * then a check is slow where the machine is idle and fails, or checks
 * nothing, where it is loaded. WAIT_UNTIL(cond, ms) evaluates cond until
 * it holds, sleeping 1 ms, then longer, up to 16 ms, between tries; when
 * ms milliseconds pass first, the test fails naming the condition. The
 * deadline only bounds a failing test: make it generous (TEST_WAIT_MS,
 * a sanitizer build on a loaded 2-core machine). A property that something
 * does NOT happen has no condition to wait for: wait instead for an event
 * that comes after it (a thread joined, a later answer). */
#define TEST_WAIT_MS 10000

static inline uint64_t test_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The pause before the next try: 1 ms, doubled each try up to 16 ms. */
static inline void test_wait_pause(unsigned *pause_ms)
{
    usleep(*pause_ms * 1000u);
    if (*pause_ms < 16)
        *pause_ms *= 2;
}

#define WAIT_UNTIL(cond, ms)                                                     \
    do {                                                                         \
        uint64_t until_ = test_mono_ms() + (ms);                                 \
        unsigned pause_ = 1;                                                     \
        while (!(cond)) {                                                        \
            if (test_mono_ms() > until_) {                                       \
                fprintf(stderr, "  %s:%d: waited %u ms in vain for: %s\n",       \
                        __FILE__, __LINE__, (unsigned)(ms), #cond);              \
                test_failed_flag = 1;                                            \
                break;                                                           \
            }                                                                    \
            test_wait_pause(&pause_);                                            \
        }                                                                        \
    } while (0)

/* The same as a function, for helpers that return whether pred(arg) came
 * to hold within ms (the caller checks). */
static inline int test_wait_until(int (*pred)(void *), void *arg, unsigned ms)
{
    uint64_t until = test_mono_ms() + ms;
    unsigned pause = 1;
    while (!pred(arg)) {
        if (test_mono_ms() > until)
            return 0;
        test_wait_pause(&pause);
    }
    return 1;
}

/* The outcome of a core call (0 / -errno plus a struct st_error) as one
 * status, so tests compare codes: ST_OK on success, else the error's code.
 * The check fails when the errno returned does not go with the code (I/O
 * errors return the system's errno, any negative one). */
#define ST_CODE(call, e) test_st_code(__FILE__, __LINE__, #call, (call), (e))

static inline enum st_status test_st_code(const char *file, int line, const char *what, int rc,
                                          const struct st_error *e)
{
    if (rc == 0)
        return ST_OK;
    int io = e->code == ST_ERR_IO || e->code == ST_ERR_NO_MEMORY;
    if (rc > 0 || (!io && rc != st_status_errno(e->code))) {
        fprintf(stderr, "  %s:%d: %s returned %d with code %s\n", file, line, what, rc,
                st_status_name(e->code));
        test_failed_flag = 1;
    }
    return e->code;
}

/* The process's address-space size, for tests that leave it only so much
 * room with RLIMIT_AS (out-of-memory paths; skipped under ASan). */
static inline size_t vm_size_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kib = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmSize: %zu kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib * 1024;
}

/* mkdir -p for the directories above path (absolute; those that exist,
 * the temporary base included, are left alone). */
static inline void test_mkparents(const char *path)
{
    char *p = strdup(path);
    CHECK(p != NULL);
    for (char *s = p ? p + 1 : NULL; s && (s = strchr(s, '/')) != NULL; s++) {
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            CHECK(!"mkdir");
        *s = '/';
    }
    free(p);
}

/* Writes data[0..n) to path, creating the directories above it. */
static inline void test_write_file(const char *path, const void *data, size_t n)
{
    test_mkparents(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, data, n) == (ssize_t)n);
    close(fd);
}

/* A safetensors file at path from its header JSON; data_len zero bytes
 * follow the header. */
static inline void test_write_st(const char *path, const char *json, size_t data_len)
{
    size_t n = strlen(json);
    unsigned char *buf = calloc(1, 8 + n + data_len);
    CHECK(buf != NULL);
    if (!buf)
        return;
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, json, n);
    test_write_file(path, buf, 8 + n + data_len);
    free(buf);
}

/* Runs a command's main (argv as a NULL-terminated list) with its output
 * and errors captured in *out and *err (the caller frees both); returns
 * its exit status. */
static inline int test_run_main(int (*main_fn)(int, char **, FILE *, FILE *),
                                const char *const *args, char **out, char **err)
{
    int n = 0;
    while (args[n])
        n++;
    size_t olen, elen;
    FILE *o = open_memstream(out, &olen), *e = open_memstream(err, &elen);
    int rc = main_fn(n, (char **)args, o, e);
    fclose(o);
    fclose(e);
    return rc;
}

#define RUN(name)                                                                \
    do {                                                                         \
        test_failed_flag = 0;                                                    \
        test_##name();                                                           \
        if (test_failed_flag) {                                                  \
            tests_failed++;                                                      \
            fprintf(stderr, "FAIL %s\n", #name);                                 \
        } else {                                                                 \
            tests_passed++;                                                      \
        }                                                                        \
    } while (0)

#define TEST_SUMMARY()                                                           \
    (printf("%d passed, %d failed\n", tests_passed, tests_failed),               \
     tests_failed ? 1 : 0)

#endif
