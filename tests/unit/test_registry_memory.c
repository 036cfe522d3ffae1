/* registry under an address-space limit: a model whose files need more
 * memory than there is becomes invalid with out_of_memory and a message
 * naming the file, whatever step ran out (the header's buffer or arena, the
 * index, the model's tensor table or its lookup map); the models beside it
 * stay ready, and the scan never aborts. A sweep over the room left finds
 * every step. Skipped under ASan, which needs its address space. */
#include <fcntl.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry.h"
#include "test.h"
#include "util.h"

static char base[] = "/tmp/test_registry_memory.XXXXXX";

/* A valid file of n U8[1] tensors "<prefix>NNNNNNN" (data all zero). */
static void write_many(const char *path, const char *prefix, size_t n)
{
    size_t cap = n * 96 + 16, len = 8;
    char *buf = xcalloc(1, cap + n);
    buf[len++] = '{';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len,
                                "%s\"%s%07zu\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
                                i ? "," : "", prefix, i, i, i + 1);
    buf[len++] = '}';
    uint64_t hl = len - 8;
    for (int i = 0; i < 8; i++)
        buf[i] = (char)(hl >> (8 * i));
    test_write_file(path, buf, len + n);
    free(buf);
}

/* Scans root with `room` bytes of address space beyond what is in use. */
static struct reg_snapshot *scan_with_room(const char *root, size_t room)
{
    struct rlimit old, tight;
    struct st_error err;
    CHECK(getrlimit(RLIMIT_AS, &old) == 0);
    malloc_trim(0);
    tight = old;
    tight.rlim_cur = vm_size_bytes() + room;
    CHECK(setrlimit(RLIMIT_AS, &tight) == 0);
    struct reg_snapshot *r = reg_snapshot_scan(root, 1, NULL, &err);
    CHECK(setrlimit(RLIMIT_AS, &old) == 0);
    CHECK(r != NULL);
    return r;
}

/* Sweeps the room from tight until the model is ready: until then it is
 * invalid with out_of_memory each time; returns a bit per kind of message
 * seen (1 the header, 2 the index, 4 the tensor table or map, 8 ready). */
static unsigned sweep(const char *root, const char *name, const char *file, size_t max_room)
{
    unsigned seen = 0;
    for (size_t room = 512 << 10; room <= max_room && !(seen & 8); room += 512 << 10) {
        struct reg_snapshot *r = scan_with_room(root, room);
        if (!r)
            continue;
        const struct reg_model *m = reg_snapshot_find_model(r, name, strlen(name));
        const struct reg_model *small = reg_snapshot_find_model(r, "small", 5);
        CHECK(small && small->state == MODEL_READY && small->n_tensors == 3);
        CHECK(m != NULL);
        if (m && m->state == MODEL_READY) {
            seen |= 8; /* and with more room it stays so: the sweep ends */
            printf("  %s ready with %zu KiB of room\n", name, room >> 10);
        } else if (m) {
            if (m->error.code != ST_ERR_NO_MEMORY)
                fprintf(stderr, "  %zu KiB: %s: %s\n", room >> 10, st_status_name(m->error.code),
                        m->error.message);
            CHECK(m->error.code == ST_ERR_NO_MEMORY);
            CHECK(m->n_tensors == 0 && reg_model_find_tensor(m, "t0000000", 8) == NULL);
            CHECK_CONTAINS(m->error.message, file);
            CHECK_CONTAINS(m->error.message, "not enough memory");
            seen |= strstr(m->error.message, "-byte header") ? 1
                    : strstr(m->error.message, "-byte index") ? 2
                    : strstr(m->error.message, "index the model's") ? 4 : 0;
        }
        reg_snapshot_unref(r);
    }
    return seen;
}

TEST(big_header)
{
    char *root = xasprintf("%s/h", base), *p = xasprintf("%s/big/model.safetensors", root);
    write_many(p, "t", 100000);
    free(p);
    p = xasprintf("%s/small/model.safetensors", root);
    write_many(p, "s", 3);
    free(p);
    unsigned seen = sweep(root, "big", "model.safetensors", 128u << 20);
    printf("  header: seen %s%s%s\n", seen & 1 ? "header-OOM " : "",
           seen & 4 ? "table-OOM " : "", seen & 8 ? "ready" : "");
    CHECK(seen & 1); /* the header's buffer or arena */
    CHECK(seen & 4); /* the model's tensor table or map, once the header fitted */
    CHECK(seen & 8);
    free(root);
}

