/* Differential-test driver for st_header_parse: reads records from stdin
 * (u64 json length, u64 data length, the JSON bytes; little-endian) and
 * prints one line per record: the status name, the message in hex, and a
 * dump of the parsed header in hex (empty on error). diff_st_header.py
 * builds it against the current parser and against an older one. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_header.h"

static void hex(const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++)
        printf("%02x", s[i]);
}

static int read_u64(uint64_t *v)
{
    unsigned char b[8];
    if (fread(b, 1, 8, stdin) != 8)
        return -1;
    *v = 0;
    for (int i = 7; i >= 0; i--)
        *v = *v << 8 | b[i];
    return 0;
}

/* The parsed header as text: every field a caller can see. */
static char *dump(const struct st_header *h, size_t *len)
{
    char *buf;
    FILE *f = open_memstream(&buf, len);
    fprintf(f, "h %" PRIu64 " %" PRIu64 " %d %zu %zu\n", h->header_len, h->data_len,
            h->has_metadata, h->n_metadata, h->n_tensors);
    for (size_t i = 0; i < h->n_metadata; i++) {
        fprintf(f, "m %zu:", strlen(h->metadata[i].key));
        fwrite(h->metadata[i].key, 1, strlen(h->metadata[i].key), f);
        fprintf(f, " %zu:", strlen(h->metadata[i].value));
        fwrite(h->metadata[i].value, 1, strlen(h->metadata[i].value), f);
        fputc('\n', f);
    }
    for (size_t i = 0; i < h->n_tensors; i++) {
        const struct st_tensor *t = &h->tensors[i];
        fprintf(f, "t %zu:", t->name_len);
        fwrite(t->name, 1, t->name_len, f);
        fprintf(f, " %s %" PRIu32 " [", dtype_info(t->dtype)->name, t->ndim);
        for (uint32_t k = 0; k < t->ndim; k++)
            fprintf(f, "%s%" PRIu64, k ? "," : "", t->shape[k]);
        fprintf(f, "] %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", t->nelems, t->begin, t->end);
    }
    fclose(f);
    return buf;
}

int main(void)
{
    uint64_t len, data_len;
    while (read_u64(&len) == 0 && read_u64(&data_len) == 0) {
        char *json = malloc(len ? len : 1);
        if (fread(json, 1, len, stdin) != len)
            return 2;
        struct st_header *h = NULL;
        struct st_error e;
        int rc = st_header_parse(json, len, data_len, "d.safetensors", &h, &e);
        printf("%s ", st_status_name(rc == 0 ? ST_OK : e.code));
        hex(e.message, strlen(e.message));
        printf(" ");
        if (h) {
            size_t n;
            char *d = dump(h, &n);
            hex(d, n);
            free(d);
        }
        printf("\n");
        st_header_free(h);
        free(json);
    }
    return 0;
}
