/* config: one table lists every option with its type, default, range and
 * doc; the defaults, the INI parser, command-line overrides, config_print
 * and the docs check all read that table, so an option cannot exist in one
 * place and not another.
 *
 * INI dialect: "[section]" headers, "key = value" lines, '#' or ';' starting
 * a comment at the beginning of a line or after whitespace, whitespace
 * trimmed, a value may be double-quoted to keep leading/trailing blanks or a
 * " #". Keys before the first section header are accepted for any option;
 * inside a section a key must belong to it. A repeated key replaces the
 * earlier value (lists too: the last line gives the whole list). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/gpu.h"
#include "util.h"

enum opt_type {
    OPT_STRING,  /* char * */
    OPT_ENUM,    /* char *, one of choices */
    OPT_UINT,    /* unsigned, decimal */
    OPT_SIZE32,  /* unsigned, with K/M/G suffix */
    OPT_SIZE,    /* uint64_t, with K/M/G/T suffix */
    OPT_BOOL,    /* int 0/1 */
    OPT_STRLIST, /* char *[max] with an unsigned count */
    OPT_IDLIST,  /* uint32_t[max] with an unsigned count */
};

struct opt {
    const char *name;
    const char *section;
    enum opt_type type;
    const char *def;           /* default, parsed by the same code as a file value */
    uint64_t min, max;         /* numbers: value range; lists: entry range (IDLIST) */
    size_t off;                /* field in struct config */
    size_t count_off;          /* lists: their count field */
    unsigned max_items;        /* lists: capacity */
    const char *choices;       /* OPT_ENUM: "a|b|c" */
    /* Extra syntax check for strings and list entries; returns a reason or NULL. */
    const char *(*check)(const char *v);
    const char *doc;
};

#define K 1024ULL
#define OFF(f) offsetof(struct config, f)
#define NOLIST 0, 0, NULL, NULL

static const char *check_listen(const char *v);
static const char *check_preload(const char *v);
static const char *check_no_ctl(const char *v);

