/* verify: re-hash and compare with the state directory's record.
 *
 * A directory is scanned the way the daemon scans it (reg_snapshot_scan), so
 * exactly the files it serves are checked, through the same symlink rules.
 * Each file is read once, with the identity taken before and after as the
 * hasher does; the record looked up is the one for that identity, so a file
 * changed since it was hashed shows as "not cached", and only a file whose
 * bytes changed while its identity did not (bit rot, a tampered state file,
 * a writer that forged every timestamp) shows as a mismatch. The state file
 * is only read: verifying beside a running daemon is safe. */
#include "verify.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "digest.h"
#include "hashfile.h"
#include "registry.h"
#include "util.h"

struct tally {
    size_t ok, mismatch, uncached, errors;
    struct hashstore *store;
    void *buf;
    FILE *out;
};

static void verify_fd(struct tally *t, int fd, const char *path)
{
    struct stat sb;
    struct hash_id before, after;
    struct hash_entry rec;
    struct digest_result d;
    char hex[2 * DIGEST_SHA256_LEN + 1], was[2 * DIGEST_SHA256_LEN + 1];
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fprintf(t->out, "ERROR     -  %s: %s\n", path, "not a readable regular file");
        t->errors++;
        return;
    }
    hash_id_from_sys_stat(&sb, &before);
    int rc = digest_fd(fd, before.size, t->buf, DIGEST_BLOCK, NULL, NULL, &d);
    if (rc == 0 && fstat(fd, &sb) == 0)
        hash_id_from_sys_stat(&sb, &after);
    if (rc != 0 || !hash_id_equal(&before, &after)) {
        fprintf(t->out, "ERROR     -  %s: %s\n", path,
                rc == 0 || rc == -ENODATA ? "changed while being read" : strerror(-rc));
        t->errors++;
        return;
    }
    digest_hex(d.sha256, DIGEST_SHA256_LEN, hex);
    if (!hashstore_lookup(t->store, &before, &rec)) {
        fprintf(t->out, "UNCACHED  %s  %s\n", hex, path);
        t->uncached++;
        return;
    }
    if (memcmp(rec.sha256, d.sha256, DIGEST_SHA256_LEN) != 0 ||
        rec.has_git_sha1 != d.has_git_sha1 ||
        (d.has_git_sha1 && memcmp(rec.git_sha1, d.git_sha1, DIGEST_SHA1_LEN) != 0)) {
        digest_hex(rec.sha256, DIGEST_SHA256_LEN, was);
        fprintf(t->out, "MISMATCH  %s  %s (recorded %s)\n", hex, path, was);
        t->mismatch++;
        return;
    }
    fprintf(t->out, "OK        %s  %s\n", hex, path);
    t->ok++;
}

static void verify_scan(struct tally *t, const char *path, int single, FILE *err)
{
    struct st_error e;
    struct reg_scan_opts opts = {.single_model = single};
    struct reg_snapshot *r = reg_snapshot_scan(path, 0, &opts, &e);
    if (!r) {
        fprintf(err, "tensord verify: %s\n", e.message);
        t->errors++;
        return;
    }
    for (size_t i = 0; i < r->n_models; i++) {
        const struct reg_model *m = r->models[i];
        if (!single && m->dir[0] == '\0')
            continue; /* a file directly in the directory: the single-model scan had it */
        for (size_t k = 0; k < m->n_files; k++) {
            const struct reg_file *f = &m->files[k];
            char *shown = single ? xasprintf("%s/%s", path, f->name)
                                 : xasprintf("%s/%s/%s", path, m->name, f->name);
            int fd = f->fd >= 0                ? f->fd
                     : f->error.code == ST_OK ? reg_open_below(m->root, f, O_RDONLY)
                                              : -1;
            if (fd < 0) {
                fprintf(t->out, "ERROR     -  %s: %s\n", shown,
                        f->error.code != ST_OK ? f->error.message : strerror(-fd));
                t->errors++;
            } else {
                verify_fd(t, fd, shown);
                if (fd != f->fd)
                    close(fd);
            }
            free(shown);
        }
    }
    reg_snapshot_unref(r);
}

/* A directory may be a model, a models root, or both (a root with
 * NAME.safetensors files in it): its own files as one model, then the
 * models below it, cover every case. */
static void verify_dir(struct tally *t, const char *path, FILE *err)
{
    verify_scan(t, path, 1, err);
    verify_scan(t, path, 0, err);
}

/* Loads the state file; returns 0, or -1 after a message on err. Says
 * on err which state directory it read: a file the daemon hashed shows as
 * not cached when its hashes are kept in another one (make run keeps them
 * in build/run/state). */
