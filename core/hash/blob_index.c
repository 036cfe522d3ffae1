/* blob_index: see blob_index.h. */
#include "blob_index.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "reg_repo.h"
#include "strmap.h"
#include "util.h"

/* A file and the root it is opened below. */
struct blob_ref {
    const struct reg_file *f;
    const struct reg_root *root;
};

struct blob_index {
    pthread_mutex_t lock;
    const struct reg_snapshot *snap; /* the snapshot indexed (never dereferenced once another
                                      * one is asked for: compared with generation) */
    uint64_t generation;
    struct strmap *by_digest;        /* 32 bytes of sha256 (the file's own) -> struct blob_ref * */
    struct blob_ref *refs;           /* every file of snap: [0, n_known) hashed and in the map,
                                      * [n_known, n) not hashed when last looked at */
    size_t n, n_known;
    uint64_t caught_up;              /* reg_hashes_recorded() when [n_known, n) was last looked
                                      * at: a miss walks it again only when a hash came since */
};

struct blob_index *blob_index_new(void)
{
    struct blob_index *bi = xcalloc(1, sizeof(*bi));
    pthread_mutex_init(&bi->lock, NULL);
    return bi;
}

static void do_clear(struct blob_index *bi)
{
    strmap_free(bi->by_digest);
    free(bi->refs);
    bi->by_digest = NULL;
    bi->refs = NULL;
    bi->snap = NULL;
    bi->n = bi->n_known = 0;
}

void blob_index_free(struct blob_index *bi)
{
    if (!bi)
        return;
    do_clear(bi);
    pthread_mutex_destroy(&bi->lock);
    free(bi);
}

/* Every file of snap, hashed or not: models' files and repos' files (a
 * file of both is listed twice; the first with its hash wins). */
static void do_rebuild(struct blob_index *bi, const struct reg_snapshot *snap)
{
    do_clear(bi);
    size_t total = snap->n_files + snap->n_repo_files;
    bi->refs = xmalloc((total ? total : 1) * sizeof(*bi->refs));
    for (size_t i = 0; i < snap->n_models; i++) {
        const struct reg_model *m = snap->models[i];
        for (size_t k = 0; k < m->n_files; k++)
            bi->refs[bi->n++] = (struct blob_ref){&m->files[k], m->root};
    }
    for (size_t i = 0; i < snap->n_repos; i++) {
        const struct reg_repo *r = snap->repos[i];
        for (size_t k = 0; k < r->n_files; k++)
            bi->refs[bi->n++] = (struct blob_ref){&r->files[k], r->root};
    }
    bi->by_digest = strmap_new(total);
    bi->snap = snap;
    bi->generation = snap->generation;
}

/* Moves the files hashed since the last look into the map. */
static void do_catch_up(struct blob_index *bi)
{
    /* Read before the walk: a file hashed during it is looked at again. */
    bi->caught_up = reg_hashes_recorded();
    for (size_t i = bi->n_known; i < bi->n; i++) {
        if (!reg_file_hashed(bi->refs[i].f))
            continue;
        struct blob_ref tmp = bi->refs[bi->n_known];
        bi->refs[bi->n_known] = bi->refs[i];
        bi->refs[i] = tmp;
        struct blob_ref *r = &bi->refs[bi->n_known++];
        /* refs never moves again (n is fixed per snapshot), so the map may
         * point into it; a digest already present keeps its first file. */
        strmap_put(bi->by_digest, (const char *)r->f->sha256, 32, r);
    }
}

const struct reg_file *blob_index_find(struct blob_index *bi, const struct reg_snapshot *snap,
                                       const uint8_t digest[32], const struct reg_root **root)
{
    pthread_mutex_lock(&bi->lock);
    if (bi->snap != snap || bi->generation != snap->generation) {
        do_rebuild(bi, snap);
        do_catch_up(bi);
    }
    const struct blob_ref *r = strmap_get(bi->by_digest, (const char *)digest, 32);
    /* A miss walks the files not yet hashed only when some hash came since
     * the last walk: digests that name nothing, asked again and again while
     * a large root is hashed, cost a map lookup each, not a walk under the
     * lock that every blob request takes. */
    if (!r && bi->n_known < bi->n && reg_hashes_recorded() != bi->caught_up) {
        do_catch_up(bi);
        r = strmap_get(bi->by_digest, (const char *)digest, 32);
    }
    pthread_mutex_unlock(&bi->lock);
    if (!r)
        return NULL;
    *root = r->root;
    return r->f;
}

int blob_digest_parse(const char *s, size_t len, uint8_t digest[32])
{
    const char *colon = memchr(s, ':', len);
    if (!colon)
        return -EINVAL;
    size_t alen = (size_t)(colon - s);
    if (alen != 6 || memcmp(s, "sha256", 6) != 0) {
        /* OCI's grammar: an algorithm is [a-z0-9]+ with [+._-] separators. */
        for (size_t i = 0; i < alen; i++)
            if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
                  (s[i] && strchr("+._-", s[i]))))
                return -EINVAL;
        return alen ? -ENOTSUP : -EINVAL;
    }
    if (len - alen - 1 != 64 || digest_unhex(colon + 1, 32, digest) != 0)
        return -EINVAL;
    return 0;
}
