/* hashfile: the state file's parser and writer (format in hashfile.h). */
#include "hashfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define MAGIC "tensord-hashes"
#define VERSION 1
/* The longest valid line is 212 bytes (five 20-digit numbers, two signs,
 * two digests, six spaces); anything longer is not one of ours. */
#define LINE_MAX_LEN 256
#define FILE_MAX ((uint64_t)HASHSTORE_MAX_ENTRIES * LINE_MAX_LEN + 1024)
#define IO_BLOCK (64 * 1024)

static EVP_MD_CTX *sha256_new(void)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1)
        abort(); /* libcrypto out of memory: as for any small allocation */
    return c;
}

/* ---- parsing ------------------------------------------------------------ */

struct parser {
    const char *label;
    hashfile_add_fn add;
    void *ctx;
    struct st_error *err;
    size_t line_no, count;
    int seen_magic, seen_end;
    EVP_MD_CTX *sha; /* over every byte before the end line */
    char line[LINE_MAX_LEN + 1]; /* the line being read (one byte over is enough to fail it) */
    size_t line_len;
};

/* Fails with "LABEL:LINE: why"; returns the errno that goes with code. */
static int state_error(struct parser *p, enum st_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int state_error(struct parser *p, enum st_status code, const char *fmt, ...)
{
    char why[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return st_error_fail(p->err, code, "%.80s:%zu: %s", p->label, p->line_no, why);
}

/* A failed system call: "LABEL:LINE: what: strerror", returns -errnum. */
static int state_sys_error(struct parser *p, int errnum, const char *what)
{
    return st_error_errno(p->err, errnum, "%.80s:%zu: %s", p->label, p->line_no, what);
}

/* One decimal field followed by `sep` (' ', or '\0' for the end of the
 * line): digits only, no leading zero, no overflow. Returns the position
 * after the separator (the end for '\0') or NULL. */
static const char *parse_field(const char *q, const char *end, char sep, uint64_t *out)
{
    size_t used;
    uint64_t v;
    if (decimal_u64(q, (size_t)(end - q), &v, &used) != 0 || used == 0 || (used > 1 && q[0] == '0'))
        return NULL;
    q += used;
    if (sep == '\0' ? q != end : (q == end || *q != sep))
        return NULL;
    *out = v;
    return sep == '\0' ? q : q + 1;
}

static const char *parse_i64(const char *q, const char *end, int64_t *out)
{
    int neg = q < end && *q == '-';
    uint64_t v;
    const char *r = parse_field(q + neg, end, ' ', &v);
    if (!r || (neg && v == 0) || v > (uint64_t)INT64_MAX + (uint64_t)neg)
        return NULL;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return r;
}

/* A digest of n bytes: 2n hex digits followed by sep (or the line's end). */
static const char *parse_digest(const char *q, const char *end, size_t n, char sep, uint8_t *out)
{
    if ((size_t)(end - q) < 2 * n || digest_unhex(q, n, out) != 0)
        return NULL;
    q += 2 * n;
    if (sep == '\0')
        return q == end ? q : NULL;
    return q < end && *q == sep ? q + 1 : NULL;
}

static int parse_entry(struct parser *p, const char *q, const char *end)
{
    struct hash_entry e;
    memset(&e, 0, sizeof(e));
    if (!(q = parse_field(q, end, ' ', &e.id.dev)) || !(q = parse_field(q, end, ' ', &e.id.ino)) ||
        !(q = parse_field(q, end, ' ', &e.id.size)) || !(q = parse_i64(q, end, &e.id.mtime_ns)) ||
        !(q = parse_i64(q, end, &e.id.ctime_ns)) ||
        !(q = parse_digest(q, end, DIGEST_SHA256_LEN, ' ', e.sha256)))
        return state_error(p, ST_ERR_STATE_FORMAT,
                           "not an entry (DEV INO SIZE MTIME CTIME SHA256 GIT_SHA1)");
    if (end - q == 1 && q[0] == '-')
        e.has_git_sha1 = 0;
    else if (parse_digest(q, end, DIGEST_SHA1_LEN, '\0', e.git_sha1))
        e.has_git_sha1 = 1;
    else
        return state_error(p, ST_ERR_STATE_FORMAT,
                           "the git blob id is neither 40 hex digits nor \"-\"");
    if (e.has_git_sha1 != (e.id.size <= DIGEST_GIT_SHA1_MAX))
        return state_error(p, ST_ERR_STATE_FORMAT,
                           "a git blob id %s for a file of %" PRIu64 " bytes",
                           e.has_git_sha1 ? "present" : "missing", e.id.size);
    if (p->count >= HASHSTORE_MAX_ENTRIES)
        return state_error(p, ST_ERR_LIMIT, "more than %u entries", HASHSTORE_MAX_ENTRIES);
    int rc = p->add(p->ctx, &e);
    if (rc > 0)
        return state_error(p, ST_ERR_STATE_FORMAT, "a second entry for the same file");
    if (rc < 0)
        return state_error(p, ST_ERR_LIMIT, "no room for entry %zu", p->count + 1);
    p->count++;
    return 0;
}

static int parse_end(struct parser *p, const char *q, const char *end)
{
    uint64_t count = 0;
    uint8_t want[DIGEST_SHA256_LEN], got[DIGEST_SHA256_LEN];
    unsigned n = 0;
    if (!(q = parse_field(q, end, ' ', &count)) ||
        !parse_digest(q, end, DIGEST_SHA256_LEN, '\0', want))
        return state_error(p, ST_ERR_STATE_FORMAT, "not an end line (end COUNT SHA256)");
    if (count != p->count)
        return state_error(p, ST_ERR_STATE_TORN,
                           "the end line counts %" PRIu64 " entries, the file has %zu", count,
                           p->count);
    EVP_DigestFinal_ex(p->sha, got, &n);
    if (memcmp(want, got, sizeof(got)) != 0)
        return state_error(p, ST_ERR_STATE_TORN, "checksum mismatch: the file was changed or torn");
    p->seen_end = 1;
    return 0;
}

/* One line, without its '\n'. */
static int parse_line(struct parser *p, const char *line, size_t len)
{
    const char *end = line + len;
    p->line_no++;
    if (p->seen_end)
        return state_error(p, ST_ERR_STATE_FORMAT, "text after the end line");
    if (len > LINE_MAX_LEN)
        return state_error(p, ST_ERR_STATE_FORMAT, "a line longer than %d bytes", LINE_MAX_LEN);
    if (p->seen_magic && len >= 4 && memcmp(line, "end ", 4) == 0)
        return parse_end(p, line + 4, end);
    EVP_DigestUpdate(p->sha, line, len);
    EVP_DigestUpdate(p->sha, "\n", 1);
    if (p->seen_magic)
        return parse_entry(p, line, end);
    uint64_t v;
    size_t k = sizeof(MAGIC " ") - 1;
    if (len < k || memcmp(line, MAGIC " ", k) != 0 || !parse_field(line + k, end, '\0', &v))
        return state_error(p, ST_ERR_STATE_FORMAT, "not a tensord hash file (no \"%s N\" line)",
                           MAGIC);
    if (v != VERSION)
        return state_error(p, ST_ERR_STATE_VERSION,
                           "format version %" PRIu64 ", this tensord reads %d", v, VERSION);
    p->seen_magic = 1;
    return 0;
}

/* Splits buf[0..n) into lines for parse_line: a line that goes on past
 * the end of buf waits in p->line for the next call. */
static int feed(struct parser *p, const char *buf, size_t n)
{
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (buf[i] != '\n') {
            if (p->line_len <= LINE_MAX_LEN)
                p->line[p->line_len++] = buf[i];
            continue;
        }
        rc = parse_line(p, p->line, p->line_len);
        p->line_len = 0;
    }
    return rc;
}

static void parser_init(struct parser *p, const char *label, hashfile_add_fn add, void *ctx,
                        struct st_error *err)
{
    *p = (struct parser){.label = label, .add = add, .ctx = ctx, .err = err, .sha = sha256_new()};
    st_error_fail(err, ST_OK, "%s", ""); /* err may be NULL */
}

static int parser_finish(struct parser *p, int rc)
{
    if (rc == 0 && p->line_len) {
        p->line_no++;
        rc = state_error(p, ST_ERR_STATE_TORN,
                         "the last line has no newline: the file is truncated");
    } else if (rc == 0 && !p->seen_end) {
        rc = state_error(p, ST_ERR_STATE_TORN, "no end line: the file is truncated");
    }
    EVP_MD_CTX_free(p->sha);
    return rc;
}

int hashfile_parse(const char *buf, size_t len, const char *label,
                   hashfile_add_fn add, void *ctx, struct st_error *err)
{
    struct parser p;
    parser_init(&p, label, add, ctx, err);
    return parser_finish(&p, feed(&p, buf, len));
}

int hashfile_read(int dirfd, const char *name, const char *label,
                  hashfile_add_fn add, void *ctx, int *found,
                  struct st_error *err)
{
    struct parser p;
    int rc = 0;
    char *block = NULL;
    uint64_t total = 0;
    struct stat sb;
    *found = 0;
    parser_init(&p, label, add, ctx, err);
    /* O_NONBLOCK: a FIFO planted in the state directory cannot hang us. */
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        if (errno != ENOENT)
            rc = state_sys_error(&p, errno, "open");
        EVP_MD_CTX_free(p.sha);
        return rc;
    }
    *found = 1;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = state_error(&p, ST_ERR_IO, "not a regular file");
        goto done;
    }
    if (!(block = malloc(IO_BLOCK))) {
        rc = state_sys_error(&p, ENOMEM, "read");
        goto done;
    }
    while (rc == 0) {
        ssize_t r = read(fd, block, IO_BLOCK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = state_sys_error(&p, errno, "read");
            break;
        }
        if (r == 0)
            break;
        if ((total += (uint64_t)r) > FILE_MAX) {
            rc = state_error(&p, ST_ERR_LIMIT, "more bytes than %u entries take",
                             HASHSTORE_MAX_ENTRIES);
            break;
        }
        rc = feed(&p, block, (size_t)r);
    }
