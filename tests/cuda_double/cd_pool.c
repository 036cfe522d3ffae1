/* cuda_double device memory: the memfds behind every allocation, the
 * double's own read-write view of each (where copies read and write, so the
 * caller's fresh mappings never page fault under a copy, as a GPU's memory
 * does not), and the pool that keeps released memory, populated, for the
 * next allocation of the same size. A test double, not CUDA: see
 * cuda_double.h.
 *
 * A pooled memfd may still be mapped by a worker that imported it (workers
 * keep reading an evicted generation), or sit in a socket on its way to one.
 * So every descriptor handed to another process is an open file description
 * of its own with a shared flock (cd_pool_export): the kernel drops that lock
 * only when the description's last reference goes, every descriptor and
 * every mapping of it in every process, SCM_RIGHTS messages in flight
 * included. The pool hands a memfd out again only when an exclusive flock on
 * the double's own description succeeds: no export of it is left anywhere. */
#include "cuda_double.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

int cd_memfd(size_t size, int dev)
{
    char name[64];
    snprintf(name, sizeof(name), CD_MEMFD_PREFIX "%d", dev);
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return -1;
    /* Device memory does not change size: importers may trust it. */
    if (ftruncate(fd, (off_t)size) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int cd_pool_fresh(int dev, size_t size, int populate, int *fd, char **view, char *why,
                  size_t whylen)
{
    int e = 0;
    *view = MAP_FAILED;
    *fd = cd_memfd(size, dev);
    if (*fd < 0) {
        e = -errno;
        snprintf(why, whylen, "memfd for %zu bytes: %s", size, strerror(errno));
        goto fail;
    }
    *view = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (*view == MAP_FAILED) {
        e = -errno;
        snprintf(why, whylen, "mapping %zu bytes: %s", size, strerror(errno));
        goto fail;
    }
    /* A GPU's memory is there once allocated. Allocating the pages first
     * and then mapping them is several times faster than faulting each in
     * (shmem without huge pages), and the copies then never fault. */
    if (populate && (fallocate(*fd, 0, 0, (off_t)size) < 0 ||
                     madvise(*view, size, MADV_POPULATE_WRITE) < 0)) {
        e = -errno;
        snprintf(why, whylen, "populating %zu bytes: %s", size, strerror(errno));
        goto fail;
    }
    return 0;
fail:
    if (*view != MAP_FAILED)
        munmap(*view, size);
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
    *view = NULL;
    return e;
}

static void pooled_free(struct cd_pooled **pp)
{
    struct cd_pooled *p = *pp;
    *pp = p->next;
    cd.pooled[p->dev] -= p->size;
    munmap(p->view, p->size);
    close(p->fd);
    free(p);
}

int cd_pool_take(int dev, size_t size, int *fd, char **view)
{
    for (struct cd_pooled **pp = &cd.pool; *pp; pp = &(*pp)->next) {
        struct cd_pooled *p = *pp;
        if (p->dev != dev || p->size != size)
            continue;
        /* Fails while any export of it is open or mapped anywhere. */
        if (flock(p->fd, LOCK_EX | LOCK_NB) < 0) {
            cd.pool_held++;
            continue;
        }
        flock(p->fd, LOCK_UN);
        *fd = p->fd;
        *view = p->view;
        *pp = p->next;
        cd.pooled[dev] -= size;
        cd.pool_reused++;
        free(p);
        return 1;
    }
    return 0;
}

void cd_pool_trim(int dev)
{
    while (cd.used[dev] + cd.pooled[dev] > cd.mem_bytes) {
        struct cd_pooled **oldest = NULL;
        for (struct cd_pooled **pp = &cd.pool; *pp; pp = &(*pp)->next)
            if ((*pp)->dev == dev)
                oldest = pp;
        if (!oldest)
            return;
        pooled_free(oldest);
    }
}

void cd_pool_give(struct cd_mem *m)
{
    struct cd_pooled *p = NULL;
    if (cd_valid_dev(m->dev) && m->poolable && m->view && (p = malloc(sizeof(*p)))) {
        *p = (struct cd_pooled){.fd = m->fd, .view = m->view, .size = m->size, .dev = m->dev,
                                .next = cd.pool};
        cd.pool = p;
        cd.pooled[m->dev] += m->size;
        return;
    }
    if (m->view)
        munmap(m->view, m->size);
    close(m->fd);
}

int cd_pool_export(struct cd_mem *m)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", m->fd);
    /* Opening the memfd again gives a new open file description (a dup
     * would share the double's own, and its lock). */
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_SH | LOCK_NB) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    /* No /proc: an export the pool cannot see, so this memory is never reused. */
    m->poolable = 0;
    return fcntl(m->fd, F_DUPFD_CLOEXEC, 0);
}

void cd_pool_report(char *buf, size_t len)
{
    size_t bytes = 0;
    for (int i = 0; i < CD_MAX_DEVICES; i++)
        bytes += cd.pooled[i];
    snprintf(buf, len,
             "\"pool\": {\"reused\": %llu, \"fresh\": %llu, \"held_elsewhere\": %llu, "
             "\"bytes\": %zu}",
             cd.pool_reused, cd.pool_fresh, cd.pool_held, bytes);
}
