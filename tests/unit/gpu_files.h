/* Files for the preload tests (test_gpu_plan.c, test_gpu_load.c,
 * test_gpu_host.c): data after a header of junk, in a temporary directory
 * on a disk-backed file system, and control over which of their pages the
 * page cache holds. */
#ifndef TENSORD_TEST_GPU_FILES_H
#define TENSORD_TEST_GPU_FILES_H

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test.h"
#include "util.h"

/* mkdtemp'ed by gpu_files_setup under /var/tmp (never tmpfs, where pages
 * cannot leave the page cache), removed by gpu_files_teardown. */
static char gpu_files_dir[] = "/var/tmp/tensord-gpu-unit-XXXXXX";

static inline int gpu_files_setup(void)
{
    if (!mkdtemp(gpu_files_dir)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

static inline void gpu_files_teardown(void)
{
    char *cmd = xasprintf("rm -rf '%s'", gpu_files_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", gpu_files_dir);
    free(cmd);
}

/* n pseudo-random bytes (xorshift from seed); the caller frees them. */
static inline unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *p = xmalloc(n ? n : 1);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (unsigned char)x;
    }
    return p;
}

/* Writes head bytes of junk then data[0..n) to name; returns it opened
 * read-only (its pages are in the page cache: it was just written). */
static inline int data_file(const char *name, size_t head, const unsigned char *data, size_t n)
{
    char *path = xasprintf("%s/%s", gpu_files_dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    unsigned char *junk = pattern(head, 99);
    CHECK(fd >= 0);
    CHECK(write(fd, junk, head) == (ssize_t)head);
    CHECK(write(fd, data, n) == (ssize_t)n);
    CHECK(fsync(fd) == 0);
    close(fd);
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    free(junk);
    free(path);
    return fd;
}

/* name opened with O_DIRECT, or -1 where the file system refuses it. */
static inline int direct_fd(const char *name)
{
    char *path = xasprintf("%s/%s", gpu_files_dir, name);
    int fd = open(path, O_RDONLY | O_DIRECT);
    free(path);
    return fd;
}

/* Pages of [off, off + len) of fd that the page cache holds (mincore, which
 * tells the file's owner the truth). */
static inline size_t cached_pages(int fd, uint64_t off, uint64_t len)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uint64_t a = off / pg * pg, n = off + len - a;
    if (len == 0)
        return 0;
    unsigned char *map = mmap(NULL, (size_t)n, PROT_READ, MAP_SHARED, fd, (off_t)a);
    unsigned char *vec = xmalloc((size_t)(n + pg - 1) / pg);
    size_t count = 0;
    CHECK(map != MAP_FAILED);
    if (map != MAP_FAILED && mincore(map, (size_t)n, vec) == 0)
        for (size_t i = 0; i < (n + pg - 1) / pg; i++)
            count += vec[i] & 1;
    if (map != MAP_FAILED)
        munmap(map, (size_t)n);
    free(vec);
    return count;
}

/* Drops [off, off + len) of fd (clean: written and fsync'ed) from the page
 * cache. Returns 1 when none of its pages is left there, 0 when the kernel
 * kept some (the caller skips what needs them gone). */
static inline int drop_cached(int fd, uint64_t off, uint64_t len)
{
    CHECK(posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED) == 0);
    return cached_pages(fd, off, len) == 0;
}

#endif
