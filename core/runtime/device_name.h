/* device_name: the name of a device a preload may go to, as the
 * configuration (preload = MODEL@DEVICE), POST /v1/models/{model}/gpu and
 * the lease socket's open take it. Its syntax only: the GPU layer resolves
 * a name against the devices it found (gpu/gpu.h, gpu_find_device). */
#ifndef TENSORD_DEVICE_NAME_H
#define TENSORD_DEVICE_NAME_H

#define DEVICE_NAME_UUID_MAX 48    /* "GPU-8-4-4-4-12" or "MIG-..." hex plus NUL fits */
#define DEVICE_NAME_MAX_DEVICES 64 /* cuda:N names an N below this */

enum device_kind { DEVICE_HOST, DEVICE_CUDA };

/* Parses "host", "cuda" (cuda:0), "cuda:N", or a UUID as nvidia-smi -L
 * prints it ("GPU-...", or "MIG-..." for a MIG instance). Sets *kind and
 * *index (-1 with *uuid for a UUID, to be resolved against the backend's
 * devices). Returns 0 or -EINVAL on bad syntax. */
int device_name_parse(const char *s, enum device_kind *kind, int *index, const char **uuid);

#endif
