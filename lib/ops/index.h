/* index.h - the scatter-add behind the gradients of kiln_index_select and kiln_gather. */
#ifndef KILN_OPS_INDEX_H
#define KILN_OPS_INDEX_H

#include <stdbool.h>

#include "kiln.h"

/* A new tensor of g's shape with dimension axis (resolved) replaced by n, holding
 * out[..., k, ...] = sum of g[..., j, ...] over the j whose index is k (deterministic: one
 * work-item per column adds in j order). idx is 1-D (index_select's, per_element false) or of
 * g's shape (gather's, per_element true); an index outside [0, n) adds nothing. */
kiln_status kiln__index_add(const kiln_tensor *g, int axis, const kiln_tensor *idx,
                            bool per_element, int64_t n, kiln_tensor **out);

#endif
