/* lgk_qconv.h - the parts of the quantized conv (qconv.c) in files of their own, called
 * once it has checked the problem: the depthwise conv (qdwconv.c) and the GEMM with its
 * epilogue in registers on AVX-512 VNNI (qconv_vnni.c). */
#ifndef LGK_QCONV_H
#define LGK_QCONV_H

#include "lgk_qgemm.h"

/* y (n, c, oh, ow) = the depthwise conv (groups == c == o) of x (n, c, h, w) by w
 * (c, 1, kh, kw) under q (as lgk_qconv2d_nchw's). p, q and the buffers' sizes must
 * have been checked (lgk_conv2d_out_shape gave oh, ow; lgk_qparams_check passed for
 * o rows). Runs on the int8 GEMM's selected family (lgk_qgemm_isa). */
int lgk_qdwconv_nchw(const lgk_conv2d_params *p, int64_t oh, int64_t ow, const uint8_t *x,
                     const uint8_t *w, void *y, const lgk_qparams *q, int nthreads);

/* A conv's GEMM on the VNNI family: W (M filters x K taps) packed by lgk_qgemm_pack_a
 * (panels, and its row sums) under q (as lgk_qconv2d_nchw's), with the zero-point
 * correction's per-filter part, the multipliers and the output range made once per call
 * by lgk_qcv_prepare (release with lgk_qcv_release). */
typedef struct {
    int64_t M, K, k4;
    const uint8_t *panels;
    const int32_t *rowc; /* bias - zb (rowsum - K za), per filter */
    lgk_qexpanded ex;    /* zero points of the packed operands, multipliers, the flip of B */
    lgk_scratch rowc_scratch;
    int za_uniform;      /* every filter has the same packed zero point */
    size_t esize;
    float lo, hi;        /* the output range less its zero point */
} lgk_qcv;

int lgk_qcv_prepare(int64_t M, int64_t K, const uint8_t *panels, const int32_t *sums,
                    const lgk_qparams *q, lgk_qcv *c);
void lgk_qcv_release(lgk_qcv *c);
/* y[m * ldc + j] (j < n, of q's output type) from B's pixels [0, n): K rows of bytes of
 * q->b_type, row stride rs_b. */
int lgk_qcv_run(const lgk_qcv *c, const uint8_t *b, int64_t rs_b, int64_t n, void *y,
                int64_t ldc);

#endif /* LGK_QCONV_H */
