/* mirror_names: see mirror_names.h.
 *
 * On disk, names/<hex> where hex is the SHA-256 of the answer's full key
 * (whom it was given to, then the question): "tensord-mirror-name 1\n",
 * the key's length and the key on their own lines, then the answer's
 * bytes; the file's mtime is when the upstream gave it. A file that does
 * not read back as that (a crash mid-write never leaves one: files are
 * written aside and renamed) is ignored. */
#include "mirror_names.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "digest.h"
#include "fileio.h"
#include "log.h"
#include "mirror_int.h"
#include "util.h"

#define MAGIC "tensord-mirror-name 1\n"
#define NBUCKETS 1024
#define FILE_MAX (MIRROR_DOC_MAX + 65536u) /* an answer and its key */

struct mem_entry {
    struct mem_entry *hnext;       /* the bucket's chain */
    struct mem_entry *prev, *next; /* least recently used first */
    char *key;                     /* whom, '\n', the question */
    char *data;
    size_t len;
    int64_t at;                    /* unix seconds the upstream gave it */
};

struct disk_entry {
    struct disk_entry *next;       /* the bucket's chain */
    char hex[65];
    uint64_t size;
    int64_t at;
    uint64_t seq;                  /* orders the answers of one second (0: a previous run's) */
    uint64_t sum;                  /* of its answer's bytes (0: not known: read back at start) */
    int own;                       /* the mirror's own answer (its bounds are apart) */
};

struct mirror_names {
    pthread_mutex_t lock;
    int dirfd;                     /* names/ */
    uint64_t seed;                 /* the buckets' (hash_seed): the keys are callers' names */
    struct mem_entry *buckets[NBUCKETS];
    struct mem_entry *head, *tail;
    size_t mem_bytes;
    struct disk_entry *disk[NBUCKETS]; /* the files on disk, by name */
    size_t n_disk[2];              /* of callers' answers [0], the mirror's own [1] */
    uint64_t disk_bytes[2];
    uint64_t disk_seq;             /* the last disk_entry.seq given */
    unsigned seq;                  /* names of files being written */
};

/* ---- keys ------------------------------------------------------------------- */

/* Whom an answer given to a request with auth belongs to, and for how long
 * it is served (seconds; 0: never); whether it is kept on disk. */
struct whom {
    char tag[72];
    unsigned max_age;
    int disk;
};

static void whom_of(const struct mirror *m, const struct mirror_asker *a, struct whom *w)
{
    if (a->own) {
        *w = (struct whom){"own", m->opt.stale_max_age, 1};
    } else if (!a->auth) {
        *w = (struct whom){"-", m->opt.stale_max_age, 1};
    } else {
        *w = (struct whom){"t:", m->opt.auth_ttl, 0};
        digest_sha256_hex(a->auth, strlen(a->auth), w->tag + 2);
    }
}

static char *full_key(const struct whom *w, const char *key)
{
    return xasprintf("%s\n%s", w->tag, key);
}

static uint64_t sum_of(const void *data, size_t len)
{
    return hash_fnv1a(data, len, HASH_FNV_SEED) ^ len;
}

/* ---- memory ----------------------------------------------------------------- */

static size_t bucket(const struct mirror_names *n, const char *key)
{
    return hash_fnv1a(key, strlen(key), n->seed) % NBUCKETS;
}

