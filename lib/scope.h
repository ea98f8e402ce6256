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

/* Called by the tensor code for every new tensor header: put t into the calling thread's
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

/* Drop a reference kiln took with kiln_tensor_retain (a saved input, a parameter list's entry):
 * unlike kiln_tensor_release, which releases a scoped tensor's creation reference and so takes
 * it out of its scope, this leaves the scope's reference alone. Every reference kiln retains
 * must be dropped with this. */
void kiln__tensor_drop(kiln_tensor *t);

/* The number of tensor headers alive in the process (created and not yet released). */
int64_t kiln__tensor_live(void);

#endif
