/* scope.h - scopes for temporaries (kiln_scope_*): every tensor a thread creates inside a scope
 * belongs to it until the scope ends. Internal: not part of the public API. */
#ifndef KILN_SCOPE_H
#define KILN_SCOPE_H

#include "kiln.h"

/* Take t out of the scope it was created in, if any: the caller now owns the creation
 * reference. kiln itself calls this for every tensor it creates and keeps past the call that
 * created it (a leaf's gradient, an optimizer's moments, a layer's weights), so that the end of
 * a user's scope never releases a tensor kiln still holds. */
void kiln__scope_forget(kiln_tensor *t);

#endif
