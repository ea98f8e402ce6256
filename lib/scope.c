/* scope.c - scopes for temporaries: a per-thread stack of scopes, each a list of the tensors
 * created on that thread while it was the innermost; kiln_scope_end releases their creation
 * references. One process-wide lock guards every list and every tensor's scope pointer, since a
 * tensor may be released (and so leave its scope) on any thread. */
#include "scope.h"

#include <pthread.h>
#include <stdlib.h>

#include "alloc.h"
#include "status.h"
#include "tensor.h"

#define KILN__SCOPE_MAGIC 0x6b73636fu /* "ksco" */

struct kiln_scope {
    uint32_t magic;
    kiln_scope *parent;
    kiln_tensor *head; /* the tensors it owns (t->scope_next) */
};

static pthread_mutex_t scope_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local kiln_scope *top;
static _Thread_local bool suspended;

bool kiln__scope_suspend(void)
{
    bool prev = suspended;
    suspended = true;
    return prev;
}

void kiln__scope_resume(bool prev)
{
    suspended = prev;
}

bool kiln__scope_suspended(void)
{
    return suspended;
}

bool kiln__scope_active(void)
{
    return top && !suspended;
}

/* With the lock held. */
static void link_into(kiln_scope *sc, kiln_tensor *t)
{
    t->scope_prev = NULL;
    t->scope_next = sc->head;
    if (sc->head)
        sc->head->scope_prev = t;
    sc->head = t;
    atomic_store(&t->scope, sc);
}

static void unlink_from(kiln_scope *sc, kiln_tensor *t)
{
    if (t->scope_prev)
        t->scope_prev->scope_next = t->scope_next;
    else
        sc->head = t->scope_next;
    if (t->scope_next)
        t->scope_next->scope_prev = t->scope_prev;
    t->scope_prev = t->scope_next = NULL;
    atomic_store(&t->scope, NULL);
}

void kiln__scope_adopt(kiln_tensor *t)
{
    if (!top || suspended)
        return;
    pthread_mutex_lock(&scope_lock);
    link_into(top, t);
    pthread_mutex_unlock(&scope_lock);
}

void kiln__scope_forget(kiln_tensor *t)
{
    /* A tensor outside every scope cannot enter one concurrently (only its creating call or a
     * kiln_scope_keep of a scoped tensor puts one in), so NULL needs no lock. */
    if (!t || !atomic_load(&t->scope))
        return;
    pthread_mutex_lock(&scope_lock);
    kiln_scope *sc = atomic_load(&t->scope);
    if (sc)
        unlink_from(sc, t);
    pthread_mutex_unlock(&scope_lock);
}

kiln_status kiln_scope_begin(kiln_scope **out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_scope_begin: out is NULL");
    *out = NULL;
    kiln_scope *sc = kiln__calloc(1, sizeof *sc);
    if (!sc)
        return kiln__host_oom("kiln_scope_begin");
    sc->magic = KILN__SCOPE_MAGIC;
    sc->parent = top;
    top = sc;
    *out = sc;
    return KILN_OK;
}

static kiln_status check_scope(const kiln_scope *sc, const char *op)
{
    if (!sc)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: scope is NULL", op);
    if (sc->magic != KILN__SCOPE_MAGIC)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: scope (%p) is not an open scope from kiln_scope_begin", op,
                           (const void *)sc);
    return KILN_OK;
}

kiln_status kiln_scope_keep(kiln_scope *scope, kiln_tensor *t)
{
    const char *op = "kiln_scope_keep";
    kiln_status s = check_scope(scope, op);
    if (s == KILN_OK)
        s = kiln__check_handle(t, op, "tensor");
    if (s != KILN_OK)
        return s;
    pthread_mutex_lock(&scope_lock);
    bool mine = atomic_load(&t->scope) == scope;
    if (mine) {
        unlink_from(scope, t);
        if (scope->parent)
            link_into(scope->parent, t);
    }
    pthread_mutex_unlock(&scope_lock);
    if (!mine)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the tensor does not belong to this scope (it was created outside "
                           "it, in an inner scope, or was already kept or released)",
                           op);
    return KILN_OK;
}

/* End one scope (the innermost of this thread): release what it owns. */
static void end_one(kiln_scope *sc)
{
    pthread_mutex_lock(&scope_lock);
    kiln_tensor *list = sc->head;
    sc->head = NULL;
    for (kiln_tensor *t = list; t; t = t->scope_next)
        atomic_store(&t->scope, NULL);
    pthread_mutex_unlock(&scope_lock);
    top = sc->parent;
    sc->magic = 0;
    while (list) {
        kiln_tensor *t = list;
        list = t->scope_next;
        t->scope_next = t->scope_prev = NULL;
        kiln__tensor_drop(t);
    }
    free(sc);
}

void kiln_scope_end(kiln_scope *scope)
{
    const char *op = "kiln_scope_end";
    if (!scope)
        return;
    if (check_scope(scope, op) != KILN_OK) {
        kiln__log_last_error(KILN_LOG_ERROR);
        return;
    }
    kiln_scope *sc = top;
    while (sc && sc != scope)
        sc = sc->parent;
    if (!sc) {
        kiln__error(KILN_ERR_STATE,
                    "%s: scope %p is not open on this thread (a scope ends on the thread that "
                    "began it); ignored",
                    op, (void *)scope);
        kiln__log_last_error(KILN_LOG_ERROR);
        return;
    }
    if (top != scope) {
        kiln__error(KILN_ERR_STATE,
                    "%s: scope %p is not the innermost scope of this thread; ending the scopes "
                    "begun inside it first",
                    op, (void *)scope);
        kiln__log_last_error(KILN_LOG_ERROR);
        while (top != scope)
            end_one(top);
    }
    end_one(scope);
}
