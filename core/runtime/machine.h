/* machine: what this process may use of the machine it runs on: CPUs and
 * memory, as its affinity mask, the kernel and its cgroups allow.
 *
 * Worker pools size themselves from machine_cpus(), so a daemon confined by
 * taskset, a cpuset, a container's --cpus or systemd's CPUQuota= does not
 * start threads it cannot run; the host memory backend admits a preload
 * only when machine_memory() says it fits, so a model larger than the
 * machine is refused rather than filling memory until the OOM killer picks
 * a process.
 *
 * Limits are read from every cgroup on the way from this process's own to
 * the root of its hierarchy, the tightest winning: cgroup v2 (cpu.max,
 * memory.max and memory.current) and v1 (cpu.cfs_quota_us and
 * cpu.cfs_period_us, memory.limit_in_bytes and memory.usage_in_bytes), each
 * found where /proc/self/mountinfo says its hierarchy is mounted (a
 * container's mount shows its own cgroup as the root). Both read /proc and
 * the cgroup file system (a few small files): call them where that is fine
 * (start-up, a preload request), not per byte. */
#ifndef TENSORD_MACHINE_H
#define TENSORD_MACHINE_H

#include <stdint.h>

/* CPUs this process may use: its affinity mask's, fewer when a cgroup's CPU
 * quota grants less time than that. At least 1. */
unsigned machine_cpus(void);

struct machine_memory {
    uint64_t total;            /* MemTotal, or the smallest cgroup limit when lower */
    uint64_t available;        /* MemAvailable, or what the tightest cgroup still allows
                                * (its limit less its usage) when lower */
};

/* Fills *m. Returns 0, or -errno when /proc/meminfo cannot be read. */
int machine_memory(struct machine_memory *m);

/* The same two read below sysroot ("" for the machine itself; tests give a
 * directory holding proc/self/cgroup, proc/self/mountinfo, proc/meminfo
 * and the cgroup files at the paths mountinfo names). machine_quota_cpus:
 * the CPUs the tightest quota grants (rounded up), 0 when none limits. */
unsigned machine_quota_cpus(const char *sysroot);
int machine_memory_at(const char *sysroot, struct machine_memory *m);

/* The NUMA node of PCI device bus_id ("0000:3b:00.0", as the CUDA driver
 * names a GPU's place; any case) as sysfs says it below sysroot ("" for
 * the machine): its node, or -1 when the kernel does not say (one node, no
 * NUMA), the device is not there, or bus_id is not such a name. */
int machine_pci_numa_node(const char *sysroot, const char *bus_id);

/* Makes the memory the calling thread allocates from now on come from node
 * where it can (MPOL_PREFERRED: another node's when that one is full);
 * node < 0 gives the thread back the default policy. Pinned staging memory
 * is allocated between the two, on the node of the GPU that reads it.
 * Returns 0 or -errno (a kernel without NUMA: -ENOSYS). */
int machine_prefer_node(int node);

#endif
