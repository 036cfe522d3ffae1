/* gpu: device names, and the CUDA probe when the build has no CUDA. */
#include "gpu.h"

#include <errno.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int gpu_parse_device(const char *s, enum gpu_kind *kind, int *index, const char **uuid)
{
    *uuid = NULL;
    *index = -1;
    if (!s || !*s)
        return -EINVAL;
    if (strcmp(s, "host") == 0) {
        *kind = GPU_KIND_HOST;
        *index = 0;
        return 0;
    }
    if (strcmp(s, "cuda") == 0) {
        *kind = GPU_KIND_CUDA;
        *index = 0;
        return 0;
    }
    if (strncmp(s, "cuda:", 5) == 0) {
        const char *d = s + 5;
        if (*d < '0' || *d > '9' || strlen(d) > 4)
            return -EINVAL;
        for (const char *p = d; *p; p++)
            if (*p < '0' || *p > '9')
                return -EINVAL;
        *kind = GPU_KIND_CUDA;
        *index = atoi(d);
        return *index < GPU_MAX_DEVICES ? 0 : -EINVAL;
    }
    if ((strncmp(s, "GPU-", 4) == 0 || strncmp(s, "MIG-", 4) == 0) && strlen(s) < GPU_UUID_MAX) {
        for (const char *p = s + 4; *p; p++)
            if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F') ||
                  *p == '-'))
                return -EINVAL;
        *kind = GPU_KIND_CUDA;
        *uuid = s;
        return 0;
    }
    return -EINVAL;
}

int gpu_find_device(const struct gpu_backend *b, int index, const char *uuid)
{
    for (size_t i = 0; i < b->n_devices; i++) {
        if (uuid ? b->devices[i].uuid[0] && strcasecmp(b->devices[i].uuid, uuid) == 0
                 : b->devices[i].index == index)
            return (int)i;
    }
    return -1;
}

#ifndef TENSORD_CUDA
struct gpu_backend *gpu_cuda_probe(struct st_error *err)
{
    st_error_fail(err, ST_ERR_NO_DEVICE, "built without CUDA support");
    return NULL;
}
#endif
