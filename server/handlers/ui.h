/* ui: the web console at /ui/, a single page served from the binary (its
 * files are compiled in by server/handlers/ui/embed.py). The page reads the public
 * JSON API with the visitor's token; serving it needs none. */
#ifndef TENSORD_UI_H
#define TENSORD_UI_H

#include <stddef.h>

struct ui_asset {
    const char *name;                 /* "" for the page, else the file's base name */
    const char *content_type;
    const unsigned char *data;
    size_t len;
    const char *etag;                 /* strong and quoted: a hash of the bytes */
    const unsigned char *gzip;        /* the bytes as one gzip member (level 9, made by
                                       * embed.py), sent to clients that accept it */
    size_t gzip_len;
};

/* The generated table (build/gen/ui_assets.c). */
extern const struct ui_asset ui_assets[];
extern const size_t ui_assets_count;
/* The OpenAPI description, "openapi.json" (build/gen/openapi_assets.c,
 * made by server/handlers/openapi/build.py). */
extern const struct ui_asset openapi_assets[];
extern const size_t openapi_assets_count;

#endif
