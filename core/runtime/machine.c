/* machine: the CPUs and memory this process may use (see machine.h). */
#include "machine.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fileio.h"

/* The first line of a small file, into buf. Returns 0 or -errno. */
static int read_line(const char *path, char *buf, size_t len)
{
    char *text;
    size_t n;
    int rc = fileio_read_small(path, len - 1, &text, &n);
    if (rc < 0)
        return rc;
    snprintf(buf, len, "%s", text);
    buf[strcspn(buf, "\n")] = '\0';
    free(text);
    return 0;
}

/* A file's first line as a number; 0 when it is not there or not one. */
static unsigned long long read_number(const char *dir, const char *file)
{
    char path[PATH_MAX + 64], line[64], *end;
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    if (read_line(path, line, sizeof(line)) < 0)
        return 0;
    unsigned long long v = strtoull(line, &end, 10);
    return end != line && *end == '\0' ? v : 0;
}

/* Whether the comma-separated list has item. */
static int has_item(const char *list, const char *item)
{
    size_t n = strlen(item);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, item, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

/* Where the hierarchy of controller (NULL: the v2 one) is mounted: *dir,
 * and the cgroup path its mount shows as its root, from mountinfo lines
 * "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE SUPER".
 * Returns 0, or -1 when it is not mounted. */
static int find_mount(const char *sysroot, const char *controller, char *dir, size_t dirlen,
                      char *root, size_t rootlen)
{
    char path[PATH_MAX], line[4096];
    snprintf(path, sizeof(path), "%s/proc/self/mountinfo", sysroot);
    FILE *f = fopen(path, "re");
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f)) {
        char mroot[PATH_MAX], mpoint[PATH_MAX], fstype[32], super[512];
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %4095s %4095s", mroot, mpoint) != 2 ||
            sscanf(dash + 3, "%31s %*s %511s", fstype, super) != 2)
            continue;
        found = controller ? strcmp(fstype, "cgroup") == 0 && has_item(super, controller)
                           : strcmp(fstype, "cgroup2") == 0;
        if (found) {
            snprintf(dir, dirlen, "%s%s", sysroot, mpoint);
            snprintf(root, rootlen, "%s", mroot);
        }
    }
    if (f)
        fclose(f);
    return found ? 0 : -1;
}

/* This process's cgroup in the hierarchy of controller (NULL: v2), from
 * /proc/self/cgroup lines "ID:CONTROLLERS:PATH". Returns 0 or -1. */
static int own_cgroup(const char *sysroot, const char *controller, char *out, size_t len)
{
    char path[PATH_MAX], line[4096];
    snprintf(path, sizeof(path), "%s/proc/self/cgroup", sysroot);
    FILE *f = fopen(path, "re");
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = '\0'; /* line: the hierarchy's id; c1 + 1: its controllers */
        found = controller ? has_item(c1 + 1, controller) : strcmp(line, "0") == 0 && !c1[1];
        if (found)
            snprintf(out, len, "%s", c2 + 1);
    }
    if (f)
        fclose(f);
    return found ? 0 : -1;
}

/* Calls fn(dir, ctx) for this process's cgroup of controller (NULL: v2)
 * and each one above it, up to its hierarchy's mount. */
static void cgroup_walk(const char *sysroot, const char *controller,
                        void (*fn)(const char *dir, void *ctx), void *ctx)
{
    char mount[PATH_MAX], mroot[PATH_MAX], own[PATH_MAX], dir[2 * PATH_MAX];
    if (find_mount(sysroot, controller, mount, sizeof(mount), mroot, sizeof(mroot)) < 0 ||
        own_cgroup(sysroot, controller, own, sizeof(own)) < 0 || strstr(own, ".."))
        return;
    /* A container's mount shows its own cgroup (mroot) as the root. */
    size_t skip = strcmp(mroot, "/") != 0 && strncmp(own, mroot, strlen(mroot)) == 0
                      ? strlen(mroot) : 0;
    snprintf(dir, sizeof(dir), "%s%s", mount, own + skip);
    size_t base = strlen(mount);
    for (size_t len = strlen(dir); len > base && dir[len - 1] == '/'; len--)
        dir[len - 1] = '\0';
    for (;;) {
        fn(dir, ctx);
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= base || !slash || (size_t)(slash - dir) < base)
            break;
        *slash = '\0';
    }
}

/* ---- CPUs ------------------------------------------------------------------ */

/* The CPUs a quota of quota per period grants, rounded up; 0 for none. */
static unsigned quota_cpus(unsigned long long quota, unsigned long long period)
{
    if (!quota || !period)
        return 0;
    unsigned long long n = (quota + period - 1) / period;
    return n > 4096 ? 4096 : (unsigned)n;
}

static void tighter(unsigned *best, unsigned n)
{
    if (n && (!*best || n < *best))
        *best = n;
}

