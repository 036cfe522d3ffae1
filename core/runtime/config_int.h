/* config_int: what the three files of the config module share. The table of
 * options (config_options.c) says what each option is; config.c checks and
 * stores values (defaults, command line); config_ini.c reads and writes the
 * INI file. */
#ifndef TENSORD_CONFIG_INT_H
#define TENSORD_CONFIG_INT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

enum opt_type {
    OPT_STRING,  /* char * */
    OPT_ENUM,    /* char *, one of choices */
    OPT_UINT,    /* unsigned, decimal */
    OPT_SIZE32,  /* unsigned, with K/M/G suffix */
    OPT_SIZE,    /* uint64_t, with K/M/G/T suffix */
    OPT_BOOL,    /* int 0/1 */
    OPT_STRLIST, /* char *[max] with an unsigned count */
    OPT_IDLIST,  /* uint32_t[max] with an unsigned count */
};

struct opt {
    const char *name;
    const char *section;
    enum opt_type type;
    const char *def;           /* default, parsed by the same code as a file value */
    uint64_t min, max;         /* numbers: value range; lists: entry range (IDLIST) */
    size_t off;                /* field in struct config */
    size_t count_off;          /* lists: their count field */
    unsigned max_items;        /* lists: capacity */
    const char *choices;       /* OPT_ENUM: "a|b|c" */
    /* Extra syntax check for strings and list entries; returns a reason or NULL. */
    const char *(*check)(const char *v);
    const char *doc;
};

/* config_options.c: the table, in the order config_print writes it. */
extern const struct opt config_options[];
extern const size_t config_n_options;
/* The option named name[0..len), or NULL. */
const struct opt *config_opt_find(const char *name, size_t len);
/* 1 when some option lives in section s[0..len). */
int config_section_known(const char *s, size_t len);

/* config.c: checks value for o and stores it; cfg changes only on success.
 * Returns 0, or -EINVAL with "WHERE: option NAME: reason" in err. */
int config_opt_apply(struct config *cfg, const struct opt *o, const char *value,
                     struct st_error *err, const char *where);
/* Writes "WHERE: option NAME: reason" (or "WHERE: reason" when name is
 * NULL) into err (ST_ERR_INVALID_ARGUMENT) and returns -EINVAL. */
int config_option_error(struct st_error *err, const char *where, const char *name,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
