/* config_ini: the configuration file. Reads INI text from memory (so it can
 * be fuzzed) into a struct config, stopping at the first bad line with a
 * message naming the file, the line and the option; and writes the
 * effective configuration back as a file that reads the same.
 *
 * INI dialect: "[section]" headers, "key = value" lines, '#' or ';' starting
 * a comment at the beginning of a line or after whitespace, whitespace
 * trimmed, a value may be double-quoted to keep leading/trailing blanks or a
 * " #". Keys before the first section header are accepted for any option;
 * inside a section a key must belong to it. A repeated key replaces the
 * earlier value (lists too: the last line gives the whole list). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_int.h"
#include "fileio.h"
#include "util.h"

#define SECTION_MAX 64 /* bytes of a section name, with its NUL */
#define NAME_MAX_LEN 64 /* bytes of an option name, with its NUL */

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* One line being read: its text, and the span [b, e) left once trimmed. */
struct ini_line {
    const char *text;
    size_t b, e;
    const char *where;         /* "FILE:LINE", for messages */
};

/* After a closing ']' or '"' at `after`: only blanks, then a comment or the end. */
static int only_comment_after(const struct ini_line *l, size_t after)
{
    while (after < l->e && is_blank(l->text[after]))
        after++;
    return after == l->e || l->text[after] == '#' || l->text[after] == ';';
}

/* "[section]": checks the name and copies it into section. */
static int read_section_header(const struct ini_line *l, char section[SECTION_MAX],
                               struct st_error *err)
{
    const char *line = l->text;
    const char *close = memchr(line + l->b, ']', l->e - l->b);
    if (!close)
        return config_option_error(err, l->where, NULL, "missing ']' in section header");
    if (!only_comment_after(l, (size_t)(close - line) + 1))
        return config_option_error(err, l->where, NULL, "text after section header");
    const char *s = line + l->b + 1;
    size_t slen = (size_t)(close - s);
    while (slen && is_blank(*s))
        s++, slen--;
    while (slen && is_blank(s[slen - 1]))
        slen--;
    if (!config_section_known(s, slen))
        return config_option_error(err, l->where, NULL, "unknown section [%.*s]",
                                   (int)(slen > 64 ? 64 : slen), s);
    memcpy(section, s, slen);
    section[slen] = '\0';
    return 0;
}

/* The option named before the '=' at eq, which must be allowed in section
 * (copied into name, cut, for messages). NULL with err when there is none. */
static const struct opt *read_option_name(const struct ini_line *l, size_t eq,
                                          const char *section, char name[NAME_MAX_LEN],
                                          struct st_error *err)
{
    size_t b = l->b, ke = eq;
    while (ke > b && is_blank(l->text[ke - 1]))
        ke--;
    if (ke == b) {
        config_option_error(err, l->where, NULL, "missing option name before '='");
        return NULL;
    }
    size_t klen = ke - b > NAME_MAX_LEN - 1 ? NAME_MAX_LEN - 1 : ke - b;
    memcpy(name, l->text + b, klen);
    name[klen] = '\0';
    const struct opt *o = ke - b < NAME_MAX_LEN ? config_opt_find(l->text + b, ke - b) : NULL;
    if (!o) {
        config_option_error(err, l->where, name, "unknown option");
        return NULL;
    }
    if (section[0] && strcmp(section, o->section) != 0) {
        config_option_error(err, l->where, name, "belongs in [%s], not [%s]",
                            o->section, section);
        return NULL;
    }
    return o;
}

/* The value after the '=' at eq, as [*vb, *ve): quoted, or up to a comment
 * that follows whitespace. */
static int read_value_span(const struct ini_line *l, size_t eq, const char *name, size_t *vb,
                           size_t *ve, struct st_error *err)
{
    const char *line = l->text;
    size_t b = eq + 1, e = l->e;
    while (b < e && is_blank(line[b]))
        b++;
    if (b < e && line[b] == '"') {
        const char *q = memchr(line + b + 1, '"', e - b - 1);
        if (!q)
            return config_option_error(err, l->where, name, "missing closing '\"'");
        if (!only_comment_after(l, (size_t)(q - line) + 1))
            return config_option_error(err, l->where, name, "text after closing '\"'");
        *vb = b + 1;
        *ve = (size_t)(q - line);
        return 0;
    }
    for (size_t i = b; i < e; i++)
        if ((line[i] == '#' || line[i] == ';') && i > b && is_blank(line[i - 1])) {
            e = i;
            break;
        }
    while (e > b && is_blank(line[e - 1]))
        e--;
    *vb = b;
    *ve = e;
    return 0;
}

