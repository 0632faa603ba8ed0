/* lgk_qdw.h - the quantized depthwise conv (qdwconv.c), called by qconv.c once it has
 * checked the problem. */
#ifndef LGK_QDW_H
#define LGK_QDW_H

#include "lgk_qgemm.h"

/* y (n, c, oh, ow) = the depthwise conv (groups == c == o) of x (n, c, h, w) by w
 * (c, 1, kh, kw) under q (as lgk_qconv2d_nchw's). p, q and the buffers' sizes must
 * have been checked (lgk_conv2d_out_shape gave oh, ow; lgk_qparams_check passed for
 * o rows). Runs on the int8 GEMM's selected family (lgk_qgemm_isa). */
int lgk_qdwconv_nchw(const lgk_conv2d_params *p, int64_t oh, int64_t ow, const uint8_t *x,
                     const uint8_t *w, void *y, const lgk_qparams *q, int nthreads);

#endif /* LGK_QDW_H */
