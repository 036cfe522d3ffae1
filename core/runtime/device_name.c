/* device_name: see device_name.h. */
#include "device_name.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int device_name_parse(const char *s, enum device_kind *kind, int *index, const char **uuid)
{
    *uuid = NULL;
    *index = -1;
    if (!s || !*s)
        return -EINVAL;
    if (strcmp(s, "host") == 0) {
        *kind = DEVICE_HOST;
        *index = 0;
        return 0;
    }
    if (strcmp(s, "cuda") == 0) {
        *kind = DEVICE_CUDA;
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
        *kind = DEVICE_CUDA;
        *index = atoi(d);
        return *index < DEVICE_NAME_MAX_DEVICES ? 0 : -EINVAL;
    }
    if ((strncmp(s, "GPU-", 4) == 0 || strncmp(s, "MIG-", 4) == 0) &&
        strlen(s) < DEVICE_NAME_UUID_MAX) {
        for (const char *p = s + 4; *p; p++)
            if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F') ||
                  *p == '-'))
                return -EINVAL;
        *kind = DEVICE_CUDA;
        *uuid = s;
        return 0;
    }
    return -EINVAL;
}