/* cgroup v2 cpu.max: "QUOTA PERIOD" or "max PERIOD". */
static void cpu_v2(const char *dir, void *ctx)
{
    char path[2 * PATH_MAX], line[64], quota[32];
    unsigned long long period;
    snprintf(path, sizeof(path), "%s/cpu.max", dir);
    if (read_line(path, line, sizeof(line)) == 0 &&
        sscanf(line, "%31s %llu", quota, &period) == 2 && strcmp(quota, "max") != 0)
        tighter(ctx, quota_cpus(strtoull(quota, NULL, 10), period));
}

/* cgroup v1: cpu.cfs_quota_us (-1 for none) per cpu.cfs_period_us. */
static void cpu_v1(const char *dir, void *ctx)
{
    char path[2 * PATH_MAX], line[64];
    snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir);
    if (read_line(path, line, sizeof(line)) == 0 && line[0] != '-')
        tighter(ctx, quota_cpus(strtoull(line, NULL, 10), read_number(dir, "cpu.cfs_period_us")));
}

unsigned machine_quota_cpus(const char *sysroot)
{
    unsigned best = 0;
    cgroup_walk(sysroot, NULL, cpu_v2, &best);
    cgroup_walk(sysroot, "cpu", cpu_v1, &best);
    return best;
}

unsigned machine_cpus(void)
{
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    unsigned cpus = n < 1 ? 1 : (unsigned)n, quota = machine_quota_cpus("");
    return quota && quota < cpus ? quota : cpus;
}

/* ---- memory ------------------------------------------------------------------ */

/* Narrows *m by one cgroup's limit and usage (limit 0: none). */
static void narrow(struct machine_memory *m, unsigned long long limit, unsigned long long used)
{
    if (!limit || limit >= m->total)
        return; /* v1 says "no limit" with a huge number */
    uint64_t left = used < limit ? limit - used : 0;
    m->total = limit;
    if (left < m->available)
        m->available = left;
}

static void memory_v2(const char *dir, void *ctx)
{
    char path[2 * PATH_MAX], max[64];
    snprintf(path, sizeof(path), "%s/memory.max", dir);
    if (read_line(path, max, sizeof(max)) == 0 && strcmp(max, "max") != 0)
        narrow(ctx, strtoull(max, NULL, 10), read_number(dir, "memory.current"));
}

static void memory_v1(const char *dir, void *ctx)
{
    narrow(ctx, read_number(dir, "memory.limit_in_bytes"),
           read_number(dir, "memory.usage_in_bytes"));
}

int machine_memory_at(const char *sysroot, struct machine_memory *m)
{
    char path[PATH_MAX], *text;
    size_t len;
    snprintf(path, sizeof(path), "%s/proc/meminfo", sysroot);
    int rc = fileio_read_small(path, 1 << 16, &text, &len);
    if (rc < 0)
        return rc;
    unsigned long long total = 0, avail = 0;
    const char *t = strstr(text, "MemTotal:"), *a = strstr(text, "MemAvailable:");
    int ok = t && a && sscanf(t, "MemTotal: %llu kB", &total) == 1 &&
             sscanf(a, "MemAvailable: %llu kB", &avail) == 1;
    free(text);
    if (!ok)
        return -EINVAL;
    m->total = (uint64_t)total << 10;
    m->available = (uint64_t)avail << 10;
    cgroup_walk(sysroot, NULL, memory_v2, m);
    cgroup_walk(sysroot, "memory", memory_v1, m);
    return 0;
}

int machine_memory(struct machine_memory *m)
{
    return machine_memory_at("", m);
}

int machine_pci_numa_node(const char *sysroot, const char *bus_id)
{
    char id[32], path[PATH_MAX + 64], line[32], *end;
    size_t n = strlen(bus_id);
    if (n == 0 || n >= sizeof(id))
        return -1;
    for (size_t i = 0; i <= n; i++) { /* sysfs spells it in lower case */
        unsigned char c = (unsigned char)bus_id[i];
        if (c && !isxdigit(c) && c != ':' && c != '.')
            return -1; /* no '/' or "..": a name, never a path */
        id[i] = (char)tolower(c);
    }
    snprintf(path, sizeof(path), "%s/sys/bus/pci/devices/%s/numa_node", sysroot, id);
    if (read_line(path, line, sizeof(line)) < 0)
        return -1;
    long node = strtol(line, &end, 10);
    return end != line && *end == '\0' && node >= 0 && node < 1024 ? (int)node : -1;
}

int machine_prefer_node(int node)
{
    unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};
    long rc;
    if (node < 0) {
        rc = syscall(SYS_set_mempolicy, MPOL_DEFAULT, NULL, 0UL);
    } else if (node >= 1024) {
        return -EINVAL;
    } else {
        mask[(unsigned)node / (8 * sizeof(unsigned long))] |=
            1UL << ((unsigned)node % (8 * sizeof(unsigned long)));
        rc = syscall(SYS_set_mempolicy, MPOL_PREFERRED, mask, 1024UL + 1);
    }
    return rc == 0 ? 0 : -errno;
}
