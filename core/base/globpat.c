/* globpat: fnmatch.fnmatchcase's patterns (see globpat.h).
 *
 * Python compiles a pattern to a regular expression; a set `[...]` goes
 * through two steps that give it its corner cases: the text between the
 * brackets is cut at the '-' that may form ranges ("chunks"), chunks that
 * would make a reversed range are merged (dropping both ends), and the
 * result, with every other '-' escaped, is read as a regex set. Both steps
 * are reproduced here on code points, so `[z-a]`, `[a--]`, `[b-a-c]` and
 * `[!z-a]` mean what they mean in Python. Matching is the classic two-pointer
 * walk that remembers the last '*', which is exact for tokens that each match
 * one character. */
#include "globpat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

enum tok_kind { TOK_LIT, TOK_ANY, TOK_STAR, TOK_SET };

struct tok {
    enum tok_kind kind;
    int negated;        /* TOK_SET: matches characters outside the ranges */
    uint32_t cp;        /* TOK_LIT */
    size_t set_off;     /* TOK_SET: first range in ranges[] */
    size_t set_n;       /* TOK_SET: ranges (0: never matches, or always when negated) */
};

struct globpat {
    size_t n_toks;
    struct tok *toks;
    uint32_t *ranges;   /* lo, hi pairs, inclusive */
    size_t n_ranges;
};

/* Decodes one UTF-8 sequence of s[*i..n) into *cp (ASCII without a call:
 * names are mostly ASCII). Returns 0, or -1 when it is malformed (overlong,
 * surrogate, out of range, cut short). */
static int utf8_next(const unsigned char *s, size_t n, size_t *i, uint32_t *cp)
{
    size_t len = 1;
    if (s[*i] < 0x80)
        *cp = s[*i];
    else if (!(len = utf8_decode((const char *)s + *i, n - *i, cp)))
        return -1;
    *i += len;
    return 0;
}

/* Decodes s[0..n) into a new array of code points (*out, caller frees).
 * Returns the count, or (size_t)-1 when s is not UTF-8. */
static size_t decode(const char *s, size_t n, uint32_t **out)
{
    uint32_t *cps = xmalloc((n ? n : 1) * sizeof(*cps));
    size_t i = 0, k = 0;
    while (i < n) {
        if (utf8_next((const unsigned char *)s, n, &i, &cps[k]) < 0) {
            free(cps);
            return (size_t)-1;
        }
        k++;
    }
    *out = cps;
    return k;
}

/* One item of the regex set Python builds: a literal character, or an
 * unescaped '-' that joins chunks (and may form a range). */
struct item {
    uint32_t cp;
    int dash;
};

static void add_range(struct globpat *g, uint32_t lo, uint32_t hi)
{
    g->ranges = xrealloc(g->ranges, (g->n_ranges + 1) * 2 * sizeof(*g->ranges));
    g->ranges[2 * g->n_ranges] = lo;
    g->ranges[2 * g->n_ranges + 1] = hi;
    g->n_ranges++;
}

/* The items of a set with a '-' in p[i..j), as Python's fnmatch.translate
 * writes them: chunks cut at each '-' found from k, where k skips the first
 * character (or "!x") and, after a cut, the character following it; chunks
 * whose facing ends make a reversed range merge without those ends; the
 * chunks are then joined by unescaped '-' items. Appends to items. */
