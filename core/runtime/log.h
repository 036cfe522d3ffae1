/* log: the daemon's own messages (stderr) and the access log.
 *
 * Every line goes out with a single write(2), so lines from concurrent
 * threads never interleave (lines stay below PIPE_BUF; longer fields are
 * truncated) and no lock is taken. When stderr is the systemd journal
 * (JOURNAL_STREAM matches it), messages carry a "<N>" priority prefix
 * instead of a timestamp, which journald already adds. */
#ifndef TENSORD_LOG_H
#define TENSORD_LOG_H

#include <stddef.h>
#include <stdint.h>

/* Not the <syslog.h> names on purpose: never include both. */
enum log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* level: "error", "warn", "info" or "debug". access_log: a path (opened
 * O_APPEND, created 0640), "-" for stderr, or "off". Returns 0, -EINVAL for
 * an unknown level, or the -errno of a file that cannot be opened. Safe to
 * call again (the previous access-log file is replaced). */
int log_init(const char *level, const char *access_log);

/* Reopens the access-log path (log rotation on SIGHUP). The descriptor
 * number stays the same (dup2), so writers in other threads never see a
 * closed fd. Returns 0 or -errno (the old file stays in use). */
int log_reopen(void);

/* "2025-01-02T03:04:05.678Z warn: message" on stderr. A trailing newline
 * in fmt is not needed. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One access-log line:
 *   TIME METHOD PATH STATUS BYTES DURATION_MS RANGE
 * e.g. 2025-01-02T03:04:05.678Z GET /v1/models/m/tensors/w 206 8 0.412 bytes=0-7
 * PATH and RANGE are escaped (%XX for bytes outside printable ASCII, space,
 * '"' and '\\'), the value of any query parameter whose name ends in
 * "token" is written as "***", and RANGE is "-" when range is NULL. */
void log_access(const char *method, const char *path, unsigned status, uint64_t bytes,
                uint64_t duration_ns, const char *range);

/* Formats the access line into buf (at most size bytes, newline included,
 * NUL-terminated); returns its length. Exposed for tests. */
size_t log_format_access(char *buf, size_t size, const char *method, const char *path,
                         unsigned status, uint64_t bytes, uint64_t duration_ns,
                         const char *range);

#endif
