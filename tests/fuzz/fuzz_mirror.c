/* Fuzzes what the mirror reads from outside itself: the first byte picks
 *   0: a state file of its cache (mirror/mirror_store.c), left by a previous
 *      run or another program: accepted only with the key's digest, a size
 *      whose blocks fit, a block size that is a multiple of 4096 and a
 *      bitmap of exactly its blocks with no bit past the last;
 *   1: a repo document from the upstream (mirror/mirror_repo.c): every file
 *      a path in a repo, sorted, named once, the commit 40 lowercase hex
 *      digits;
 *   2: header lines of an upstream answer (mirror/upstream.c) and the file
 *      metadata made of them (mirror/mirror_ask.c): every string taken is
 *      NUL-terminated, without control bytes, a range is ordered and within
 *      its total, a found file has a commit and a digest of its kind;
 *   3: a file of the cache's names/ (mirror/mirror_names.c), and the kept
 *      answer it holds read back as a document and as a file's metadata
 *      (mirror/mirror_ask.c): a document's status is 2xx, its header values
 *      NUL-terminated without control bytes, its body what follows; a
 *      metadata's commit 40 hex digits and its digest one of a kind.
 * Errors must carry a message; nothing may be left allocated. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mirror_ask.h"
#include "mirror_names.h"
#include "mirror_repo.h"
#include "mirror_store.h"
#include "upstream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_string(const char *s, size_t cap)
{
    const char *end = memchr(s, '\0', cap);
    if (!end)
        abort();
    for (; s < end; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            abort();
}

static void state(const char *text, size_t len)
{
    static const char key[] =
        "sha256-9235ad6a0a1b2c3d4e5f60718293a4b5c6d7e8f90123456789abcdef01234567";
    struct mirror_id id;
    uint64_t block;
    const uint8_t *bits;
    struct st_error err = {0};
    if (mirror_state_parse(text, len, key, &id, &block, &bits, &err) < 0) {
        if (!err.message[0])
            abort();
        return;
    }
    uint64_t n = mirror_blocks(id.size, block);
    if (block % 4096 || block == 0 || n > MIRROR_MAX_BLOCKS ||
        len != MIRROR_STATE_HEADER + (n + 7) / 8 || id.digest[0] != 0x92)
        abort();
    if (n % 8 && bits[(n + 7) / 8 - 1] >> (n % 8))
        abort();
}

static void doc(const char *text, size_t len)
{
    struct mirror_repo r;
    struct st_error err = {0};
    if (mirror_repo_parse(text, len, &r, &err) < 0) {
        if (!err.message[0] || r.files || r.n)
            abort();
        return;
    }
    if (strlen(r.commit) != 40 || strspn(r.commit, "0123456789abcdef") != 40)
        abort();
    for (size_t i = 0; i < r.n; i++) {
        const char *name = r.files[i].name;
        /* a path in a repo: no empty, "." or ".." component; sorted, once */
        if (!name[0] || name[0] == '/' || strstr(name, "//") || strstr(name, "/./") ||
            strstr(name, "/../") || strncmp(name, "./", 2) == 0 || strncmp(name, "../", 3) == 0 ||
            strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
            name[strlen(name) - 1] == '/' || (i && strcmp(r.files[i - 1].name, name) >= 0))
            abort();
        if (r.files[i].has_id && r.files[i].id.size != r.files[i].size)
            abort();
        if (mirror_repo_find(&r, name) != &r.files[i])
            abort();
    }
    mirror_repo_clear(&r);
}

static void headers(const char *text, size_t len)
{
    struct upstream_answer a;
    memset(&a, 0, sizeof(a));
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) + 1 : len;
        upstream_answer_header(&a, text + at, end - at);
        at = end;
    }
    check_string(a.commit, sizeof(a.commit));
    check_string(a.etag, sizeof(a.etag));
    check_string(a.linked_etag, sizeof(a.linked_etag));
    check_string(a.error_code, sizeof(a.error_code));
    check_string(a.error_message, sizeof(a.error_message));
    check_string(a.cache_control, sizeof(a.cache_control));
    if (a.link)
        check_string(a.link, strlen(a.link) + 1);
    if (a.has_range && (a.range_end < a.range_start || a.range_end >= a.range_total))
        abort();
    struct mirror_meta meta;
    struct st_error err = {0};
    int rc = mirror_meta_from_answer(&a, &meta, &err);
    upstream_answer_free(&a);
    if (rc < 0) {
        if (!err.message[0])
            abort();
        return;
    }
    if (meta.status == 200 && (strlen(meta.commit) != 40 ||
                               (meta.id.kind != MIRROR_SHA256 && meta.id.kind != MIRROR_GIT_SHA1)))
        abort();
}

static void kept(const char *text, size_t len)
{
    size_t off, n;
    if (mirror_names_parse(text, len, "doc\nGET\n/api/models/x\n", &off, &n) == 0) {
        if (off > len || n != len - off)
            abort();
        text += off; /* the answer the file keeps */
        len = n;
    }
    char *copy = malloc(len + 1);
    memcpy(copy, text, len);
    copy[len] = '\0';
    struct mirror_doc d;
    memset(&d, 0, sizeof(d));
    if (mirror_kept_doc_parse(copy, len, &d) == 0) {
        if (d.a.status < 200 || d.a.status > 299 || !d.body || d.len > len)
            abort();
        check_string(d.a.commit, sizeof(d.a.commit));
        check_string(d.a.etag, sizeof(d.a.etag));
        check_string(d.a.cache_control, sizeof(d.a.cache_control));
        if (d.a.link)
            check_string(d.a.link, strlen(d.a.link) + 1);
    }
    free(d.body);
    upstream_answer_free(&d.a);
    struct mirror_meta mt;
    if (mirror_kept_meta_parse(copy, &mt) == 0 &&
        (mt.status != 200 || strspn(mt.commit, "0123456789abcdef") != 40 ||
         (mt.id.kind != MIRROR_SHA256 && mt.id.kind != MIRROR_GIT_SHA1)))
        abort();
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    switch (data[0] % 4) {
    case 0:
        state(text, len);
        break;
    case 1:
        doc(text, len);
        break;
    case 2:
        headers(text, len);
        break;
    default:
        kept(text, len);
    }
    return 0;
}
