/* fetch_plan_read: a fetch plan read as a body (core/body/body.h): its
 * header regenerated from the nearest mark, its tensors' bytes read from
 * the model's files (or the descriptors the plan reads through), spans one
 * file holds contiguously handed to sendfile, and the file spans of any
 * range listed for a reader of bytes still arriving. */
#include <errno.h>
#include <string.h>

#include "fetch_plan_int.h"
#include "fileio.h"
#include "st_header.h"

/* Tensors a sendfile check walks at most (a range over more goes out
 * through the streamed reader): it runs on an HTTP thread. */
#define SPAN_WALK_MAX 4096

/* ---- reading: the header ------------------------------------------------------ */

/* The last mark whose `at` (header) or `doff` (data) is at most v. */
static const struct fetch_mark *mark_before(const struct fetch_plan *p, uint64_t v, int data)
{
    size_t lo = 0, hi = p->n_marks;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((data ? p->marks[mid].doff : p->marks[mid].at) <= v)
            lo = mid;
        else
            hi = mid;
    }
    return &p->marks[lo];
}

/* Makes the cursor's entry tensor k's, at answer offset at, data at doff. */
static int entry_of(struct fetch_plan *p, size_t k, uint64_t at, uint64_t doff)
{
    struct fetch_cursor *c = p->cur;
    c->have_unit = 0;
    if (fetch_plan_item(p, k, &c->hit, NULL) != 0)
        return -EIO; /* planned once already: cannot happen */
    fetch_plan_entry(&c->text, (size_t)p->has_meta + k, doff, &c->hit);
    if (c->text.sb.failed)
        return -ENOMEM;
    c->unit = (size_t)p->has_meta + k;
    c->unit_at = at;
    c->unit_doff = doff;
    c->unit_nbytes = c->hit.plan.nbytes;
    c->have_unit = 1;
    return 0;
}

/* Moves the cursor to the header entry holding answer byte off (in the
 * JSON, before its closing). */
static int seek_entry(struct fetch_plan *p, uint64_t off)
{
    struct fetch_cursor *c = p->cur;
    if (!c->have_unit || off < c->unit_at) {
        if (p->has_meta && off < ST_PREFIX_LEN + p->meta_len) {
            fetch_plan_metadata(p->m, &c->text, NULL);
            if (c->text.sb.failed)
                return -ENOMEM;
            c->unit = 0;
            c->unit_at = ST_PREFIX_LEN;
            c->unit_doff = c->unit_nbytes = 0;
            c->have_unit = 1;
        } else {
            const struct fetch_mark *mk = mark_before(p, off, 0);
            int rc = entry_of(p, mk->item, mk->at, mk->doff);
            if (rc)
                return rc;
        }
    }
    while (off >= c->unit_at + c->text.sb.len) {
        size_t k = c->unit + 1 - (size_t)p->has_meta; /* the next tensor */
        int rc = entry_of(p, k, c->unit_at + c->text.sb.len, c->unit_doff + c->unit_nbytes);
        if (rc)
            return rc;
    }
    return 0;
}

/* Copies prefix bytes [off, off + len) (inside it). */
static int read_header(struct fetch_plan *p, uint64_t off, char *out, size_t len)
{
    struct fetch_cursor *c = p->cur;
    while (len) {
        size_t n;
        if (off < ST_PREFIX_LEN) {
            unsigned char le[ST_PREFIX_LEN];
            uint64_t hl = p->prefix_len - ST_PREFIX_LEN;
            for (int i = 0; i < ST_PREFIX_LEN; i++)
                le[i] = (unsigned char)(hl >> (8 * i));
            n = ST_PREFIX_LEN - (size_t)off < len ? ST_PREFIX_LEN - (size_t)off : len;
            memcpy(out, le + off, n);
        } else if (off >= ST_PREFIX_LEN + p->json_len) {
            char end[16];
            size_t in = (size_t)(off - ST_PREFIX_LEN - p->json_len);
            n = fetch_plan_header_end(p, end) - in < len ? fetch_plan_header_end(p, end) - in : len;
            memcpy(out, end + in, n);
        } else {
            int rc = seek_entry(p, off);
            if (rc)
                return rc;
            size_t in = (size_t)(off - c->unit_at);
            n = c->text.sb.len - in < len ? c->text.sb.len - in : len;
            memcpy(out, c->text.sb.buf + in, n);
        }
        out += n;
        off += n;
        len -= n;
    }
    return 0;
}

