/* gpu: finding a named device, and the CUDA probe when the build has no CUDA. */
#include "gpu.h"


#include <string.h>
#include <strings.h>

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
