/* mirror_store: see mirror_store.h. */
#include "mirror_store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "digest.h"
#include "fileio.h"
#include "util.h"

#define MAGIC "tensord-mirror-state 1\n"

void mirror_key(const struct mirror_id *id, char out[72])
{
    const char *kind = id->kind == MIRROR_SHA256 ? "sha256-" : "gitsha1-";
    size_t n = strlen(kind);
    memcpy(out, kind, n);
    digest_hex(id->digest, id->kind == MIRROR_SHA256 ? 32 : 20, out + n);
}

int mirror_key_parse(const char *s, size_t len, struct mirror_id *id)
{
    memset(id, 0, sizeof(*id));
    if (len == 7 + 64 && memcmp(s, "sha256-", 7) == 0) {
        id->kind = MIRROR_SHA256;
        return digest_unhex(s + 7, 32, id->digest) == 0 ? 0 : -EINVAL;
    }
    if (len == 8 + 40 && memcmp(s, "gitsha1-", 8) == 0) {
        id->kind = MIRROR_GIT_SHA1;
        return digest_unhex(s + 8, 20, id->digest) == 0 ? 0 : -EINVAL;
    }
    return -EINVAL;
}

int mirror_state_create(int dirfd, const char *key, const struct mirror_id *id, uint64_t block,
                        struct st_error *err)
{
    char name[96], head[MIRROR_STATE_HEADER];
    snprintf(name, sizeof(name), "blobs/%s.state", key);
    uint64_t nbytes = (mirror_blocks(id->size, block) + 7) / 8;
    memset(head, '\n', sizeof(head));
    int n = snprintf(head, sizeof(head), MAGIC "key %s\nsize %" PRIu64 "\nblock %" PRIu64 "\n",
                     key, id->size, block);
    head[n] = '\n'; /* snprintf's NUL */
    int fd = openat(dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return st_error_errno(err, errno, "mirror cache: %s", name);
    int rc = fileio_pwrite_full(fd, head, sizeof(head), 0);
    /* The bitmap is all zeros: a hole the size of it reads as such. */
    if (rc == 0 && ftruncate(fd, (off_t)(MIRROR_STATE_HEADER + nbytes)) < 0)
        rc = -errno;
    if (rc < 0) {
        close(fd);
        unlinkat(dirfd, name, 0);
        return st_error_errno(err, -rc, "mirror cache: writing %s", name);
    }
    return fd;
}

/* The value of "NAME <decimal>\n" at *p (advanced past it). */
static int field_u64(const char **p, const char *end, const char *name, uint64_t *v)
{
    size_t n = strlen(name), used;
    if ((size_t)(end - *p) < n + 1 || memcmp(*p, name, n) != 0 || (*p)[n] != ' ')
        return -1;
    *p += n + 1;
    if (decimal_u64(*p, (size_t)(end - *p), v, &used) < 0 || used == 0 || used > 20 ||
        *p + used >= end || (*p)[used] != '\n')
        return -1;
    *p += used + 1;
    return 0;
}

int mirror_state_parse(const char *buf, size_t len, const char *key, struct mirror_id *id,
                       uint64_t *block, const uint8_t **bitmap, struct st_error *err)
{
    const char *p = buf, *end = buf + (len < MIRROR_STATE_HEADER ? len : MIRROR_STATE_HEADER);
    size_t klen = strlen(key);
    if (len < MIRROR_STATE_HEADER)
        return st_error_fail(err, ST_ERR_STATE_FORMAT, "%s.state: shorter than its header", key);
    if (mirror_key_parse(key, klen, id) < 0)
        return st_error_fail(err, ST_ERR_STATE_FORMAT, "%s.state: not a blob's name", key);
    if (memcmp(p, MAGIC, sizeof(MAGIC) - 1) != 0)
        return st_error_fail(err, ST_ERR_STATE_VERSION, "%s.state: not a state file of this "
                             "version", key);
    p += sizeof(MAGIC) - 1;
    if ((size_t)(end - p) < 4 + klen + 1 || memcmp(p, "key ", 4) != 0 ||
        memcmp(p + 4, key, klen) != 0 || p[4 + klen] != '\n')
        return st_error_fail(err, ST_ERR_STATE_FORMAT, "%s.state: its key line names another "
                             "blob", key);
    p += 4 + klen + 1;
    if (field_u64(&p, end, "size", &id->size) < 0 || field_u64(&p, end, "block", block) < 0)
        return st_error_fail(err, ST_ERR_STATE_FORMAT, "%s.state: no size and block lines", key);
    for (; p < end; p++)
        if (*p != '\n')
            return st_error_fail(err, ST_ERR_STATE_FORMAT, "%s.state: bytes after the header's "
                                 "lines", key);
    if (*block < 4096 || *block % 4096 || *block > (1ull << 30))
        return st_error_fail(err, ST_ERR_STATE_FORMAT, "%s.state: block size %" PRIu64 " is not "
                             "a multiple of 4096 up to 1 GiB", key, *block);
    uint64_t nblocks = mirror_blocks(id->size, *block);
    if (nblocks > MIRROR_MAX_BLOCKS)
        return st_error_fail(err, ST_ERR_STATE_FORMAT, "%s.state: %" PRIu64 " blocks, more than "
                             "%u", key, nblocks, MIRROR_MAX_BLOCKS);
    uint64_t nbytes = (nblocks + 7) / 8;
    if (len != MIRROR_STATE_HEADER + nbytes)
        return st_error_fail(err, ST_ERR_STATE_FORMAT, "%s.state: %zu bytes, not the %" PRIu64
                             " its size says", key, len, MIRROR_STATE_HEADER + nbytes);
    const uint8_t *bits = (const uint8_t *)buf + MIRROR_STATE_HEADER;
    if (nblocks % 8 && (bits[nbytes - 1] >> (nblocks % 8)))
        return st_error_fail(err, ST_ERR_STATE_FORMAT, "%s.state: bits set past the last block",
                             key);
    *bitmap = bits;
    return 0;
}

int mirror_state_put(int fd, uint64_t b, uint8_t value)
{
    return fileio_pwrite_full(fd, &value, 1, MIRROR_STATE_HEADER + b / 8);
}

int64_t mirror_state_read(int dirfd, const char *key, char **out)
{
    char name[96];
    snprintf(name, sizeof(name), "blobs/%s.state", key);
    *out = NULL;
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    uint64_t max = MIRROR_STATE_HEADER + MIRROR_MAX_BLOCKS / 8;
    off_t size = lseek(fd, 0, SEEK_END);
    int64_t rc;
    if (size < 0 || (uint64_t)size > max) {
        rc = size < 0 ? -errno : -EFBIG;
    } else {
        char *buf = xmalloc((size_t)size + 1);
        rc = fileio_pread_full(fd, buf, (size_t)size, 0);
        if (rc == 0) {
            *out = buf;
            rc = size;
        } else {
            free(buf);
        }
    }
    close(fd);
    return rc;
}
