/* st_header: safetensors header parsing and validation.
 *
 * One pre-pass over the raw bytes checks UTF-8, finds the first byte, NUL
 * bytes and '-' signs, measures the nesting depth and counts what the arena
 * must hold (a few comparisons a byte). st_entries then reads the JSON once,
 * checking each entry and writing it straight into the arena; no tree is
 * built. Last, the reference crate's offset walk runs over the tensors
 * sorted by offsets. Errors come in the order they always did: the pre-pass
 * checks, then JSON errors, then entries', then the '-' check, then the walk. */
#include "st_header.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fileio.h"
#include "st_header_int.h"
#include "util.h"

#define NONE ((size_t)-1)

/* Messages stay under 500 bytes: a file name is cut at FILE_SHOW bytes, a
 * tensor name or other string at NAME_SHOW, a shape after SHAPE_SHOW dims. */
#define FILE_SHOW 160
#define NAME_SHOW ST_NAME_SHOW
#define SHAPE_SHOW 4

/* Context shared by the checks of one parse: the file label for messages. */
struct ctx {
    char file[FILE_SHOW + 4];
    struct st_error *err;
};

static void ctx_init(struct ctx *c, const char *file, struct st_error *err)
{
    if (!file)
        file = "(header)";
    str_excerpt(file, strlen(file), FILE_SHOW, c->file);
    c->err = err;
}

/* "[2, 3]" with at most SHAPE_SHOW dimensions before "...". */
static const char *fmt_shape(const uint64_t *shape, uint32_t ndim, char *out, size_t outlen)
{
    size_t j = 1;
    out[0] = '[';
    j += shape_format(out + 1, outlen - 1, shape, ndim < SHAPE_SHOW ? ndim : SHAPE_SHOW, ", ");
    if (ndim > SHAPE_SHOW && j < outlen)
        j += (size_t)snprintf(out + j, outlen - j, ", ... (%" PRIu32 " dims)", ndim);
    if (j < outlen - 1) {
        out[j++] = ']';
        out[j] = '\0';
    } else {
        out[outlen - 1] = '\0';
    }
    return out;
}

int st_header_check_prefix(const unsigned char prefix[ST_PREFIX_LEN],
                           uint64_t file_size, const char *file,
                           uint64_t *header_len, struct st_error *err)
{
    struct ctx c;
    ctx_init(&c, file, err);
    *header_len = 0;
    if (file_size < ST_PREFIX_LEN)
        return st_error_fail(err, ST_ERR_HEADER_TOO_SMALL,
                             "%s: file is %" PRIu64 " bytes, shorter than the %d-byte header length prefix",
                             c.file, file_size, ST_PREFIX_LEN);
    uint64_t n = 0;
    for (int i = ST_PREFIX_LEN - 1; i >= 0; i--)
        n = n << 8 | prefix[i];
    if (n == 0)
        return st_error_fail(err, ST_ERR_HEADER_EMPTY, "%s: header length is 0", c.file);
    if (n > ST_MAX_HEADER_LEN)
        return st_error_fail(err, ST_ERR_HEADER_TOO_LARGE,
                             "%s: header length %" PRIu64 " exceeds the limit of %llu bytes", c.file,
                             n, ST_MAX_HEADER_LEN);
    uint64_t end;
    if (u64_add(n, ST_PREFIX_LEN, &end) != 0 || end > file_size)
        return st_error_fail(err, ST_ERR_HEADER_LENGTH,
                             "%s: header length %" PRIu64 " runs past the end of the %" PRIu64
                             "-byte file",
                             c.file, n, file_size);
    *header_len = n;
    return 0;
}

/* What the pre-pass learns about the raw bytes. */
struct scan {
    size_t bad_utf8;  /* offset of the first invalid UTF-8 sequence, or NONE */
    size_t nul;       /* offset of the first NUL byte, or NONE */
    size_t minus;     /* offset of the first '-' outside strings, or NONE */
    unsigned depth;   /* deepest nesting of objects/arrays outside strings */
    /* Bounds on what the arena holds (exact for a valid header). */
    size_t keys1;     /* ':' at depth 1: entries of the top-level object */
    size_t keys2;     /* ':' at depth 2: bounds the __metadata__ entries */
    size_t elems3;    /* '[' opening depth 3 and ',' at depth 3: bounds the dimensions */
};

