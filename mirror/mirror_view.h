/* mirror_view: the upstream's repos and models as the mirror's own routes
 * serve them (the /v1 API and the S3 API, server/handlers/h_mirror_v1.c and
 * h_mirror_s3.c), asked of the upstream with upstream_token_file's token.
 *
 * A snap is a repo at the commit its main branch names: the repo's
 * document (every file with its size and hash). A view is a model of it:
 * a repo ("org/name", or "name") or one of its directories ("org/name/dir",
 * for a repo of several models), built over the cache from its weight
 * files' headers (mirror/mirror_model.h) and holding nothing of the cache:
 * each answer opens the files it reads. Both are refcounted, immutable,
 * and kept in maps (at most MIRROR_SNAPS_MAX and MIRROR_VIEWS_MAX, and
 * about MIRROR_SNAPS_BYTES and MIRROR_VIEWS_BYTES of memory, whatever the
 * upstream's documents and headers hold: the least recently used go
 * first); a view holds its snap.
 *
 * Names: what main is now is asked again once the answer is older than
 * mirror_auth_ttl (a job, mirror/mirror_job.h); a commit that did not
 * change keeps its view, whose model and documents were made once. When
 * the upstream cannot be reached, the last repo document it gave is used
 * (mirror_repo_fetch), and the snap says how old it is: answers from it
 * are marked stale. The maps' one mutex is a leaf. */
#ifndef TENSORD_MIRROR_VIEW_H
#define TENSORD_MIRROR_VIEW_H

#include <stdint.h>

#include "mirror_model.h"
#include "mirror_repo.h"
#include "st_error.h"

struct mirror;
struct mirror_job;
struct mirror_snap;
struct mirror_view;
struct mirror_views;

#define MIRROR_SNAPS_MAX 64
#define MIRROR_SNAPS_BYTES (256ull << 20) /* their documents' memory, about */
#define MIRROR_VIEWS_MAX 32
#define MIRROR_VIEWS_BYTES (512ull << 20) /* their models' memory, about (headers' text) */

struct mirror_views *mirror_views_new(void);
void mirror_views_free(struct mirror_views *vs);

/* ---- snaps: repos ---- */

/* repo's snap when the mirror has one younger than mirror_auth_ttl, with a
 * reference; else NULL (ask with mirror_job_snap). */
struct mirror_snap *mirror_snap_find(struct mirror *m, const char *repo);
/* A job asking the upstream what repo's main is (cb as for
 * mirror_job_submit; NULL with *why as it). */
struct mirror_job *mirror_job_snap(struct mirror *m, uint64_t client, const char *repo,
                                   void (*cb)(void *arg), void *arg, int *why);
/* Whether j is a view job (snap 0) or a snap job (snap 1). */
int mirror_job_runs_view(const struct mirror_job *j, int snap);
/* Its outcome: 0 and a reference to the snap, or -errno with err as
 * mirror_repo_fetch's. */
int mirror_job_snap_take(struct mirror_job *j, struct mirror_snap **out, struct st_error *err);
void mirror_snap_unref(struct mirror_snap *s);
const char *mirror_snap_repo(const struct mirror_snap *s);
const struct mirror_repo *mirror_snap_doc(const struct mirror_snap *s);
/* -1 when the upstream gave its document within mirror_auth_ttl, else the
 * seconds since it gave the one kept (it cannot be reached). */
int64_t mirror_snap_age(const struct mirror_snap *s);

/* ---- views: models ---- */

/* The view of model `name` when the repo's snap is younger than
 * mirror_auth_ttl and names the commit the view was built at, and what
 * its headers said still stands (mirror_model_current): a reference,
 * and *age the snap's (mirror_snap_age); else NULL (ask with
 * mirror_job_view). */
struct mirror_view *mirror_view_find(struct mirror *m, const char *name, int64_t *age);
struct mirror_job *mirror_job_view(struct mirror *m, uint64_t client, const char *name,
                                   void (*cb)(void *arg), void *arg, int *why);
/* Its outcome: 0, a reference to the view and *age (its snap's), or
 * -errno with err (ST_ERR_NOT_FOUND: no such repo, or no model there;
 * others as mirror_model_build). */
int mirror_job_view_take(struct mirror_job *j, struct mirror_view **out, int64_t *age,
                         struct st_error *err);
void mirror_view_unref(struct mirror_view *v);
struct mirror_model *mirror_view_model(const struct mirror_view *v);

/* The cache's file of the model's file rf for one reader (fetched with the
 * mirror's own token), with a reference the caller releases; NULL with err
 * as mirror_open. */
struct mirror_file *mirror_view_open(struct mirror *m, const struct mirror_view *v,
                                     const struct reg_file *rf, struct st_error *err);
/* The same for another file of the model's directory in the repo (name:
 * config.json, ...): NULL with err ST_ERR_NOT_FOUND when there is none
 * with a hash the mirror can check. */
struct mirror_file *mirror_view_open_other(struct mirror *m, const struct mirror_view *v,
                                           const char *name, struct st_error *err);

#endif
