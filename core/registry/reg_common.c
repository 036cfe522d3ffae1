/* reg_common: see reg_common.h. */
#include "reg_common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "beneath.h"
#include "st_header.h"
#include "util.h"

int reg_errno_transient(int e)
{
    switch (e) {
    case EMFILE: case ENFILE: case ENOMEM: case ENOBUFS: case EIO: case EAGAIN:
    case EINTR: case ETIMEDOUT: case ESTALE: case ENOLCK: case EDEADLK:
        return 1;
    default:
        return 0;
    }
}

int reg_file_open(const struct reg_root *root, char *path, const char *name, struct reg_file *f,
                  int *transient)
{
    memset(f, 0, sizeof(*f));
    int fd = beneath_open(root->fd, root->path, path, O_RDONLY | O_NOCTTY | O_NONBLOCK);
    if (fd >= 0)
        fd = fileio_regular(fd, &f->st);
    if (fd == -EXDEV || fd == -ENOENT || fd == -ELOOP || fd == -ENOTDIR || fd == -EINVAL ||
        fd == -ENXIO) {
        free(path);
        return 0;
    }
    if (!(f->name = strdup(name))) {
        if (fd >= 0)
            close(fd);
        free(path);
        return -1;
    }
    f->path = path;
    f->is_safetensors = str_has_suffix(name, ".safetensors");
    f->fd = fd < 0 ? -1 : fd;
    if (fd < 0) {
        st_error_errno(&f->error, -fd, "%s: open", name);
        *transient |= reg_errno_transient(-fd);
    }
    return 1;
}

static int cmp_id(const void *a, const void *b)
{
    return strcmp(((const struct reg_entry_id *)a)->name, ((const struct reg_entry_id *)b)->name);
}

void reg_ids_sort(struct reg_entry_id *ids, size_t n)
{
    if (n > 1)
        qsort(ids, n, sizeof(*ids), cmp_id);
}

struct reg_entry_id *reg_ids_sorted_copy(const struct reg_entry_id *ids, size_t n)
{
    struct reg_entry_id *copy = calloc(n ? n : 1, sizeof(*copy));
    for (size_t i = 0; copy && i < n; i++) {
        if (!(copy[i].name = strdup(ids[i].name))) {
            reg_ids_free(copy, i);
            return NULL;
        }
        copy[i].st = ids[i].st;
    }
    if (copy)
        reg_ids_sort(copy, n);
    return copy;
}

int reg_ids_same(const struct reg_entry_id *a, size_t na, const struct reg_entry_id *b, size_t nb)
{
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i].name, b[i].name) != 0 || !fileio_same_version(&a[i].st, &b[i].st))
            return 0;
    return 1;
}

void reg_ids_free(struct reg_entry_id *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(ids[i].name);
    free(ids);
}

void reg_files_free(struct reg_file *files, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (files[i].fd >= 0)
            close(files[i].fd);
        st_header_free(files[i].header);
        free(files[i].name);
        free(files[i].path);
    }
    free(files);
}

struct reg_root *reg_root_open(const char *root, const struct reg_root *prev,
                               struct st_error *err)
{
    char *real = realpath(root, NULL);
    int fd = real ? open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK) : -1;
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        st_error_errno(err, errno, "models root \"%.300s\"", root);
        if (fd >= 0)
            close(fd);
        free(real);
        return NULL;
    }
    if (prev && strcmp(prev->path, real) == 0 && prev->dev == sb.st_dev && prev->ino == sb.st_ino) {
        close(fd);
        free(real);
        return reg_root_ref((struct reg_root *)prev);
    }
    struct reg_root *rr = xcalloc(1, sizeof(*rr));
    atomic_init(&rr->refs, 1);
    rr->fd = fd;
    rr->path = real;
    rr->dev = sb.st_dev;
    rr->ino = sb.st_ino;
    return rr;
}

struct reg_root *reg_root_ref(struct reg_root *r)
{
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
    return r;
}

void reg_root_unref(struct reg_root *r)
{
    if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return;
    close(r->fd);
    free(r->path);
    free(r);
}
