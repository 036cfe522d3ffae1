/* verify: `tensord verify [--config FILE] [--state-dir DIR] PATH...`
 * re-hashes files and model directories and compares each SHA-256 (and git
 * blob id) with the one the daemon recorded in its state directory. */
#ifndef TENSORD_VERIFY_H
#define TENSORD_VERIFY_H

#include <stdio.h>

/* Exit status: 0 when every file matched its recorded hash, 1 when any
 * did not or could not be read, 2 on usage errors, 3 when none mismatched
 * but some had no recorded hash (not hashed yet, or changed since). */
int verify_main(int argc, char **argv, FILE *out, FILE *err);

#endif
