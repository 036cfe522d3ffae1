/* conditional: see conditional.h. */
#include "conditional.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "util.h"

static char *put_2digits(char *p, int v)
{
    *p++ = (char)('0' + v / 10);
    *p++ = (char)('0' + v % 10);
    return p;
}

/* IMF-fixdate by arithmetic: gmtime_r and strftime take the time zone lock
 * and go through the locale on every answer, and the date is always UTC. */
void http_date_format(int64_t t, char *buf, size_t len)
{
    static const char wdays[7][4] = {"Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    int64_t days = t / 86400, secs = t % 86400;
    if (secs < 0) {
        secs += 86400;
        days--;
    }
    int wday = (int)(((days % 7) + 7) % 7); /* 1970-01-01 was a Thursday */
    /* Civil date from days since the epoch, in 400-year eras starting on
     * March 1st so the leap day is the era-year's last day. */
    int64_t z = days + 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    int day = (int)(doy - (153 * mp + 2) / 5 + 1);
    int month = (int)(mp < 10 ? mp + 3 : mp - 9);
    int64_t year = yoe + era * 400 + (month <= 2);
    if (year < 0 || year > 9999 || len < HTTP_DATE_LEN) { /* outside what HTTP-date can say */
        snprintf(buf, len, "%s", "Thu, 01 Jan 1970 00:00:00 GMT");
        return;
    }
    /* "Sun, 06 Nov 1994 08:49:37 GMT", digit by digit: snprintf costs about
     * 3,000 instructions here, on every file and tensor answer. */
    char *p = buf;
    memcpy(p, wdays[wday], 3);
    p += 3;
    *p++ = ',';
    *p++ = ' ';
    p = put_2digits(p, day);
    *p++ = ' ';
    memcpy(p, months[month - 1], 3);
    p += 3;
    *p++ = ' ';
    p = put_2digits(p, (int)(year / 100));
    p = put_2digits(p, (int)(year % 100));
    *p++ = ' ';
    p = put_2digits(p, (int)(secs / 3600));
    *p++ = ':';
    p = put_2digits(p, (int)(secs / 60 % 60));
    *p++ = ':';
    p = put_2digits(p, (int)(secs % 60));
    memcpy(p, " GMT", 5);
}

int http_date_parse(const char *s, int64_t *out)
{
    static const char *const formats[] = {
        "%a, %d %b %Y %H:%M:%S GMT", /* IMF-fixdate */
        "%A, %d-%b-%y %H:%M:%S GMT", /* obsolete RFC 850 */
        "%a %b %e %H:%M:%S %Y",      /* asctime */
    };
    for (size_t i = 0; i < ARRAY_LEN(formats); i++) {
        struct tm tm;
        memset(&tm, 0, sizeof(tm));
        const char *end = strptime(s, formats[i], &tm);
        if (!end)
            continue;
        while (*end == ' ' || *end == '\t')
            end++;
        if (*end)
            continue;
        *out = (int64_t)timegm(&tm);
        return 0;
    }
    return -1;
}

/* Compares one entity-tag from a list with ours. */
static int etag_equal(const char *tag, size_t len, const char *etag, int weak)
{
    int tag_weak = len >= 2 && tag[0] == 'W' && tag[1] == '/';
    int our_weak = etag[0] == 'W' && etag[1] == '/';
    if (!weak && (tag_weak || our_weak))
        return 0;
    if (tag_weak) {
        tag += 2;
        len -= 2;
    }
    if (our_weak)
        etag += 2;
    return strlen(etag) == len && memcmp(tag, etag, len) == 0;
}

int http_etag_match(const char *list, const char *etag, int weak)
{
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (!*p)
            break;
        if (*p == '*')
            return 1; /* any current representation, with a validator or not */
        if (!etag || !etag[0])
            return 0;
        const char *start = p;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        if (*p != '"')
            return 0; /* malformed list: treat as no match */
        const char *close = strchr(p + 1, '"');
        if (!close)
            return 0;
        p = close + 1;
        if (etag_equal(start, (size_t)(p - start), etag, weak))
            return 1;
    }
    return 0;
}

enum cond cond_evaluate(const struct cond_headers *h, const char *etag, int64_t mtime, int safe)
{
    int64_t t;
    if (h->if_match) {
        if (!http_etag_match(h->if_match, etag, 0))
            return COND_PRECONDITION_FAILED;
    } else if (h->if_unmodified_since && mtime >= 0 &&
               http_date_parse(h->if_unmodified_since, &t) == 0 && mtime > t) {
        return COND_PRECONDITION_FAILED;
    }
    if (h->if_none_match) {
        if (http_etag_match(h->if_none_match, etag, 1))
            return safe ? COND_NOT_MODIFIED : COND_PRECONDITION_FAILED;
    } else if (safe && h->if_modified_since && mtime >= 0 &&
               http_date_parse(h->if_modified_since, &t) == 0 && mtime <= t) {
        return COND_NOT_MODIFIED;
    }
    return COND_PROCEED;
}

/* An entity-tag must match strongly. A date never does here: it validates
 * only when the server knows the representation changed at most once in that
 * second (§8.8.2.2), and a file can be rewritten twice in one second, or
 * given back an old mtime, so a resuming client would splice two versions.
 * The full representation is sent instead. */
int cond_if_range_allows(const char *if_range, const char *etag)
{
    if (!if_range)
        return 1;
    while (*if_range == ' ')
        if_range++;
    return if_range[0] == '"' && http_etag_match(if_range, etag, 0);
}
