/* verify: `tensord verify [--config FILE] [--state-dir DIR] PATH...`
 * re-hashes files and model directories and compares each SHA-256 (and git
 * blob id) with the one the daemon recorded in its state directory. */
#ifndef TENSORD_VERIFY_H
#define TENSORD_VERIFY_H

#include <stdio.h>

/* Exit status (tensord(8), EXIT STATUS): 0 when every file matched its
 * recorded hash, 1 when any did not, 2 when something could not be checked
 * (a usage error, a path that does not exist or cannot be read, a state
 * directory that cannot be read), which wins over 1; 3 when none
 * mismatched but some had no recorded hash (not hashed yet, changed
 * since, or recorded in another state directory). */
int verify_main(int argc, char **argv, FILE *out, FILE *err);

#endif
