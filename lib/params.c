/* params.c - a named list of tensors (a model's parameters, an optimizer's state): what layers
 * add their weights to, what optimizers step and what checkpoints save. */
#include <stdlib.h>
#include <string.h>

#include "params.h"

#include "alloc.h"
#include "checkpoint.h"
#include "scope.h"
#include "status.h"
#include "tensor.h"

struct kiln_params {
    int n, cap;
    char **names;
    kiln_tensor **tensors;
};

kiln_status kiln_params_create(kiln_params **out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_params_create: out is NULL");
    *out = kiln__calloc(1, sizeof **out);
    return *out ? KILN_OK : kiln__host_oom("kiln_params_create");
}

static int index_of(const kiln_params *p, const char *name)
{
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->names[i], name) == 0)
            return i;
    return -1;
}

static bool grow(kiln_params *p)
{
    if (p->n < p->cap)
        return true;
    int cap = p->cap ? 2 * p->cap : 8;
    char **names = kiln__realloc(p->names, (size_t)cap * sizeof *names);
    if (!names)
        return false;
    p->names = names;
    kiln_tensor **tensors = kiln__realloc(p->tensors, (size_t)cap * sizeof(kiln_tensor *));
    if (!tensors)
        return false;
    p->tensors = tensors;
    p->cap = cap;
    return true;
}

kiln_status kiln_params_add(kiln_params *p, const char *name, kiln_tensor *t)
{
    static const char op[] = "kiln_params_add";
    if (!p || !name)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op,
                           !p ? "the list" : "name");
    kiln_status s = kiln__check_handle(t, op, "t");
    if (s != KILN_OK)
        return s;
    if (!name[0])
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the name is empty", op);
    if (index_of(p, name) >= 0)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the list already holds a tensor named '%s'", op, name);
    char *copy = kiln__strdup(name);
    if (!copy || !grow(p)) {
        free(copy);
        return kiln__host_oom(op);
    }
    p->names[p->n] = copy;
    p->tensors[p->n] = kiln_tensor_retain(t);
    p->n++;
    return KILN_OK;
}

int kiln_params_count(const kiln_params *p)
{
    return p ? p->n : 0;
}

const char *kiln_params_name(const kiln_params *p, int i)
{
    return p && i >= 0 && i < p->n ? p->names[i] : NULL;
}

kiln_tensor *kiln_params_tensor(const kiln_params *p, int i)
{
    return p && i >= 0 && i < p->n ? p->tensors[i] : NULL;
}

kiln_tensor *kiln_params_find(const kiln_params *p, const char *name)
{
    int i = p && name ? index_of(p, name) : -1;
    return i >= 0 ? p->tensors[i] : NULL;
}

void kiln_params_free(kiln_params *p)
{
    if (!p)
        return;
    kiln__params_truncate(p, 0);
    free(p->names);
    free(p->tensors);
    free(p);
}

/* The list as kiln_save / kiln_load_into take it (borrowed names and tensors). */
static kiln_status as_named(const kiln_params *p, const char *op, kiln_named_tensor **out)
{
    *out = NULL;
    if (!p)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the list is NULL", op);
    if (p->n == 0)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the list is empty", op);
    kiln_named_tensor *named = kiln__calloc((size_t)p->n, sizeof *named);
    if (!named)
        return kiln__host_oom(op);
    for (int i = 0; i < p->n; i++)
        named[i] = (kiln_named_tensor){.name = p->names[i], .tensor = p->tensors[i]};
    *out = named;
    return KILN_OK;
}

kiln_status kiln_params_save(const kiln_params *p, const char *path)
{
    kiln_named_tensor *named;
    kiln_status s = as_named(p, "kiln_params_save", &named);
    if (s == KILN_OK)
        s = kiln__checkpoint_support("kiln_params_save");
    if (s == KILN_OK)
        s = kiln_save(path, named, p->n);
    free(named);
    return s;
}

/* kiln_params_load and kiln_params_load_flags: strict unless flags say otherwise. */
static kiln_status load(const char *op, const kiln_params *p, const char *path,
                        kiln_load_flags flags)
{
    kiln_named_tensor *named;
    kiln_status s = as_named(p, op, &named);
    unsigned known = KILN_LOAD_NON_STRICT | KILN_LOAD_CONVERT_DTYPE;
    if (s == KILN_OK && ((unsigned)flags & ~known))
        s = kiln__error(KILN_ERR_INVALID_ARGUMENT,
                        "%s: unknown flag bits 0x%x; the flags are KILN_LOAD_NON_STRICT and "
                        "KILN_LOAD_CONVERT_DTYPE",
                        op, (unsigned)flags & ~known);
    if (s == KILN_OK)
        s = kiln__checkpoint_support(op);
    unsigned mode =
        (flags & KILN_LOAD_NON_STRICT) ? KILN__LOAD_ALLOW_MISSING : KILN__LOAD_REJECT_UNEXPECTED;
    if (flags & KILN_LOAD_CONVERT_DTYPE)
        mode |= KILN__LOAD_CONVERT;
    if (s == KILN_OK)
        s = kiln__load_into(op, path, named, p->n, mode);
    free(named);
    return s;
}

kiln_status kiln_params_load(const kiln_params *p, const char *path)
{
    return load("kiln_params_load", p, path, 0);
}

kiln_status kiln_params_load_flags(const kiln_params *p, const char *path, kiln_load_flags flags)
{
    return load("kiln_params_load_flags", p, path, flags);
}

void kiln__params_truncate(kiln_params *p, int n)
{
    while (p->n > n) {
        p->n--;
        free(p->names[p->n]);
        kiln__tensor_drop(p->tensors[p->n]); /* retained: a scope's reference stays */
    }
}
