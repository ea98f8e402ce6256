/* conv.h - the gradients of kiln_conv2d's im2col, chunked and depthwise paths and of the poolings,
 * for lib/autograd_grads.c. */
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

/* The gradients of kiln_conv2d's depthwise path (node KILN__AG_CONV_DW: the geometry as above,
 * axis = the channel multiplier O / C) for x [N, C, H, W] and w [O, 1, KH, KW] from g
 * [N, O, OH, OW]: *dx when dx is not NULL, *dw when dw is not NULL (both NULL on failure). */
kiln_status kiln__conv_dw_bw(const kiln_tensor *g, const kiln_tensor *x, const kiln_tensor *w,
                             const kiln__ag_args *geom, kiln_tensor **dx, kiln_tensor **dw);

/* The gradients of kiln_conv2d's chunked path (one group; node KILN__AG_CONV_GEMM: the geometry
 * as above, axis = samples per chunk) for x [N, C, H, W] and w [O, C, KH, KW] from g
 * [N, O, OH, OW], a chunk at a time, the columns made again: *dx and *dw as for the depthwise
 * path. */
kiln_status kiln__conv_chunked_bw(const kiln_tensor *g, const kiln_tensor *x, const kiln_tensor *w,
                                  const kiln__ag_args *geom, kiln_tensor **dx, kiln_tensor **dw);

/* The gradients of kiln_max_pool2d (each window's maximum found again in x, as the forward
 * found it) and kiln_avg_pool2d for x of the node, g of the output's shape; geom perm[0..5] =
 * KH, KW, SH, SW, PH, PW. */
kiln_status kiln__max_pool2d_bw(const kiln_tensor *g, const kiln_tensor *x,
                                const kiln__ag_args *geom, kiln_tensor **dx);
kiln_status kiln__avg_pool2d_bw(const kiln_tensor *g, const kiln_tensor *x,
                                const kiln__ag_args *geom, kiln_tensor **dx);

#endif
