/* The test file shared by the slice unit tests (test_slice.c, against the
 * reference model, and test_slice_cases.c, fixed cases): a tensor of
 * position-derived bytes at an odd offset in a temp file. */
#ifndef TENSORD_SLICE_FIXTURE_H
#define TENSORD_SLICE_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- test file: bytes with a position-derived pattern ---- */
#define FILE_PAD 13 /* the tensor starts at an odd offset in the file */
static inline uint8_t pattern_byte(uint64_t pos)
{
    uint64_t z = pos * 0x9e3779b97f4a7c15ULL;
    return (uint8_t)((z >> 29) ^ (z >> 47) ^ pos);
}

static inline int make_file(uint64_t tensor_bytes, uint8_t **copy)
{
    char path[] = "/tmp/test_slice_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    unlink(path);
    size_t total = FILE_PAD + tensor_bytes;
    uint8_t *buf = malloc(total ? total : 1);
    for (size_t i = 0; i < total; i++)
        buf[i] = pattern_byte(i);
    if (write(fd, buf, total) != (ssize_t)total) {
        close(fd);
        free(buf);
        return -1;
    }
    *copy = buf;
    return fd;
}

#endif
