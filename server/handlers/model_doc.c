/* model_doc: both documents are written key by key in the order the tree
 * version inserted them (jansson keeps insertion order), so the bytes stay
 * what clients and caches saw before. Every key inside an object is unique
 * by construction (file names in a directory, tensor names checked by the
 * registry, metadata keys by the header parser), except the merged
 * metadata, where the first file to set a key wins. */
#include "model_doc.h"

#include <malloc.h>
#include <stdint.h>
#include <string.h>

#include "digest.h"
#include "jsonw.h"
#include "strbuf.h"
#include "strmap.h"

/* A document past this size was big enough to leave freed heap behind
 * (the buffer's earlier, smaller copies): give it back to the system. */
#define TRIM_AFTER_BYTES (1u << 20)

static void put_key(struct strbuf *sb, const char *key, size_t len)
{
    strbuf_json_string(sb, key, len);
    strbuf_putc(sb, ':');
}

/* {"code":"...","message":"..."} */
static void put_error(struct strbuf *sb, const struct st_error *e)
{
    strbuf_puts(sb, "{\"code\":");
    strbuf_json_cstr(sb, st_status_name(e->code));
    strbuf_puts(sb, ",\"message\":");
    strbuf_json_cstr(sb, e->message);
    strbuf_putc(sb, '}');
}

/* "name":{"dtype":...,"shape":[...] : how a tensor's entry starts in both
 * documents. */
static void put_tensor_head(struct strbuf *sb, const struct st_tensor *t)
{
    put_key(sb, t->name, t->name_len);
    strbuf_puts(sb, "{\"dtype\":");
    strbuf_json_cstr(sb, dtype_info(t->dtype)->name);
    strbuf_puts(sb, ",\"shape\":[");
    for (uint32_t i = 0; i < t->ndim; i++) {
        if (i)
            strbuf_putc(sb, ',');
        strbuf_json_int(sb, (int64_t)t->shape[i]);
    }
    strbuf_putc(sb, ']');
}

static void put_offsets(struct strbuf *sb, const struct st_tensor *t)
{
    strbuf_putc(sb, '[');
    strbuf_json_int(sb, (int64_t)t->begin);
    strbuf_putc(sb, ',');
    strbuf_json_int(sb, (int64_t)t->end);
    strbuf_putc(sb, ']');
}

/* The text (its length in *len), or NULL when an append ran out of memory. */
static char *finish(struct strbuf *sb, size_t *len)
{
    char *text = strbuf_detach(sb, len);
    if (!text || *len >= TRIM_AFTER_BYTES)
        malloc_trim(0);
    return text;
}

/* One entry of "files"; returns whether the file's hash is known. The
 * hash is looked at once, so the entry's etag and sha256 always agree even
 * when it becomes known meanwhile. */
static int put_file(struct strbuf *sb, const struct reg_file *f)
{
    char etag[REG_ETAG_MAX], sha[2 * DIGEST_SHA256_LEN + 1];
    int hashed = reg_file_sha256_hex(f, sha);
    if (hashed)
        snprintf(etag, sizeof(etag), "\"%s\"", sha);
    else
        fileio_etag(&f->st, etag);
    strbuf_puts(sb, "{\"name\":");
    strbuf_json_cstr(sb, f->name);
    strbuf_puts(sb, ",\"size\":");
    strbuf_json_int(sb, (int64_t)f->st.size);
    strbuf_puts(sb, ",\"etag\":");
    strbuf_json_cstr(sb, etag);
    strbuf_puts(sb, ",\"header_length\":");
    if (f->header)
        strbuf_json_int(sb, (int64_t)f->header->header_len);
    else
        strbuf_puts(sb, "null");
    strbuf_puts(sb, ",\"sha256\":");
    if (hashed)
        strbuf_json_cstr(sb, sha);
    else
        strbuf_puts(sb, "null");
    if (f->is_safetensors && f->error.code != ST_OK) {
        strbuf_puts(sb, ",\"error\":");
        put_error(sb, &f->error);
    }
    strbuf_putc(sb, '}');
    return hashed;
}

/* "metadata": each file's own __metadata__, under the file's name. */
static void put_metadata_by_file(struct strbuf *sb, const struct reg_model *m)
{
    strbuf_putc(sb, '{');
    int first = 1;
    for (size_t i = 0; i < m->n_files; i++) {
        const struct st_header *h = m->files[i].header;
        if (!h || !h->has_metadata)
            continue;
        if (!first)
            strbuf_putc(sb, ',');
        first = 0;
        put_key(sb, m->files[i].name, strlen(m->files[i].name));
        strbuf_putc(sb, '{');
        for (size_t k = 0; k < h->n_metadata; k++) {
            if (k)
                strbuf_putc(sb, ',');
            put_key(sb, h->metadata[k].key, strlen(h->metadata[k].key));
            strbuf_json_cstr(sb, h->metadata[k].value);
        }
        strbuf_putc(sb, '}');
    }
    strbuf_putc(sb, '}');
}

/* The head: the model's name, state, counts and files (with the hashes
 * known now; *known gets how many). */
static void put_head(struct strbuf *sb, const struct reg_model *m, size_t *known)
{
    strbuf_puts(sb, "{\"name\":");
    strbuf_json_cstr(sb, m->name);
    strbuf_puts(sb, m->state == MODEL_READY ? ",\"state\":\"ready\"" : ",\"state\":\"invalid\"");
    strbuf_puts(sb, m->sharded ? ",\"sharded\":true" : ",\"sharded\":false");
    strbuf_puts(sb, ",\"tensor_count\":");
    strbuf_json_int(sb, (int64_t)m->n_tensors);
    strbuf_puts(sb, ",\"bytes\":");
    strbuf_json_int(sb, (int64_t)m->tensor_bytes);
    strbuf_puts(sb, ",\"files\":[");
    *known = 0;
    for (size_t i = 0; i < m->n_files; i++) {
        if (i)
            strbuf_putc(sb, ',');
        *known += (size_t)put_file(sb, &m->files[i]);
    }
    strbuf_putc(sb, ']');
}

