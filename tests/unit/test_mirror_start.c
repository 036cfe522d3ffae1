/* Unit tests for server/cli/mirror_start.c: no mirror without an upstream; a
 * mirror with its cache where the configuration says, or in the state
 * directory; the upstream token file's first line, and its errors named.
 * And the order in which an evicted partial blob's files go. */
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "config.h"
#include "mirror.h"
#include "mirror_start.h"
#include "mirror_store.h"
#include "test.h"
#include "util.h"

static char dir[] = "/tmp/test_mirror_start.XXXXXX";

/* Every unlinkat of the product, in order (this definition takes the
 * place of libc's for the whole test binary). */
static char unlinked[8][96];
static int n_unlinked;

int unlinkat(int dirfd, const char *path, int flags)
{
    if (n_unlinked < 8)
        snprintf(unlinked[n_unlinked++], sizeof(unlinked[0]), "%s", path);
    return (int)syscall(SYS_unlinkat, dirfd, path, flags);
}

static int unlinked_at(const char *path)
{
    for (int i = 0; i < n_unlinked; i++)
        if (strcmp(unlinked[i], path) == 0)
            return i;
    return -1;
}

static struct mirror *start(const char *const *opts, int *rc, char *err)
{
    struct config cfg;
    config_defaults(&cfg);
    struct st_error e;
    for (const char *const *o = opts; *o; o += 2)
        CHECK(config_set(&cfg, o[0], o[1], &e) == 0);
    struct mirror *m = mirror_start(&cfg, rc, err, 512);
    config_free(&cfg);
    return m;
}

TEST(configurations)
{
    char err[512] = "";
    int rc = 1;
    static const char *const none[] = {NULL};
    CHECK(start(none, &rc, err) == NULL && rc == 0); /* no upstream: no mirror, no error */
    char *cache = xasprintf("%s/cache", dir), *state = xasprintf("%s/state", dir);
    const char *const with_cache[] = {"upstream", "http://127.0.0.1:9", "mirror_cache_dir", cache,
                                      NULL};
    struct mirror *m = start(with_cache, &rc, err);
    CHECK(m != NULL && rc == 0);
    mirror_free(m);
    struct stat st;
    CHECK(stat(cache, &st) == 0 && S_ISDIR(st.st_mode)); /* made when missing */
    const char *const in_state[] = {"upstream", "http://127.0.0.1:9", "state_dir", state, NULL};
    m = start(in_state, &rc, err);
    CHECK(m != NULL && rc == 0);
    mirror_free(m);
    char *in = xasprintf("%s/mirror", state);
    CHECK(stat(in, &st) == 0 && S_ISDIR(st.st_mode));
    free(in);
    char *tok = xasprintf("%s/token", dir);
    test_write_file(tok, "\nsecret\n", 8);
    const char *const empty_token[] = {"upstream", "http://127.0.0.1:9", "mirror_cache_dir", cache,
                                       "upstream_token_file", tok, NULL};
    CHECK(start(empty_token, &rc, err) == NULL && rc == -1);
    char *want = xasprintf("upstream_token_file %s: the first line is empty", tok);
    CHECK_STR(err, want);
    free(want);
    test_write_file(tok, "hf_secret\nignored\n", 18);
    m = start(empty_token, &rc, err);
    CHECK(m != NULL && rc == 0);
    mirror_free(m);
    unlink(tok);
    m = start(empty_token, &rc, err);
    CHECK(m == NULL && rc == -1);
    CHECK_CONTAINS(err, "No such file or directory");
    free(tok);
    free(cache);
    free(state);
}

/* A partial blob evicted (here: at start, over a smaller cap) loses its
 * blob before its state file: a crash between the two leaves a state file
 * alone, which the next start removes, never a partial blob without one,
 * which it would take for complete. */
TEST(eviction_removes_the_blob_first)
{
    char err[512] = "";
    int rc = 1;
    char *cache = xasprintf("%s/evict", dir);
    const char *const opts[] = {"upstream", "http://127.0.0.1:9", "mirror_cache_dir", cache,
                                "mirror_block_bytes", "64K", "mirror_cache_max_bytes", "1M",
                                NULL};
    struct mirror *m = start(opts, &rc, err); /* makes blobs/ */
    CHECK(m != NULL && rc == 0);
    mirror_free(m);
    struct mirror_id id = {.kind = MIRROR_GIT_SHA1, .size = 2u << 20};
    memset(id.digest, 0xab, 20);
    char key[72], blob[128];
    mirror_key(&id, key);
    struct st_error e;
    int cfd = open(cache, O_RDONLY | O_DIRECTORY);
    int sfd = mirror_state_create(cfd, key, &id, 64 << 10, &e);
    CHECK(sfd >= 0);
    for (uint64_t b = 0; b < 32; b += 8) /* every block held: 2 MiB, over the cap */
        CHECK(mirror_state_put(sfd, b, 0xff) == 0);
    close(sfd);
    snprintf(blob, sizeof(blob), "%s/blobs/%s", cache, key);
    int bfd = open(blob, O_RDWR | O_CREAT, 0644);
    CHECK(bfd >= 0 && ftruncate(bfd, (off_t)id.size) == 0);
    close(bfd);
    n_unlinked = 0;
    m = start(opts, &rc, err);
    CHECK(m != NULL && rc == 0);
    mirror_free(m);
    char name[96], state[96];
    snprintf(name, sizeof(name), "blobs/%s", key);
    snprintf(state, sizeof(state), "blobs/%s.state", key);
    CHECK(unlinked_at(name) >= 0 && unlinked_at(state) > unlinked_at(name));
    CHECK(access(blob, F_OK) < 0);
    close(cfd);
    free(cache);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    RUN(configurations);
    RUN(eviction_removes_the_blob_first);
    char *cmd = xasprintf("rm -rf '%s'", dir);
    int rc = system(cmd);
    free(cmd);
    (void)rc;
    return TEST_SUMMARY();
}