/* One pass: UTF-8 validity (utf8_valid on each multi-byte sequence), nesting
 * depth, NUL bytes and '-' outside strings, and the counts that size the
 * arena. Escaped bytes inside strings are skipped so that "\"" and "{" in
 * names do not count. Runs of bytes that matter to none of this (most of a
 * name, digits, whitespace) are skipped in a tight loop. */
static void scan_bytes(const char *json, size_t len, struct scan *sc)
{
    static const unsigned char stop_outside[128] = {
        [0] = 1, ['"'] = 1, ['{'] = 1, ['['] = 1, ['}'] = 1, [']'] = 1,
        [':'] = 1, [','] = 1, ['-'] = 1,
    };
    static const unsigned char stop_inside[128] = {[0] = 1, ['"'] = 1, ['\\'] = 1};
    const unsigned char *s = (const unsigned char *)json;
    unsigned depth = 0, max = 0;
    int in_str = 0;
    memset(sc, 0, sizeof(*sc));
    sc->bad_utf8 = sc->nul = sc->minus = NONE;
    for (size_t i = 0; i < len;) {
        const unsigned char *stop = in_str ? stop_inside : stop_outside;
        while (i < len && s[i] < 0x80 && !stop[s[i]])
            i++;
        if (i == len)
            break;
        unsigned char c = s[i];
        if (c >= 0x80) {
            size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
            if (n > len - i || !utf8_valid(json + i, n)) {
                sc->bad_utf8 = i;
                break;
            }
            i += n;
            continue;
        }
        if (in_str) {
            if (c == '"')
                in_str = 0;
            else if (c == '\\')
                i += i + 1 < len && s[i + 1] < 0x80; /* a multi-byte one is checked as such */
            else if (sc->nul == NONE)
                sc->nul = i;
            i++;
            continue;
        }
        switch (c) {
        case '"': in_str = 1; break;
        case '{':
        case '[':
            if (++depth > max)
                max = depth;
            sc->elems3 += c == '[' && depth == 3;
            break;
        case '}':
        case ']':
            if (depth > 0)
                depth--;
            break;
        case ':':
            sc->keys1 += depth == 1;
            sc->keys2 += depth == 2;
            break;
        case ',':
            sc->elems3 += depth == 3;
            break;
        case '-':
            if (sc->minus == NONE)
                sc->minus = i;
            break;
        default: /* NUL */
            if (sc->nul == NONE)
                sc->nul = i;
            break;
        }
        i++;
    }
    sc->depth = max;
}

static int is_json_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int cmp_tensor(const void *pa, const void *pb)
{
    const struct st_tensor *a = pa, *b = pb;
    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end)
        return a->end < b->end ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* The crate's validate(): sorted offsets start at 0 and are contiguous, and
 * each tensor's span is exactly what its shape and dtype need. Fills nelems. */
