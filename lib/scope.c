/* scope.c - scopes for temporaries: a per-thread stack of scopes, each a list of the tensors
 * created on that thread while it was the innermost; kiln_scope_end releases their creation
 * references. One process-wide lock guards every list, the registry of open scopes and every
 * tensor's scope pointer, since a tensor may be released (and so leave its scope) on any thread.
 *
 * A kiln_scope handle is not the scope's memory: it is the scope's serial number, never reused,
 * looked up in the registry of open scopes. So a handle used after its scope ended (ended twice,
 * or an inner scope that its outer one's end ended) is recognised without reading freed memory,
 * and can never name a later scope that happens to get the same memory. */
#include "scope.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "alloc.h"
#include "live.h"
#include "status.h"
#include "tensor.h"

struct kiln__scope_rec {
    uintptr_t serial;                  /* the handle's value */
    struct kiln__scope_rec *parent;    /* the enclosing scope of the same thread */
    struct kiln__scope_rec *next_open; /* the registry of open scopes */
    kiln_tensor *head;                 /* the tensors it owns (t->scope_next) */
};
typedef struct kiln__scope_rec scope_rec;

static pthread_mutex_t scope_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local scope_rec *top;
static scope_rec *open_scopes; /* every thread's open scopes, under scope_lock */
static uintptr_t last_serial;  /* under scope_lock */
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
static void link_into(scope_rec *sc, kiln_tensor *t)
{
    t->scope_prev = NULL;
    t->scope_next = sc->head;
    if (sc->head)
        sc->head->scope_prev = t;
    sc->head = t;
    atomic_store(&t->scope, sc);
}

static void unlink_from(scope_rec *sc, kiln_tensor *t)
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
    scope_rec *sc = atomic_load(&t->scope);
    if (sc)
        unlink_from(sc, t);
    pthread_mutex_unlock(&scope_lock);
}

static kiln_scope *handle_of(const scope_rec *sc)
{
    return (kiln_scope *)sc->serial;
}

/* The open scope that handle names, or NULL (never begun, ended, or forged). With the lock
 * held; the handle itself is never dereferenced. */
static scope_rec *find_open(const kiln_scope *handle)
{
    for (scope_rec *sc = open_scopes; sc; sc = sc->next_open)
        if (handle_of(sc) == handle)
            return sc;
    return NULL;
}

/* Tensors' events, from tensor.c (hooks): a new tensor joins the innermost scope; the release
 * of a scoped tensor is that of the scope's (creation) reference; a dead one leaves. */
static void released(kiln_tensor *t)
{
    if (!suspended)
        kiln__scope_forget(t);
}

static void register_hooks(void)
{
    kiln__tensor_hooks_add(&(kiln__tensor_hooks){
        .born = kiln__scope_adopt, .released = released, .dead = kiln__scope_forget});
}

static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

kiln_status kiln_scope_begin(kiln_scope **out)
{
    pthread_once(&hooks_once, register_hooks);
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_scope_begin: out is NULL");
    *out = NULL;
    scope_rec *sc = kiln__calloc(1, sizeof *sc);
    if (!sc)
        return kiln__host_oom("kiln_scope_begin");
    kiln__live_add(KILN__LIVE_SCOPE, 1);
    pthread_mutex_lock(&scope_lock);
    /* Serial numbers are even and never 0, so that no handle is NULL or a small-integer lookalike
     * of a real pointer's low bits; 2^63 scopes before one could repeat. */
    last_serial += 2;
    sc->serial = last_serial;
    sc->next_open = open_scopes;
    open_scopes = sc;
    pthread_mutex_unlock(&scope_lock);
    sc->parent = top;
    top = sc;
    *out = handle_of(sc);
    return KILN_OK;
}

static kiln_status not_open(const kiln_scope *scope, const char *op)
{
    if (!scope)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: scope is NULL", op);
    return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                       "%s: scope %p is not open: it has ended (ended twice, or ended by the end "
                       "of a scope around it) or is not a handle from kiln_scope_begin",
                       op, (const void *)scope);
}

kiln_status kiln_scope_keep(kiln_scope *scope, kiln_tensor *t)
{
    const char *op = "kiln_scope_keep";
    kiln_status s = kiln__check_handle(t, op, "tensor");
    if (s != KILN_OK)
        return s;
    pthread_mutex_lock(&scope_lock);
    scope_rec *sc = find_open(scope);
    bool mine = sc && atomic_load(&t->scope) == sc;
    if (mine) {
        unlink_from(sc, t);
        if (sc->parent)
            link_into(sc->parent, t);
    }
    pthread_mutex_unlock(&scope_lock);
    if (!sc)
        return not_open(scope, op);
    if (!mine)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: the tensor does not belong to this scope (it was created outside "
                           "it, in an inner scope, or was already kept or released)",
                           op);
    return KILN_OK;
}

/* End one scope (the innermost of this thread): release what it owns. */
static void end_one(scope_rec *sc)
{
    pthread_mutex_lock(&scope_lock);
    scope_rec **p = &open_scopes;
    while (*p != sc)
        p = &(*p)->next_open;
    *p = sc->next_open;
    kiln_tensor *list = sc->head;
    sc->head = NULL;
    for (kiln_tensor *t = list; t; t = t->scope_next)
        atomic_store(&t->scope, NULL);
    pthread_mutex_unlock(&scope_lock);
    top = sc->parent;
    bool was_ending = kiln__tensor_scope_ending(true);
    while (list) {
        kiln_tensor *t = list;
        list = t->scope_next;
        t->scope_next = t->scope_prev = NULL;
        kiln__tensor_drop(t);
    }
    kiln__tensor_scope_ending(was_ending);
    free(sc);
    kiln__live_add(KILN__LIVE_SCOPE, -1);
}

void kiln_scope_end(kiln_scope *scope)
{
    const char *op = "kiln_scope_end";
    if (!scope)
        return;
    /* This thread's open scopes are its own stack: no lock needed to search it. */
    scope_rec *sc = top;
    while (sc && handle_of(sc) != scope)
        sc = sc->parent;
    if (!sc) {
        pthread_mutex_lock(&scope_lock);
        bool elsewhere = find_open(scope) != NULL;
        pthread_mutex_unlock(&scope_lock);
        if (elsewhere)
            kiln__error(KILN_ERR_STATE,
                        "%s: scope %p is not open on this thread (a scope ends on the thread "
                        "that began it); ignored",
                        op, (void *)scope);
        else
            not_open(scope, op);
        kiln__log_last_error(KILN_LOG_ERROR);
        return;
    }
    if (top != sc) {
        kiln__error(KILN_ERR_STATE,
                    "%s: scope %p is not the innermost scope of this thread; ending the scopes "
                    "begun inside it first",
                    op, (void *)scope);
        kiln__log_last_error(KILN_LOG_ERROR);
        while (top != sc)
            end_one(top);
    }
    end_one(sc);
}