static struct mem_entry *do_find(struct mirror_names *n, const char *key)
{
    for (struct mem_entry *e = n->buckets[bucket(n, key)]; e; e = e->hnext)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static void do_unlink(struct mirror_names *n, struct mem_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        n->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        n->tail = e->prev;
    e->prev = e->next = NULL;
}

static void do_link_last(struct mirror_names *n, struct mem_entry *e)
{
    e->prev = n->tail;
    if (n->tail)
        n->tail->next = e;
    else
        n->head = e;
    n->tail = e;
}

static void do_remove(struct mirror_names *n, struct mem_entry *e)
{
    struct mem_entry **pp = &n->buckets[bucket(n, e->key)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    do_unlink(n, e);
    n->mem_bytes -= e->len;
    free(e->key);
    free(e->data);
    free(e);
}

/* Keeps a copy of data under key, the oldest going to make room. */
static void do_remember(struct mirror_names *n, const char *key, const void *data, size_t len,
                        int64_t at)
{
    struct mem_entry *e = do_find(n, key);
    if (e)
        do_remove(n, e);
    if (len > NAMES_MEM_MAX / 4)
        return; /* the disk keeps it, or nobody */
    while (n->head && n->mem_bytes + len > NAMES_MEM_MAX)
        do_remove(n, n->head);
    e = xcalloc(1, sizeof(*e));
    e->key = xstrdup(key);
    e->data = xstrndup(data, len);
    e->len = len;
    e->at = at;
    size_t b = bucket(n, key);
    e->hnext = n->buckets[b];
    n->buckets[b] = e;
    do_link_last(n, e);
    n->mem_bytes += len;
}

/* ---- disk ------------------------------------------------------------------- */

static struct disk_entry *do_disk_find(struct mirror_names *n, const char *hex)
{
    for (struct disk_entry *d = n->disk[bucket(n, hex)]; d; d = d->next)
        if (strcmp(d->hex, hex) == 0)
            return d;
    return NULL;
}

static void do_disk_drop(struct mirror_names *n, struct disk_entry *d)
{
    struct disk_entry **pp = &n->disk[bucket(n, d->hex)];
    while (*pp != d)
        pp = &(*pp)->next;
    *pp = d->next;
    unlinkat(n->dirfd, d->hex, 0);
    n->disk_bytes[d->own] -= d->size;
    n->n_disk[d->own]--;
    free(d);
}

/* The oldest answer on disk of the class own (a previous run's before this
 * run's of the same second). */
static struct disk_entry *do_disk_oldest(struct mirror_names *n, int own)
{
    struct disk_entry *old = NULL;
    for (size_t b = 0; b < NBUCKETS; b++)
        for (struct disk_entry *d = n->disk[b]; d; d = d->next)
            if (d->own == own &&
                (!old || d->at < old->at || (d->at == old->at && d->seq < old->seq)))
                old = d;
    return old;
}

/* Records file hex (replacing its entry), then removes the oldest files of
 * its class until that class is within its bounds. */
static void do_disk_note(struct mirror_names *n, const char *hex, int own, uint64_t size,
                         int64_t at, uint64_t sum)
{
    static const size_t max_files[2] = {NAMES_DISK_FILES - NAMES_DISK_OWN_FILES,
                                        NAMES_DISK_OWN_FILES};
    static const uint64_t max_bytes[2] = {NAMES_DISK_MAX - NAMES_DISK_OWN_MAX,
                                          NAMES_DISK_OWN_MAX};
    struct disk_entry *d = do_disk_find(n, hex);
    if (!d) {
        d = xcalloc(1, sizeof(*d));
        memcpy(d->hex, hex, 65);
        size_t b = bucket(n, hex);
        d->next = n->disk[b];
        n->disk[b] = d;
    } else { /* rewritten: a file read back at the start may have counted as a caller's */
        n->n_disk[d->own]--;
        n->disk_bytes[d->own] -= d->size;
    }
    d->own = own;
    n->n_disk[own]++;
    n->disk_bytes[own] += size;
    d->size = size;
    d->at = at;
    d->seq = sum ? ++n->disk_seq : 0;
    d->sum = sum;
    while (n->n_disk[own] > max_files[own] ||
           (n->disk_bytes[own] > max_bytes[own] && n->n_disk[own] > 1))
        do_disk_drop(n, do_disk_oldest(n, own));
}

/* Whether file name of names/ holds the mirror's own answer (its key
 * begins "own\n"; a file that does not read as an answer counts as a
 * caller's, and is ignored when read). */
static int file_is_own(int dirfd, const char *name)
{
    char head[64];
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t got = fd >= 0 ? pread(fd, head, sizeof(head) - 1, 0) : -1;
    if (fd >= 0)
        close(fd);
    size_t ml = strlen(MAGIC);
    if (got < (ssize_t)ml || memcmp(head, MAGIC, ml) != 0)
        return 0;
    head[got] = '\0';
    const char *nl = strchr(head + ml, '\n');
    return nl && strncmp(nl + 1, "own\n", 4) == 0;
}

/* Writes the answer's file aside and renames it into place. */
static int write_file(struct mirror_names *n, const char *hex, const char *key, const void *data,
                      size_t len)
{
    char tmp[96], head[64];
    pthread_mutex_lock(&n->lock);
    snprintf(tmp, sizeof(tmp), ".tmp-%d-%u", (int)getpid(), n->seq++);
    pthread_mutex_unlock(&n->lock);
    int fd = openat(n->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -errno;
    int hl = snprintf(head, sizeof(head), MAGIC "%zu\n", strlen(key));
    size_t kl = strlen(key);
    int rc = fileio_pwrite_full(fd, head, (size_t)hl, 0);
    if (rc == 0)
        rc = fileio_pwrite_full(fd, key, kl, (uint64_t)hl);
    if (rc == 0)
        rc = fileio_pwrite_full(fd, "\n", 1, (uint64_t)hl + kl);
    if (rc == 0)
        rc = fileio_pwrite_full(fd, data, len, (uint64_t)hl + kl + 1);
    close(fd);
    if (rc == 0 && renameat(n->dirfd, tmp, n->dirfd, hex) < 0)
        rc = -errno;
    if (rc < 0)
        unlinkat(n->dirfd, tmp, 0);
    return rc;
}

int mirror_names_parse(const char *buf, size_t size, const char *key, size_t *off, size_t *len)
{
    size_t ml = strlen(MAGIC), kl = strlen(key);
    char want[32];
    int wl = snprintf(want, sizeof(want), "%zu\n", kl);
    size_t at_key = ml + (size_t)wl;
    if (size < at_key + kl + 1 || memcmp(buf, MAGIC, ml) != 0 ||
        memcmp(buf + ml, want, (size_t)wl) != 0 || memcmp(buf + at_key, key, kl) != 0 ||
        buf[at_key + kl] != '\n')
        return -EINVAL;
    *off = at_key + kl + 1;
    *len = size - *off;
    return 0;
}

/* Reads file hex back: its answer when it is key's (1, *data malloc'd),
 * 0 otherwise. */
static int read_file(struct mirror_names *n, const char *hex, const char *key, char **data,
                     size_t *len, int64_t *at)
{
    int fd = openat(n->dirfd, hex, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    struct stat sb;
    char *buf = NULL;
    size_t off;
    int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size <= FILE_MAX &&
             (buf = malloc((size_t)sb.st_size + 1)) &&
             fileio_pread_full(fd, buf, (size_t)sb.st_size, 0) == 0 &&
             mirror_names_parse(buf, (size_t)sb.st_size, key, &off, len) == 0;
    if (ok) {
        memmove(buf, buf + off, *len);
        buf[*len] = '\0';
        *data = buf;
        *at = (int64_t)sb.st_mtim.tv_sec;
        buf = NULL;
    }
    free(buf);
    close(fd);
    return ok;
}

/* ---- the store -------------------------------------------------------------- */

struct mirror_names *mirror_names_new(int dirfd, struct st_error *err)
{
    int fd = -1;
    if (mkdirat(dirfd, "names", 0700) == 0 || errno == EEXIST)
        fd = openat(dirfd, "names", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        st_error_errno(err, errno, "mirror cache: names/");
        return NULL;
    }
    struct mirror_names *n = xcalloc(1, sizeof(*n));
    pthread_mutex_init(&n->lock, NULL);
    n->dirfd = fd;
    n->seed = hash_seed(n);
    int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        struct stat sb;
        if (de->d_name[0] == '.') { /* a write a crash cut short */
            if (strncmp(de->d_name, ".tmp-", 5) == 0)
                unlinkat(fd, de->d_name, 0);
            continue;
        }
        if (strlen(de->d_name) != 64 || strspn(de->d_name, "0123456789abcdef") != 64 ||
            fstatat(fd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(sb.st_mode))
            continue;
        do_disk_note(n, de->d_name, file_is_own(fd, de->d_name), (uint64_t)sb.st_size,
                     (int64_t)sb.st_mtim.tv_sec, 0);
    }
    if (d)
        closedir(d);
    else if (dup_fd >= 0)
        close(dup_fd);
    return n;
}

void mirror_names_free(struct mirror_names *n)
{
    if (!n)
        return;
    while (n->head)
        do_remove(n, n->head);
    for (size_t b = 0; b < NBUCKETS; b++)
        for (struct disk_entry *d = n->disk[b], *next; d; d = next) {
            next = d->next;
            free(d);
        }
    close(n->dirfd);
    pthread_mutex_destroy(&n->lock);
    free(n);
}

void mirror_names_put(struct mirror *m, const char *key, const struct mirror_asker *asker,
                      const void *data, size_t len)
{
    struct mirror_names *n = m->names;
    struct whom w;
    whom_of(m, asker, &w);
    if (w.max_age == 0 || !m->opt.serve_stale)
        return;
    char *full = full_key(&w, key), hex[65];
    int64_t now = (int64_t)time(NULL);
    uint64_t sum = sum_of(data, len);
    digest_sha256_hex(full, strlen(full), hex);
    pthread_mutex_lock(&n->lock);
    do_remember(n, full, data, len, now);
    const struct disk_entry *d = w.disk ? do_disk_find(n, hex) : NULL;
    int same = d && d->sum == sum;
    pthread_mutex_unlock(&n->lock);
    if (w.disk) {
        int rc;
        /* The same answer again: only when it was given changes. */
        rc = same && utimensat(n->dirfd, hex, NULL, AT_SYMLINK_NOFOLLOW) == 0
                 ? 0
                 : write_file(n, hex, full, data, len);
        if (rc < 0) {
            log_msg(LOG_WARN, "mirror: keeping an answer for an outage in names/%.16s...: %s",
                    hex, strerror(-rc));
        } else {
            pthread_mutex_lock(&n->lock);
            do_disk_note(n, hex, !!asker->own, strlen(MAGIC) + 24 + strlen(full) + len, now, sum);
            pthread_mutex_unlock(&n->lock);
        }
    }
    free(full);
}

/* The answer kept for key under whom w, when young enough. */
static int get_one(struct mirror *m, const struct whom *w, const char *key, char **data,
                   size_t *len, int64_t *age)
{
    struct mirror_names *n = m->names;
    char *full = full_key(w, key), hex[65];
    int64_t now = (int64_t)time(NULL), at = 0;
    int found = 0;
    pthread_mutex_lock(&n->lock);
    struct mem_entry *e = do_find(n, full);
    if (e) {
        do_unlink(n, e);
        do_link_last(n, e);
        *data = xstrndup(e->data, e->len);
        *len = e->len;
        at = e->at;
        found = 1;
    }
    pthread_mutex_unlock(&n->lock);
    if (!found && w->disk) {
        digest_sha256_hex(full, strlen(full), hex);
        found = read_file(n, hex, full, data, len, &at);
        if (found) {
            pthread_mutex_lock(&n->lock);
            do_remember(n, full, *data, *len, at);
            pthread_mutex_unlock(&n->lock);
        }
    }
    free(full);
    if (found && (w->max_age == 0 || now - at > (int64_t)w->max_age)) {
        free(*data);
        *data = NULL;
        found = 0;
    }
    if (found)
        *age = now > at ? now - at : 0;
    return found;
}

int mirror_names_get(struct mirror *m, const char *key, const struct mirror_asker *asker,
                     char **data, size_t *len, int64_t *age)
{
    static const struct mirror_asker nobody = {NULL, 0};
    struct whom w, anyone;
    *data = NULL;
    if (!m->opt.serve_stale)
        return 0;
    whom_of(m, asker, &w);
    whom_of(m, &nobody, &anyone);
    /* The asker's own first; then what anyone was given. */
    return get_one(m, &w, key, data, len, age) ||
           ((asker->own || asker->auth) && get_one(m, &anyone, key, data, len, age));
}
