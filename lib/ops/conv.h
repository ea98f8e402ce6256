/* conv.h - the adjoint of kiln_conv2d's im2col, for its gradient (lib/autograd_grads.c). */
#ifndef KILN_OPS_CONV_H
#define KILN_OPS_CONV_H

#include "autograd.h"
#include "kiln.h"

/* The geometry a node of kind KILN__AG_IM2COL keeps in its args: perm[0..7] = kh, kw, stride h,
 * stride w, padding h, padding w, dilation h, dilation w; op = groups. */

/* dx [N, C, H, W] (x's shape, g's dtype and device) from the gradient g of im2col's columns
 * [G, C/G KH KW, N OH OW]: each element the sum of the columns' entries that read it. */
kiln_status kiln__col2im(const kiln_tensor *g, const kiln_tensor *x, const kiln__ag_args *geom,
                         kiln_tensor **dx);

/* The gradients of kiln_max_pool2d (each window's maximum found again in x, as the forward
 * found it) and kiln_avg_pool2d for x of the node, g of the output's shape; geom perm[0..5] =
 * KH, KW, SH, SW, PH, PW. */
kiln_status kiln__max_pool2d_bw(const kiln_tensor *g, const kiln_tensor *x,
                                const kiln__ag_args *geom, kiln_tensor **dx);
kiln_status kiln__avg_pool2d_bw(const kiln_tensor *g, const kiln_tensor *x,
                                const kiln__ag_args *geom, kiln_tensor **dx);

#endif