static const struct opt options[] = {
    {"models", "server", OPT_STRING, "./models", 0, 0, OFF(models), 0, 0, NULL, check_no_ctl,
     "root directory of the models served"},
    {"listen", "server", OPT_STRING, "127.0.0.1:8077", 0, 0, OFF(listen), 0, 0, NULL,
     check_listen, "HTTP listen address, ADDR:PORT or [IPV6]:PORT"},
    {"threads", "server", OPT_UINT, "0", 0, 1024, OFF(threads), NOLIST,
     "HTTP worker threads; 0 = one per online CPU"},
    {"max_connections", "server", OPT_UINT, "1024", 1, 1000000, OFF(max_connections), NOLIST,
     "open connections in total; beyond it new connections get 503"},
    {"max_connections_per_ip", "server", OPT_UINT, "0", 0, 1000000,
     OFF(max_connections_per_ip), NOLIST, "open connections per client address; 0 = no limit"},
    {"connection_timeout", "server", OPT_UINT, "60", 0, 86400, OFF(connection_timeout), NOLIST,
     "seconds an idle connection stays open; 0 = no timeout"},
    {"header_timeout", "server", OPT_UINT, "10", 0, 3600, OFF(header_timeout), NOLIST,
     "seconds a client has to send a request line and its headers; 0 = no limit"},
    {"max_request_header_bytes", "server", OPT_SIZE32, "32K", 4096, 1024 * K,
     OFF(max_request_header_bytes), NOLIST,
     "bytes of request line and headers per request; larger requests get 431"},
    {"max_ranges", "server", OPT_UINT, "16", 1, 256, OFF(max_ranges), NOLIST,
     "byte ranges in one multipart/byteranges answer"},
    {"max_slice_bytes", "server", OPT_SIZE, "16G", 0, 1024 * K * K * K * K, OFF(max_slice_bytes),
     NOLIST, "largest slice answer, 400 slice_too_large beyond; 0 = no limit"},
    {"max_fetch_body_bytes", "server", OPT_SIZE32, "1M", 4 * K, 64 * K * K,
     OFF(max_fetch_body_bytes), NOLIST,
     "largest request body of POST /v1/models/{model}/fetch, 413 body_too_large beyond"},
    {"max_fetch_tensors", "server", OPT_UINT, "100000", 1, 10000000, OFF(max_fetch_tensors),
     NOLIST, "tensors in one fetch answer (listed, or the model's for a fetch of all), 413 "
     "too_many_tensors beyond"},
    {"max_fetch_bytes", "server", OPT_SIZE, "0", 0, 1024 * K * K * K * K, OFF(max_fetch_bytes),
     NOLIST, "largest fetch answer, 413 fetch_too_large beyond; 0 = no limit"},
    {"sendfile", "server", OPT_BOOL, "true", 0, 1, OFF(sendfile), NOLIST,
     "send contiguous spans over 64 KiB with sendfile (zero-copy); false copies every body "
     "with pread and aborts a download whose file changes in place"},
    {"watch", "server", OPT_BOOL, "true", 0, 1, OFF(watch), NOLIST,
     "rescan the models root when files change (inotify); SIGHUP always rescans"},
    {"state_dir", "server", OPT_STRING, "", 0, 0, OFF(state_dir), 0, 0, NULL, check_no_ctl,
     "directory for state kept across restarts (content hashes); empty = $STATE_DIRECTORY, "
     "else /var/lib/tensord as root, else $XDG_STATE_HOME/tensord or ~/.local/state/tensord"},
    {"hash_threads", "hash", OPT_UINT, "2", 1, 64, OFF(hash_threads), NOLIST,
     "threads computing the SHA-256 of served files in the background"},
    {"hash_max_bytes_per_second", "hash", OPT_SIZE, "0", 0, 1024 * K * K * K * K,
     OFF(hash_max_bytes_per_second), NOLIST,
     "read rate of background hashing, all threads together; 0 = no limit (files a client "
     "waits for are never limited)"},
    {"hash_wait", "hash", OPT_UINT, "8", 0, 300, OFF(hash_wait), NOLIST,
     "seconds a Hugging Face request waits for the content hashes of its repo (hashed first) "
     "before it is answered 503 with Retry-After; 0 = answer 503 at once"},
    {"access_log", "log", OPT_STRING, "-", 0, 0, OFF(access_log), 0, 0, NULL, check_no_ctl,
     "access log: a file path, \"-\" for stderr, or \"off\""},
    {"log_level", "log", OPT_ENUM, "info", 0, 0, OFF(log_level), 0, 0, "error|warn|info|debug",
     NULL, "daemon messages at this level and more severe go to stderr"},
    {"auth_token_file", "security", OPT_STRING, "", 0, 0, OFF(auth_token_file), 0, 0, NULL,
     check_no_ctl, "file of bearer tokens; empty = no authentication"},
    {"tls_cert", "security", OPT_STRING, "", 0, 0, OFF(tls_cert), 0, 0, NULL, check_no_ctl,
     "PEM certificate chain; with tls_key, serve HTTPS"},
    {"tls_key", "security", OPT_STRING, "", 0, 0, OFF(tls_key), 0, 0, NULL, check_no_ctl,
     "PEM private key for tls_cert"},
    {"ipc_socket", "gpu", OPT_STRING, "", 0, 0, OFF(ipc_socket), 0, 0, NULL, check_no_ctl,
     "Unix socket for GPU leases; empty = $RUNTIME_DIRECTORY/tensord.sock, "
     "else /run/tensord/tensord.sock"},
    {"preload", "gpu", OPT_STRLIST, "", 0, 0, OFF(preload), OFF(n_preload), CONFIG_MAX_PRELOAD,
     NULL, check_preload, "models loaded at start-up, MODEL@DEVICE (cuda:N, GPU-/MIG-UUID or host)"},
    {"allow_uids", "gpu", OPT_IDLIST, "", 0, 4294967294ULL, OFF(allow_uids), OFF(n_allow_uids),
     CONFIG_MAX_IDS, NULL, NULL, "user ids allowed on the IPC socket besides the daemon's own"},
    {"allow_gids", "gpu", OPT_IDLIST, "", 0, 4294967294ULL, OFF(allow_gids), OFF(n_allow_gids),
     CONFIG_MAX_IDS, NULL, NULL, "group ids allowed on the IPC socket"},
    {"ipc_idle_timeout", "gpu", OPT_UINT, "60", 0, 86400, OFF(ipc_idle_timeout), NOLIST,
     "seconds before the IPC socket closes a connection that holds no lease and sends nothing, "
     "or that stalls mid-request or mid-answer; 0 = never"},
    {"legacy_ipc", "gpu", OPT_BOOL, "false", 0, 1, OFF(legacy_ipc), NOLIST,
     "also export a legacy cudaIpcMemHandle_t per allocation"},
    {"verify", "gpu", OPT_BOOL, "false", 0, 1, OFF(verify), NOLIST,
     "compare device memory with the file after a preload, before ready"},
    {"staging_buffers", "gpu", OPT_UINT, "4", 1, 64, OFF(staging_buffers), NOLIST,
     "pinned host staging buffers in the preload ring"},
    {"staging_buffer_bytes", "gpu", OPT_SIZE, "64M", 64 * K, 1024 * K * K,
     OFF(staging_buffer_bytes), NOLIST, "size of each staging buffer"},
};