TEST(big_index)
{
    char *root = xasprintf("%s/i", base), *p;
    size_t n = 50000, cap = n * 80 + 64, len = 0;
    char *idx = xmalloc(cap);
    len += (size_t)snprintf(idx, cap, "{\"weight_map\":{");
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(idx + len, cap - len, "%s\"t%07zu\":\"model-%05zu.safetensors\"",
                                i ? "," : "", i, i % 2 + 1);
    len += (size_t)snprintf(idx + len, cap - len, "}}");
    p = xasprintf("%s/sharded/model.safetensors.index.json", root);
    test_write_file(p, idx, len);
    free(p);
    free(idx);
    /* the shards hold what the index maps to them: even to one, odd to two */
    for (int k = 1; k <= 2; k++) {
        size_t hc = n / 2 * 96 + 16, hl = 8;
        char *h = xcalloc(1, hc + n);
        h[hl++] = '{';
        for (size_t i = (size_t)k - 1, j = 0; i < n; i += 2, j++)
            hl += (size_t)snprintf(h + hl, hc - hl,
                                   "%s\"t%07zu\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
                                   j ? "," : "", i, j, j + 1);
        h[hl++] = '}';
        for (int b = 0; b < 8; b++)
            h[b] = (char)((uint64_t)(hl - 8) >> (8 * b));
        p = xasprintf("%s/sharded/model-%05d.safetensors", root, k);
        test_write_file(p, h, hl + n / 2);
        free(p);
        free(h);
    }
    p = xasprintf("%s/small/model.safetensors", root);
    write_many(p, "s", 3);
    free(p);
    unsigned seen = sweep(root, "sharded", ".safetensors", 128u << 20);
    printf("  index: seen %s%s%s%s\n", seen & 1 ? "header-OOM " : "", seen & 2 ? "index-OOM " : "",
           seen & 4 ? "table-OOM " : "", seen & 8 ? "ready" : "");
    CHECK(seen & 2); /* the index */
    CHECK(seen & 4); /* the cross-check's maps or the tensor table */
    CHECK(seen & 8);
    free(root);
}

/* Regression: listing a directory and collecting a repo's files grew
 * tables with xrealloc, so a directory of many files aborted the scan when
 * memory ran out. Now the directory is a transient error (the scan counts
 * it and keeps what it had), the model beside it stays ready, and with
 * room the repo is complete. */
TEST(big_directory)
{
    char *root = xasprintf("%s/d", base), *p = xasprintf("%s/small/model.safetensors", root);
    write_many(p, "s", 3);
    free(p);
    const size_t n = 3000;
    char name[256];
    memset(name, 'f', sizeof(name));
    for (size_t i = 0; i < n; i++) {
        snprintf(name + 230, sizeof(name) - 230, "%06zu", i);
        p = xasprintf("%s/many/%s", root, name);
        test_write_file(p, "x", 1);
        free(p);
    }
    int seen_error = 0, complete = 0;
    for (size_t room = 512 << 10; room <= (16u << 20) && !complete; room += 256 << 10) {
        struct reg_snapshot *r = scan_with_room(root, room);
        const struct reg_model *small = reg_snapshot_find_model(r, "small", 5);
        CHECK(small && small->state == MODEL_READY);
        const struct reg_repo *many = reg_snapshot_find_repo(r, "many", 4);
        if (r->scan_errors)
            seen_error = 1;
        else
            complete = many && many->n_files == n;
        reg_snapshot_unref(r);
    }
    printf("  directory: %s%s\n", seen_error ? "OOM seen " : "", complete ? "complete" : "");
    CHECK(seen_error);
    CHECK(complete);
    free(root);
}

int main(void)
{
#if defined(__SANITIZE_ADDRESS__)
    printf("  SKIP: ASan needs its address space, no RLIMIT_AS test\n");
    return TEST_SUMMARY();
#endif
    /* Fixed thresholds: big blocks are their own mappings and go back when
     * freed, so the room measured before each scan is the room it has (a
     * heap grown by an earlier scan would otherwise lend it more). */
    mallopt(M_MMAP_THRESHOLD, 128 << 10);
    mallopt(M_TRIM_THRESHOLD, 128 << 10);
    CHECK(mkdtemp(base) != NULL);
    RUN(big_header);
    RUN(big_index);
    RUN(big_directory);
    char *cmd = xasprintf("rm -rf '%s'", base);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", base);
    free(cmd);
    return TEST_SUMMARY();
}