/* ---- reading: the data ---------------------------------------------------------- */

/* Moves the cursor to the tensor holding data byte d (< data_len). */
static int seek_item(struct fetch_plan *p, uint64_t d)
{
    struct fetch_cursor *c = p->cur;
    if (!c->have_item || d < c->k_at) {
        const struct fetch_mark *mk = mark_before(p, d, 1);
        c->have_item = 0;
        if (fetch_plan_item(p, mk->item, &c->it, NULL) != 0)
            return -EIO;
        c->k = mk->item;
        c->k_at = mk->doff;
        c->have_item = 1;
    }
    while (d >= c->k_at + c->it.plan.nbytes) {
        c->k_at += c->it.plan.nbytes;
        c->k++;
        c->have_item = 0;
        if (c->k >= p->n_tensors || fetch_plan_item(p, c->k, &c->it, NULL) != 0)
            return -EIO;
        c->have_item = 1;
    }
    return 0;
}

/* A contiguous read not made yet, so the next tensor can extend it. */
struct span {
    int fd;
    uint64_t off;
    size_t len;
    unsigned char *dst;
};

static int span_flush(struct span *s)
{
    int rc = s->len ? fileio_pread_full(s->fd, s->dst, s->len, s->off) : 0;
    s->len = 0;
    return rc;
}

/* Copies data bytes [d, d + len) (inside the data). A file is checked
 * against its validated version once its last bytes in this call are read
 * (consecutive tensors usually share one file), so the bytes copied predate
 * any change to it. */
static int read_data(struct fetch_plan *p, uint64_t d, unsigned char *out, size_t len)
{
    struct fetch_cursor *c = p->cur;
    struct span pend = {.fd = -1};
    const struct reg_file *last = NULL;
    int rc = 0;
    while (len) {
        if ((rc = seek_item(p, d)) != 0)
            break;
        const struct fetch_tensor *it = &c->it;
        const struct reg_file *f = it->t->file;
        if (last && f != last) {
            if ((rc = span_flush(&pend)) != 0)
                break;
            if (!fetch_plan_unchanged(p, last)) {
                rc = -ENODATA;
                break;
            }
        }
        last = f;
        uint64_t in = d - c->k_at;
        size_t n = it->plan.nbytes - in < len ? (size_t)(it->plan.nbytes - in) : len;
        if (it->plan.n_runs <= 1) {
            uint64_t off = fetch_plan_tensor_off(it) + it->plan.base + in;
            if (pend.len && pend.fd == fetch_plan_fd(p, f) && pend.off + pend.len == off &&
                pend.dst + pend.len == out) {
                pend.len += n; /* continues the previous tensor's bytes */
            } else {
                if ((rc = span_flush(&pend)) != 0)
                    break;
                pend = (struct span){.fd = fetch_plan_fd(p, f), .off = off, .len = n, .dst = out};
            }
        } else {
            if ((rc = span_flush(&pend)) != 0)
                break;
            rc = slice_read(&it->plan, fetch_plan_fd(p, f), fetch_plan_tensor_off(it), in, out, n);
            if (rc != 0)
                break;
        }
        out += n;
        d += n;
        len -= n;
    }
    if (rc == 0)
        rc = span_flush(&pend);
    if (rc == 0 && last && !fetch_plan_unchanged(p, last))
        rc = -ENODATA;
    return rc;
}

/* ---- as a body ------------------------------------------------------------------- */

