/* hub_doc: see hub_doc.h. */
#include "hub_doc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "card_yaml.h"
#include "digest.h"
#include "log.h"
#include "model_doc.h"
#include "strbuf.h"
#include "util.h"

/* ---- entries ------------------------------------------------------------------ */

static size_t lfs_pointer_size(uint64_t size)
{
    char digits[24];
    /* "version https://git-lfs.github.com/spec/v1\n" "oid sha256:<64>\n" "size <n>\n" */
    return 43 + 76 + 6 + (size_t)snprintf(digits, sizeof(digits), "%" PRIu64, size);
}

static void lfs_object(struct jsonw *w, const struct reg_file *f, const char *hash_key)
{
    char sha[65];
    digest_hex(f->sha256, 32, sha);
    jsonw_kobj(w, "lfs");
    jsonw_kstr(w, hash_key, sha);
    jsonw_ku64(w, "size", f->st.size);
    jsonw_ku64(w, "pointerSize", lfs_pointer_size(f->st.size));
    jsonw_obj_end(w);
}

/* An entry of a tree or paths-info listing: file f, or directory d when f
 * is NULL; with expand, its last commit (the revision's one: list_repo_tree
 * and get_paths_info with expand=True read it). */
static void tree_entry(struct jsonw *w, const struct reg_repo *r, const struct reg_repo_rev *rev,
                       const struct reg_file *f, const struct reg_repo_dir *d, int expand)
{
    char oid[41];
    digest_hex(f ? rev->blob[f - r->files] : d->tree, 20, oid);
    jsonw_obj(w);
    jsonw_kstr(w, "type", f ? "file" : "directory");
    jsonw_kstr(w, "oid", oid);
    jsonw_ku64(w, "size", f ? f->st.size : 0);
    jsonw_kstr(w, "path", f ? f->name : d->path);
    if (f && reg_repo_file_is_lfs(f))
        lfs_object(w, f, "oid");
    if (expand) {
        jsonw_kobj(w, "lastCommit");
        jsonw_kstr(w, "id", rev->commit);
        jsonw_kstr(w, "title", HUB_COMMIT_TITLE);
        jsonw_kstr(w, "date", HUB_REVISION_DATE);
        jsonw_obj_end(w);
    }
    jsonw_obj_end(w);
}

/* ---- the repo's document --------------------------------------------------------- */

void hub_doc_repo_summary(struct jsonw *w, const struct reg_repo *r,
                          const struct reg_repo_rev *rev)
{
    const char *slash = strchr(r->id, '/');
    jsonw_kstr(w, "_id", r->id);
    jsonw_kstr(w, "id", r->id);
    jsonw_kstr(w, "modelId", r->id);
    if (slash) {
        jsonw_key(w, "author");
        jsonw_strn(w, r->id, (size_t)(slash - r->id));
    }
    if (rev)
        jsonw_kstr(w, "sha", rev->commit);
    jsonw_kstr(w, "lastModified", HUB_REVISION_DATE);
    jsonw_kstr(w, "createdAt", HUB_REVISION_DATE);
    jsonw_kbool(w, "private", 0);
    jsonw_kbool(w, "gated", 0);
    jsonw_kbool(w, "disabled", 0);
    jsonw_ku64(w, "downloads", 0);
    jsonw_ku64(w, "likes", 0);
    int st = 0;
    for (size_t i = 0; i < r->n_files && !st; i++)
        st = r->files[i].is_safetensors;
    jsonw_karr(w, "tags");
    if (st)
        jsonw_str(w, "safetensors");
    jsonw_arr_end(w);
}

/* "safetensors": parameters by dtype of the repo's own model m (the /v1
 * model in the repo's directory), when there is one and it is valid. */
static void safetensors_info(struct jsonw *w, const struct reg_model *m)
{
    if (!m || m->state != MODEL_READY || m->n_tensors == 0)
        return;
    jsonw_kobj(w, "safetensors");
    uint64_t total = model_doc_parameters(w, m);
    jsonw_ku64(w, "total", total);
    jsonw_obj_end(w);
}

/* A README larger than this has its front matter read from its first
 * CARD_README_MAX bytes. */
#define CARD_README_MAX (1u << 20)

/* The card of f, README.md (its YAML front matter as JSON, see
 * core/req/card_yaml.h), into *card: a document, empty when the front matter
 * is missing or no mapping. Returns 0, -ESTALE when README.md changed since
 * it was hashed (the card would not be the commit's), or another -errno
 * (nothing to keep: the next request tries again). */
