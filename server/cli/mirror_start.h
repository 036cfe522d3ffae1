/* mirror_start: the daemon's mirror made from the configuration (the
 * [mirror] options, docs/CONFIG.md). */
#ifndef TENSORD_MIRROR_START_H
#define TENSORD_MIRROR_START_H

#include <stddef.h>

#include "config.h"

struct mirror;

/* The mirror of cfg->upstream, or NULL: *rc 0 when upstream is empty (no
 * mirror), -1 with errbuf when it could not start. */
struct mirror *mirror_start(const struct config *cfg, int *rc, char *errbuf, size_t errlen);

#endif
