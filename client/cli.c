/* tensord-client: list preloaded models, open one and check it.
 *
 *   tensord-client [--socket PATH | --config FILE] ls
 *   tensord-client [--socket PATH | --config FILE] open MODEL [--device D] [--rank R]
 *                  [--dump DIR] [--hold]
 *
 * `open` maps the model, prints its allocation and tensor tables and the
 * time the open took, recomputes every allocation's checksum from the mapped
 * memory and compares it with the daemon's (exit 1 on a mismatch). --dump
 * writes each tensor's bytes to DIR/NAME.bin ('/' in names becomes '%2F');
 * --hold keeps the lease until a line (or EOF) arrives on stdin.
 *
 * Without --socket the daemon is looked for where it puts its socket
 * (config_ipc_socket_candidates): the config file's ipc_socket, else
 * $TENSORD_SOCKET, and only that one when one of them names it; else
 * $XDG_RUNTIME_DIR/tensord.sock, then /run/tensord/tensord.sock. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "tensord_client.h"

#define DEFAULT_CONFIG "/etc/tensord/tensord.conf"
#define MAX_CANDIDATES 8

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tensord-client [--socket PATH | --config FILE] ls\n"
            "       tensord-client [--socket PATH | --config FILE] open MODEL [--device D]\n"
            "                      [--rank R] [--dump DIR] [--hold]\n"
            "       tensord-client --help | --version\n"
            "\n"
            "Talks to tensord's lease socket (GPU and host memory sharing).\n"
            "commands:\n"
            "  ls                  the preloaded models, their state and device (JSON)\n"
            "  open MODEL          map MODEL under a lease, print its allocations and\n"
            "                      tensors and check every allocation's checksum\n"
            "options:\n"
            "  --socket PATH       the daemon's lease socket\n"
            "  --config FILE       read ipc_socket from FILE (default " DEFAULT_CONFIG ",\n"
            "                      when it exists)\n"
            "  --device D          open: insist on a device (host, cuda:N or a GPU UUID)\n"
            "  --rank R            open: a tensor-parallel partition's rank R\n"
            "  --dump DIR          open: write each tensor's bytes to DIR/NAME.bin\n"
            "  --hold              open: keep the lease until a line or EOF on stdin\n"
            "  --help, --version\n"
            "Without --socket the socket is where the daemon puts it: the config file's\n"
            "ipc_socket, else $TENSORD_SOCKET (a socket named there that does not exist is\n"
            "an error: no other is tried), else the first that exists of\n"
            "$XDG_RUNTIME_DIR/tensord.sock and /run/tensord/tensord.sock.\n"
            "Exit status (as every tensord command's): 0 ok; 1 an allocation's checksum\n"
            "did not match; 2 it could not do what was asked (usage, no socket, the daemon\n"
            "refused, such as a model that does not exist or is not preloaded, a tensor\n"
            "that could not be dumped), which wins over 1.\n");
}

static void usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "tensord-client: %s%s%s\n\n", what, arg ? " " : "", arg ? arg : "");
    usage(stderr);
    exit(2);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Writes tensor i of m to DIR/NAME.bin; returns 0, or -1 after saying
 * which step failed and why. */
static int dump_tensor(const struct tensord_model *m, size_t i, const char *dir)
{
    const struct tensord_tensor *t = tensord_model_tensor(m, i);
    char path[4096], err[256];
    size_t o = (size_t)snprintf(path, sizeof(path), "%s/", dir);
    for (const char *p = t->name; *p && o + 4 < sizeof(path); p++)
        o += (size_t)(*p == '/' ? snprintf(path + o, sizeof(path) - o, "%%2F")
                                : snprintf(path + o, sizeof(path) - o, "%c", *p));
    snprintf(path + o, sizeof(path) - o, ".bin");
    void *buf = malloc(t->nbytes ? t->nbytes : 1);
    FILE *f = NULL;
    int rc = -1;
    if (!buf) {
        fprintf(stderr, "tensord-client: dumping %s: no memory for its %llu bytes\n", t->name,
                (unsigned long long)t->nbytes);
    } else if (tensord_tensor_read(m, i, buf, err, sizeof(err)) != 0) {
        fprintf(stderr, "tensord-client: dumping %s: reading it: %s\n", t->name, err);
    } else if (!(f = fopen(path, "wb"))) {
        fprintf(stderr, "tensord-client: dumping %s: cannot create %s: %s\n", t->name, path,
                strerror(errno));
    } else if (fwrite(buf, 1, t->nbytes, f) != t->nbytes) {
        fprintf(stderr, "tensord-client: dumping %s: writing %s: %s\n", t->name, path,
                strerror(errno));
    } else {
        rc = 0;
    }
    if (f && fclose(f) != 0 && rc == 0) {
        fprintf(stderr, "tensord-client: dumping %s: writing %s: %s\n", t->name, path,
                strerror(errno));
        rc = -1;
    }
    free(buf);
    return rc;
}

