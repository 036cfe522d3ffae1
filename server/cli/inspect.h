/* inspect: `tensord inspect PATH...` validates files and model directories. */
#ifndef TENSORD_INSPECT_H
#define TENSORD_INSPECT_H

#include <stdio.h>

/* Returns 0 when everything is valid, 1 when anything is invalid, 2 on usage errors. */
int inspect_main(int argc, char **argv, FILE *out, FILE *err);

#endif