static int check_layout(struct ctx *c, struct st_header *h)
{
    char nm[NAME_SHOW + 4], pv[NAME_SHOW + 4], sh[128];
    uint64_t start = 0;
    const struct st_tensor *prev = NULL;
    for (size_t i = 0; i < h->n_tensors; i++) {
        struct st_tensor *t = &h->tensors[i];
        const struct dtype_info *di = dtype_info(t->dtype);
        if (t->begin != start) {
            str_excerpt(t->name, t->name_len, NAME_SHOW, nm);
            if (!prev)
                return st_error_fail(c->err, ST_ERR_INVALID_OFFSET,
                                     "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                                     "] but the first tensor must begin at 0",
                                     c->file, nm, t->begin, t->end);
            return st_error_fail(c->err, ST_ERR_INVALID_OFFSET,
                                 "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                                 "] %s tensor \"%s\", which ends at %" PRIu64,
                                 c->file, nm, t->begin, t->end,
                                 t->begin < start ? "overlap" : "leave a hole after",
                                 str_excerpt(prev->name, prev->name_len, NAME_SHOW, pv), start);
        }
        uint64_t n = 1, bits;
        for (uint32_t k = 0; k < t->ndim; k++) {
            if (u64_mul(n, t->shape[k], &n) != 0)
                return st_error_fail(c->err, ST_ERR_OVERFLOW,
                                     "%s: tensor \"%s\": element count of shape %s overflows 64 bits",
                                     c->file, str_excerpt(t->name, t->name_len, NAME_SHOW, nm),
                                     fmt_shape(t->shape, t->ndim, sh, sizeof(sh)));
        }
        t->nelems = n;
        if (u64_mul(n, di->bits, &bits) != 0)
            return st_error_fail(c->err, ST_ERR_OVERFLOW,
                                 "%s: tensor \"%s\": size of %s %s (%" PRIu64
                                 " elements) overflows 64 bits",
                                 c->file, str_excerpt(t->name, t->name_len, NAME_SHOW, nm), di->name,
                                 fmt_shape(t->shape, t->ndim, sh, sizeof(sh)), n);
        if (bits % 8 != 0)
            return st_error_fail(c->err, ST_ERR_MISALIGNED,
                                 "%s: tensor \"%s\": %s %s is %" PRIu64
                                 " bits, not a whole number of bytes",
                                 c->file, str_excerpt(t->name, t->name_len, NAME_SHOW, nm), di->name,
                                 fmt_shape(t->shape, t->ndim, sh, sizeof(sh)), bits);
        if (t->end - t->begin != bits / 8)
            return st_error_fail(c->err, ST_ERR_SIZE_MISMATCH,
                                 "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                                 "] span %" PRIu64 " bytes but %s %s needs %" PRIu64,
                                 c->file, str_excerpt(t->name, t->name_len, NAME_SHOW, nm), t->begin,
                                 t->end, t->end - t->begin, di->name,
                                 fmt_shape(t->shape, t->ndim, sh, sizeof(sh)), bits / 8);
        start = t->end;
        prev = t;
    }
    if (start != h->data_len) {
        if (!prev)
            return st_error_fail(c->err, ST_ERR_DATA_LENGTH,
                                 "%s: the header has no tensors but %" PRIu64
                                 " data bytes follow it",
                                 c->file, h->data_len);
        return st_error_fail(c->err, ST_ERR_DATA_LENGTH,
                             "%s: tensor \"%s\" ends at data offset %" PRIu64
                             " but the data buffer holds %" PRIu64 " bytes (%s)",
                             c->file, str_excerpt(prev->name, prev->name_len, NAME_SHOW, nm), start,
                             h->data_len, start > h->data_len ? "file truncated" : "trailing bytes");
    }
    return 0;
}

int st_header_parse(const char *json, size_t len, uint64_t data_len,
                    const char *file, struct st_header **out,
                    struct st_error *err)
{
    struct ctx c;
    int rc = 0;
    struct st_header *h = NULL;
    struct scan sc;

    *out = NULL;
    ctx_init(&c, file, err);
    scan_bytes(json, len, &sc);
    if (sc.bad_utf8 != NONE)
        return st_error_fail(err, ST_ERR_UTF8, "%s: header is not valid UTF-8 (byte %zu)", c.file,
                             sc.bad_utf8);
    size_t first = 0;
    while (first < len && is_json_ws(json[first]))
        first++;
    if (first == len)
        return st_error_fail(err, ST_ERR_HEADER_START,
                             "%s: header holds no JSON, only %zu bytes of whitespace",
                             c.file, len);
    if (json[first] != '{')
        return st_error_fail(err, ST_ERR_HEADER_START,
                             "%s: header must start with '{', found byte 0x%02x at offset %zu", c.file,
                             (unsigned char)json[first], first);
    if (sc.depth > ST_MAX_DEPTH)
        return st_error_fail(err, ST_ERR_DEPTH, "%s: header nesting depth exceeds %d", c.file,
                             ST_MAX_DEPTH);
    if (sc.nul != NONE)
        return st_error_fail(err, ST_ERR_JSON, "%s: header has a NUL byte at offset %zu", c.file,
                             sc.nul);

