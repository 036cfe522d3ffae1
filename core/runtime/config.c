/* config: checking and storing option values, for the defaults, the INI
 * file (config_ini.c) and command-line overrides alike; the environment's
 * say in the socket and state paths. What each option is lives in the
 * table (config_options.c). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config_int.h"
#include "util.h"

/* ---- value parsing ------------------------------------------------------ */

/* The whole of s as a decimal number: 0, -1 when it is not one, -2 when it
 * does not fit in 64 bits. */
static int parse_u64(const char *s, uint64_t *out)
{
    size_t n = strlen(s), used;
    int rc = decimal_u64(s, n, out, &used);
    if (rc == -ERANGE)
        return -2;
    return rc == 0 && used == n ? 0 : -1;
}

/* "64M", "16G", "32k", "4096", "1GiB", "2MB": binary multiples. Returns as
 * parse_u64 does. */
static int parse_size(const char *s, uint64_t *out)
{
    size_t n = strspn(s, "0123456789"), used;
    uint64_t v, mult = 1;
    if (n == 0 || n > 32)
        return -1;
    if (decimal_u64(s, n, &v, &used) < 0)
        return -2;
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

int config_option_error(struct st_error *err, const char *where, const char *name,
                        const char *fmt, ...)
{
    char reason[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    if (name)
        return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "%s: option %s: %s", where, name,
                             reason);
    return st_error_fail(err, ST_ERR_INVALID_ARGUMENT, "%s: %s", where, reason);
}

static int check_range(const struct opt *o, uint64_t v, struct st_error *err,
                       const char *where)
{
    if (v < o->min || v > o->max)
        return config_option_error(err, where, o->name, "%llu is out of range %llu..%llu",
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

/* ---- storing a value, one step per type ---------------------------------- */

static int is_choice(const char *choices, const char *value)
{
    size_t n = strlen(value);
    for (const char *c = choices; *c;) {
        size_t len = strcspn(c, "|");
        if (len == n && strncmp(c, value, n) == 0)
            return 1;
        c += len + (c[len] == '|');
    }
    return 0;
}

static int apply_string(char *base, const struct opt *o, const char *value,
                        struct st_error *err, const char *where)
{
    const char *why;
    if (o->check && (why = o->check(value)))
        return config_option_error(err, where, o->name, "%s", why);
    if (o->type == OPT_ENUM && !is_choice(o->choices, value))
        return config_option_error(err, where, o->name, "\"%.64s\" is not one of %s",
                                   value, o->choices);
    char **sp = (char **)(base + o->off);
    free(*sp);
    *sp = xstrdup(value);
    return 0;
}

static int apply_number(char *base, const struct opt *o, const char *value,
                        struct st_error *err, const char *where)
{
    uint64_t v;
    int rc = o->type == OPT_UINT ? parse_u64(value, &v) : parse_size(value, &v);
    if (rc == -2)
        return config_option_error(err, where, o->name, "number too large");
    if (rc < 0)
        return config_option_error(
                                   err, where, o->name, "\"%.64s\" is not %s", value,
                                   o->type == OPT_UINT ? "an unsigned integer"
                                   : "a size (a number with an optional K, M, G or T)");
    if (check_range(o, v, err, where) < 0)
        return -EINVAL;
    if (o->type == OPT_SIZE)
        *(uint64_t *)(base + o->off) = v;
    else
        *(unsigned *)(base + o->off) = (unsigned)v;
    return 0;
}

static int apply_bool(char *base, const struct opt *o, const char *value,
                      struct st_error *err, const char *where)
{
    int b;
    if (parse_bool(value, &b) < 0)
        return config_option_error(err, where, o->name,
                                   "\"%.64s\" is not a boolean (true/false)", value);
    *(int *)(base + o->off) = b;
    return 0;
}

/* Checks every entry of a list (the string check, or a numeric id in
 * range), filling ids[] for an id list. */
static int check_list_items(const struct opt *o, char **items, unsigned n, uint32_t *ids,
                            struct st_error *err, const char *where)
{
    const char *why;
    uint64_t v;
    for (unsigned i = 0; i < n; i++) {
        if (o->type == OPT_STRLIST) {
            if (o->check && (why = o->check(items[i])))
                return config_option_error(err, where, o->name, "\"%.64s\": %s",
                                           items[i], why);
            continue;
        }
        if (parse_u64(items[i], &v) < 0)
            return config_option_error(err, where, o->name,
                                       "\"%.64s\" is not a numeric id", items[i]);
        if (check_range(o, v, err, where) < 0)
            return -EINVAL;
        ids[i] = (uint32_t)v;
    }
    return 0;
}

/* Replaces the whole list with items[0..n) (or ids[0..n)). */
static void store_list(char *base, const struct opt *o, char **items, const uint32_t *ids,
                       unsigned n)
{
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
}

static int apply_list(char *base, const struct opt *o, const char *value,
                      struct st_error *err, const char *where)
{
    char *buf = xstrdup(value),
         *items[CONFIG_MAX_PRELOAD > CONFIG_MAX_IDS ? CONFIG_MAX_PRELOAD : CONFIG_MAX_IDS];
    uint32_t ids[CONFIG_MAX_IDS];
    const char *why;
    unsigned n;
    int rc = -EINVAL;
    if (split_list(buf, items, o->max_items, &n, &why) < 0) {
        config_option_error(err, where, o->name, "%s (at most %u)", why, o->max_items);
        goto out;
    }
    if (check_list_items(o, items, n, ids, err, where) < 0)
        goto out;
    store_list(base, o, items, ids, n);
    rc = 0;
out:
    free(buf);
    return rc;
}

int config_opt_apply(struct config *cfg, const struct opt *o, const char *value,
                     struct st_error *err, const char *where)
{
    char *base = (char *)cfg;
    switch (o->type) {
    case OPT_STRING:
    case OPT_ENUM:
        return apply_string(base, o, value, err, where);
    case OPT_UINT:
    case OPT_SIZE32:
    case OPT_SIZE:
        return apply_number(base, o, value, err, where);
    case OPT_BOOL:
        return apply_bool(base, o, value, err, where);
    case OPT_STRLIST:
    case OPT_IDLIST:
        return apply_list(base, o, value, err, where);
    }
    return -EINVAL;
}

/* ---- public API ---------------------------------------------------------- */

void config_defaults(struct config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < config_n_options; i++)
        if (config_opt_apply(cfg, &config_options[i], config_options[i].def, NULL,
                             "defaults") < 0)
            abort(); /* a bad default is a programming error; test_config catches it */
}

int config_set(struct config *cfg, const char *name, const char *value, struct st_error *err)
{
    const struct opt *o = config_opt_find(name, strlen(name));
    if (!o)
        return config_option_error(err, "command line", name, "unknown option");
    return config_opt_apply(cfg, o, value, err, "command line");
}

void config_free(struct config *cfg)
{
    char *base = (char *)cfg;
    for (size_t i = 0; i < config_n_options; i++) {
        const struct opt *o = &config_options[i];
        if (o->type == OPT_STRING || o->type == OPT_ENUM) {
            char **sp = (char **)(base + o->off);
            free(*sp);
            *sp = NULL;
        } else if (o->type == OPT_STRLIST) {
            store_list(base, o, NULL, NULL, 0);
        }
    }
}

char *config_ipc_socket_path(const struct config *cfg)
{
    if (cfg->ipc_socket && cfg->ipc_socket[0])
        return xstrdup(cfg->ipc_socket);
    const char *env = getenv("TENSORD_SOCKET");
    if (env && env[0])
        return xstrdup(env);
    const char *rd = getenv("RUNTIME_DIRECTORY");
    if (rd && rd[0] == '/') {
        size_t n = strcspn(rd, ":");
        return xasprintf("%.*s/tensord.sock", (int)n, rd);
    }
    /* Root serves the system-wide socket that every user's client tries
     * last; anyone else cannot create /run/tensord, but owns its
     * XDG_RUNTIME_DIR (as with state_dir: system paths for root only). */
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (geteuid() != 0 && xdg && xdg[0] == '/')
        return xasprintf("%s/tensord.sock", xdg);
    return xstrdup(TENSORD_SYSTEM_SOCKET);
}

static size_t add_candidate(char **paths, size_t n, size_t max, char *p)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(paths[i], p) == 0) {
            free(p);
            return n;
        }
    if (n == max) {
        free(p);
        return n;
    }
    paths[n] = p;
    return n + 1;
}

