#include "st_error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const names[ST_STATUS_COUNT] = {
    [ST_OK] = "ok",
    [ST_ERR_IO] = "io_error",
    [ST_ERR_NO_MEMORY] = "out_of_memory",
    [ST_ERR_HEADER_TOO_SMALL] = "header_too_small",
    [ST_ERR_HEADER_EMPTY] = "header_empty",
    [ST_ERR_HEADER_TOO_LARGE] = "header_too_large",
    [ST_ERR_HEADER_LENGTH] = "invalid_header_length",
    [ST_ERR_UTF8] = "invalid_utf8",
    [ST_ERR_HEADER_START] = "invalid_header_start",
    [ST_ERR_DEPTH] = "nesting_too_deep",
    [ST_ERR_JSON] = "invalid_json",
    [ST_ERR_DUPLICATE_KEY] = "duplicate_key",
    [ST_ERR_NOT_OBJECT] = "header_not_object",
    [ST_ERR_METADATA] = "invalid_metadata",
    [ST_ERR_TENSOR_INFO] = "invalid_tensor_info",
    [ST_ERR_UNKNOWN_FIELD] = "unknown_field",
    [ST_ERR_DTYPE] = "unknown_dtype",
    [ST_ERR_SHAPE] = "invalid_shape",
    [ST_ERR_OFFSETS] = "invalid_data_offsets",
    [ST_ERR_OVERFLOW] = "size_overflow",
    [ST_ERR_MISALIGNED] = "misaligned_size",
    [ST_ERR_SIZE_MISMATCH] = "size_mismatch",
    [ST_ERR_INVALID_OFFSET] = "invalid_offset",
    [ST_ERR_DATA_LENGTH] = "data_length_mismatch",
    [ST_ERR_INDEX_JSON] = "index_invalid_json",
    [ST_ERR_INDEX_SHAPE] = "index_invalid_shape",
    [ST_ERR_INDEX_SHARD_PATH] = "index_bad_shard_path",
    [ST_ERR_INDEX_EMPTY] = "index_empty",
    [ST_ERR_STATE_FORMAT] = "state_invalid",
    [ST_ERR_STATE_VERSION] = "state_version",
    [ST_ERR_STATE_TORN] = "state_torn",
    [ST_ERR_SHARD_MISSING] = "shard_missing",
    [ST_ERR_SHARD_INVALID] = "shard_invalid",
    [ST_ERR_TENSOR_NOT_IN_SHARD] = "tensor_not_in_shard",
    [ST_ERR_TENSOR_NOT_IN_INDEX] = "tensor_not_in_index",
    [ST_ERR_DUPLICATE_TENSOR] = "duplicate_tensor",
    [ST_ERR_MULTIPLE_INDEXES] = "multiple_indexes",
    [ST_ERR_NAME_CONFLICT] = "name_conflict",
    [ST_ERR_INVALID_ARGUMENT] = "invalid_argument",
    [ST_ERR_NOT_FOUND] = "not_found",
    [ST_ERR_CONFLICT] = "conflict",
    [ST_ERR_NO_DEVICE] = "no_device",
    [ST_ERR_DEVICE] = "device_error",
    [ST_ERR_DEVICE_MEMORY] = "device_out_of_memory",
    [ST_ERR_LIMIT] = "limit_reached",
    [ST_ERR_SLICE] = "invalid_slice",
    [ST_ERR_SPLIT] = "invalid_split",
    [ST_ERR_UNTRUSTED] = "untrusted_path",
    [ST_ERR_RETRY] = "retry",
    [ST_ERR_AMBIGUOUS] = "ambiguous",
};

int st_status_errno(enum st_status s)
{
    switch (s) {
    case ST_OK:
        return 0;
    case ST_ERR_IO:
    case ST_ERR_DEVICE:
        return -EIO;
    case ST_ERR_NO_MEMORY:
        return -ENOMEM;
    case ST_ERR_NOT_FOUND:
    case ST_ERR_SHARD_MISSING:
        return -ENOENT;
    case ST_ERR_NO_DEVICE:
        return -ENODEV;
    case ST_ERR_DEVICE_MEMORY:
        return -ENOSPC;
    case ST_ERR_CONFLICT:
        return -EBUSY;
    case ST_ERR_LIMIT:
    case ST_ERR_RETRY:
        return -EAGAIN;
    case ST_ERR_UNTRUSTED:
        return -EACCES;
    default:
        return -EINVAL;
    }
}

const char *st_status_name(enum st_status s)
{
    if ((int)s < 0 || s >= ST_STATUS_COUNT || !names[s])
        return "unknown_error";
    return names[s];
}

static void set_message(struct st_error *err, enum st_status code, const char *fmt, va_list ap)
{
    err->code = code;
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
}

int st_error_fail(struct st_error *err, enum st_status code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        set_message(err, code, fmt, ap);
        va_end(ap);
    }
    return st_status_errno(code);
}

int st_error_errno(struct st_error *err, int errnum, const char *fmt, ...)
{
    if (errnum <= 0)
        errnum = EIO;
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        set_message(err, errnum == ENOMEM ? ST_ERR_NO_MEMORY : ST_ERR_IO, fmt, ap);
        va_end(ap);
        size_t n = strlen(err->message);
        snprintf(err->message + n, sizeof(err->message) - n, ": %s", strerror(errnum));
    }
    return -errnum;
}