static int cmd_open(struct tensord_client *c, const char *model, const char *device, int rank,
                    const char *dump, int hold)
{
    char err[512];
    struct tensord_open_options which = TENSORD_OPEN_OPTIONS_INIT;
    which.device = device;
    which.rank = rank;
    double t0 = now_ms();
    struct tensord_model *m = tensord_open_ex(c, model, &which, err, sizeof(err));
    double t1 = now_ms();
    if (!m) {
        fprintf(stderr, "tensord-client: open %s: %s\n", model, err);
        return 2;
    }
    printf("model %s  generation %llu  backend %s  device %s (%s)  open %.3f ms\n",
           tensord_model_name(m), (unsigned long long)tensord_model_generation(m),
           tensord_model_backend(m), tensord_model_device(m), tensord_model_device_uuid(m),
           t1 - t0);
    if (tensord_model_split(m))
        printf("rank %d of %d  split %s\n", tensord_model_rank(m), tensord_model_world(m),
               tensord_model_split(m));
    /* First: the daemon may still be summing its checksums, which the
     * table shows (verify waits for them). */
    double t2 = now_ms();
    char verr[512];
    int bad = tensord_model_verify(m, verr, sizeof(verr)) < 0;
    double verify_ms = now_ms() - t2;
    printf("%-5s %-14s %-14s %-16s %s\n", "ALLOC", "BYTES", "MAPPED", "CHECKSUM", "FILE");
    uint64_t total = 0;
    for (size_t i = 0; i < tensord_model_alloc_count(m); i++) {
        const struct tensord_alloc *a = tensord_model_alloc(m, i);
        char sum[24] = "-";
        if (a->has_checksum)
            snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)a->checksum);
        printf("%-5zu %-14llu %-14llu %-16s %s\n", i, (unsigned long long)a->byte_size,
               (unsigned long long)a->alloc_size, sum, a->file);
        total += a->byte_size;
    }
    printf("%-40s %-6s %-20s %-5s %-12s %-12s %s\n", "TENSOR", "DTYPE", "SHAPE", "ALLOC",
           "OFFSET", "NBYTES", "PART");
    for (size_t i = 0; i < tensord_model_tensor_count(m); i++) {
        const struct tensord_tensor *t = tensord_model_tensor(m, i);
        char shape[256];
        size_t o = (size_t)snprintf(shape, sizeof(shape), "[");
        for (int d = 0; d < t->ndim && o < sizeof(shape); d++)
            o += (size_t)snprintf(shape + o, sizeof(shape) - o, "%s%lld", d ? "," : "",
                                  (long long)t->shape[d]);
        if (o < sizeof(shape))
            snprintf(shape + o, sizeof(shape) - o, "]");
        char part[96] = "-"; /* a partition's cut: dim D's [start:stop] of its length */
        if (t->part_dim >= 0)
            snprintf(part, sizeof(part), "dim %d [%lld:%lld] of %lld", t->part_dim,
                     (long long)t->part_start, (long long)t->part_stop,
                     (long long)t->part_length);
        printf("%-40s %-6s %-20s %-5u %-12llu %-12llu %s\n", t->name, t->dtype, shape, t->alloc,
               (unsigned long long)t->offset, (unsigned long long)t->nbytes, part);
    }
    int rc = 0;
    if (bad) {
        printf("checksum: MISMATCH: %s\n", verr);
        rc = 1;
    } else {
        printf("checksum: ok (%zu allocations, %llu bytes, %.3f ms)\n",
               tensord_model_alloc_count(m), (unsigned long long)total, verify_ms);
    }
    for (size_t i = 0; dump && i < tensord_model_tensor_count(m); i++) {
        if (dump_tensor(m, i, dump) < 0) {
            rc = 2; /* could not do what was asked: wins over a mismatch */
            break;  /* the next tensors would fail for the same reason */
        }
    }
    fflush(stdout);
    if (hold) {
        printf("holding the lease; send a line or close stdin to end it\n");
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof(line), stdin)) { /* EOF ends the hold too */
        }
    }
    tensord_model_close(m);
    return rc;
}

/* Connects to --socket, else to the socket named (ipc_socket,
 * $TENSORD_SOCKET), else to the first candidate that exists (see the top
 * of this file). NULL, with every path tried named, when none does. */