static size_t dashed_items(const uint32_t *p, size_t i, size_t j, struct item *items)
{
    size_t n_items = 0;
    size_t *cs = xmalloc((j - i + 2) * sizeof(*cs)), *ce = xmalloc((j - i + 2) * sizeof(*ce));
    size_t nc = 0, start = i, k = p[i] == '!' ? i + 2 : i + 1;
    for (;;) {
        size_t d = k;
        while (d < j && p[d] != '-')
            d++;
        if (d >= j)
            break;
        cs[nc] = start, ce[nc] = d, nc++;
        start = d + 1;
        k = d + 3;
    }
    /* The last chunk; when it is empty, the '-' before it becomes a member
     * at the end of the chunk before. */
    int trailing_dash = start >= j;
    if (!trailing_dash)
        cs[nc] = start, ce[nc] = j, nc++;
    /* Chunks as item lists, so merging can splice them. */
    struct item **ch = xmalloc(nc * sizeof(*ch));
    size_t *chn = xmalloc(nc * sizeof(*chn));
    for (size_t c = 0; c < nc; c++) {
        size_t extra = trailing_dash && c == nc - 1;
        ch[c] = xmalloc((ce[c] - cs[c] + extra + 1) * sizeof(**ch));
        chn[c] = 0;
        for (size_t x = cs[c]; x < ce[c]; x++)
            ch[c][chn[c]++] = (struct item){p[x], 0};
        if (extra)
            ch[c][chn[c]++] = (struct item){'-', 0};
    }
    /* Drop reversed ranges, from the end: chunks c-1 and c merge without
     * their facing ends. */
    for (size_t c = nc ? nc - 1 : 0; c > 0; c--) {
        if (chn[c - 1] == 0 || chn[c] == 0)
            continue; /* cannot happen: a merged chunk is empty only at index 0 */
        if (ch[c - 1][chn[c - 1] - 1].cp > ch[c][0].cp) {
            struct item *m = xmalloc((chn[c - 1] + chn[c]) * sizeof(*m));
            size_t mn = 0;
            for (size_t x = 0; x + 1 < chn[c - 1]; x++)
                m[mn++] = ch[c - 1][x];
            for (size_t x = 1; x < chn[c]; x++)
                m[mn++] = ch[c][x];
            free(ch[c - 1]);
            free(ch[c]);
            ch[c - 1] = m;
            chn[c - 1] = mn;
            for (size_t x = c; x + 1 < nc; x++)
                ch[x] = ch[x + 1], chn[x] = chn[x + 1];
            nc--;
        }
    }
    for (size_t c = 0; c < nc; c++) {
        if (c)
            items[n_items++] = (struct item){'-', 1};
        for (size_t x = 0; x < chn[c]; x++)
            items[n_items++] = ch[c][x];
        free(ch[c]);
    }
    free(ch);
    free(chn);
    free(cs);
    free(ce);
    return n_items;
}

/* The regex set of items into g's ranges: an item followed by an unescaped
 * '-' and another item is a range; a '-' with nothing after it is a member.
 * Returns 0, or -1 for a reversed range. */
static int add_items(struct globpat *g, const struct item *items, size_t n_items, size_t a)
{
    while (a < n_items) {
        uint32_t lo = items[a].cp;
        if (a + 1 < n_items && items[a + 1].dash) {
            if (a + 2 >= n_items) {
                add_range(g, lo, lo);
                add_range(g, '-', '-');
                a += 2;
                continue;
            }
            uint32_t hi = items[a + 2].cp;
            if (lo > hi)
                return -1;
            add_range(g, lo, hi);
            a += 3;
            continue;
        }
        add_range(g, lo, lo);
        a++;
    }
    return 0;
}

/* The set whose text is p[i..j) (between '[' and ']'). Fills *t. Returns 0,
 * or -1 for a range the regex engine refuses (Python raises re.error). */
static int compile_set(struct globpat *g, const uint32_t *p, size_t i, size_t j, struct tok *t)
{
    size_t n_items = 0;
    struct item *items = xmalloc((2 * (j - i) + 1) * sizeof(*items));
    int has_dash = 0;
    for (size_t k = i; k < j; k++)
        has_dash |= p[k] == '-';
    if (has_dash) {
        n_items = dashed_items(p, i, j, items);
    } else {
        for (size_t k = i; k < j; k++)
            items[n_items++] = (struct item){p[k], 0};
    }
    t->kind = TOK_SET;
    t->set_off = g->n_ranges;
    t->negated = 0;
    size_t a = 0;
    if (n_items && !items[0].dash && items[0].cp == '!') {
        t->negated = 1; /* "[!]"-like sets left with no member match any character */
        a = 1;
    }
    int rc = add_items(g, items, n_items, a);
    t->set_n = g->n_ranges - t->set_off;
    free(items);
    return rc;
}

