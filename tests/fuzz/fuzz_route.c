/* Fuzzes request-path routing and percent-decoding: no crash, and a routed
 * model or file name, a repo id or a path in a repo never has an empty, "."
 * or ".." component. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "route.h"
#include "util.h"

static void check_components(const char *name, size_t len)
{
    const char *c = name, *end = name + len;
    for (;;) {
        const char *slash = memchr(c, '/', (size_t)(end - c));
        size_t clen = (size_t)((slash ? slash : end) - c);
        if (clen == 0 || (clen == 1 && c[0] == '.') || (clen == 2 && c[0] == '.' && c[1] == '.'))
            abort();
        if (!slash)
            break;
        c = slash + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *path = xstrndup((const char *)data, size);
    struct route r;
    char err[256];
    enum route_kind k = route_parse(path, NULL, NULL, &r, err, sizeof(err));
    if (r.model) {
        if (strlen(r.model) != r.model_len)
            abort();
        check_components(r.model, r.model_len);
    }
    if ((k == ROUTE_HUB_FILE || k == ROUTE_HUB_TREE) && r.name) {
        if (strlen(r.name) != r.name_len)
            abort();
        check_components(r.name, r.name_len);
    }
    if (k != ROUTE_BAD_PATH && r.rev && (strlen(r.rev) != r.rev_len || r.rev_len == 0))
        abort();
    if (k == ROUTE_FILE || k == ROUTE_FILE_HEADER) {
        check_components(r.name, r.name_len);
        if (memchr(r.name, '/', r.name_len))
            abort();
    }
    route_free(&r);
    size_t n;
    free(pct_decode((const char *)data, size, 0, &n));
    free(path);
    return 0;
}