    h = calloc(1, sizeof(*h));
    if (!h)
        return st_error_fail(err, ST_ERR_NO_MEMORY, "%s: not enough memory to read the header",
                             c.file);
    h->header_len = len;
    h->data_len = data_len;
    struct st_entries_room room = {sc.keys1, sc.keys2, sc.elems3};
    if ((rc = st_entries_read(json, len, &room, c.file, h, err)) != 0)
        goto done;
    /* Every number left is an unsigned integer, so a '-' outside strings can
     * only be "-0", which reads as 0 and the crate refuses. */
    if (sc.minus != NONE) {
        rc = st_error_fail(err, ST_ERR_JSON,
                           "%s: header has a negative number at offset %zu (shape and "
                           "data_offsets hold unsigned integers)",
                           c.file, sc.minus);
        goto done;
    }
    /* Writers usually emit tensors in offset order; skipping qsort then also
     * skips its scratch allocation. */
    size_t i = 1;
    while (i < h->n_tensors && cmp_tensor(&h->tensors[i - 1], &h->tensors[i]) < 0)
        i++;
    if (i < h->n_tensors)
        qsort(h->tensors, h->n_tensors, sizeof(*h->tensors), cmp_tensor);
    if ((rc = check_layout(&c, h)) != 0)
        goto done;
    *out = h;
    h = NULL;
done:
    st_header_free(h);
    if (rc == 0 && err)
        st_error_fail(err, ST_OK, "%s", "");
    return rc;
}

int st_header_read_fd(int fd, const char *file, size_t keep_max,
                      struct st_header **out, struct st_error *err)
{
    struct ctx c;
    struct stat st;
    unsigned char prefix[ST_PREFIX_LEN] = {0};
    uint64_t n;
    int rc;

    *out = NULL;
    ctx_init(&c, file, err);
    if (fstat(fd, &st) != 0)
        return st_error_errno(err, errno, "%s: stat", c.file);
    uint64_t size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
    if (size >= ST_PREFIX_LEN) {
        int r = fileio_pread_full(fd, prefix, ST_PREFIX_LEN, 0);
        if (r == -ENODATA)
            return st_error_fail(err, ST_ERR_IO,
                                 "%s: reading the header length: file shrank while reading", c.file);
        if (r != 0)
            return st_error_errno(err, -r, "%s: reading the header length", c.file);
    }
    if ((rc = st_header_check_prefix(prefix, size, file, &n, err)) != 0)
        return rc;
    /* One buffer for prefix and JSON, so it can be kept as raw. The file
     * chooses its size (up to 100 MB): not having it is an answer, not an
     * abort. */
    unsigned char *buf = malloc(ST_PREFIX_LEN + (size_t)n);
    if (!buf)
        return st_error_fail(err, ST_ERR_NO_MEMORY,
                             "%s: not enough memory to read the %" PRIu64 "-byte header", c.file, n);
    memcpy(buf, prefix, ST_PREFIX_LEN);
    char *json = (char *)buf + ST_PREFIX_LEN;
    int r = fileio_pread_full(fd, json, (size_t)n, ST_PREFIX_LEN);
    if (r == -ENODATA)
        rc = st_error_fail(err, ST_ERR_IO,
                           "%s: reading the %" PRIu64 "-byte header: file shrank while reading",
                           c.file, n);
    else if (r != 0)
        rc = st_error_errno(err, -r, "%s: reading the %" PRIu64 "-byte header", c.file, n);
    else
        rc = st_header_parse(json, (size_t)n, size - ST_PREFIX_LEN - n, file, out, err);
    if (rc == 0 && ST_PREFIX_LEN + n <= keep_max)
        (*out)->raw = buf;
    else
        free(buf);
    return rc;
}

void st_header_free(struct st_header *h)
{
    if (!h)
        return;
    free(h->arena);
    free(h->raw);
    free(h);
}