static const char *const type_names[] = {"string", "enum", "uint", "size",
                                         "size", "bool", "list", "list"};

/* ---- value checks ------------------------------------------------------- */

/* No value holds a '"', so config_print can always quote one. */
static const char *check_no_ctl(const char *v)
{
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p < 0x20 || *p == 0x7f)
            return "control character in value";
        if (*p == '"')
            return "'\"' inside a value";
    }
    return NULL;
}

static const char *check_listen(const char *v)
{
    const char *colon = strrchr(v, ':');
    if (!colon)
        return "expected ADDR:PORT";
    if (v[0] == '[' && (colon == v || colon[-1] != ']'))
        return "expected [IPV6]:PORT";
    if (v[0] != '[' && memchr(v, ':', (size_t)(colon - v)))
        return "an IPv6 address needs brackets: [ADDR]:PORT";
    const char *p = colon + 1;
    if (!*p || strlen(p) > 5)
        return "port must be 0..65535";
    unsigned long port = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return "port must be 0..65535";
        port = port * 10 + (unsigned long)(*p - '0');
    }
    if (port > 65535)
        return "port must be 0..65535";
    return check_no_ctl(v);
}

static const char *check_preload(const char *v)
{
    const char *at = strrchr(v, '@');
    if (!at || at == v || !at[1])
        return "expected MODEL@DEVICE";
    /* The same names POST .../gpu takes (core/gpu.c). */
    enum gpu_kind kind;
    int index;
    const char *uuid;
    if (gpu_parse_device(at + 1, &kind, &index, &uuid) < 0)
        return "device must be cuda:N, cuda, a GPU-... or MIG-... UUID, or host";
    return check_no_ctl(v);
}

/* ---- value parsing ------------------------------------------------------ */

static int parse_u64(const char *s, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return -1;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++)
        if (u64_mul(v, 10, &v) < 0 || u64_add(v, (uint64_t)(*s - '0'), &v) < 0)
            return -2;
    if (*s)
        return -1;
    *out = v;
    return 0;
}

/* "64M", "16G", "32k", "4096", "1GiB", "2MB": binary multiples. */
static int parse_size(const char *s, uint64_t *out)
{
    size_t n = strspn(s, "0123456789");
    if (n == 0 || n > 32)
        return -1;
    char digits[33];
    memcpy(digits, s, n);
    digits[n] = '\0';
    uint64_t v, mult = 1;
    int rc = parse_u64(digits, &v);
    if (rc < 0)
        return rc;
    const char *u = s + n;
    while (*u == ' ')
        u++;
    if (*u) {
        const char *units = "KMGT";
        const char *k = strchr(units, *u & ~0x20);
        if (!k || !(*u & ~0x20))
            return -1;
        for (const char *q = units; q <= k; q++)
            mult *= 1024;
        u++;
        if (strcmp(u, "") != 0 && strcmp(u, "B") != 0 && strcmp(u, "iB") != 0 &&
            strcmp(u, "b") != 0 && strcmp(u, "ib") != 0)
            return -1;
    }
    if (u64_mul(v, mult, out) < 0)
        return -2;
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no",
                                                                              "off", "0"};
    for (size_t i = 0; i < ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = 1, 0;
        if (strcasecmp(s, no[i]) == 0)
            return *out = 0, 0;
    }
    return -1;
}