static int load_state(struct hashstore *store, const char *dir, FILE *err)
{
    struct st_error e;
    if (!dir) {
        fprintf(err, "tensord verify: no state directory (set --state-dir)\n");
        return -1;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char *label = xasprintf("%s/%s", dir, HASHFILE_NAME);
    int rc = 0;
    if (dfd < 0) {
        fprintf(err, "tensord verify: state directory %s: %s\n", dir, strerror(errno));
        rc = -1;
    } else if (hashfile_load_store(store, dfd, HASHFILE_NAME, label, &e) != 0) {
        fprintf(err, "tensord verify: %s\n", e.message);
        rc = -1;
    } else if (hashstore_count(store) == 0) {
        fprintf(err, "tensord verify: %s records no hashes yet\n", label);
    } else {
        fprintf(err, "tensord verify: reading %zu hashes recorded in %s\n",
                hashstore_count(store), label);
    }
    if (dfd >= 0)
        close(dfd);
    free(label);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tensord verify [--config FILE] [--state-dir DIR] PATH...\n"
            "Re-hashes files, model directories or a models root and compares each SHA-256\n"
            "with the one the daemon recorded in its state directory (--state-dir, else\n"
            "the config file's state_dir, else the default: $STATE_DIRECTORY,\n"
            "/var/lib/tensord for root, ~/.local/state/tensord otherwise; `make run` keeps\n"
            "its hashes in build/run/state). The state file is only read.\n"
            "Exit status: 0 all match, 1 a hash does not match, 2 something could not be\n"
            "checked (usage, a path or the state directory missing or unreadable), 3 some\n"
            "file has no recorded hash (not hashed yet, or another state directory).\n");
}

int verify_main(int argc, char **argv, FILE *out, FILE *err)
{
    struct config cfg;
    struct tally t = {.out = out};
    struct st_error msg;
    char *dir = NULL;
    int i = 0, rc = 2;
    config_defaults(&cfg);
    for (; i < argc && (strncmp(argv[i], "--", 2) == 0 || strcmp(argv[i], "-h") == 0); i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(out);
            rc = 0;
            goto out;
        }
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        int is_config = strcmp(argv[i], "--config") == 0;
        if (!is_config && strcmp(argv[i], "--state-dir") != 0 && strcmp(argv[i], "--state_dir") != 0) {
            fprintf(err, "tensord verify: unknown option \"%s\"\n", argv[i]);
            usage(err);
            goto out;
        }
        if (i + 1 >= argc) {
            fprintf(err, "tensord verify: %s needs a value\n", argv[i]);
            goto out;
        }
        i++;
        if ((is_config ? config_load_file(&cfg, argv[i], &msg)
                       : config_set(&cfg, "state_dir", argv[i], &msg)) != 0) {
            fprintf(err, "tensord verify: %s\n", msg.message);
            goto out;
        }
    }
    if (i == argc) {
        fprintf(err, "tensord verify: no PATH given\n");
        usage(err);
        goto out;
    }
    t.store = hashstore_new();
    t.buf = xmalloc(DIGEST_BLOCK);
    dir = config_state_dir_path(&cfg);
    if (load_state(t.store, dir, err) == 0) {
        for (; i < argc; i++) {
            struct stat sb;
            if (stat(argv[i], &sb) != 0) {
                fprintf(out, "ERROR     -  %s: %s\n", argv[i], strerror(errno));
                t.errors++;
            } else if (S_ISDIR(sb.st_mode)) {
                verify_dir(&t, argv[i], err);
            } else {
                int fd = open(argv[i], O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
                if (fd < 0) {
                    fprintf(out, "ERROR     -  %s: %s\n", argv[i], strerror(errno));
                    t.errors++;
                    continue;
                }
                verify_fd(&t, fd, argv[i]);
                close(fd);
            }
        }
        fprintf(out, "%zu files: %zu ok, %zu mismatched, %zu not cached, %zu errors "
                     "(state directory %s)\n",
                t.ok + t.mismatch + t.uncached + t.errors, t.ok, t.mismatch, t.uncached, t.errors,
                dir);
        if (t.uncached)
            fprintf(err, "tensord verify: %zu file%s had no hash recorded in %s: not hashed "
                         "yet, changed since, or hashed by a daemon with another state "
                         "directory (pass its --state-dir; make run's is build/run/state)\n",
                    t.uncached, t.uncached == 1 ? "" : "s", dir);
        rc = t.errors ? 2 : t.mismatch ? 1 : t.uncached ? 3 : 0;
    } else {
        rc = 2;
    }
out:
    free(dir);
    free(t.buf);
    hashstore_free(t.store);
    config_free(&cfg);
    return rc;
}
