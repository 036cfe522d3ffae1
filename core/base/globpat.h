/* globpat: shell-style name patterns, matched exactly as Python's
 * fnmatch.fnmatchcase matches them, so a client can predict on its own which
 * tensors a fetch's split rule selects.
 *
 * `*` matches any run of characters ('.' and '/' included), `?` any one
 * character, `[...]` one character of a set (`[!...]` one character outside
 * it; a `]` right after the `[` or `[!` is a member; `a-z` is a range, and a
 * range whose ends are reversed is dropped; `-` first or last is a member);
 * a `[` with no closing `]` is literal. Backslash has no special meaning.
 * Characters are Unicode code points: pattern and name are UTF-8. Matching is
 * case-sensitive and covers the whole name.
 *
 * Cost: compiling is linear in the pattern; matching is O(name x pattern) in
 * the worst case (a near miss after a star: "*aaaa...ab" against "aaa...a"),
 * linear in the name otherwise; globpat_match's budget bounds it. */
#ifndef TENSORD_GLOBPAT_H
#define TENSORD_GLOBPAT_H

#include <stddef.h>
#include <stdint.h>

struct globpat;

/* Compiles pat[0..len). Returns a new pattern (free with globpat_free), or
 * NULL when pat is not valid UTF-8. */
struct globpat *globpat_compile(const char *pat, size_t len);

/* Returns 1 when the whole of name[0..len) (UTF-8) matches g, else 0. A name
 * that is not valid UTF-8 never matches. With a budget, spends at most
 * *budget steps (a step is one move of the walk or one set range tried),
 * subtracts what it spent, and returns -1 when the budget ran out first
 * (then *budget is 0): for callers that match untrusted patterns against
 * many names and must bound the total. budget NULL is no limit. */
int globpat_match(const struct globpat *g, const char *name, size_t len, uint64_t *budget);

void globpat_free(struct globpat *g);

#endif
