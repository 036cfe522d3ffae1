/* mirror_store: the mirror's files on disk (the layout is in mirror.h):
 * names, and the state file of a partial file.
 *
 * A state file is a 4096-byte text header, then one bit per block (bit b
 * of byte b / 8, least significant first) saying the block's bytes are in
 * the blob:
 *
 *     tensord-mirror-state 1
 *     key sha256-<64 hex>
 *     size <bytes>
 *     block <bytes>
 *
 * padded with newlines. It is read at start-up, where a malformed one (a
 * crash while it was made, another program's file) makes its partial file
 * start over: the parser is bounded and fuzzed (tests/fuzz/fuzz_mirror_state.c). */
#ifndef TENSORD_MIRROR_STORE_H
#define TENSORD_MIRROR_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"

/* What a file's content is named by. */
enum mirror_kind { MIRROR_SHA256, MIRROR_GIT_SHA1 };

struct mirror_id {
    enum mirror_kind kind;
    uint8_t digest[32];            /* 32 bytes of SHA-256, or 20 of SHA-1 */
    uint64_t size;
};

/* The key of an id ("sha256-<hex>" or "gitsha1-<hex>") into out (72 bytes). */
void mirror_key(const struct mirror_id *id, char out[72]);
/* Parses a key (len bytes) into kind and digest. Returns 0 or -EINVAL. */
int mirror_key_parse(const char *s, size_t len, struct mirror_id *id);

#define MIRROR_STATE_HEADER 4096u
#define MIRROR_MAX_BLOCKS (1u << 24) /* 16 Mi blocks: 1 PiB at 64 MiB, 1 TiB at 64 KiB */

/* Blocks of a file of size bytes in blocks of block bytes. */
static inline uint64_t mirror_blocks(uint64_t size, uint64_t block)
{
    return size == 0 ? 0 : (size - 1) / block + 1;
}

/* Makes blobs/<key>.state below dirfd (replacing one left over) for id in
 * blocks of `block` bytes, every bit clear, and returns its descriptor
 * (read-write), or -errno with err. */
int mirror_state_create(int dirfd, const char *key, const struct mirror_id *id, uint64_t block,
                        struct st_error *err);

/* Reads the state file text buf[0..len) of the blob named key: *id (kind
 * and digest from the key, size from the file), *block, and the bitmap
 * (pointing into buf, nbytes = (blocks + 7) / 8). Returns 0, or -EINVAL
 * with err naming what is wrong. */
int mirror_state_parse(const char *buf, size_t len, const char *key, struct mirror_id *id,
                       uint64_t *block, const uint8_t **bitmap, struct st_error *err);

/* Writes byte `value` of the bitmap (block b's byte) into the state file. */
int mirror_state_put(int fd, uint64_t b, uint8_t value);

/* Reads all of blobs/<key>.state below dirfd into a malloc'd buffer (at
 * most the header and MIRROR_MAX_BLOCKS bits). Returns its length, or
 * -errno. */
int64_t mirror_state_read(int dirfd, const char *key, char **out);

#endif
