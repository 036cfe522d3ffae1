/* libFuzzer target for the config parser: arbitrary bytes through
 * config_load_buffer must never crash, leak or read out of bounds, whatever
 * mix of valid and invalid lines they hold; and a config that loaded must
 * print (config_print) as a file that loads back to the same printout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *print(const struct config *cfg, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        abort();
    config_print(cfg, f);
    fclose(f);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct config cfg, again;
    struct st_error err;
    config_defaults(&cfg);
    if (config_load_buffer(&cfg, (const char *)data, size, "fuzz.conf", &err) == 0) {
        size_t n1, n2;
        char *p1 = print(&cfg, &n1);
        config_defaults(&again);
        if (config_load_buffer(&again, p1, n1, "printed", &err) != 0) {
            fprintf(stderr, "printed config does not load: %s\n%s", err.message, p1);
            abort();
        }
        char *p2 = print(&again, &n2);
        if (n1 != n2 || memcmp(p1, p2, n1) != 0) {
            fprintf(stderr, "print/load/print differs:\n%s\n---\n%s", p1, p2);
            abort();
        }
        free(p1);
        free(p2);
        config_free(&again);
    }
    config_free(&cfg);
    return 0;
}
