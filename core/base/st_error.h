/* st_error: the one error convention of core/.
 *
 * A core function that can fail returns an int: 0 (or a count) on success,
 * a negative errno on failure. When its caller needs more than the errno (a
 * user will read why), it takes an optional `struct st_error *err` as its
 * last argument and fills it on failure: a code from the one enum below and
 * a message that names the file, the tensor and the offending value. Users
 * see the message verbatim; the name (st_status_name) is the stable
 * machine-readable code; server/ alone maps codes to HTTP statuses.
 *
 *     if (bad)
 *         return st_error_fail(err, ST_ERR_DTYPE, "%s: tensor %s: ...", ...);
 *
 * st_error_fail returns the errno that goes with the code (st_status_errno),
 * so a caller that only propagates failure never looks at the code. */
#ifndef TENSORD_ST_ERROR_H
#define TENSORD_ST_ERROR_H

enum st_status {
    ST_OK = 0,
    ST_ERR_IO,                 /* read/open/stat failed (errno in the message) */
    ST_ERR_NO_MEMORY,          /* not enough memory to read or check the file: the file
                                * may be fine (a resource error, not a verdict on it) */
    /* safetensors files, in the order the reference crate checks them */
    ST_ERR_HEADER_TOO_SMALL,   /* file shorter than the 8-byte length prefix */
    ST_ERR_HEADER_EMPTY,       /* N == 0 */
    ST_ERR_HEADER_TOO_LARGE,   /* N > 100,000,000 */
    ST_ERR_HEADER_LENGTH,      /* 8 + N beyond the end of the file */
    ST_ERR_UTF8,               /* header bytes are not UTF-8 */
    ST_ERR_HEADER_START,       /* first non-whitespace byte is not '{' */
    ST_ERR_DEPTH,              /* nesting deeper than ST_MAX_DEPTH */
    ST_ERR_JSON,               /* not JSON, or bytes after the value */
    ST_ERR_DUPLICATE_KEY,      /* a key appears twice in one object */
    ST_ERR_NOT_OBJECT,         /* top level is not an object */
    ST_ERR_METADATA,           /* __metadata__ not a string-to-string object */
    ST_ERR_TENSOR_INFO,        /* tensor entry not an object / field missing / wrong type */
    ST_ERR_UNKNOWN_FIELD,      /* a field other than dtype, shape, data_offsets */
    ST_ERR_DTYPE,              /* unknown dtype */
    ST_ERR_SHAPE,              /* shape not an array of unsigned integers (or > ST_MAX_NDIM) */
    ST_ERR_OFFSETS,            /* data_offsets not two unsigned integers with begin <= end */
    ST_ERR_OVERFLOW,           /* element count or bit size overflows 64 bits */
    ST_ERR_MISALIGNED,         /* element count * bits not a multiple of 8 */
    ST_ERR_SIZE_MISMATCH,      /* end - begin differs from the size shape and dtype give */
    ST_ERR_INVALID_OFFSET,     /* sorted offsets do not start at 0 or leave a hole/overlap */
    ST_ERR_DATA_LENGTH,        /* last end differs from the data length (truncated or trailing bytes) */
    /* sharded index files */
    ST_ERR_INDEX_JSON,         /* index not UTF-8 JSON, duplicate key, too deep, too large */
    ST_ERR_INDEX_SHAPE,        /* top level not an object, weight_map missing/not string->string, metadata not an object */
    ST_ERR_INDEX_SHARD_PATH,   /* shard path absolute, with "..", "." or empty components, backslash or NUL */
    ST_ERR_INDEX_EMPTY,        /* weight_map has no entries */
    /* the state file of content hashes (core/hash/hashfile) */
    ST_ERR_STATE_FORMAT,       /* a line is not what the format says */
    ST_ERR_STATE_VERSION,      /* another format version (a newer tensord's) */
    ST_ERR_STATE_TORN,         /* no end line, or its count or digest does not match */
    /* models (registry cross-checks) */
    ST_ERR_SHARD_MISSING,      /* the index names a shard that does not exist or is not a regular file */
    ST_ERR_SHARD_INVALID,      /* a shard failed validation (the shard's own message follows) */
    ST_ERR_TENSOR_NOT_IN_SHARD,/* the index maps a tensor to a shard that lacks it */
    ST_ERR_TENSOR_NOT_IN_INDEX,/* a shard holds a tensor the index does not map to it */
    ST_ERR_DUPLICATE_TENSOR,   /* a tensor name appears in two files of one model */
    ST_ERR_MULTIPLE_INDEXES,   /* several *.safetensors.index.json in one directory */
    ST_ERR_NAME_CONFLICT,      /* NAME.safetensors at the root and a directory NAME/ */
    /* requests and resources (the daemon's own operations) */
    ST_ERR_INVALID_ARGUMENT,   /* a request, option or argument out of its domain */
    ST_ERR_NOT_FOUND,          /* no such model, tensor, instance or device */
    ST_ERR_CONFLICT,           /* the object is in a state that forbids the operation */
    ST_ERR_NO_DEVICE,          /* no GPU, no driver, or a device that cannot be used */
    ST_ERR_DEVICE,             /* a device call failed (the driver's message follows) */
    ST_ERR_DEVICE_MEMORY,      /* not enough device memory, or over the configured budget */
    ST_ERR_LIMIT,              /* a configured limit (leases, connections, sizes) is reached */
    ST_ERR_SLICE,              /* a slice that does not parse or does not fit its tensor */
    ST_ERR_SPLIT,              /* a tensor-parallel split that does not fit its tensor */
    ST_ERR_UNTRUSTED,          /* a path another user could change (a socket's directory) */
    ST_ERR_RETRY,              /* the object is being replaced in place: ask again shortly */
    ST_ERR_AMBIGUOUS,          /* a request that names several objects where it needs one */
    ST_STATUS_COUNT
};

struct st_error {
    enum st_status code;
    char message[512];
};

/* Stable machine-readable name of a status, e.g. "invalid_offset". */
const char *st_status_name(enum st_status s);

/* The negative errno that goes with a code: -EIO, -ENOMEM, -ENOENT,
 * -ENODEV, -ENOSPC, -EBUSY, -EAGAIN, -EACCES, and -EINVAL for everything that is a
 * verdict on the input. 0 for ST_OK. */
int st_status_errno(enum st_status s);

/* Fills err (when non-NULL) and returns st_status_errno(code). */
int st_error_fail(struct st_error *err, enum st_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* For a failed system call: code ST_ERR_NO_MEMORY when errnum is ENOMEM,
 * ST_ERR_IO otherwise; the message gets ": strerror(errnum)" appended.
 * Returns -errnum. */
int st_error_errno(struct st_error *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