/* The middle: metadata, tensors, index and error, which hashes never
 * change. */
static void put_middle(struct strbuf *sb, const struct reg_model *m)
{
    strbuf_puts(sb, ",\"metadata\":");
    put_metadata_by_file(sb, m);
    strbuf_puts(sb, ",\"tensors\":{");
    for (size_t i = 0; i < m->n_tensors && !sb->failed; i++) {
        const struct st_tensor *t = m->tensors[i].t;
        if (i)
            strbuf_putc(sb, ',');
        put_tensor_head(sb, t);
        strbuf_puts(sb, ",\"file\":");
        strbuf_json_cstr(sb, m->tensors[i].file->name);
        strbuf_puts(sb, ",\"data_offsets\":");
        put_offsets(sb, t);
        strbuf_puts(sb, ",\"nbytes\":");
        strbuf_json_int(sb, (int64_t)(t->end - t->begin));
        strbuf_putc(sb, '}');
    }
    strbuf_putc(sb, '}');
    if (m->index_file) {
        strbuf_puts(sb, ",\"index\":");
        strbuf_json_cstr(sb, m->index_file->name);
    }
    if (m->state != MODEL_READY) {
        strbuf_puts(sb, ",\"error\":");
        put_error(sb, &m->error);
    }
}

/* The tail: the hash progress the head showed. */
static void put_tail(struct strbuf *sb, const struct reg_model *m, size_t known)
{
    strbuf_puts(sb, ",\"hashes\":{\"known\":");
    strbuf_json_int(sb, (int64_t)known);
    strbuf_puts(sb, ",\"files\":");
    strbuf_json_int(sb, (int64_t)m->n_files);
    strbuf_puts(sb, known == m->n_files ? ",\"complete\":true}" : ",\"complete\":false}");
    strbuf_putc(sb, '}');
}

char *model_doc_description_middle(const struct reg_model *m, size_t *len)
{
    struct strbuf sb = STRBUF_INIT;
    put_middle(&sb, m);
    return finish(&sb, len);
}

char *model_doc_description_ends(const struct reg_model *m, size_t *head_len, size_t *len,
                                 size_t *known)
{
    struct strbuf sb = STRBUF_INIT;
    put_head(&sb, m, known);
    *head_len = sb.len;
    put_tail(&sb, m, *known);
    strbuf_putc(&sb, '\n'); /* the tail ends the answer, whose last line ends */
    return strbuf_detach(&sb, len);
}

/* "__metadata__" of the merged header: the files' metadata in file order,
 * the first file to set a key winning. Returns -1 when out of memory. */
static int put_merged_metadata(struct strbuf *sb, const struct reg_model *m)
{
    size_t total = 0;
    for (size_t i = 0; i < m->n_files; i++)
        if (m->files[i].header)
            total += m->files[i].header->n_metadata;
    struct strmap *seen = strmap_try_new(total); /* never grows past total */
    if (!seen)
        return -1;
    strbuf_putc(sb, '{');
    int first = 1;
    for (size_t i = 0; i < m->n_files; i++) {
        const struct st_header *h = m->files[i].header;
        for (size_t k = 0; h && k < h->n_metadata; k++) {
            const struct st_kv *kv = &h->metadata[k];
            size_t klen = strlen(kv->key);
            if (strmap_try_put(seen, kv->key, klen, NULL) != 0)
                continue;
            if (!first)
                strbuf_putc(sb, ',');
            first = 0;
            put_key(sb, kv->key, klen);
            strbuf_json_cstr(sb, kv->value);
        }
    }
    strbuf_putc(sb, '}');
    strmap_free(seen);
    return 0;
}

char *model_doc_header(const struct reg_model *m)
{
    struct strbuf sb = STRBUF_INIT;
    strbuf_puts(&sb, "{\"__metadata__\":");
    if (put_merged_metadata(&sb, m) != 0) {
        strbuf_release(&sb);
        return NULL;
    }
    for (size_t i = 0; i < m->n_tensors && !sb.failed; i++) {
        const struct st_tensor *t = m->tensors[i].t;
        strbuf_putc(&sb, ',');
        put_tensor_head(&sb, t);
        strbuf_puts(&sb, ",\"data_offsets\":");
        put_offsets(&sb, t);
        strbuf_puts(&sb, ",\"file\":");
        strbuf_json_cstr(&sb, m->tensors[i].file->name);
        strbuf_putc(&sb, '}');
    }
    strbuf_puts(&sb, "}\n"); /* the answer's last line ends (respond.h) */
    size_t len;
    return finish(&sb, &len);
}

size_t model_doc_hashes_known(const struct reg_model *m)
{
    size_t known = 0;
    for (size_t i = 0; i < m->n_files; i++)
        known += (size_t)reg_file_hashed(&m->files[i]);
    return known;
}

uint64_t model_doc_parameters(struct jsonw *w, const struct reg_model *m)
{
    uint64_t by_dtype[DT_COUNT] = {0}, total = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        by_dtype[m->tensors[i].t->dtype] += m->tensors[i].t->nelems;
        total += m->tensors[i].t->nelems;
    }
    jsonw_kobj(w, "parameters");
    for (int d = 0; d < DT_COUNT; d++)
        if (by_dtype[d])
            jsonw_ku64(w, dtype_info((enum dtype)d)->name, by_dtype[d]);
    jsonw_obj_end(w);
    return total;
}