static int card_read(const struct reg_repo *r, const struct reg_file *f, struct shared_doc **card)
{
    size_t n = f->st.size < CARD_README_MAX ? (size_t)f->st.size : CARD_README_MAX;
    int fd = reg_open_below(r->root, f, O_RDONLY);
    if (fd < 0)
        return fd;
    char *text = malloc(n + 1), *json = NULL;
    const char *yaml;
    size_t yaml_len, json_len = 0;
    struct st_error err = {0};
    int rc = !text ? -ENOMEM : fileio_pread_full(fd, text, n, 0);
    if (rc == 0 && !fileio_unchanged(fd, &f->st))
        rc = -ESTALE;
    close(fd);
    if (rc == 0 && card_yaml_front_matter(text, n, &yaml, &yaml_len)) {
        int made = card_yaml_to_json(yaml, yaml_len, &json, &json_len, &err);
        if (made == -ENOMEM)
            rc = made; /* a condition of the host, not a verdict on the card */
        else if (made < 0)
            log_msg(LOG_DEBUG, "hub: %s/README.md: no cardData: %s", r->id, err.message);
    }
    free(text);
    if (rc == 0)
        *card = shared_doc_new(json ? json : xstrdup(""), json ? json_len : 0, 0);
    else
        free(json);
    return rc;
}

int hub_doc_card(const struct reg_repo *r, const struct shared_doc **out)
{
    *out = NULL;
    const struct reg_file *f = reg_repo_find_file(r, "README.md", 9);
    if (!f)
        return 0;
    const struct shared_doc *card = reg_repo_doc(r, REG_REPO_DOC_CARD);
    if (!card) {
        struct shared_doc *made = NULL;
        int rc = card_read(r, f, &made);
        if (rc < 0) {
            log_msg(LOG_DEBUG, "hub: %s/README.md: %s", r->id, strerror(-rc));
            return rc == -ESTALE ? rc : 0;
        }
        card = reg_repo_set_doc(r, REG_REPO_DOC_CARD, made);
    }
    *out = card;
    return 0;
}

/* Writes "cardData" into w when the repo's README.md has a card
 * (hub_doc_card). Returns 0, or -ESTALE when README.md changed since it was
 * hashed (the caller answers 503). */
static int card_data(struct jsonw *w, const struct reg_repo *r)
{
    const struct shared_doc *card;
    int rc = hub_doc_card(r, &card);
    if (rc < 0 || !card)
        return rc;
    if (card->len) {
        jsonw_key(w, "cardData");
        jsonw_raw(w, card->seg[0].p, card->len);
    }
    return 0;
}

struct shared_doc *hub_doc_info(const struct reg_repo *r, const struct reg_repo_rev *rev,
                                const struct reg_model *m, int *rc)
{
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    hub_doc_repo_summary(&w, r, rev);
    jsonw_ku64(&w, "usedStorage", r->bytes);
    safetensors_info(&w, m);
    if ((*rc = card_data(&w, r)) < 0) {
        jsonw_free(&w);
        return NULL;
    }
    jsonw_karr(&w, "siblings");
    for (size_t i = 0; i < r->n_files; i++) {
        const struct reg_file *f = &r->files[i];
        char oid[41];
        digest_hex(rev->blob[i], 20, oid);
        jsonw_obj(&w);
        jsonw_kstr(&w, "rfilename", f->name);
        jsonw_ku64(&w, "size", f->st.size);
        jsonw_kstr(&w, "blobId", oid);
        if (reg_repo_file_is_lfs(f))
            lfs_object(&w, f, "sha256");
        jsonw_obj_end(&w);
    }
    jsonw_arr_end(&w);
    jsonw_karr(&w, "spaces");
    jsonw_arr_end(&w);
    jsonw_obj_end(&w);
    strbuf_putc(&w.sb, '\n');
    size_t len;
    char *text = jsonw_take(&w, &len);
    *rc = text ? 0 : -ENOMEM;
    return text ? shared_doc_new(text, len, 0) : NULL;
}

/* ---- the listing ------------------------------------------------------------------ */

/* Where a folder's runs are in the listing's text (hub_doc.h). */
struct listing_dir {
    struct shared_doc_range self;   /* its own entry (none for the root) */
    struct shared_doc_range all;    /* every entry below it (recursive) */
    struct shared_doc_range kids;   /* its children's entries */
    uint64_t all_hash, kids_hash;   /* the tree answers' FNV-1a */
};

struct listing {
    struct shared_doc_range *files; /* per file of the repo, its entry */
    struct listing_dir *dirs;       /* per folder of the revision, in its order */
};

static void listing_free(void *p)
{
    struct listing *ix = p;
    free(ix->files);
    free(ix->dirs);
    free(ix);
}

/* The FNV-1a of the tree answer "[" run-less-its-','"]\n". */
static uint64_t answer_hash(const char *text, struct shared_doc_range run)
{
    uint64_t h = hash_fnv1a("[", 1, HASH_FNV_SEED);
    if (run.len)
        h = hash_fnv1a(text + run.off + 1, run.len - 1, h);
    return hash_fnv1a("]\n", 2, h);
}

/* A ',' and entry (file f, or folder d) appended to w; returns its range. */
static struct shared_doc_range put_entry(struct jsonw *w, const struct reg_repo *r,
                                         const struct reg_repo_rev *rev, const struct reg_file *f,
                                         const struct reg_repo_dir *d, int expand)
{
    size_t off = w->sb.len;
    strbuf_putc(&w->sb, ',');
    tree_entry(w, r, rev, f, d, expand);
    return (struct shared_doc_range){off, w->sb.len - off};
}

/* Every entry once, in a recursive tree's order, into w; ix's ranges of
 * them. */
