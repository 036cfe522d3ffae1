/* libFuzzer target for the hash state file parser: arbitrary bytes through
 * hashfile_parse must never crash, leak or read out of bounds, and every
 * error must name the file and a line.
 *
 * Random bytes almost never carry a valid checksum, so the first input byte
 * picks a mode: odd, the rest is parsed as it is; even, the rest is taken as
 * the lines before the end line and the target appends a correct
 * "end COUNT SHA256" itself, which lets the fuzzer reach the end of the
 * parser and its acceptance. Whatever is accepted must round-trip: loaded
 * into a store and formatted again, it parses to the same entries. */
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hashfile.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct bag {
    struct hashstore *s;
    size_t n;
};

static int add(void *ctx, const struct hash_entry *e)
{
    struct bag *b = ctx;
    if (hashstore_lookup(b->s, &e->id, NULL))
        return 1;
    if (hashstore_put(b->s, e, 1) != 0)
        return -1;
    b->n++;
    return 0;
}

static int same(const struct hash_entry *a, const struct hash_entry *b)
{
    return hash_id_equal(&a->id, &b->id) && memcmp(a->sha256, b->sha256, sizeof(a->sha256)) == 0 &&
           a->has_git_sha1 == b->has_git_sha1 &&
           (!a->has_git_sha1 || memcmp(a->git_sha1, b->git_sha1, sizeof(a->git_sha1)) == 0);
}

static void check_error(const struct st_error *err, int rc)
{
    if (rc != st_status_errno(err->code) || strncmp(err->message, "fuzz:", 5) != 0) {
        fprintf(stderr, "error %d without \"fuzz:LINE:\": %s\n", rc, err->message);
        abort();
    }
}

/* The text with a correct end line for the COUNT lines that look like
 * entries (the parser will say whether they are). */
static char *with_end(const char *body, size_t len, size_t *out_len)
{
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += body[i] == '\n';
    unsigned char d[32];
    unsigned dn = 0;
    EVP_Digest(body, len, d, &dn, EVP_sha256(), NULL);
    char hex[65];
    digest_hex(d, 32, hex);
    char *out = xmalloc(len + 128);
    memcpy(out, body, len);
    *out_len = len + (size_t)sprintf(out + len, "end %zu %s\n", lines ? lines - 1 : 0, hex);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t len = size - 1;
    char *text = NULL;
    const char *in = (const char *)data + 1;
    if (!(data[0] & 1)) {
        text = with_end(in, len, &len);
        in = text;
    }
    struct bag b = {.s = hashstore_new()};
    struct st_error err;
    int rc = hashfile_parse(in, len, "fuzz", add, &b, &err);
    if (rc != 0) {
        check_error(&err, rc);
    } else {
        const struct hash_entry *kept = NULL;
        size_t n = 0;
        struct hashstore_plan *p = hashstore_plan_save(b.s, 1, &kept, &n);
        if (n != b.n || (!p && b.n))
            abort();
        size_t flen;
        char *again = hashfile_format(kept, n, &flen);
        struct bag c = {.s = hashstore_new()};
        if (hashfile_parse(again, flen, "fuzz", add, &c, &err) != 0 || c.n != n) {
            fprintf(stderr, "formatted text does not parse back: %s\n", err.message);
            abort();
        }
        for (size_t i = 0; i < n; i++) {
            struct hash_entry e;
            if (!hashstore_lookup(c.s, &kept[i].id, &e) || !same(&e, &kept[i]))
                abort();
        }
        free(again);
        hashstore_end_save(b.s, p, 1);
        hashstore_free(c.s);
    }
    hashstore_free(b.s);
    free(text);
    return 0;
}
