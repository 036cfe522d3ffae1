/* Helpers shared by the st_header unit tests (test_st_header.c for framing,
 * JSON and reading from an fd; test_st_entries.c for tensor entries,
 * metadata and messages). */
#ifndef TENSORD_ST_HEADER_FIXTURE_H
#define TENSORD_ST_HEADER_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "st_header.h"
#include "test.h"
#include "util.h"

#define FILE_NAME "model.safetensors"

/* Parses a NUL-terminated header; frees the result, returns the code and
 * leaves the message in *e. */
static inline enum st_status parse_len(const char *json, size_t len, uint64_t data_len,
                                       struct st_error *e)
{
    struct st_header *h = (struct st_header *)1;
    enum st_status rc = ST_CODE(st_header_parse(json, len, data_len, FILE_NAME, &h, e), e);
    if (rc != ST_OK)
        CHECK(h == NULL);
    CHECK(e->code == rc);
    if (rc != ST_OK) {
        CHECK(strlen(e->message) < 500);
        CHECK(strncmp(e->message, FILE_NAME ": ", strlen(FILE_NAME) + 2) == 0);
    }
    st_header_free(h);
    return rc;
}

static inline enum st_status parse(const char *json, uint64_t data_len, struct st_error *e)
{
    return parse_len(json, strlen(json), data_len, e);
}

static inline enum st_status code_of(const char *json, uint64_t data_len)
{
    struct st_error e;
    return parse(json, data_len, &e);
}

/* A one-tensor header "a" with the given dtype, shape text and offsets. */
static inline char *one(const char *dtype, const char *shape, uint64_t b, uint64_t end)
{
    return xasprintf("{\"a\":{\"dtype\":\"%s\",\"shape\":%s,\"data_offsets\":[%llu,%llu]}}", dtype,
                     shape, (unsigned long long)b, (unsigned long long)end);
}

static inline enum st_status code_one(const char *dtype, const char *shape, uint64_t b,
                                      uint64_t end, uint64_t data_len)
{
    char *j = one(dtype, shape, b, end);
    enum st_status rc = code_of(j, data_len);
    free(j);
    return rc;
}

#endif