static void put_recursive(struct jsonw *w, const struct reg_repo *r,
                          const struct reg_repo_rev *rev, struct listing *ix, int expand)
{
    uint8_t *listed = xcalloc(rev->n_dirs ? rev->n_dirs : 1, 1);
    for (size_t i = 0; i < r->n_files; i++) {
        const char *name = r->files[i].name;
        for (const char *s = name; (s = strchr(s, '/')) != NULL; s++) {
            const struct reg_repo_dir *d = reg_repo_find_dir(rev, name, (size_t)(s - name));
            size_t k = (size_t)(d - rev->dirs);
            if (listed[k])
                continue;
            listed[k] = 1;
            ix->dirs[k].self = put_entry(w, r, rev, NULL, d, expand);
            ix->dirs[k].all.off = w->sb.len;
        }
        ix->files[i] = put_entry(w, r, rev, &r->files[i], NULL, expand);
    }
    free(listed);
    for (size_t k = 0; k < rev->n_dirs; k++) {
        const struct reg_repo_dir *d = &rev->dirs[k];
        size_t end = d->end > d->first ? ix->files[d->end - 1].off + ix->files[d->end - 1].len
                                       : ix->dirs[k].all.off;
        ix->dirs[k].all.len = end - ix->dirs[k].all.off;
    }
}

/* Each folder's children, folder after folder, copied from the entries in
 * text (the recursive run) into c, whose bytes will follow text's. */
static void put_children(struct strbuf *c, const char *text, size_t text_len,
                         const struct reg_repo *r, const struct reg_repo_rev *rev,
                         struct listing *ix)
{
    uint8_t *emitted = xcalloc(rev->n_dirs ? rev->n_dirs : 1, 1);
    for (size_t k = 0; k < rev->n_dirs; k++) {
        const struct reg_repo_dir *d = &rev->dirs[k];
        size_t skip = d->len ? d->len + 1 : 0;
        ix->dirs[k].kids.off = text_len + c->len;
        for (size_t i = d->first; i < d->end; i++) {
            const char *name = r->files[i].name, *slash = strchr(name + skip, '/');
            struct shared_doc_range e = ix->files[i];
            if (slash) {
                size_t ck = (size_t)(reg_repo_find_dir(rev, name, (size_t)(slash - name)) -
                                     rev->dirs);
                if (emitted[ck])
                    continue;
                emitted[ck] = 1;
                e = ix->dirs[ck].self;
            }
            strbuf_append(c, text + e.off, e.len);
        }
        ix->dirs[k].kids.len = text_len + c->len - ix->dirs[k].kids.off;
    }
    free(emitted);
}

struct shared_doc *hub_doc_listing(const struct reg_repo *r, const struct reg_repo_rev *rev,
                                   int expand)
{
    struct listing *ix = xcalloc(1, sizeof(*ix));
    ix->files = xcalloc(r->n_files ? r->n_files : 1, sizeof(*ix->files));
    ix->dirs = xcalloc(rev->n_dirs ? rev->n_dirs : 1, sizeof(*ix->dirs));
    struct jsonw w = JSONW_INIT;
    struct strbuf c = STRBUF_INIT;
    put_recursive(&w, r, rev, ix, expand);
    if (rev->n_dirs) /* the root: everything */
        ix->dirs[0].all = (struct shared_doc_range){0, w.sb.len};
    put_children(&c, w.sb.buf ? w.sb.buf : "", w.sb.len, r, rev, ix);
    strbuf_append(&w.sb, c.buf ? c.buf : "", c.len);
    strbuf_release(&c);
    size_t len;
    char *text = c.failed ? NULL : jsonw_take(&w, &len);
    jsonw_free(&w);
    if (!text) {
        listing_free(ix);
        return NULL;
    }
    for (size_t k = 0; k < rev->n_dirs; k++) {
        ix->dirs[k].all_hash = answer_hash(text, ix->dirs[k].all);
        ix->dirs[k].kids_hash = answer_hash(text, ix->dirs[k].kids);
    }
    struct shared_doc *d = shared_doc_new(text, len, 0);
    d->index = ix;
    d->index_free = listing_free;
    return d;
}

void hub_doc_tree(const struct shared_doc *listing, const struct reg_repo_rev *rev,
                  const struct reg_repo_dir *d, int recursive, struct shared_doc_range *run,
                  uint64_t *hash)
{
    const struct listing_dir *ld = &((const struct listing *)listing->index)->dirs[d - rev->dirs];
    struct shared_doc_range r = recursive ? ld->all : ld->kids;
    *run = r.len ? (struct shared_doc_range){r.off + 1, r.len - 1} : r;
    *hash = recursive ? ld->all_hash : ld->kids_hash;
}

struct shared_doc_range hub_doc_file_entry(const struct shared_doc *listing, size_t i)
{
    return ((const struct listing *)listing->index)->files[i];
}

struct shared_doc_range hub_doc_dir_entry(const struct shared_doc *listing,
                                          const struct reg_repo_rev *rev,
                                          const struct reg_repo_dir *d)
{
    return ((const struct listing *)listing->index)->dirs[d - rev->dirs].self;
}
