#include "inspect.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry.h"
#include "st_header.h"
#include "util.h"

static void print_row(FILE *out, const struct st_tensor *t, const char *file)
{
    char shape[ST_MAX_NDIM * 22 + 3];
    shape[0] = '[';
    size_t n = 1 + shape_format(shape + 1, sizeof(shape) - 2, t->shape, t->ndim, ", ");
    snprintf(shape + n, sizeof(shape) - n, "]");
    fprintf(out, "%-48s %-12s %-20s %14" PRIu64 "  %s\n", t->name, dtype_info(t->dtype)->name,
            shape, t->end - t->begin, file);
}

static void print_header_row(FILE *out)
{
    fprintf(out, "%-48s %-12s %-20s %14s  %s\n", "TENSOR", "DTYPE", "SHAPE", "BYTES", "FILE");
}

/* 1 when fd starts as every safetensors file does: 8 bytes of header
 * length, then '{' (perhaps after spaces). A file that does not (a text
 * file, an archive) is named as such rather than by the header check that
 * happened to fail on it first. */
static int looks_like_safetensors(int fd)
{
    unsigned char b[16];
    ssize_t n = pread(fd, b, sizeof(b), 0);
    for (ssize_t i = 8; i < n; i++)
        if (b[i] != ' ')
            return b[i] == '{';
    return 0;
}

/* One .safetensors file on its own. Returns 1 when valid, 0 when invalid,
 * -1 when it cannot be read. */
static int inspect_file(const char *path, FILE *out, FILE *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        fprintf(err, "%s: cannot open: %s\n", path, strerror(errno));
        return -1;
    }
    struct st_header *h;
    struct st_error e;
    int rc = st_header_read_fd(fd, path, 0, &h, &e);
    int foreign = rc != 0 && !looks_like_safetensors(fd);
    close(fd);
    if (foreign) {
        fprintf(err, "%s: not a safetensors file: it does not start with an 8-byte header "
                     "length and a JSON object (invalid (%s): %s)\n",
                path, st_status_name(e.code), e.message);
        return 0;
    }
    if (rc != 0) {
        fprintf(err, "%s: invalid (%s): %s\n", path, st_status_name(e.code), e.message);
        return 0;
    }
    fprintf(out, "%s\n", path);
    print_header_row(out);
    uint64_t bytes = 0;
    for (size_t i = 0; i < h->n_tensors; i++) {
        print_row(out, &h->tensors[i], path);
        bytes += h->tensors[i].end - h->tensors[i].begin;
    }
    fprintf(out, "valid: %zu tensors, %" PRIu64 " bytes, header %" PRIu64 " bytes\n\n",
            h->n_tensors, bytes, h->header_len);
    st_header_free(h);
    return 1;
}

static int print_model(const struct reg_model *m, FILE *out, FILE *err)
{
    if (m->state != MODEL_READY) {
        fprintf(err, "model %s: invalid (%s): %s\n", m->name, st_status_name(m->error.code),
                m->error.message);
        return 0;
    }
    fprintf(out, "model %s%s\n", m->name, m->sharded ? " (sharded)" : "");
    print_header_row(out);
    for (size_t i = 0; i < m->n_tensors; i++)
        print_row(out, m->tensors[i].t, m->tensors[i].file->name);
    fprintf(out, "valid: %zu tensors, %" PRIu64 " bytes in %zu files\n\n", m->n_tensors,
            m->tensor_bytes, m->n_files);
    return 1;
}

/* Returns 1 when path has a subdirectory (names starting with '.' aside). */
static int has_subdirectory(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *ent;
    int found = 0;
    if (!d)
        return 0;
    while (!found && (ent = readdir(d)))
        found = ent->d_name[0] != '.' && ent->d_type == DT_DIR;
    closedir(d);
    return found;
}

/* A directory that directly holds .safetensors files and has no
 * subdirectories is one model (llama/); any other directory is a models root,
 * where NAME.safetensors files are models of their own. Returns 1 when
 * everything in it is valid, 0 when something is not, -1 when it cannot be
 * read. */
static int inspect_dir(const char *path, FILE *out, FILE *err)
{
    struct st_error e;
    struct reg_scan_opts opts = {
        .single_model = registry_dir_is_model(path) && !has_subdirectory(path)};
    struct reg_snapshot *r = reg_snapshot_scan(path, 1, &opts, &e);
    if (!r) {
        fprintf(err, "%s: %s\n", path, e.message);
        return -1;
    }
    int ok = 1;
    if (r->n_models == 0)
        fprintf(out, "%s: no models\n", path);
    for (size_t i = 0; i < r->n_models; i++)
        ok &= print_model(r->models[i], out, err);
    reg_snapshot_unref(r);
    return ok;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tensord inspect PATH...\n"
               "Validates .safetensors files, model directories and models roots as the daemon "
               "does,\nand prints each model's tensors (name, dtype, shape, bytes, file).\n"
               "Exit status: 0 all valid, 1 something is invalid, 2 something could not be "
               "inspected\n(a usage error, a path that does not exist or cannot be read).\n");
}

int inspect_main(int argc, char **argv, FILE *out, FILE *err)
{
    int i = 0;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(out);
            return 0;
        }
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        fprintf(err, "tensord inspect: unknown option \"%s\"\n", argv[i]);
        usage(err);
        return 2;
    }
    if (i == argc) {
        fprintf(err, "tensord inspect: no PATH given\n");
        usage(err);
        return 2;
    }
    int ok = 1, files = 0, trouble = 0;
    for (; i < argc; i++) {
        struct stat st;
        /* A path that is not there was not inspected: trouble (2), not a
         * verdict on a file. */
        if (stat(argv[i], &st) < 0) {
            fprintf(err, "%s: %s\n", argv[i], strerror(errno));
            trouble++;
            continue;
        }
        files++;
        int valid = S_ISDIR(st.st_mode)   ? inspect_dir(argv[i], out, err)
                    : S_ISREG(st.st_mode) ? inspect_file(argv[i], out, err)
                                          : -2;
        if (valid == -2)
            fprintf(err, "%s: not a regular file or directory\n", argv[i]);
        trouble += valid < 0;
        ok &= valid == 1;
    }
    fprintf(out, "%d path%s checked: %s%s\n", files, files == 1 ? "" : "s",
            ok ? "all valid" : "INVALID (reasons above)",
            trouble ? "; some could not be inspected (above)" : "");
    return trouble ? 2 : ok ? 0 : 1;
}
