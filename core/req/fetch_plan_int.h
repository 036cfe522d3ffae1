/* fetch_plan_int: what the planning (fetch_plan.c) and the reading of a
 * plan as a body (fetch_plan_read.c) share: the marks a reader starts
 * from, a planned tensor, the reader's cursor, and planning one tensor. */
#ifndef TENSORD_FETCH_PLAN_INT_H
#define TENSORD_FETCH_PLAN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "fetch_plan.h"
#include "slice.h"
#include "tformat.h"

/* Where a reader can start: tensor `item`, its header entry at answer
 * offset `at`, its bytes at data offset `doff`. */
struct fetch_mark {
    size_t item;
    uint64_t at;
    uint64_t doff;
};

/* One tensor of the answer, planned. */
struct fetch_tensor {
    const struct reg_tensor *t;
    const char *name;
    size_t name_len;
    struct slice_plan plan;     /* its bytes: the slice, cut to its part of the split */
};

/* The reader's place, moved by every read. */
struct fetch_cursor {
    /* the header entry being copied (unit 0 is __metadata__ when there is
     * one, then one per tensor), its text in `text` */
    int have_unit;
    size_t unit;
    uint64_t unit_at;           /* its answer offset */
    uint64_t unit_doff;         /* its tensor's data offset (the entry's data_offsets) */
    uint64_t unit_nbytes;       /* ... and size */
    struct tformat_st text;
    struct fetch_tensor hit;    /* the tensor of that entry */
    /* the tensor being read */
    int have_item;
    size_t k;
    uint64_t k_at;              /* its data offset */
    struct fetch_tensor it;
};

struct fetch_checker;

/* Plans tensor k of the answer into *it: its slice, its part of the split.
 * With a checker (the first walk), every check and its error; without,
 * what reading needs. Returns 0 or -errno. */
int fetch_plan_item(const struct fetch_plan *p, size_t k, struct fetch_tensor *it,
                    struct fetch_checker *ck);
/* The file offset of the first byte of the tensor it plans. */
uint64_t fetch_plan_tensor_off(const struct fetch_tensor *it);
/* The descriptor file f of the plan's model is read through. */
int fetch_plan_fd(const struct fetch_plan *p, const struct reg_file *f);
/* Whether f is still the version validated (a file read elsewhere has a
 * content fixed by its hash: always). */
int fetch_plan_unchanged(const struct fetch_plan *p, const struct reg_file *f);
/* Writes the header entry of a tensor into w: its ',' (or the '{' of the
 * header) when `entries` come before it, its data at data offset doff. */
void fetch_plan_entry(struct tformat_st *w, size_t entries, uint64_t doff,
                      const struct fetch_tensor *it);
/* __metadata__ merged over the model's files (the first file to set a key
 * wins), written into w as the header's first entry and hashed into h
 * when h is not NULL. Returns the number of keys. */
size_t fetch_plan_metadata(const struct reg_model *m, struct tformat_st *w, uint64_t *h);
/* The header's closing ('}' and the padding to 8 bytes) into out; its length. */
size_t fetch_plan_header_end(const struct fetch_plan *p, char out[16]);

#endif
