/* mirror_repos: see mirror_repos.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mirror_repos.h"

#include "mirror_int.h"
#include "util.h"

struct known_repo {
    struct known_repo *prev, *next; /* least recently heard of first */
    char *id;
    struct mirror_repo doc;         /* its latest commit, and files sorted by name */
    int64_t at;
};

struct mirror_repos {
    pthread_mutex_t lock;
    struct known_repo *head, *tail;
    size_t n;
    size_t files;              /* of all of them */
};

struct mirror_repos *mirror_repos_new(void)
{
    struct mirror_repos *t = xcalloc(1, sizeof(*t));
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

/* Frees r and the repos chained after it (next). */
static void repos_free(struct known_repo *r)
{
    for (struct known_repo *next; r; r = next) {
        next = r->next;
        mirror_repo_clear(&r->doc);
        free(r->id);
        free(r);
    }
}

void mirror_repos_free(struct mirror_repos *t)
{
    if (!t)
        return;
    repos_free(t->head);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

static void do_unlink(struct mirror_repos *t, struct known_repo *r)
{
    t->files -= r->doc.n;
    if (r->prev)
        r->prev->next = r->next;
    else
        t->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        t->tail = r->prev;
    r->prev = r->next = NULL;
    t->n--;
}

static void do_link_last(struct mirror_repos *t, struct known_repo *r)
{
    t->files += r->doc.n;
    r->prev = t->tail;
    if (t->tail)
        t->tail->next = r;
    else
        t->head = r;
    t->tail = r;
    t->n++;
}

/* Within MIRROR_REPOS_FILES files in all, whatever the upstream's
 * documents hold: the least recently heard of go (but keep, the newest),
 * chained on *gone for the caller to free once the lock is released. */
static void do_trim(struct mirror_repos *t, struct known_repo *keep, struct known_repo **gone)
{
    while (t->files > MIRROR_REPOS_FILES && t->head && t->head != keep) {
        struct known_repo *r = t->head;
        do_unlink(t, r);
        r->next = *gone;
        *gone = r;
    }
}

/* The repo's entry, made (empty) when missing and moved to the end. */
static struct known_repo *do_touch(struct mirror_repos *t, const char *id)
{
    struct known_repo *r = t->head;
    while (r && strcmp(r->id, id) != 0)
        r = r->next;
    if (r) {
        do_unlink(t, r);
    } else {
        r = xcalloc(1, sizeof(*r));
        r->id = xstrdup(id);
        while (t->n >= MIRROR_REPOS_MAX && t->head) {
            struct known_repo *old = t->head;
            do_unlink(t, old);
            repos_free(old); /* unlinked: old alone */
        }
    }
    do_link_last(t, r);
    return r;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct mirror_repo_file *)a)->name,
                  ((const struct mirror_repo_file *)b)->name);
}

static struct mirror_repo_file *find(struct known_repo *r, const char *name)
{
    struct mirror_repo_file key = {.name = (char *)name};
    return r->doc.n ? bsearch(&key, r->doc.files, r->doc.n, sizeof(key), by_name) : NULL;
}

void mirror_repos_learn(struct mirror *m, const char *repo, const struct mirror_repo *doc,
                        int64_t at)
{
    struct mirror_repos *t = m->repos;
    struct mirror_repo_file *copy = xcalloc(doc->n ? doc->n : 1, sizeof(*copy));
    for (size_t i = 0; i < doc->n; i++) {
        copy[i] = doc->files[i];
        copy[i].name = xstrdup(doc->files[i].name);
    }
    pthread_mutex_lock(&t->lock);
    struct known_repo *r = do_touch(t, repo);
    if (strcmp(r->doc.commit, doc->commit) == 0) /* what the older document knew, kept */
        for (size_t i = 0; i < doc->n; i++) {
            const struct mirror_repo_file *old = find(r, copy[i].name);
            if (old && old->has_id && !copy[i].has_id) {
                copy[i].id = old->id;
                copy[i].has_id = 1;
                copy[i].size = old->size;
                copy[i].has_size = 1;
            }
        }
    struct mirror_repo drop = r->doc;
    t->files += doc->n - r->doc.n;
    r->doc = *doc;
    r->doc.files = copy;
    r->at = at > r->at ? at : r->at;
    struct known_repo *old = NULL;
    do_trim(t, r, &old);
    pthread_mutex_unlock(&t->lock);
    mirror_repo_clear(&drop);
    repos_free(old);
}

void mirror_repos_learn_file(struct mirror *m, const char *repo, const char *commit,
                             const char *path, const struct mirror_id *id, int lfs)
{
    struct mirror_repos *t = m->repos;
    pthread_mutex_lock(&t->lock);
    struct known_repo *r = do_touch(t, repo);
    if (!r->doc.commit[0])
        memcpy(r->doc.commit, commit, 41);
    /* A file of another commit tells nothing of this one. */
    if (strcmp(r->doc.commit, commit) == 0) {
        struct mirror_repo_file *f = find(r, path);
        if (!f) {
            r->doc.files = xrealloc(r->doc.files, (r->doc.n + 1) * sizeof(*r->doc.files));
            f = &r->doc.files[r->doc.n++];
            t->files++;
            *f = (struct mirror_repo_file){.name = xstrdup(path)};
            qsort(r->doc.files, r->doc.n, sizeof(*r->doc.files), by_name);
            f = find(r, path);
        }
        f->id = *id;
        f->has_id = f->has_size = 1;
        f->size = id->size;
        f->lfs = lfs;
    }
    struct known_repo *old = NULL;
    do_trim(t, r, &old);
    pthread_mutex_unlock(&t->lock);
    repos_free(old);
}

