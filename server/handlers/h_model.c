/* h_model: the routes of one model once it is found (a model of the
 * models root, or a mirrored one: server/handlers/h_mirror_v1.c): its
 * description and merged header, its files, tensors and fetches. */
#include "handlers.h"
#include "route.h"

struct answer *handle_model_route(const struct request_view *v, struct answer *a,
                                  const struct route *rt, const struct reg_model *m,
                                  const struct model_files *mf)
{
    if (rt->kind == ROUTE_MODEL)
        return handle_model(v, a, m, 0);
    if (m->state != MODEL_READY)
        return answer_error(a, HTTP_CONFLICT, "model_invalid", "model \"%.300s\" is invalid: %s",
                            m->name, m->error.message);
    switch (rt->kind) {
    case ROUTE_MODEL_HEADER:
        return handle_model(v, a, m, 1);
    case ROUTE_FILE:
    case ROUTE_FILE_HEADER: {
        const struct reg_file *f = reg_model_find_file(m, rt->name, rt->name_len);
        if (!f)
            return answer_error(a, HTTP_NOT_FOUND, "file_not_found",
                                "model \"%.300s\" has no file \"%.300s\"", m->name, rt->name);
        return handle_file(v, a, m, f, rt->kind == ROUTE_FILE_HEADER, mf);
    }
    case ROUTE_FETCH:
        return handle_fetch(v, a, m, mf);
    case ROUTE_TENSOR: {
        const struct reg_tensor *t = reg_model_find_tensor(m, rt->name, rt->name_len);
        if (!t)
            return answer_error(a, HTTP_NOT_FOUND, "tensor_not_found",
                                "model \"%.300s\" has no tensor \"%.300s\"", m->name, rt->name);
        return handle_tensor(v, a, m, t, mf);
    }
    default:
        return answer_error(a, HTTP_NOT_FOUND, "not_found", "no such endpoint");
    }
}