static struct tensord_client *connect_daemon(const char *sock, const char *config_path)
{
    char err[1024];
    struct tensord_client *c = NULL;
    if (sock) {
        if (!(c = tensord_connect(sock, err, sizeof(err))))
            fprintf(stderr, "tensord-client: %s\n", err);
        return c;
    }
    struct config cfg;
    config_defaults(&cfg);
    const char *file = config_path ? config_path : DEFAULT_CONFIG;
    struct st_error serr;
    if ((config_path || access(file, R_OK) == 0) && config_load_file(&cfg, file, &serr) < 0) {
        fprintf(stderr, "tensord-client: %s\n", serr.message);
        config_free(&cfg);
        return NULL;
    }
    char *paths[MAX_CANDIDATES];
    const char *named;
    size_t n = config_ipc_socket_candidates(&cfg, paths, MAX_CANDIDATES, &named), i;
    config_free(&cfg);
    for (i = 0; i < n && access(paths[i], F_OK) != 0; i++) {
    }
    if (i < n && !(c = tensord_connect(paths[i], err, sizeof(err))))
        fprintf(stderr, "tensord-client: %s\n", err);
    if (i == n && named) {
        fprintf(stderr, "tensord-client: %s%s%s names the lease socket %s: %s (no other socket "
                        "is tried). Is tensord running with it? `tensord --print-socket` with "
                        "its options names its socket.\n", named,
                *named == 'i' ? " of " : "", *named == 'i' ? file : "", paths[0],
                strerror(ENOENT));
    } else if (i == n) {
        fprintf(stderr, "tensord-client: no lease socket found; tried:\n");
        for (size_t k = 0; k < n; k++)
            fprintf(stderr, "  %s: %s\n", paths[k], strerror(ENOENT));
        fprintf(stderr, "(neither ipc_socket of %s nor $TENSORD_SOCKET names one: "
                        "$XDG_RUNTIME_DIR/tensord.sock, then /run/tensord/tensord.sock). Is "
                        "tensord running? `tensord --print-socket` with its options names its "
                        "socket; pass it with --socket.\n", file);
    }
    for (size_t k = 0; k < n; k++)
        free(paths[k]);
    return c;
}

int main(int argc, char **argv)
{
    const char *sock = NULL, *config = NULL, *device = NULL, *dump = NULL, *cmd = NULL,
               *model = NULL, *rank_text = NULL;
    int hold = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            printf("tensord-client %s\n", TENSORD_VERSION);
            return 0;
        }
        const char **opt = strcmp(a, "--socket") == 0   ? &sock
                           : strcmp(a, "--config") == 0 ? &config
                           : strcmp(a, "--device") == 0 ? &device
                           : strcmp(a, "--dump") == 0   ? &dump
                           : strcmp(a, "--rank") == 0   ? &rank_text
                                                        : NULL;
        if (opt && i + 1 >= argc)
            usage_error("option needs a value:", a);
        if (opt)
            *opt = argv[++i];
        else if (strcmp(a, "--hold") == 0)
            hold = 1;
        else if (a[0] == '-')
            usage_error("unknown option", a);
        else if (!cmd)
            cmd = a;
        else if (!model)
            model = a;
        else
            usage_error("unexpected argument", a);
    }
    if (!cmd)
        usage_error("no command given (ls or open)", NULL);
    if (strcmp(cmd, "ls") != 0 && strcmp(cmd, "open") != 0)
        usage_error("unknown command", cmd);
    if (strcmp(cmd, "open") == 0 && !model)
        usage_error("open needs a MODEL", NULL);
    if (strcmp(cmd, "ls") == 0 && model)
        usage_error("unexpected argument", model);
    int rank = -1;
    if (rank_text) {
        char *end;
        long v = strtol(rank_text, &end, 10);
        if (rank_text[0] < '0' || rank_text[0] > '9' || *end || v > INT32_MAX)
            usage_error("--rank needs a rank (0, 1, ...), not", rank_text);
        rank = (int)v;
    }
    struct tensord_client *c = connect_daemon(sock, config);
    if (!c)
        return 2;
    int rc = 0;
    char err[512];
    if (strcmp(cmd, "ls") == 0) {
        char *list = tensord_list(c, err, sizeof(err));
        if (list)
            printf("%s\n", list);
        else
            fprintf(stderr, "tensord-client: %s\n", err);
        rc = list ? 0 : 2;
        free(list);
    } else {
        rc = cmd_open(c, model, device, rank, dump, hold);
    }
    tensord_close(c);
    return rc;
}
