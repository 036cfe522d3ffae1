/* Helpers shared by the registry unit tests (test_registry.c and
 * test_registry_fs.c): model trees built under a temp directory, one fresh
 * root per test, scanned and checked model by model. */
#ifndef TENSORD_REGISTRY_FIXTURE_H
#define TENSORD_REGISTRY_FIXTURE_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry.h"
#include "test.h"
#include "util.h"

static char base[] = "/tmp/test_registry.XXXXXX";
static char root[600];
static int n_roots;

/* A fresh, empty root for one test. */
static inline void new_root(void)
{
    snprintf(root, sizeof(root), "%s/r%d", base, n_roots++);
    CHECK(mkdir(root, 0755) == 0);
}

static inline char *at(const char *rel)
{
    return xasprintf("%s/%s", root, rel);
}

/* mkdir -p for the directories above rel. */
static inline void mkparents(const char *rel)
{
    char *p = at(rel);
    test_mkparents(p);
    free(p);
}

static inline void write_raw(const char *rel, const void *data, size_t n)
{
    char *p = at(rel);
    test_write_file(p, data, n);
    free(p);
}

/* A safetensors file from its header JSON and the data length (zeros). */
static inline void write_st(const char *rel, const char *json, size_t data_len)
{
    char *p = at(rel);
    test_write_st(p, json, data_len);
    free(p);
}

/* A valid file holding the comma-separated tensors, each U8 [4]. */
static inline void write_tensors(const char *rel, const char *names)
{
    char *json = xstrdup("{");
    size_t off = 0;
    char *list = xstrdup(names), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *next = xasprintf("%s%s\"%s\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[%zu,%zu]}",
                               json, off ? "," : "", t, off, off + 4);
        free(json);
        json = next;
        off += 4;
    }
    char *next = xasprintf("%s}", json);
    write_st(rel, next, off);
    free(next);
    free(json);
    free(list);
}

static inline void write_text(const char *rel, const char *text)
{
    write_raw(rel, text, strlen(text));
}

static inline void symlink_at(const char *target, const char *rel)
{
    mkparents(rel);
    char *p = at(rel);
    CHECK(symlink(target, p) == 0);
    free(p);
}

static inline struct reg_snapshot *scan(void)
{
    struct st_error err;
    struct reg_snapshot *r = reg_snapshot_scan(root, 7, NULL, &err);
    CHECK(r != NULL);
    if (!r)
        fprintf(stderr, "  scan: %s\n", err.message);
    return r;
}

static inline const struct reg_model *model(const struct reg_snapshot *r, const char *name)
{
    return reg_snapshot_find_model(r, name, strlen(name));
}

static inline int has_tensor(const struct reg_model *m, const char *name)
{
    return reg_model_find_tensor(m, name, strlen(name)) != NULL;
}

/* Checks that model name exists and is invalid with code and a message
 * containing needle (when non-NULL). */
static inline void expect_invalid(const struct reg_snapshot *r, const char *name,
                                  enum st_status code, const char *needle)
{
    const struct reg_model *m = model(r, name);
    CHECK(m != NULL);
    if (!m)
        return;
    if (m->state != MODEL_INVALID || m->error.code != code)
        fprintf(stderr, "  model %s: state %d, %s: %s (wanted %s)\n", name, m->state,
                st_status_name(m->error.code), m->error.message, st_status_name(code));
    CHECK(m->state == MODEL_INVALID);
    CHECK(m->error.code == code);
    if (needle)
        CHECK_CONTAINS(m->error.message, needle);
    CHECK_EQ_U64(m->n_tensors, 0);
    CHECK(m->n_files > 0);
    CHECK(reg_model_find_tensor(m, "a", 1) == NULL);
}

/* Every descriptor the scans opened is closed again by reg_snapshot_unref. */
static inline int count_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 65536; fd++)
        if (fcntl(fd, F_GETFD) != -1)
            n++;
    return n;
}

/* Creates the temp base and raises the descriptor limit; *fds is how many
 * descriptors were open before any scan. Returns 0, or 1 when the base could
 * not be made. */
static inline int registry_fixture_begin(int *fds)
{
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }
    /* every served file stays open: 2500 models need more than the default 1024 */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 8192) {
        rl.rlim_cur = rl.rlim_max < 8192 ? rl.rlim_max : 8192;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    *fds = count_fds();
    return 0;
}

/* Fails the run when a descriptor leaked since registry_fixture_begin, and
 * removes the temp base. */
static inline void registry_fixture_end(int fds)
{
    if (count_fds() != fds) {
        fprintf(stderr, "FAIL descriptors leaked: %d open, %d before\n", count_fds(), fds);
        tests_failed++;
    }
    char *cmd = xasprintf("rm -rf %s", base);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", base);
    free(cmd);
}

#endif