/* The state of one repo: 1 and *s, or 0 when the table does not know it. */
static int repo_state(struct mirror *m, const char *repo, struct mirror_repo_state *s)
{
    struct mirror_repos *t = m->repos;
    struct mirror_id *ids = NULL;
    size_t n_ids = 0;
    memset(s, 0, sizeof(*s));
    pthread_mutex_lock(&t->lock);
    struct known_repo *r = t->head;
    while (r && strcmp(r->id, repo) != 0)
        r = r->next;
    if (r) {
        memcpy(s->commit, r->doc.commit, 41);
        s->at = r->at;
        s->files = r->doc.n;
        ids = xcalloc(r->doc.n ? r->doc.n : 1, sizeof(*ids));
        for (size_t i = 0; i < r->doc.n; i++) {
            const struct mirror_repo_file *f = &r->doc.files[i];
            s->bytes += f->has_size ? f->size : 0;
            if (f->has_id)
                ids[n_ids++] = f->id;
        }
    }
    pthread_mutex_unlock(&t->lock);
    if (!r)
        return 0;
    s->files_known = n_ids;
    for (size_t i = 0; i < n_ids; i++) { /* the cache's lock, not the table's */
        int complete = 0;
        s->cached += mirror_cached(m, &ids[i], &complete);
        s->files_complete += (uint64_t)complete;
    }
    free(ids);
    return 1;
}

void mirror_repos_each(struct mirror *m,
                       void (*fn)(void *arg, const char *repo, const struct mirror_repo_state *s),
                       void *arg)
{
    struct mirror_repos *t = m->repos;
    char **names;
    size_t n = 0;
    pthread_mutex_lock(&t->lock);
    names = xcalloc(t->n + 1, sizeof(*names));
    for (struct known_repo *r = t->tail; r; r = r->prev)
        names[n++] = xstrdup(r->id);
    pthread_mutex_unlock(&t->lock);
    for (size_t i = 0; i < n; i++) {
        struct mirror_repo_state s;
        if (repo_state(m, names[i], &s))
            fn(arg, names[i], &s);
        free(names[i]);
    }
    free(names);
}

/* Decodes segment p[0..n) (percent-escapes) into out (cap bytes). Returns
 * 0, or -1 when it is empty, malformed, holds '/', a NUL or a control
 * byte, or does not fit. */
static int segment(const char *p, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)p[i];
        if (c == '%') {
            int hi = i + 2 < n ? hex_digit_value(p[i + 1]) : -1;
            int lo = i + 2 < n ? hex_digit_value(p[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c < 0x20 || c == 0x7f || c == '/' || o + 1 >= cap)
            return -1;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return o ? 0 : -1;
}

void mirror_repos_learn_doc(struct mirror *m, const char *target, const char *body, size_t len)
{
    static const char prefix[] = "/api/models/";
    if (strncmp(target, prefix, sizeof(prefix) - 1) != 0)
        return;
    const char *at = target + sizeof(prefix) - 1, *end = at + strcspn(at, "?#");
    char seg[4][256];
    size_t n = 0;
    while (at < end) {
        const char *slash = memchr(at, '/', (size_t)(end - at));
        size_t sl = slash ? (size_t)(slash - at) : (size_t)(end - at);
        if (n == 4 || segment(at, sl, seg[n++], sizeof(seg[0])) < 0)
            return;
        at += sl + (slash ? 1 : 0);
        if (slash && at == end)
            return; /* a trailing '/' */
    }
    /* {a}, {a}/{b}, {a}/revision/main, {a}/{b}/revision/main: a repo's
     * document as it is now (the table keeps a repo's latest commit: an
     * older revision's document would turn it back); anything else is
     * another revision's or another route's. */
    size_t parts = n;
    if (n == 3 && strcmp(seg[1], "revision") == 0 && strcmp(seg[2], "main") == 0)
        parts = 1;
    else if (n == 4 && strcmp(seg[2], "revision") == 0 && strcmp(seg[3], "main") == 0)
        parts = 2;
    else if (n > 2 || n == 0)
        return;
    char repo[520];
    snprintf(repo, sizeof(repo), "%s%s%s", seg[0], parts == 2 ? "/" : "",
             parts == 2 ? seg[1] : "");
    struct mirror_repo doc;
    struct st_error err;
    if (mirror_repo_parse(body, len, &doc, &err) == 0) {
        mirror_repos_learn(m, repo, &doc, (int64_t)time(NULL));
        mirror_repo_clear(&doc);
    }
}
