/* answer_open: the lease socket's open answer (docs/GPU.md), read like
 * every answer (answer.h) into a model's tables. */
#ifndef TENSORD_ANSWER_OPEN_H
#define TENSORD_ANSWER_OPEN_H

#include <stddef.h>

struct tensord_model;

/* Fills m's name, device, generation, allocation and tensor tables from an
 * open answer that answer_read accepted, and checks every number against
 * the others: n_fds descriptors came with it, one per allocation; a tensor
 * lies inside its allocation, and its dtype (one the library knows) and
 * shape make exactly its nbytes. Returns 0, or -1 with err; what was
 * filled in is m's to free either way. */
int answer_open(const char *body, size_t len, size_t n_fds, struct tensord_model *m, char *err,
                size_t errlen);
/* Frees what answer_open filled in (m itself and its mappings are the
 * caller's). */
void answer_open_free(struct tensord_model *m);

#endif
