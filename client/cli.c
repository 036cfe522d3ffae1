/* tensord-client: list preloaded models, open one and check it.
 *
 *   tensord-client [--socket PATH] ls
 *   tensord-client [--socket PATH] open MODEL [--device D] [--dump DIR] [--hold]
 *
 * `open` maps the model, prints its allocation and tensor tables and the
 * time the open took, recomputes every allocation's checksum from the mapped
 * memory and compares it with the daemon's (exit 1 on a mismatch). --dump
 * writes each tensor's bytes to DIR/NAME.bin ('/' in names becomes '%2F');
 * --hold keeps the lease until a line (or EOF) arrives on stdin. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensord_client.h"

static void usage(void)
{
    fprintf(stderr, "usage: tensord-client [--socket PATH] ls\n"
                    "       tensord-client [--socket PATH] open MODEL [--device D] [--dump DIR] "
                    "[--hold]\n");
    exit(2);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

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
    FILE *f = fopen(path, "wb");
    int rc = buf && f && tensord_tensor_read(m, i, buf, err, sizeof(err)) == 0 &&
                     fwrite(buf, 1, t->nbytes, f) == t->nbytes ? 0 : -1;
    if (f && fclose(f) != 0)
        rc = -1;
    if (rc < 0)
        fprintf(stderr, "tensord-client: dumping %s to %s failed\n", t->name, path);
    free(buf);
    return rc;
}

static int cmd_open(struct tensord_client *c, const char *model, const char *device,
                    const char *dump, int hold)
{
    char err[512];
    double t0 = now_ms();
    struct tensord_model *m = tensord_open(c, model, device, err, sizeof(err));
    double t1 = now_ms();
    if (!m) {
        fprintf(stderr, "tensord-client: open %s: %s\n", model, err);
        return 1;
    }
    printf("model %s  generation %llu  backend %s  device %s (%s)  open %.3f ms\n",
           tensord_model_name(m), (unsigned long long)tensord_model_generation(m),
           tensord_model_backend(m), tensord_model_device(m), tensord_model_device_uuid(m),
           t1 - t0);
    printf("%-5s %-14s %-14s %-16s %s\n", "ALLOC", "BYTES", "MAPPED", "CHECKSUM", "FILE");
    uint64_t total = 0;
    for (size_t i = 0; i < tensord_model_alloc_count(m); i++) {
        const struct tensord_alloc *a = tensord_model_alloc(m, i);
        printf("%-5zu %-14llu %-14llu %016llx %s\n", i, (unsigned long long)a->byte_size,
               (unsigned long long)a->alloc_size, (unsigned long long)a->checksum, a->file);
        total += a->byte_size;
    }
    printf("%-40s %-6s %-20s %-5s %-12s %s\n", "TENSOR", "DTYPE", "SHAPE", "ALLOC", "OFFSET",
           "NBYTES");
    for (size_t i = 0; i < tensord_model_tensor_count(m); i++) {
        const struct tensord_tensor *t = tensord_model_tensor(m, i);
        char shape[256];
        size_t o = (size_t)snprintf(shape, sizeof(shape), "[");
        for (int d = 0; d < t->ndim && o < sizeof(shape); d++)
            o += (size_t)snprintf(shape + o, sizeof(shape) - o, "%s%lld", d ? "," : "",
                                  (long long)t->shape[d]);
        if (o < sizeof(shape))
            snprintf(shape + o, sizeof(shape) - o, "]");
        printf("%-40s %-6s %-20s %-5u %-12llu %llu\n", t->name, t->dtype, shape, t->alloc,
               (unsigned long long)t->offset, (unsigned long long)t->nbytes);
    }
    int rc = 0;
    double t2 = now_ms();
    if (tensord_model_verify(m, err, sizeof(err)) < 0) {
        printf("checksum: MISMATCH: %s\n", err);
        rc = 1;
    } else {
        printf("checksum: ok (%zu allocations, %llu bytes, %.3f ms)\n",
               tensord_model_alloc_count(m), (unsigned long long)total, now_ms() - t2);
    }
    if (dump)
        for (size_t i = 0; i < tensord_model_tensor_count(m); i++)
            if (dump_tensor(m, i, dump) < 0)
                rc = 1;
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

int main(int argc, char **argv)
{
    const char *sock = NULL, *device = NULL, *dump = NULL, *cmd = NULL, *model = NULL;
    int hold = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
            sock = argv[++i];
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            device = argv[++i];
        else if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc)
            dump = argv[++i];
        else if (strcmp(argv[i], "--hold") == 0)
            hold = 1;
        else if (argv[i][0] == '-')
            usage();
        else if (!cmd)
            cmd = argv[i];
        else if (!model)
            model = argv[i];
        else
            usage();
    }
    if (!cmd || (strcmp(cmd, "open") == 0 && !model) ||
        (strcmp(cmd, "ls") != 0 && strcmp(cmd, "open") != 0))
        usage();
    char err[512];
    struct tensord_client *c = tensord_connect(sock, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "tensord-client: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (strcmp(cmd, "ls") == 0) {
        char *list = tensord_list(c, err, sizeof(err));
        if (list)
            printf("%s\n", list);
        else
            fprintf(stderr, "tensord-client: %s\n", err);
        rc = list ? 0 : 1;
        free(list);
    } else {
        rc = cmd_open(c, model, device, dump, hold);
    }
    tensord_close(c);
    return rc;
}
