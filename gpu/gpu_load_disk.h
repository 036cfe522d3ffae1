/* gpu_load_disk: a load's disk mover (gpu/gpu_load.h), built on the load's
 * shared state (gpu/gpu_run.h); gpu/gpu_load.c runs it. */
#ifndef TENSORD_GPU_LOAD_DISK_H
#define TENSORD_GPU_LOAD_DISK_H

#include "gpu_run.h"

/* The disk mover, on the calling thread: reads the plan's disk chunks and
 * what the copy threads hand over until they have all ended and nothing is
 * left, and waits for its copies before it returns. */
void gpu_load_disk(struct gpu_run *r, struct gpu_load_stats *st);

#endif
