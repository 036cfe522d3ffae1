/* h_whoami: GET /api/whoami-v2, who a bearer token is, in the Hub's shape:
 * what `hf auth login --token` and HfApi().whoami() read to check a token
 * and to name it (auth.accessToken.displayName) before they store it. A
 * tensord token is no user: the document names the daemon and the token's
 * role, and says nothing else about anyone. */
#include "handlers.h"
#include "jsonw.h"

struct answer *handle_hub_whoami(const struct request_view *v, struct answer *a, int sent,
                                 enum auth_role role)
{
    (void)v;
    /* The dispatcher refused a wrong token already; with tokens off every
     * request may do everything, but "who am I" still needs a token to
     * name, as on the Hub. */
    if (!sent || role == AUTH_NONE)
        return answer_hub_error(a, HTTP_UNAUTHORIZED, NULL, 0,
                                "a bearer token is required (Authorization: Bearer TOKEN)");
    const char *name = role == AUTH_ADMIN ? "tensord-admin" : "tensord-read";
    struct jsonw w = JSONW_INIT;
    jsonw_obj(&w);
    jsonw_kstr(&w, "type", "user");
    jsonw_kstr(&w, "id", name);
    jsonw_kstr(&w, "name", name);
    jsonw_kstr(&w, "fullname", role == AUTH_ADMIN ? "tensord admin token" : "tensord read token");
    jsonw_kbool(&w, "isPro", 0);
    jsonw_kbool(&w, "canPay", 0);
    jsonw_kbool(&w, "emailVerified", 0);
    jsonw_karr(&w, "orgs");
    jsonw_arr_end(&w);
    jsonw_kobj(&w, "auth");
    jsonw_kstr(&w, "type", "access_token");
    jsonw_kobj(&w, "accessToken");
    jsonw_kstr(&w, "displayName", name);
    /* tensord's roles: "read" reads everything, "admin" also preloads and
     * evicts (and is every request's when tokens are off). */
    jsonw_kstr(&w, "role", role == AUTH_ADMIN ? "admin" : "read");
    jsonw_obj_end(&w);
    jsonw_obj_end(&w);
    jsonw_obj_end(&w);
    answer_jsonw(a, HTTP_OK, &w);
    /* an answer about a credential: no cache keeps it */
    if (a->kind == ANSWER_BODY)
        a->rep.cache_control = "private, no-store";
    return a;
}