done:
    free(block);
    close(fd);
    return parser_finish(&p, rc);
}

/* ---- writing ------------------------------------------------------------ */

/* Where the text goes: a descriptor through a block buffer, or a growing
 * string (fd < 0). The end line's digest covers everything before it. */
struct sink {
    int fd;
    char *buf;
    size_t len, cap;
    int err; /* the first write error, a negative errno */
    EVP_MD_CTX *sha;
};

static void sink_flush(struct sink *k)
{
    size_t off = 0;
    while (k->fd >= 0 && off < k->len && !k->err) {
        ssize_t w = write(k->fd, k->buf + off, k->len - off);
        if (w < 0 && errno != EINTR)
            k->err = -errno;
        else if (w > 0)
            off += (size_t)w;
    }
    if (k->fd >= 0)
        k->len = 0;
}

static void sink_put(struct sink *k, const char *s, size_t n, int hashed)
{
    if (hashed)
        EVP_DigestUpdate(k->sha, s, n);
    if (k->len + n > k->cap) {
        if (k->fd >= 0) {
            sink_flush(k);
        } else {
            k->cap = (k->cap + n) * 2;
            k->buf = xrealloc(k->buf, k->cap);
        }
    }
    memcpy(k->buf + k->len, s, n);
    k->len += n;
}