/* "name = value": finds the option and applies the value to cfg. */
static int read_option_line(struct config *cfg, const struct ini_line *l, const char *section,
                            struct st_error *err)
{
    const char *eq = memchr(l->text + l->b, '=', l->e - l->b);
    char name[NAME_MAX_LEN];
    size_t vb = 0, ve = 0;
    if (!eq)
        return config_option_error(err, l->where, NULL, "missing '=' in \"%.*s\"",
                                   (int)(l->e - l->b > 64 ? 64 : l->e - l->b), l->text + l->b);
    size_t at = (size_t)(eq - l->text);
    const struct opt *o = read_option_name(l, at, section, name, err);
    if (!o || read_value_span(l, at, name, &vb, &ve, err) < 0)
        return -EINVAL;
    char *value = xstrndup(l->text + vb, ve - vb);
    int rc = config_opt_apply(cfg, o, value, err, l->where);
    free(value);
    return rc;
}

int config_load_buffer(struct config *cfg, const char *buf, size_t len, const char *file,
                       struct st_error *err)
{
    char where[512];
    char section[SECTION_MAX] = "";
    unsigned lineno = 0;
    size_t pos = 0;
    /* A UTF-8 byte-order mark, as some editors write, is not part of the first key. */
    if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0)
        pos = 3;
    while (pos < len) {
        const char *line = buf + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;
        pos += n + (nl != NULL);
        snprintf(where, sizeof(where), "%s:%u", file, ++lineno);
        if (memchr(line, '\0', n))
            return config_option_error(err, where, NULL, "NUL byte in line");
        struct ini_line l = {.text = line, .b = 0, .e = n, .where = where};
        while (l.b < l.e && is_blank(line[l.b]))
            l.b++;
        while (l.e > l.b && is_blank(line[l.e - 1]))
            l.e--;
        if (l.b == l.e || line[l.b] == '#' || line[l.b] == ';')
            continue;
        int rc = line[l.b] == '[' ? read_section_header(&l, section, err)
                                  : read_option_line(cfg, &l, section, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int config_load_file(struct config *cfg, const char *path, struct st_error *err)
{
    char *buf;
    size_t len;
    int rc = fileio_read_small(path, (16u << 20) - 1, &buf, &len);
    if (rc == -EFBIG)
        return st_error_fail(err, ST_ERR_LIMIT, "%s: file larger than 16 MiB", path);
    if (rc < 0)
        return st_error_errno(err, -rc, "%s", path);
    rc = config_load_buffer(cfg, buf, len, path, err);
    free(buf);
    return rc;
}

/* Writes a value so that config_load_buffer reads it back unchanged. */
static void print_string(FILE *out, const char *s)
{
    size_t n = strlen(s);
    int quote = n && (is_blank(s[0]) || is_blank(s[n - 1]) || s[0] == '"' || s[0] == '#' ||
                      s[0] == ';' || strstr(s, " #") || strstr(s, " ;") || strstr(s, "\t#") ||
                      strstr(s, "\t;"));
    if (quote)
        fprintf(out, "\"%s\"", s);
    else
        fputs(s, out);
}

static void print_size(FILE *out, uint64_t v)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && v && v % 1024 == 0)
        v /= 1024, u++;
    if (u < 0)
        fprintf(out, "%llu", (unsigned long long)v);
    else
        fprintf(out, "%llu%c", (unsigned long long)v, units[u]);
}

void config_print(const struct config *cfg, FILE *out)
{
    const char *base = (const char *)cfg;
    const char *section = "";
    fprintf(out, "# tensord effective configuration (tensord --print-config)\n");
    for (size_t i = 0; i < config_n_options; i++) {
        const struct opt *o = &config_options[i];
        if (strcmp(section, o->section) != 0) {
            section = o->section;
            fprintf(out, "\n[%s]\n", section);
        }
        fprintf(out, "# %s\n%s = ", o->doc, o->name);
        switch (o->type) {
        case OPT_STRING:
        case OPT_ENUM:
            print_string(out, *(char *const *)(base + o->off));
            break;
        case OPT_UINT:
            fprintf(out, "%u", *(const unsigned *)(base + o->off));
            break;
        case OPT_SIZE32:
            print_size(out, *(const unsigned *)(base + o->off));
            break;
        case OPT_SIZE:
            print_size(out, *(const uint64_t *)(base + o->off));
            break;
        case OPT_BOOL:
            fputs(*(const int *)(base + o->off) ? "true" : "false", out);
            break;
        case OPT_STRLIST:
        case OPT_IDLIST: {
            /* Joined first: an entry may start with '#', which after ", "
             * needs the whole value quoted. */
            unsigned n = *(const unsigned *)(base + o->count_off);
            char *joined = NULL;
            size_t jlen = 0;
            FILE *j = open_memstream(&joined, &jlen);
            if (!j)
                abort();
            for (unsigned k = 0; k < n; k++) {
                if (k)
                    fputs(", ", j);
                if (o->type == OPT_STRLIST)
                    fputs(((char *const *)(base + o->off))[k], j);
                else
                    fprintf(j, "%u", ((const uint32_t *)(base + o->off))[k]);
            }
            fclose(j);
            print_string(out, joined);
            free(joined);
            break;
        }
        }
        fputc('\n', out);
    }
}
