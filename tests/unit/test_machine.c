/* Tests for core/runtime/machine.c: CPU quotas and memory limits read from fake
 * /proc and cgroup trees (cgroup v2 alone, v1, both mounted as systemd's
 * hybrid layout does, a container whose mounts show its own cgroup as the
 * root, limits set on a parent, none at all), and sane answers from the
 * machine the tests run on. */
#include <limits.h>
#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "machine.h"
#include "test.h"
#include "util.h"

static char base[] = "/tmp/tensord-machine-XXXXXX";
static int n_roots;

/* Writes text to root/rel, making its directories. */
static void put(const char *root, const char *rel, const char *text)
{
    char *path = xasprintf("%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    free(path);
}

#define MEMINFO "MemTotal:       16384000 kB\nMemFree: 1 kB\nMemAvailable:   8192000 kB\n"
#define GiB (1024ull * 1024 * 1024)

static char *new_root(void)
{
    char *root = xasprintf("%s/r%d", base, n_roots++);
    CHECK(mkdir(root, 0755) == 0);
    put(root, "proc/meminfo", MEMINFO);
    return root;
}

/* cgroup v2 only, the daemon in a child of a limited parent. */
TEST(v2_limits_on_the_way_up)
{
    char *r = new_root();
    put(r, "proc/self/cgroup", "0::/system.slice/tensord.service\n");
    put(r, "proc/self/mountinfo", "29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    put(r, "sys/fs/cgroup/system.slice/tensord.service/cpu.max", "max 100000\n");
    put(r, "sys/fs/cgroup/system.slice/cpu.max", "250000 100000\n");
    put(r, "sys/fs/cgroup/cpu.max", "max 100000\n");
    put(r, "sys/fs/cgroup/system.slice/tensord.service/memory.max", "4294967296\n");
    put(r, "sys/fs/cgroup/system.slice/tensord.service/memory.current", "1073741824\n");
    put(r, "sys/fs/cgroup/system.slice/memory.max", "max\n");
    CHECK(machine_quota_cpus(r) == 3); /* 2.5 CPUs, rounded up */
    struct machine_memory m;
    CHECK(machine_memory_at(r, &m) == 0);
    CHECK_EQ_U64(m.total, 4 * GiB);
    CHECK_EQ_U64(m.available, 3 * GiB);
    free(r);
}

/* cgroup v1 (and v2 mounted beside it, unlimited: systemd's hybrid). */
TEST(v1_and_hybrid)
{
    char *r = new_root();
    put(r, "proc/self/cgroup", "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n");
    put(r, "proc/self/mountinfo",
        "30 23 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "31 23 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "32 23 0:29 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n");
    put(r, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "150000\n");
    put(r, "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    put(r, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    put(r, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    put(r, "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "2147483648\n");
    put(r, "sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", "2000000000\n");
    put(r, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put(r, "sys/fs/cgroup/unified/cpu.max", "max 100000\n");
    CHECK(machine_quota_cpus(r) == 2);
    struct machine_memory m;
    CHECK(machine_memory_at(r, &m) == 0);
    CHECK_EQ_U64(m.total, 2 * GiB);
    CHECK_EQ_U64(m.available, 2147483648ull - 2000000000ull);
    free(r);
}

/* A container: its mounts show its own cgroup as the root, so the path
 * /proc/self/cgroup gives is found below the mount without its prefix;
 * usage over the limit leaves nothing available. */
TEST(container_mount_root)
{
    char *r = new_root();
    put(r, "proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
    put(r, "proc/self/mountinfo",
        "29 23 0:26 /kubepods/pod1/ctr /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n");
    put(r, "sys/fs/cgroup/cpu.max", "50000 100000\n");
    put(r, "sys/fs/cgroup/memory.max", "1073741824\n");
    put(r, "sys/fs/cgroup/memory.current", "2073741824\n");
    CHECK(machine_quota_cpus(r) == 1);
    struct machine_memory m;
    CHECK(machine_memory_at(r, &m) == 0);
    CHECK_EQ_U64(m.total, GiB);
    CHECK_EQ_U64(m.available, 0);
    free(r);
}

/* No cgroup at all, malformed files, a path that climbs: the machine's own
 * figures, no quota. */
TEST(no_limits_and_junk)
{
    char *r = new_root();
    CHECK(machine_quota_cpus(r) == 0);
    struct machine_memory m;
    CHECK(machine_memory_at(r, &m) == 0);
    CHECK_EQ_U64(m.total, 16384000ull * 1024);
    CHECK_EQ_U64(m.available, 8192000ull * 1024);
    put(r, "proc/self/cgroup", "0::/../../etc\n");
    put(r, "proc/self/mountinfo", "29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    put(r, "sys/fs/cgroup/cpu.max", "junk\n");
    put(r, "sys/fs/cgroup/memory.max", "-5\n");
    CHECK(machine_quota_cpus(r) == 0);
    CHECK(machine_memory_at(r, &m) == 0 && m.total == 16384000ull * 1024);
    put(r, "proc/meminfo", "nothing here\n");
    CHECK(machine_memory_at(r, &m) == -EINVAL);
    free(r);
    CHECK(machine_memory_at("/nonexistent", &m) < 0);
}

/* A GPU's NUMA node from sysfs by its PCI bus id, in either case; names
 * that are no bus id, unknown devices and -1 are no node. */
TEST(pci_numa_node)
{
    char *r = new_root();
    put(r, "sys/bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
    put(r, "sys/bus/pci/devices/0000:86:00.0/numa_node", "-1\n");
    put(r, "sys/bus/pci/devices/0000:87:00.0/numa_node", "x\n");
    put(r, "sys/numa_node", "0\n");
    CHECK(machine_pci_numa_node(r, "0000:3B:00.0") == 1);
    CHECK(machine_pci_numa_node(r, "0000:3b:00.0") == 1);
    CHECK(machine_pci_numa_node(r, "0000:86:00.0") == -1);
    CHECK(machine_pci_numa_node(r, "0000:87:00.0") == -1);
    CHECK(machine_pci_numa_node(r, "0000:99:00.0") == -1);
    CHECK(machine_pci_numa_node(r, "../../..") == -1);
    CHECK(machine_pci_numa_node(r, "") == -1);
    free(r);
}

/* The thread's policy: node 0 preferred, then the default again. */
TEST(prefer_node)
{
    int rc = machine_prefer_node(0);
    if (rc == -ENOSYS) {
        fprintf(stderr, "  (no NUMA in this kernel)\n");
        return;
    }
    CHECK(rc == 0);
    int mode = -1;
    unsigned long mask[16] = {0};
    CHECK(syscall(SYS_get_mempolicy, &mode, mask, 1024UL + 1, NULL, 0UL) == 0);
    CHECK(mode == MPOL_PREFERRED && (mask[0] & 1));
    CHECK(machine_prefer_node(-1) == 0);
    CHECK(syscall(SYS_get_mempolicy, &mode, mask, 1024UL + 1, NULL, 0UL) == 0);
    CHECK(mode == MPOL_DEFAULT);
    CHECK(machine_prefer_node(5000) == -EINVAL);
}

TEST(this_machine)
{
    unsigned cpus = machine_cpus();
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(cpus >= 1 && (long)cpus <= online);
    struct machine_memory m;
    CHECK(machine_memory(&m) == 0);
    CHECK(m.total > 0 && m.available > 0 && m.available <= m.total);
}

int main(void)
{
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(v2_limits_on_the_way_up);
    RUN(v1_and_hybrid);
    RUN(container_mount_root);
    RUN(no_limits_and_junk);
    RUN(pci_numa_node);
    RUN(prefer_node);
    RUN(this_machine);
    char *cmd = xasprintf("rm -rf '%s'", base);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", base);
    free(cmd);
    return TEST_SUMMARY();
}