struct globpat *globpat_compile(const char *pat, size_t len)
{
    uint32_t *p;
    size_t n = decode(pat, len, &p);
    if (n == (size_t)-1)
        return NULL;
    struct globpat *g = xcalloc(1, sizeof(*g));
    g->toks = xmalloc((n ? n : 1) * sizeof(*g->toks));
    size_t i = 0;
    while (i < n) {
        uint32_t c = p[i++];
        struct tok t = {.kind = TOK_LIT, .cp = c};
        if (c == '*') {
            if (g->n_toks && g->toks[g->n_toks - 1].kind == TOK_STAR)
                continue;
            t.kind = TOK_STAR;
        } else if (c == '?') {
            t.kind = TOK_ANY;
        } else if (c == '[') {
            size_t j = i;
            if (j < n && p[j] == '!')
                j++;
            if (j < n && p[j] == ']')
                j++;
            while (j < n && p[j] != ']')
                j++;
            if (j < n) {
                if (compile_set(g, p, i, j, &t) < 0) {
                    free(p);
                    globpat_free(g);
                    return NULL;
                }
                i = j + 1;
            }
        }
        g->toks[g->n_toks++] = t;
    }
    free(p);
    return g;
}

/* Whether token t matches c; adds the set ranges tried to *steps. */
static int tok_matches(const struct globpat *g, const struct tok *t, uint32_t c, uint64_t *steps)
{
    switch (t->kind) {
    case TOK_LIT:
        return t->cp == c;
    case TOK_ANY:
        return 1;
    case TOK_SET:
        for (size_t r = t->set_off; r < t->set_off + t->set_n; r++) {
            ++*steps;
            if (c >= g->ranges[2 * r] && c <= g->ranges[2 * r + 1])
                return !t->negated;
        }
        return t->negated;
    default:
        return 0;
    }
}

int globpat_match(const struct globpat *g, const char *name, size_t len, uint64_t *budget)
{
    uint32_t stack[256], *s = stack;
    size_t n;
    uint64_t unlimited = UINT64_MAX;
    if (!budget)
        budget = &unlimited;
    if (len <= ARRAY_LEN(stack)) {
        size_t i = 0;
        n = 0;
        while (i < len)
            if (utf8_next((const unsigned char *)name, len, &i, &stack[n++]) < 0)
                return 0;
    } else {
        n = decode(name, len, &s);
        if (n == (size_t)-1)
            return 0;
    }
    const size_t none = (size_t)-1;
    size_t p = 0, k = 0, star_p = none, star_k = 0;
    uint64_t steps = len; /* the decoding */
    int matched = 0;
    while (k < n) {
        if (++steps > *budget) {
            matched = -1;
            goto out;
        }
        if (p < g->n_toks && g->toks[p].kind == TOK_STAR) {
            star_p = ++p;
            star_k = k;
        } else if (p < g->n_toks && tok_matches(g, &g->toks[p], s[k], &steps)) {
            p++;
            k++;
        } else if (star_p != none) {
            p = star_p;
            k = ++star_k;
        } else {
            goto out;
        }
    }
    while (p < g->n_toks && g->toks[p].kind == TOK_STAR)
        p++;
    matched = p == g->n_toks;
out:
    *budget = steps >= *budget ? 0 : *budget - steps;
    if (s != stack)
        free(s);
    return matched;
}

void globpat_free(struct globpat *g)
{
    if (!g)
        return;
    free(g->toks);
    free(g->ranges);
    free(g);
}