static int fail(char *err, size_t errlen, const char *where, const char *name, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));
static int fail(char *err, size_t errlen, const char *where, const char *name, const char *fmt, ...)
{
    char reason[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    if (err && errlen) {
        if (name)
            snprintf(err, errlen, "%s: option %s: %s", where, name, reason);
        else
            snprintf(err, errlen, "%s: %s", where, reason);
    }
    return -1;
}

static int check_range(const struct opt *o, uint64_t v, char *err, size_t errlen,
                       const char *where)
{
    if (v < o->min || v > o->max)
        return fail(err, errlen, where, o->name, "%llu is out of range %llu..%llu",
                    (unsigned long long)v, (unsigned long long)o->min,
                    (unsigned long long)o->max);
    return 0;
}

/* Splits a comma-separated list into trimmed items; returns the count or -1
 * on an empty item. items[] point into buf, which is modified. */
static int split_list(char *buf, char **items, unsigned max, unsigned *n, const char **why)
{
    *n = 0;
    if (!*buf)
        return 0;
    for (char *p = buf;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        char *e = p + strlen(p);
        while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
            *--e = '\0';
        if (!*p)
            return *why = "empty list entry", -1;
        if (*n == max)
            return *why = "too many list entries", -1;
        items[(*n)++] = p;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

/* Validates value for o and stores it; the struct changes only on success. */
static int opt_apply(struct config *cfg, const struct opt *o, const char *value, char *err,
                     size_t errlen, const char *where)
{
    char *base = (char *)cfg;
    uint64_t v;
    int rc, b;
    const char *why;

    switch (o->type) {
    case OPT_STRING:
    case OPT_ENUM:
        if (o->check && (why = o->check(value)))
            return fail(err, errlen, where, o->name, "%s", why);
        if (o->type == OPT_ENUM) {
            size_t n = strlen(value);
            const char *c = o->choices;
            int found = 0;
            while (*c && !found) {
                size_t len = strcspn(c, "|");
                found = len == n && strncmp(c, value, n) == 0;
                c += len + (c[len] == '|');
            }
            if (!found)
                return fail(err, errlen, where, o->name, "\"%.64s\" is not one of %s", value,
                            o->choices);
        }
        char **sp = (char **)(base + o->off);
        free(*sp);
        *sp = xstrdup(value);
        return 0;
    case OPT_UINT:
    case OPT_SIZE32:
    case OPT_SIZE:
        rc = o->type == OPT_UINT ? parse_u64(value, &v) : parse_size(value, &v);
        if (rc == -2)
            return fail(err, errlen, where, o->name, "number too large");
        if (rc < 0)
            return fail(err, errlen, where, o->name, "\"%.64s\" is not %s", value,
                        o->type == OPT_UINT ? "an unsigned integer"
                                            : "a size (a number with an optional K, M, G or T)");
        if (check_range(o, v, err, errlen, where) < 0)
            return -1;
        if (o->type == OPT_SIZE)
            *(uint64_t *)(base + o->off) = v;
        else
            *(unsigned *)(base + o->off) = (unsigned)v;
        return 0;
    case OPT_BOOL:
        if (parse_bool(value, &b) < 0)
            return fail(err, errlen, where, o->name, "\"%.64s\" is not a boolean (true/false)",
                        value);
        *(int *)(base + o->off) = b;
        return 0;
    case OPT_STRLIST:
    case OPT_IDLIST: {
        char *buf = xstrdup(value), *items[CONFIG_MAX_PRELOAD > CONFIG_MAX_IDS
                                                ? CONFIG_MAX_PRELOAD
                                                : CONFIG_MAX_IDS];
        unsigned n;
        uint32_t ids[CONFIG_MAX_IDS];
        rc = -1;
        if (split_list(buf, items, o->max_items, &n, &why) < 0) {
            fail(err, errlen, where, o->name, "%s (at most %u)", why, o->max_items);
            goto out;
        }
        for (unsigned i = 0; i < n; i++) {
            if (o->type == OPT_STRLIST) {
                if (o->check && (why = o->check(items[i]))) {
                    fail(err, errlen, where, o->name, "\"%.64s\": %s", items[i], why);
                    goto out;
                }
            } else {
                if (parse_u64(items[i], &v) < 0) {
                    fail(err, errlen, where, o->name, "\"%.64s\" is not a numeric id", items[i]);
                    goto out;
                }
                if (check_range(o, v, err, errlen, where) < 0)
                    goto out;
                ids[i] = (uint32_t)v;
            }
        }
        unsigned *count = (unsigned *)(base + o->count_off);
        if (o->type == OPT_STRLIST) {
            char **list = (char **)(base + o->off);
            for (unsigned i = 0; i < *count; i++)
                free(list[i]);
            for (unsigned i = 0; i < n; i++)
                list[i] = xstrdup(items[i]);
        } else {
            memcpy(base + o->off, ids, n * sizeof(uint32_t));
        }
        *count = n;
        rc = 0;
    out:
        free(buf);
        return rc;
    }
    }
    return -1;
}

static const struct opt *opt_find(const char *name, size_t len)
{
    for (size_t i = 0; i < ARRAY_LEN(options); i++)
        if (strlen(options[i].name) == len && memcmp(options[i].name, name, len) == 0)
            return &options[i];
    return NULL;
}

static int section_known(const char *s, size_t len)
{
    for (size_t i = 0; i < ARRAY_LEN(options); i++)
        if (strlen(options[i].section) == len && memcmp(options[i].section, s, len) == 0)
            return 1;
    return 0;
}

/* ---- public API ---------------------------------------------------------- */

void config_defaults(struct config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    char err[256];
    for (size_t i = 0; i < ARRAY_LEN(options); i++)
        if (opt_apply(cfg, &options[i], options[i].def, err, sizeof(err), "defaults") < 0)
            abort(); /* a bad default is a programming error; test_config catches it */
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

int config_load_buffer(struct config *cfg, const char *buf, size_t len, const char *file,
                       char *errbuf, size_t errlen)
{
    char where[512];
    char section[64] = "";
    unsigned lineno = 0;
    size_t pos = 0;
    /* A UTF-8 byte-order mark, as some editors write, is not part of the first key. */
    if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0)
        pos = 3;
    while (pos < len) {
        const char *line = buf + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        pos += n + (nl != NULL);
        lineno++;
        snprintf(where, sizeof(where), "%s:%u", file, lineno);
        if (memchr(line, '\0', n))
            return fail(errbuf, errlen, where, NULL, "NUL byte in line");

        size_t b = 0, e = n;
        while (b < e && is_blank(line[b]))
            b++;
        while (e > b && is_blank(line[e - 1]))
            e--;
        if (b == e || line[b] == '#' || line[b] == ';')
            continue;
        if (line[b] == '[') {
            const char *close = memchr(line + b, ']', e - b);
            if (!close)
                return fail(errbuf, errlen, where, NULL, "missing ']' in section header");
            size_t rest = (size_t)(close - line) + 1;
            while (rest < e && is_blank(line[rest]))
                rest++;
            if (rest < e && line[rest] != '#' && line[rest] != ';')
                return fail(errbuf, errlen, where, NULL, "text after section header");
            const char *s = line + b + 1;
            size_t slen = (size_t)(close - s);
            while (slen && is_blank(*s))
                s++, slen--;
            while (slen && is_blank(s[slen - 1]))
                slen--;
            if (!section_known(s, slen))
                return fail(errbuf, errlen, where, NULL, "unknown section [%.*s]",
                            (int)(slen > 64 ? 64 : slen), s);
            memcpy(section, s, slen);
            section[slen] = '\0';
            continue;
        }
        const char *eq = memchr(line + b, '=', e - b);
        if (!eq)
            return fail(errbuf, errlen, where, NULL, "missing '=' in \"%.*s\"",
                        (int)(e - b > 64 ? 64 : e - b), line + b);
        size_t ke = (size_t)(eq - line);
        while (ke > b && is_blank(line[ke - 1]))
            ke--;
        if (ke == b)
            return fail(errbuf, errlen, where, NULL, "missing option name before '='");
        char name[64];
        size_t klen = ke - b > sizeof(name) - 1 ? sizeof(name) - 1 : ke - b;
        memcpy(name, line + b, klen);
        name[klen] = '\0';
        const struct opt *o = ke - b < sizeof(name) ? opt_find(line + b, ke - b) : NULL;
        if (!o)
            return fail(errbuf, errlen, where, name, "unknown option");
        if (section[0] && strcmp(section, o->section) != 0)
            return fail(errbuf, errlen, where, name, "belongs in [%s], not [%s]", o->section,
                        section);

        /* The value: quoted, or up to a comment that follows whitespace. */
        size_t vb = (size_t)(eq - line) + 1, ve = e;
        while (vb < ve && is_blank(line[vb]))
            vb++;
        if (vb < ve && line[vb] == '"') {
            const char *q = memchr(line + vb + 1, '"', ve - vb - 1);
            if (!q)
                return fail(errbuf, errlen, where, name, "missing closing '\"'");
            size_t after = (size_t)(q - line) + 1;
            while (after < ve && is_blank(line[after]))
                after++;
            if (after < ve && line[after] != '#' && line[after] != ';')
                return fail(errbuf, errlen, where, name, "text after closing '\"'");
            vb++;
            ve = (size_t)(q - line);
        } else {
            for (size_t i = vb; i < ve; i++)
                if ((line[i] == '#' || line[i] == ';') && i > vb && is_blank(line[i - 1])) {
                    ve = i;
                    break;
                }
            while (ve > vb && is_blank(line[ve - 1]))
                ve--;
        }
        char *value = xstrndup(line + vb, ve - vb);
        int rc = opt_apply(cfg, o, value, errbuf, errlen, where);
        free(value);
        if (rc < 0)
            return -1;
    }
    return 0;
}

int config_load_file(struct config *cfg, const char *path, char *errbuf, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(errbuf, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    char *buf = xmalloc(cap);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            if (cap >= (16u << 20)) {
                snprintf(errbuf, errlen, "%s: file larger than 16 MiB", path);
                goto fail;
            }
            buf = xrealloc(buf, cap *= 2);
        }
    }
    if (ferror(f)) {
        snprintf(errbuf, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    fclose(f);
    int rc = config_load_buffer(cfg, buf, len, path, errbuf, errlen);
    free(buf);
    return rc;
fail:
    fclose(f);
    free(buf);
    return -1;
}

int config_set(struct config *cfg, const char *name, const char *value, char *errbuf,
               size_t errlen)
{
    const struct opt *o = opt_find(name, strlen(name));
    if (!o)
        return fail(errbuf, errlen, "command line", name, "unknown option");
    return opt_apply(cfg, o, value, errbuf, errlen, "command line");
}

/* Writes a value so that config_load_buffer reads it back unchanged. */
static void print_string(FILE *out, const char *s)
{
    size_t n = strlen(s);
    int quote = n && (is_blank(s[0]) || is_blank(s[n - 1]) || s[0] == '"' || s[0] == '#' ||
                      s[0] == ';' || strstr(s, " #") || strstr(s, " ;") || strstr(s, "\t#") ||
                      strstr(s, "\t;"));
    if (quote)
        fprintf(out, "\"%s\"", s);
    else
        fputs(s, out);
}

static void print_size(FILE *out, uint64_t v)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && v && v % 1024 == 0)
        v /= 1024, u++;
    if (u < 0)
        fprintf(out, "%llu", (unsigned long long)v);
    else
        fprintf(out, "%llu%c", (unsigned long long)v, units[u]);
}

void config_print(const struct config *cfg, FILE *out)
{
    const char *base = (const char *)cfg;
    const char *section = "";
    fprintf(out, "# tensord effective configuration (tensord --print-config)\n");
    for (size_t i = 0; i < ARRAY_LEN(options); i++) {
        const struct opt *o = &options[i];
        if (strcmp(section, o->section) != 0) {
            section = o->section;
            fprintf(out, "\n[%s]\n", section);
        }
        fprintf(out, "# %s\n%s = ", o->doc, o->name);
        switch (o->type) {
        case OPT_STRING:
        case OPT_ENUM:
            print_string(out, *(char *const *)(base + o->off));
            break;
        case OPT_UINT:
            fprintf(out, "%u", *(const unsigned *)(base + o->off));
            break;
        case OPT_SIZE32:
            print_size(out, *(const unsigned *)(base + o->off));
            break;
        case OPT_SIZE:
            print_size(out, *(const uint64_t *)(base + o->off));
            break;
        case OPT_BOOL:
            fputs(*(const int *)(base + o->off) ? "true" : "false", out);
            break;
        case OPT_STRLIST:
        case OPT_IDLIST: {
            /* Joined first: an entry may start with '#', which after ", "
             * needs the whole value quoted. */
            unsigned n = *(const unsigned *)(base + o->count_off);
            char *joined = NULL;
            size_t jlen = 0;
            FILE *j = open_memstream(&joined, &jlen);
            if (!j)
                abort();
            for (unsigned k = 0; k < n; k++) {
                if (k)
                    fputs(", ", j);
                if (o->type == OPT_STRLIST)
                    fputs(((char *const *)(base + o->off))[k], j);
                else
                    fprintf(j, "%u", ((const uint32_t *)(base + o->off))[k]);
            }
            fclose(j);
            print_string(out, joined);
            free(joined);
            break;
        }
        }
        fputc('\n', out);
    }
}

void config_free(struct config *cfg)
{
    char *base = (char *)cfg;
    for (size_t i = 0; i < ARRAY_LEN(options); i++) {
        const struct opt *o = &options[i];
        if (o->type == OPT_STRING || o->type == OPT_ENUM) {
            char **sp = (char **)(base + o->off);
            free(*sp);
            *sp = NULL;
        } else if (o->type == OPT_STRLIST) {
            unsigned *count = (unsigned *)(base + o->count_off);
            char **list = (char **)(base + o->off);
            for (unsigned k = 0; k < *count; k++) {
                free(list[k]);
                list[k] = NULL;
            }
            *count = 0;
        }
    }
}

char *config_ipc_socket_path(const struct config *cfg)
{
    if (cfg->ipc_socket && cfg->ipc_socket[0])
        return xstrdup(cfg->ipc_socket);
    const char *rd = getenv("RUNTIME_DIRECTORY");
    if (rd && rd[0] == '/') {
        size_t n = strcspn(rd, ":");
        return xasprintf("%.*s/tensord.sock", (int)n, rd);
    }
    return xstrdup("/run/tensord/tensord.sock");
}

char *config_state_dir_path(const struct config *cfg)
{
    if (cfg->state_dir && cfg->state_dir[0])
        return xstrdup(cfg->state_dir);
    const char *sd = getenv("STATE_DIRECTORY");
    if (sd && sd[0] == '/')
        return xasprintf("%.*s", (int)strcspn(sd, ":"), sd);
    if (geteuid() == 0)
        return xstrdup("/var/lib/tensord");
    const char *xdg = getenv("XDG_STATE_HOME");
    if (xdg && xdg[0] == '/')
        return xasprintf("%s/tensord", xdg);
    const char *home = getenv("HOME");
    if (home && home[0] == '/')
        return xasprintf("%s/.local/state/tensord", home);
    return NULL;
}

unsigned config_effective_threads(const struct config *cfg)
{
    if (cfg->threads)
        return cfg->threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

size_t config_option_count(void)
{
    return ARRAY_LEN(options);
}

int config_option_info(size_t i, struct config_option_info *info)
{
    if (i >= ARRAY_LEN(options))
        return -1;
    const struct opt *o = &options[i];
    *info = (struct config_option_info){.name = o->name, .section = o->section,
                                        .type = type_names[o->type], .def = o->def,
                                        .min = o->min, .max = o->max, .choices = o->choices,
                                        .doc = o->doc};
    return 0;
}