static void write_text(struct sink *k, const struct hash_entry *e, size_t n)
{
    char line[LINE_MAX_LEN + 1], sha[2 * DIGEST_SHA256_LEN + 1], git[2 * DIGEST_SHA1_LEN + 1];
    int len = snprintf(line, sizeof(line), "%s %d\n", MAGIC, VERSION);
    sink_put(k, line, (size_t)len, 1);
    for (size_t i = 0; i < n; i++) {
        digest_hex(e[i].sha256, DIGEST_SHA256_LEN, sha);
        if (e[i].has_git_sha1)
            digest_hex(e[i].git_sha1, DIGEST_SHA1_LEN, git);
        else
            memcpy(git, "-", 2);
        len = snprintf(line, sizeof(line),
                       "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64 " %" PRId64 " %s %s\n",
                       e[i].id.dev, e[i].id.ino, e[i].id.size, e[i].id.mtime_ns,
                       e[i].id.ctime_ns, sha, git);
        sink_put(k, line, (size_t)len, 1);
    }
    uint8_t d[DIGEST_SHA256_LEN];
    unsigned dn = 0;
    EVP_DigestFinal_ex(k->sha, d, &dn);
    digest_hex(d, sizeof(d), sha);
    len = snprintf(line, sizeof(line), "end %zu %s\n", n, sha);
    sink_put(k, line, (size_t)len, 0);
    sink_flush(k);
}

