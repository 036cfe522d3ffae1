/* cuda_double reporting: the driver's error codes with their names and
 * texts (cuGetErrorName, cuGetErrorString), the refusals, violations and
 * injected faults it records, the call trace, and the JSON report written at
 * exit. A test double, not CUDA: see cuda_double.h. */
#include "cuda_double.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- errors ------------------------------------------------------------ */

static const struct {
    CUresult r;
    const char *name, *text;
} error_table[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_ECC_UNCORRECTABLE, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_SYSTEM_NOT_READY, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const char *cd_error_name(CUresult r)
{
    for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
        if (error_table[i].r == r)
            return error_table[i].name;
    return "CUDA_ERROR_(unlisted)";
}

CUresult cd_parse_error(const char *s, CUresult dflt)
{
    if (!s || !*s)
        return dflt;
    for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++)
        if (strcmp(error_table[i].name, s) == 0)
            return error_table[i].r;
    return (CUresult)atoi(s);
}

static void list_add(char ***list, size_t *n, const char *text)
{
    char **grown = realloc(*list, (*n + 1) * sizeof(**list));
    if (!grown)
        return;
    *list = grown;
    (*list)[(*n)++] = strdup(text);
}

CUresult cd_fail(CUresult r, const char *fn, const char *fmt, ...)
{
    char why[400], line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    snprintf(line, sizeof(line), "%s: %s (%s)", fn, why, cd_error_name(r));
    fprintf(stderr, "cuda-double[%d]: %s\n", (int)getpid(), line);
    list_add(&cd.errors, &cd.n_errors, line);
    return r;
}

void cd_violation(const char *fn, const char *fmt, ...)
{
    char why[400], line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    snprintf(line, sizeof(line), "%s: %s", fn, why);
    fprintf(stderr, "cuda-double[%d]: VIOLATION %s\n", (int)getpid(), line);
    list_add(&cd.violations, &cd.n_violations, line);
}

CUresult cd_inject(CUresult r, const char *fn, const char *what)
{
    char line[256];
    snprintf(line, sizeof(line), "%s: %s (%s)", fn, what, cd_error_name(r));
    fprintf(stderr, "cuda-double[%d]: injected %s\n", (int)getpid(), line);
    list_add(&cd.injected, &cd.n_injected, line);
    return r;
}

void cd_trace(const char *fn, const char *fmt, ...)
{
    if (!cd.trace)
        return;
    char args[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda-double[%d]: %s(%s)\n", (int)getpid(), fn, args);
}

CUresult cd_GetErrorString(CUresult e, const char **s)
{
    for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++) {
        if (error_table[i].r == e) {
            *s = error_table[i].text;
            return CUDA_SUCCESS;
        }
    }
    /* cuGetErrorString: an unknown code gives CUDA_ERROR_INVALID_VALUE and NULL. */
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cd_GetErrorName(CUresult e, const char **s)
{
    for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++) {
        if (error_table[i].r == e) {
            *s = error_table[i].name;
            return CUDA_SUCCESS;
        }
    }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- the exit report --------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_list(FILE *f, const char *key, char **list, size_t n)
{
    fprintf(f, ", \"%s\": [", key);
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputs(", ", f);
        json_str(f, list[i] ? list[i] : "?");
    }
    fputc(']', f);
}

__attribute__((destructor)) static void cd_report(void)
{
    if (!cd.report_dir[0])
        return;
    char path[600], tmp[620], live[512], pool[256], link[256];
    snprintf(path, sizeof(path), "%s/cuda-double.%d.json", cd.report_dir, (int)getpid());
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    cd_lock();
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "cuda-double: cannot write %s: %s\n", tmp, strerror(errno));
        cd_unlock();
        return;
    }
    unsigned retained = 0;
    for (int i = 0; i < CD_MAX_DEVICES; i++)
        retained += cd.ctx[i].refs;
    cd_vmm_report(live, sizeof(live));
    cd_pool_report(pool, sizeof(pool));
    cd_link_report(link, sizeof(link));
    fprintf(f, "{\"pid\": %d, \"inited\": %d, \"contexts_retained\": %u, %s, %s%s",
            (int)getpid(), cd.inited, retained, live, pool, link);
    json_list(f, "violations", cd.violations, cd.n_violations);
    json_list(f, "errors", cd.errors, cd.n_errors);
    json_list(f, "injected", cd.injected, cd.n_injected);
    fputs("}\n", f);
    fclose(f);
    rename(tmp, path);
    cd_unlock();
}
