/* Tests core/base/beneath.c: every way a path can lead outside a directory (absolute
 * and relative symlinks, "..", chains, loops, links swapped in after a check)
 * is refused, and every way that stays inside is followed, by beneath_open
 * (openat2 first) and by the component walk alone, which must agree. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "beneath.h"
#include "test.h"

static char base[] = "/tmp/tensord-beneath-XXXXXX";
static char root[256], outside[256];
static int rootfd = -1;

static void put(const char *dir, const char *rel, const char *text)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", dir, rel);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void mkdir_at(const char *rel)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    CHECK(mkdir(p, 0755) == 0);
}

static void link_at(const char *target, const char *rel)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", root, rel);
    unlink(p);
    CHECK(symlink(target, p) == 0);
}

/* What opening rel reads: its first line, or the negative errno as text. */
static const char *read_via(int walk_only, const char *rel, int flags, char *buf, size_t len)
{
    int fd = walk_only ? beneath_open_walk(rootfd, root, rel, flags)
                       : beneath_open(rootfd, root, rel, flags);
    if (fd < 0) {
        snprintf(buf, len, "errno %d", -fd);
        return buf;
    }
    struct stat sb;
    CHECK(fstat(fd, &sb) == 0);
    if (S_ISDIR(sb.st_mode)) {
        snprintf(buf, len, "dir");
    } else {
        ssize_t n = read(fd, buf, len - 1);
        buf[n > 0 ? n : 0] = '\0';
    }
    close(fd);
    return buf;
}

/* Both ways must give `want`. */
static void expect(const char *rel, const char *want)
{
    char a[256], b[256];
    for (int walk = 0; walk < 2; walk++) {
        const char *got = read_via(walk, rel, O_RDONLY | O_NONBLOCK, walk ? b : a, sizeof(a));
        if (strcmp(got, want) != 0) {
            fprintf(stderr, "  %s (%s): got \"%s\", want \"%s\"\n", rel,
                    walk ? "walk" : "openat2", got, want);
            test_failed_flag = 1;
        }
    }
}

static void setup(void)
{
    CHECK(mkdtemp(base) != NULL);
    snprintf(root, sizeof(root), "%s/root", base);
    snprintf(outside, sizeof(outside), "%s/outside", base);
    CHECK(mkdir(root, 0755) == 0 && mkdir(outside, 0755) == 0);
    put(outside, "secret", "SECRET");
    mkdir_at("m");
    mkdir_at("m/sub");
    mkdir_at("other");
    put(root, "m/model.safetensors", "MODEL");
    put(root, "m/sub/deep", "DEEP");
    put(root, "other/shared", "SHARED");
    rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(rootfd >= 0);
}

TEST(plain_paths)
{
    expect("m/model.safetensors", "MODEL");
    expect("m/sub/deep", "DEEP");
    expect("m//sub///deep", "DEEP");
    expect("m/./sub/deep", "DEEP");
    expect("m/sub/../model.safetensors", "MODEL");
    expect("m", "dir");
    expect("m/nope", "errno 2");
    expect("m/model.safetensors/x", "errno 20");
}

TEST(links_inside_are_followed)
{
    link_at("../other/shared", "m/rel");          /* relative, through .. */
    link_at("sub", "m/subdir");                   /* directory */
    char abs[PATH_MAX];
    snprintf(abs, sizeof(abs), "%s/other/shared", root);
    link_at(abs, "m/abs");                        /* absolute, into the root */
    link_at("rel", "m/chain");                    /* link to a link */
    link_at("..", "m/up");                        /* the root itself, by ".." */
    expect("m/rel", "SHARED");
    expect("m/subdir/deep", "DEEP");
    expect("m/abs", "SHARED");
    expect("m/chain", "SHARED");
    expect("m/up/other/shared", "SHARED");
    expect("m/up/m/up/m/subdir/deep", "DEEP");
}

TEST(links_outside_are_refused)
{
    char abs[PATH_MAX];
    snprintf(abs, sizeof(abs), "%s/secret", outside);
    link_at(abs, "m/abs_out");                    /* absolute, outside */
    link_at("../../outside/secret", "m/rel_out"); /* relative, escaping by .. */
    link_at("/etc/passwd", "m/passwd");
    link_at("rel_out", "m/chain_out");            /* a chain that ends outside */
    link_at("../..", "m/up2");                    /* a directory above the root */
    link_at("/proc/self/root/etc/passwd", "m/magic");
    snprintf(abs, sizeof(abs), "%s/..", root);    /* absolute, into the root, then up */
    link_at(abs, "m/abs_up");
    char e[32];
    snprintf(e, sizeof(e), "errno %d", EXDEV);
    expect("m/abs_out", e);
    expect("m/rel_out", e);
    expect("m/passwd", e);
    expect("m/chain_out", e);
    expect("m/up2/outside/secret", e);
    expect("m/magic", e);
    expect("m/abs_up/outside/secret", e);
    expect("../outside/secret", e);
    expect("m/../../outside/secret", e);
}

TEST(loops_and_dangling)
{
    link_at("loop_b", "m/loop_a");
    link_at("loop_a", "m/loop_b");
    link_at("self", "m/self");
    link_at("nowhere", "m/dangling");
    char e[32];
    snprintf(e, sizeof(e), "errno %d", ELOOP);
    expect("m/loop_a", e);
    expect("m/self", e);
    expect("m/dangling", "errno 2");
}

/* A file swapped for a link to a secret after a scan saw a regular file:
 * the open, not the scan, decides. */
TEST(swap_after_check_is_refused)
{
    char e[32];
    snprintf(e, sizeof(e), "errno %d", EXDEV);
    expect("m/model.safetensors", "MODEL");
    char p[PATH_MAX], abs[PATH_MAX];
    snprintf(p, sizeof(p), "%s/m/model.safetensors", root);
    snprintf(abs, sizeof(abs), "%s/secret", outside);
    CHECK(unlink(p) == 0 && symlink(abs, p) == 0);
    expect("m/model.safetensors", e);
    /* a directory swapped for a link outside, mid-path */
    snprintf(p, sizeof(p), "%s/m/sub/deep", root);
    CHECK(unlink(p) == 0);
    snprintf(p, sizeof(p), "%s/m/sub", root);
    CHECK(rmdir(p) == 0 && symlink(outside, p) == 0);
    expect("m/sub/secret", e);
}

TEST(directory_flag)
{
    char buf[64];
    CHECK(strcmp(read_via(1, "m", O_RDONLY | O_DIRECTORY, buf, sizeof(buf)), "dir") == 0);
    CHECK(strcmp(read_via(0, "m", O_RDONLY | O_DIRECTORY, buf, sizeof(buf)), "dir") == 0);
    link_at("sub", "m/sublink");
    char e[32];
    snprintf(e, sizeof(e), "errno %d", ENOTDIR);
    for (int walk = 0; walk < 2; walk++) {
        CHECK(strcmp(read_via(walk, "m/sublink", O_RDONLY | O_DIRECTORY, buf, sizeof(buf)), "dir") ==
              0);
        CHECK(strcmp(read_via(walk, "other/shared", O_RDONLY | O_DIRECTORY, buf, sizeof(buf)), e) ==
              0);
    }
}

int main(void)
{
    setup();
    RUN(plain_paths);
    RUN(links_inside_are_followed);
    RUN(links_outside_are_refused);
    RUN(loops_and_dangling);
    RUN(directory_flag);
    RUN(swap_after_check_is_refused);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", base);
    close(rootfd);
    return TEST_SUMMARY();
}
