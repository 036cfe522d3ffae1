/* inspect: `tensord inspect PATH...` validates files and model directories. */
#ifndef TENSORD_INSPECT_H
#define TENSORD_INSPECT_H

#include <stdio.h>

/* Exit status (tensord(8), EXIT STATUS): 0 when everything is valid, 1
 * when anything is invalid, 2 when something could not be inspected (a
 * usage error, a path that does not exist or cannot be read), which wins
 * over 1. */
int inspect_main(int argc, char **argv, FILE *out, FILE *err);

#endif