size_t config_ipc_socket_candidates(const struct config *cfg, char **paths, size_t max,
                                    const char **named)
{
    size_t n = 0;
    const char *env = getenv("TENSORD_SOCKET");
    *named = cfg && cfg->ipc_socket && cfg->ipc_socket[0] ? "ipc_socket"
             : env && env[0]                              ? "$TENSORD_SOCKET"
                                                          : NULL;
    if (*named)
        return add_candidate(paths, n, max,
                             xstrdup(**named == 'i' ? cfg->ipc_socket : env));
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (xdg && xdg[0] == '/')
        n = add_candidate(paths, n, max, xasprintf("%s/tensord.sock", xdg));
    return add_candidate(paths, n, max, xstrdup(TENSORD_SYSTEM_SOCKET));
}

int config_listen_is_loopback(const char *listen)
{
    const char *colon = strrchr(listen, ':');
    if (!colon || colon == listen)
        return 0;
    char host[256];
    size_t n = (size_t)(colon - listen);
    if (listen[0] == '[' && n >= 2 && colon[-1] == ']') {
        listen++;
        n -= 2;
    }
    if (n >= sizeof(host))
        return 0;
    memcpy(host, listen, n);
    host[n] = '\0';
    /* Every address the name stands for must be a loopback one. */
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
    struct addrinfo *res;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return 0;
    int loop = 1;
    for (struct addrinfo *a = res; a && loop; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)a->ai_addr;
            loop = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        } else if (a->ai_family == AF_INET6) {
            const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a->ai_addr;
            loop = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
                   (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127);
        } else {
            loop = 0;
        }
    }
    freeaddrinfo(res);
    return loop;
}

int config_option_is_bool(const char *name)
{
    const struct opt *o = config_opt_find(name, strlen(name));
    return o && o->type == OPT_BOOL;
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