static void sink_init(struct sink *k, int fd)
{
    *k = (struct sink){.fd = fd, .cap = IO_BLOCK, .sha = sha256_new()};
    k->buf = xmalloc(k->cap);
}

static void sink_free(struct sink *k)
{
    EVP_MD_CTX_free(k->sha);
    if (k->fd >= 0)
        free(k->buf);
}

char *hashfile_format(const struct hash_entry *e, size_t n, size_t *len)
{
    struct sink k;
    sink_init(&k, -1);
    write_text(&k, e, n);
    sink_put(&k, "", 1, 0);
    sink_free(&k);
    *len = k.len - 1;
    return k.buf;
}

int hashfile_replace(int dirfd, const char *name, const struct hash_entry *e, size_t n)
{
    char tmp[256];
    int rc = 0, fd = -1;
    struct sink k = {.fd = -1};
    snprintf(tmp, sizeof(tmp), "%.200s.tmp", name);
    /* Only tried: the caller comes back later rather than wait behind
     * another process (or hang with it on a file system not answering). */
    if (flock(dirfd, LOCK_EX | LOCK_NB) != 0)
        return errno == EWOULDBLOCK ? -EWOULDBLOCK : -errno;
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    sink_init(&k, fd);
    write_text(&k, e, n);
    /* The bytes reach the disk before the name points at them, and the
     * rename reaches it before the save counts as done. */
    if (k.err)
        rc = k.err;
    else if (fsync(fd) != 0 || renameat(dirfd, tmp, dirfd, name) != 0 || fsync(dirfd) != 0)
        rc = -errno;
    sink_free(&k);
    close(fd);
    if (rc != 0)
        unlinkat(dirfd, tmp, 0);
out:
    flock(dirfd, LOCK_UN);
    return rc;
}

/* ---- the store's load and save ------------------------------------------ */

static int add_to_store(void *ctx, const struct hash_entry *e)
{
    struct hashstore *s = ctx;
    if (hashstore_lookup(s, &e->id, NULL))
        return 1;
    return hashstore_put(s, e, 0) == 0 ? 0 : -1;
}

int hashfile_load_store(struct hashstore *s, int dirfd, const char *name,
                        const char *label, struct st_error *err)
{
    int found;
    int rc = hashfile_read(dirfd, name, label, add_to_store, s, &found, err);
    hashstore_loaded(s, rc == 0);
    return rc;
}

int hashfile_save_store(struct hashstore *s, uint64_t epoch, int dirfd, const char *name)
{
    const struct hash_entry *kept;
    size_t n;
    struct hashstore_plan *plan = hashstore_plan_save(s, epoch, &kept, &n);
    if (!plan)
        return 0;
    int rc = hashfile_replace(dirfd, name, kept, n);
    hashstore_end_save(s, plan, rc == 0);
    return rc;
}
