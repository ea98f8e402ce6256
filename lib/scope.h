/* scope.h - scopes for temporaries (kiln_scope_*): every tensor a thread creates inside a scope
 * belongs to it until the scope ends. Internal: not part of the public API. */
#ifndef KILN_SCOPE_H
#define KILN_SCOPE_H

#include <stdbool.h>

#include "kiln.h"

/* Take t out of the scope it was created in, if any: the caller now owns the creation
 * reference. kiln itself calls this for every tensor it creates and keeps past the call that
 * created it (a leaf's gradient, an optimizer's moments, a layer's weights), so that the end of
 * a user's scope never releases a tensor kiln still holds. */
void kiln__scope_forget(kiln_tensor *t);

/* For every new tensor header (a hook of tensor.c's): put t into the calling thread's
 * innermost scope, if one is open and scopes are not suspended. */
void kiln__scope_adopt(kiln_tensor *t);

/* Suspend scopes on this thread (kiln_backward does, around its work): tensors created are
 * owned by the code that creates them, and kiln_tensor_release only drops a reference (see
 * kiln__tensor_drop). Returns the previous state for kiln__scope_resume. */
bool kiln__scope_suspend(void);
void kiln__scope_resume(bool prev);
bool kiln__scope_suspended(void);

/* Whether the calling thread has a scope open (and not suspended). */
bool kiln__scope_active(void);

#endif
