/* xmlw: see xmlw.h. */
#include "xmlw.h"

#include <inttypes.h>
#include <string.h>

#include "util.h"

void xmlw_init(struct xmlw *w)
{
    w->sb = (struct strbuf)STRBUF_INIT;
    strbuf_puts(&w->sb, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
}

void xmlw_open(struct xmlw *w, const char *name, const char *ns)
{
    strbuf_putc(&w->sb, '<');
    strbuf_puts(&w->sb, name);
    if (ns) {
        strbuf_puts(&w->sb, " xmlns=\"");
        strbuf_puts(&w->sb, ns);
        strbuf_putc(&w->sb, '"');
    }
    strbuf_putc(&w->sb, '>');
}

void xmlw_close(struct xmlw *w, const char *name)
{
    strbuf_puts(&w->sb, "</");
    strbuf_puts(&w->sb, name);
    strbuf_putc(&w->sb, '>');
}

/* Whether the UTF-8 sequence s[0..len) is U+FFFE or U+FFFF: valid UTF-8,
 * but no XML 1.0 Char (a parser refuses the whole document). */
static int not_char(const unsigned char *s, size_t len)
{
    return len == 3 && s[0] == 0xef && s[1] == 0xbf && s[2] >= 0xbe;
}

static void put_escaped(struct strbuf *sb, const char *text, size_t n)
{
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t len = utf8_decode(text + i, n - i, NULL);
        if (c == '&')
            strbuf_puts(sb, "&amp;");
        else if (c == '<')
            strbuf_puts(sb, "&lt;");
        else if (c == '>')
            strbuf_puts(sb, "&gt;");
        else if (c == '"')
            strbuf_puts(sb, "&quot;");
        else if (c == '\'')
            strbuf_puts(sb, "&apos;");
        else if (c == '\r')
            strbuf_puts(sb, "&#13;"); /* a literal CR would be read as a line end */
        else if (len == 0 || (c < 0x20 && c != '\t' && c != '\n') || not_char(s + i, len))
            strbuf_puts(sb, "\xef\xbf\xbd"); /* U+FFFD */
        else
            strbuf_append(sb, s + i, len);
        i += len ? len : 1;
    }
}

void xmlw_text(struct xmlw *w, const char *name, const char *text, size_t n)
{
    xmlw_open(w, name, NULL);
    put_escaped(&w->sb, text, n);
    xmlw_close(w, name);
}

void xmlw_cstr(struct xmlw *w, const char *name, const char *text)
{
    xmlw_text(w, name, text, strlen(text));
}

void xmlw_u64(struct xmlw *w, const char *name, uint64_t v)
{
    xmlw_open(w, name, NULL);
    strbuf_printf(&w->sb, "%" PRIu64, v);
    xmlw_close(w, name);
}

void xmlw_bool(struct xmlw *w, const char *name, int v)
{
    xmlw_cstr(w, name, v ? "true" : "false");
}

void xmlw_url_text(struct xmlw *w, const char *name, const char *text, size_t n)
{
    xmlw_open(w, name, NULL);
    strbuf_pct_encode(&w->sb, text, n, 1);
    xmlw_close(w, name);
}

char *xmlw_take(struct xmlw *w, size_t *len)
{
    strbuf_putc(&w->sb, '\n');
    return strbuf_detach(&w->sb, len);
}
