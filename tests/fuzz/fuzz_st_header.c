/* Fuzzes safetensors header validation. The input is a whole file: the
 * prefix is checked against the input's size, then the header is parsed
 * with the data length that size leaves. On success the result is checked
 * against the rules it claims to satisfy: tensors sorted by (begin, end),
 * contiguous from 0 to data_len, each span equal to its shape's size. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "st_header.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_result(const struct st_header *h, uint64_t header_len, uint64_t data_len)
{
    uint64_t start = 0;
    if (h->header_len != header_len || h->data_len != data_len)
        abort();
    for (size_t i = 0; i < h->n_tensors; i++) {
        const struct st_tensor *t = &h->tensors[i];
        const struct dtype_info *di = dtype_info(t->dtype);
        if (!di || t->ndim > ST_MAX_NDIM || t->begin != start || t->end < t->begin)
            abort();
        if (strlen(t->name) != t->name_len)
            abort();
        uint64_t n = 1;
        for (uint32_t k = 0; k < t->ndim; k++)
            if (__builtin_mul_overflow(n, t->shape[k], &n))
                abort();
        if (n != t->nelems || (t->end - t->begin) * 8 != n * di->bits)
            abort();
        if (i > 0 && h->tensors[i - 1].begin == t->begin && h->tensors[i - 1].end == t->end &&
            strcmp(h->tensors[i - 1].name, t->name) >= 0)
            abort();
        start = t->end;
    }
    if (start != data_len)
        abort();
    if (!h->has_metadata && h->n_metadata != 0)
        abort();
    for (size_t i = 0; i < h->n_metadata; i++)
        if (!h->metadata[i].key || !h->metadata[i].value)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct st_error err;
    uint64_t n;
    unsigned char prefix[ST_PREFIX_LEN] = {0};
    memcpy(prefix, data, size < ST_PREFIX_LEN ? size : ST_PREFIX_LEN);
    int rc = st_header_check_prefix(prefix, size, "fuzz.safetensors", &n, &err);
    if (rc != 0 && rc != st_status_errno(err.code))
        abort();
    if (rc != 0)
        return 0;
    /* A private copy of exactly n bytes, so reading past the header is an ASan error. */
    char *json = malloc(n);
    if (!json)
        return 0;
    memcpy(json, data + ST_PREFIX_LEN, n);
    struct st_header *h = NULL;
    uint64_t data_len = size - ST_PREFIX_LEN - n;
    rc = st_header_parse(json, n, data_len, "fuzz.safetensors", &h, &err);
    if (rc != st_status_errno(err.code) || (rc == 0) != (h != NULL) || strlen(err.message) >= 500)
        abort();
    if (rc != 0 && strncmp(err.message, "fuzz.safetensors: ", 18) != 0)
        abort();
    if (h)
        check_result(h, n, data_len);
    st_header_free(h);
    free(json);
    return 0;
}