static int source_read(void *ctx, uint64_t off, void *buf, size_t len)
{
    struct fetch_plan *p = ctx;
    unsigned char *out = buf;
    if (off < p->prefix_len) {
        size_t n = p->prefix_len - (size_t)off < len ? p->prefix_len - (size_t)off : len;
        int rc = read_header(p, off, (char *)out, n);
        if (rc)
            return rc;
        out += n;
        off += n;
        len -= n;
    }
    return len ? read_data(p, off - p->prefix_len, out, len) : 0;
}

static int source_file_span(void *ctx, uint64_t off, uint64_t len, int *fd, uint64_t *file_off,
                            const struct fileio_stat **st)
{
    struct fetch_plan *p = ctx;
    if (off < p->prefix_len || len == 0 || seek_item(p, off - p->prefix_len) != 0)
        return 0;
    const struct fetch_cursor *c = p->cur;
    const struct fetch_tensor *it = &c->it;
    if (it->plan.n_runs > 1)
        return 0;
    const struct reg_file *f = it->t->file;
    uint64_t in = off - p->prefix_len - c->k_at;
    uint64_t start = fetch_plan_tensor_off(it) + it->plan.base + in;
    uint64_t expect = start + it->plan.nbytes - in;
    uint64_t left = len > it->plan.nbytes - in ? len - (it->plan.nbytes - in) : 0;
    struct fetch_tensor next;
    for (size_t k = c->k + 1; left && k < p->n_tensors && k - c->k <= SPAN_WALK_MAX; k++) {
        if (fetch_plan_item(p, k, &next, NULL) != 0)
            return 0;
        if (!next.plan.nbytes)
            continue;
        if (next.plan.n_runs > 1 || next.t->file != f ||
            fetch_plan_tensor_off(&next) + next.plan.base != expect)
            return 0;
        uint64_t take = left < next.plan.nbytes ? left : next.plan.nbytes;
        expect += take;
        left -= take;
    }
    if (left)
        return 0;
    *fd = fetch_plan_fd(p, f);
    *file_off = start;
    *st = &f->st;
    return 1;
}

struct tensor_walk {
    body_span_fn fn;
    void *arg;
    int fd;
    uint64_t tensor_off;       /* the tensor's first byte in its file */
    uint64_t out;              /* the body offset of the tensor's first byte sent */
};

static int tensor_span(void *arg, uint64_t src, uint64_t n, uint64_t out)
{
    const struct tensor_walk *w = arg;
    return w->fn(w->arg, w->fd, w->tensor_off + src, n, w->out + out);
}

/* The file spans of body bytes [off, off + len): tensor by tensor, a
 * contiguous one whole, a strided one run by run. */
static int source_each_span(void *ctx, uint64_t off, uint64_t len, body_span_fn fn, void *arg)
{
    struct fetch_plan *p = ctx;
    uint64_t end = off + len;
    if (end <= p->prefix_len)
        return 0;
    uint64_t d = off > p->prefix_len ? off - p->prefix_len : 0, dend = end - p->prefix_len;
    while (d < dend) {
        if (seek_item(p, d) != 0)
            return -EIO;
        const struct fetch_cursor *c = p->cur;
        const struct fetch_tensor *it = &c->it;
        uint64_t in = d - c->k_at;
        uint64_t n = it->plan.nbytes - in < dend - d ? it->plan.nbytes - in : dend - d;
        if (n == 0)
            return -EIO;
        struct tensor_walk w = {fn, arg, fetch_plan_fd(p, it->t->file), fetch_plan_tensor_off(it),
                                p->prefix_len + c->k_at};
        int rc = it->plan.n_runs <= 1
                     ? fn(arg, w.fd, w.tensor_off + it->plan.base + in, n, p->prefix_len + d)
                     : slice_each_span(&it->plan, in, n, tensor_span, &w);
        if (rc)
            return rc;
        d += n;
    }
    return 0;
}

const struct body_source fetch_plan_source = {
    .read = source_read, .file_span = source_file_span, .each_span = source_each_span,
};
