/*
 * depthwise.c - direct depthwise conv2d (one input channel per group), NCHW.
 *
 * Depthwise convs skip im2col and GEMM: each tap is one pass along an output row
 * (vectorised along x), as in pooling. The caller (lgk_conv2d_nchw) has checked
 * the shapes and buffer sizes.
 */
#include <string.h>

#include "lgk_internal.h"

/* ---- depthwise: direct ------------------------------------------------------------ */

/* A depthwise step computes DW_ROWS output rows x DW_LANES pixels at once, in
 * registers, over every tap: independent accumulators hide the FMA latency. */
#define DW_LANES 8
#define DW_ROWS 4

typedef float dw_vec __attribute__((vector_size(DW_LANES * sizeof(float))));

typedef struct {
    const lgk_conv2d_params *p;
    int64_t oh, ow, og; /* og: filters per input channel (the depth multiplier) */
    int64_t ph, pw;     /* the zero-padded copy of an input plane */
    const float *x, *w, *bias;
    float *y;
    int activation;
} dw_job;

/* *v = DW_LANES taps `sw` apart from s (sw a constant 1 or 2 where inlined). Vectors
 * go by pointer: by value their ABI would differ between the SIMD clones. */
static inline __attribute__((always_inline)) void dw_load(dw_vec *v, const float *s, int64_t sw)
{
    if (sw == 1) {
        memcpy(v, s, sizeof *v);
    } else if (sw == 2) {
        dw_vec lo, hi;
        memcpy(&lo, s, sizeof lo);
        memcpy(&hi, s + DW_LANES, sizeof hi);
#if defined(__clang__)
        *v = __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14);
#else
        typedef int dw_mask __attribute__((vector_size(DW_LANES * sizeof(int))));
        *v = __builtin_shuffle(lo, hi, (dw_mask){0, 2, 4, 6, 8, 10, 12, 14});
#endif
    } else {
        for (int t = 0; t < DW_LANES; ++t)
            (*v)[t] = s[t * sw];
    }
}

/* acc[r] += every tap of the block of output row r, whose first window starts at
 * src + r * out_step. Always inlined with sw a constant where it is 1 or 2. */
static inline __attribute__((always_inline)) void
dw_taps(dw_vec *acc, const float *src, const float *wk, const lgk_conv2d_params *p,
        int64_t pw, int64_t out_step, int64_t sw)
{
    for (int64_t ki = 0; ki < p->kh; ++ki)
        for (int64_t kj = 0; kj < p->kw; ++kj) {
            float wv = wk[ki * p->kw + kj];
            const float *s = src + ki * p->dilation_h * pw + kj * p->dilation_w;
            for (int r = 0; r < DW_ROWS; ++r) {
                dw_vec v;
                dw_load(&v, s + r * out_step, sw);
                acc[r] += wv * v;
            }
        }
}

/* One output plane from a zero-padded copy of its input plane (`pad`, ph x pw, big
 * enough that the spare rows and lanes of the last blocks read inside it). */
LGK_CLONES static void dw_plane(const dw_job *j, int64_t plane, float *pad)
{
    const lgk_conv2d_params *p = j->p;
    int64_t img = plane / p->o, oc = plane % p->o, pw = j->pw, sw = p->stride_w;
    int64_t out_step = p->stride_h * pw;
    const float *xp = j->x + (img * p->c + oc / j->og) * p->h * p->w;
    const float *wk = j->w + oc * p->kh * p->kw;
    float *yp = j->y + plane * j->oh * j->ow;
    float b = j->bias != NULL ? j->bias[oc] : 0.0f;
    memset(pad, 0, (size_t)(j->ph * pw) * sizeof(float));
    for (int64_t iy = 0; iy < p->h; ++iy)
        memcpy(pad + (iy + p->pad_top) * pw + p->pad_left, xp + iy * p->w,
               (size_t)p->w * sizeof(float));
    for (int64_t oy = 0; oy < j->oh; oy += DW_ROWS) {
        int64_t rows = LGK_MIN((int64_t)DW_ROWS, j->oh - oy);
        for (int64_t ox0 = 0; ox0 < j->ow; ox0 += DW_LANES) {
            dw_vec acc[DW_ROWS];
            for (int r = 0; r < DW_ROWS; ++r)
                for (int t = 0; t < DW_LANES; ++t)
                    acc[r][t] = b;
            const float *src = pad + oy * out_step + ox0 * sw;
            if (sw == 1)
                dw_taps(acc, src, wk, p, pw, out_step, 1);
            else if (sw == 2)
                dw_taps(acc, src, wk, p, pw, out_step, 2);
            else
                dw_taps(acc, src, wk, p, pw, out_step, sw);
            int64_t n = LGK_MIN((int64_t)DW_LANES, j->ow - ox0);
            for (int64_t r = 0; r < rows; ++r)
                memcpy(yp + (oy + r) * j->ow + ox0, &acc[r], (size_t)n * sizeof(float));
        }
    }
    lgk_activate(j->activation, yp, j->oh * j->ow);
}

static int dw_planes(void *ctx, int64_t begin, int64_t end)
{
    const dw_job *j = ctx;
    lgk_scratch pad = {NULL, 0};
    LGK_TRY(lgk_scratch_acquire(j->ph * j->pw, &pad));
    for (int64_t plane = begin; plane < end; ++plane)
        dw_plane(j, plane, pad.data);
    lgk_scratch_release(&pad);
    return LGK_OK;
}

/* Planes below this many multiply-adds per thread are not worth a thread. */
#define DW_MIN_WORK_PER_THREAD 32768

/* Extent of the padded plane along one dim: the padded input, and every tap of the
 * last block of `block` outputs (`extra` more floats for a wide strided load). */
static int dw_extent(int64_t in, int64_t pads, int64_t n_out, int64_t block, int64_t stride,
                     int64_t k, int64_t dil, int64_t extra, int64_t *out)
{
    int64_t blocks = (n_out + block - 1) / block, reach, padded;
    LGK_TRY(lgk_mul(blocks * block, stride, &reach));
    LGK_TRY(lgk_add(reach, (k - 1) * dil + 1 + extra, &reach));
    LGK_TRY(lgk_add(in, pads, &padded));
    *out = LGK_MAX(padded, reach);
    return LGK_OK;
}

int lgk_depthwise_conv2d(const lgk_conv2d_params *p, int64_t oh, int64_t ow, const float *x,
                         const float *w, const float *bias, float *y, int activation,
                         int nthreads)
{
    int64_t ph, pw, count;
    LGK_TRY(dw_extent(p->h, p->pad_top + p->pad_bottom, oh, DW_ROWS, p->stride_h, p->kh,
                      p->dilation_h, 0, &ph));
    LGK_TRY(dw_extent(p->w, p->pad_left + p->pad_right, ow, DW_LANES, p->stride_w, p->kw,
                      p->dilation_w, DW_LANES, &pw));
    LGK_TRY(lgk_mul(ph, pw, &count));
    dw_job j = {p, oh, ow, p->o / p->c, ph, pw, x, w, bias, y, activation};
    int64_t planes = p->n * p->o, work = planes * oh * ow * p->kh * p->kw;
    int threads = (int)LGK_MAX((int64_t)1, LGK_MIN((int64_t)nthreads,
                                                   work / DW_MIN_WORK_PER_THREAD));
    return lgk_parallel_for(threads, planes, 1, dw_planes, &j);
}
