/*
 * qconv.c - quantized NCHW conv2d (ONNX QLinearConv / ConvInteger arithmetic).
 *
 * Grouped and dense convs are W @ im2col per image and group on the int8 GEMM
 * (qgemm.c): the weights are A (filters as rows, so per-filter zero points,
 * multipliers and biases are per-row parameters and the result lands in NCHW order),
 * the unfolded input is B with padding filled with the data zero point (whose shifted
 * value is 0, as in onnxruntime). A 1x1 conv with unit strides and no padding reads its
 * input in place. Depthwise convs (one filter per channel: groups == c == o) have no
 * GEMM worth the name (K = kh * kw) and run directly (qdwconv.c).
 */
#include <stdatomic.h>

#include "lgk_qconv.h"

/* ---- checks ------------------------------------------------------------------------------- */

typedef struct {
    const lgk_conv2d_params *p;
    int64_t oh, ow, cg, og, kg, plane_in, plane_out; /* kg: K of one group's GEMM */
} qconv_geom;

static int qconv_check(const lgk_conv2d_params *p, const void *x, int64_t x_len, void *y,
                       int64_t y_len, const lgk_qparams *q, qconv_geom *g)
{
    LGK_TRY(lgk_conv2d_out_shape(p, &g->oh, &g->ow));
    LGK_CHECK(q != NULL, LGK_ERR_NULL);
    lgk_qparams rows = *q;
    rows.per_row = 1; /* filters are the GEMM's rows */
    LGK_TRY(lgk_qparams_check(&rows, p->o, 1));
    g->p = p;
    g->cg = p->c / p->groups;
    g->og = p->o / p->groups;
    int64_t d1[3] = {g->cg, p->kh, p->kw}, d2[2] = {p->h, p->w}, d3[2] = {g->oh, g->ow};
    LGK_TRY(lgk_checked_count(3, d1, &g->kg));
    LGK_TRY(lgk_checked_count(2, d2, &g->plane_in));
    LGK_TRY(lgk_checked_count(2, d3, &g->plane_out));
    int64_t xd[4] = {p->n, p->c, p->h, p->w}, yd[4] = {p->n, p->o, g->oh, g->ow}, count;
    LGK_TRY(lgk_checked_count(4, xd, &count));
    LGK_TRY(lgk_check_buffer(x, x_len, count));
    LGK_TRY(lgk_checked_count(4, yd, &count));
    return lgk_check_buffer(y, y_len, count);
}

/* ---- im2col -------------------------------------------------------------------------------- */

/* Output columns [lo, hi) whose input column ox * s - pad + off lies in [0, w). */
static void valid_range(int64_t n_out, int64_t s, int64_t pad, int64_t off, int64_t w,
                        int64_t *lo, int64_t *hi)
{
    int64_t start = pad - off; /* ox * s >= start */
    *lo = start <= 0 ? 0 : (start + s - 1) / s;
    int64_t end = w + pad - off; /* ox * s < end */
    *hi = end <= 0 ? 0 : LGK_MIN(n_out, (end + s - 1) / s);
    *lo = LGK_MIN(*lo, *hi);
}

/* Output columns [ox0, ox1) of one row of an unfolded input: src[ox * s + off] for ox in
 * [lo, hi), the data zero point elsewhere (dst holds column ox0 first). Loops, not
 * memcpy/memset: rows are short (tens of bytes) and many. */
__attribute__((always_inline)) static inline void qim2col_row(uint8_t *restrict dst,
                                                              const uint8_t *restrict src,
                                                              int64_t ox0, int64_t ox1,
                                                              int64_t lo, int64_t hi, int64_t s,
                                                              int64_t off, uint8_t zp)
{
    lo = LGK_MIN(LGK_MAX(lo, ox0), ox1);
    hi = LGK_MIN(LGK_MAX(hi, lo), ox1);
    for (int64_t ox = ox0; ox < lo; ++ox)
        dst[ox - ox0] = zp;
    if (s == 1 && lo < hi) {
        const uint8_t *from = src + (lo + off);
        for (int64_t ox = lo; ox < hi; ++ox)
            dst[ox - ox0] = from[ox - lo];
    } else if (s == 2 && lo < hi) { /* a constant stride: the compiler vectorizes it */
        const uint8_t *from = src + (lo * 2 + off);
        uint8_t *to = dst + (lo - ox0);
        for (int64_t i = 0; i < hi - lo; ++i)
            to[i] = from[2 * i];
    } else {
        for (int64_t ox = lo; ox < hi; ++ox)
            dst[ox - ox0] = src[ox * s + off];
    }
    for (int64_t ox = hi; ox < ox1; ++ox)
        dst[ox - ox0] = zp;
}

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
#define QIM_X86 1
#define QIM_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

QIM_TARGET static inline __mmask64 qim_mask(int64_t count)
{
    return count >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << count) - 1;
}

/* qim2col_row with masked AVX-512 moves: a row of tens of bytes is one or two moves, where
 * the compiler's loops ran its bytes one at a time past the last whole vector (rows of 7-112
 * bytes; 60% of a stride-2 3x3 conv's time). Stride 2 reads 2 n - 1 bytes (never past the
 * last one it needs) and keeps the even ones (vpmovwb). */
QIM_TARGET static inline void qim2col_row_avx512(uint8_t *restrict dst, const uint8_t *restrict src,
                                                 int64_t ox0, int64_t ox1, int64_t lo,
                                                 int64_t hi, int64_t s, int64_t off,
                                                 uint8_t zp)
{
    lo = LGK_MIN(LGK_MAX(lo, ox0), ox1);
    hi = LGK_MIN(LGK_MAX(hi, lo), ox1);
    __m512i fill = _mm512_set1_epi8((char)zp);
    for (int64_t ox = ox0; ox < lo; ox += 64)
        _mm512_mask_storeu_epi8(dst + (ox - ox0), qim_mask(lo - ox), fill);
    for (int64_t ox = hi; ox < ox1; ox += 64)
        _mm512_mask_storeu_epi8(dst + (ox - ox0), qim_mask(ox1 - ox), fill);
    uint8_t *to = dst + (lo - ox0);
    const uint8_t *from = src + (lo * s + off);
    int64_t n = hi - lo;
    if (s == 1) {
        for (int64_t i = 0; i < n; i += 64)
            _mm512_mask_storeu_epi8(to + i, qim_mask(n - i),
                                    _mm512_maskz_loadu_epi8(qim_mask(n - i), from + i));
    } else if (s == 2) {
        for (int64_t i = 0; i < n; i += 32) {
            int64_t m = LGK_MIN(n - i, (int64_t)32);
            __m512i v = _mm512_maskz_loadu_epi8(qim_mask(2 * m - 1), from + 2 * i);
            _mm256_mask_storeu_epi8(to + i, (__mmask32)qim_mask(m), _mm512_cvtepi16_epi8(v));
        }
    } else {
        for (int64_t i = 0; i < n; ++i)
            to[i] = from[i * s];
    }
}
#endif

/* The loops of qim2col: output pixels [p0, p1) of the unfolded input (kg rows of p1 - p0
 * bytes) of channels [0, cg) of x; padding = zp byte. Inlined into the portable unfold and
 * the AVX-512 one (avx512 a constant there). */
__attribute__((always_inline)) static inline void
qim2col_loops(const qconv_geom *g, const uint8_t *x, uint8_t zp, int64_t p0, int64_t p1,
              uint8_t *col, int avx512)
{
    const lgk_conv2d_params *p = g->p;
    int64_t np = p1 - p0;
    for (int64_t ci = 0; ci < g->cg; ++ci)
        for (int64_t ki = 0; ki < p->kh; ++ki)
            for (int64_t kj = 0; kj < p->kw; ++kj) {
                uint8_t *row = col + ((ci * p->kh + ki) * p->kw + kj) * np;
                int64_t lo, hi, xoff = kj * p->dilation_w;
                valid_range(g->ow, p->stride_w, p->pad_left, xoff, p->w, &lo, &hi);
                for (int64_t oy = p0 / g->ow; oy * g->ow < p1; ++oy) {
                    int64_t iy = oy * p->stride_h - p->pad_top + ki * p->dilation_h;
                    int64_t ox0 = LGK_MAX(p0 - oy * g->ow, (int64_t)0);
                    int64_t ox1 = LGK_MIN(p1 - oy * g->ow, g->ow);
                    int empty = iy < 0 || iy >= p->h;
                    uint8_t *dst = row + (oy * g->ow + ox0 - p0);
                    const uint8_t *src = x + ci * g->plane_in + (empty ? 0 : iy * p->w);
#ifdef QIM_X86
                    if (avx512) {
                        qim2col_row_avx512(dst, src, ox0, ox1, empty ? ox1 : lo,
                                           empty ? ox1 : hi, p->stride_w, xoff - p->pad_left,
                                           zp);
                        continue;
                    }
#endif
                    (void)avx512;
                    qim2col_row(dst, src, ox0, ox1, empty ? ox1 : lo, empty ? ox1 : hi,
                                p->stride_w, xoff - p->pad_left, zp);
                }
            }
}

LGK_CLONES static void qim2col_portable(const qconv_geom *g, const uint8_t *x, uint8_t zp,
                                        int64_t p0, int64_t p1, uint8_t *col)
{
    qim2col_loops(g, x, zp, p0, p1, col, 0);
}

#ifdef QIM_X86
QIM_TARGET static void qim2col_avx512(const qconv_geom *g, const uint8_t *x, uint8_t zp,
                                      int64_t p0, int64_t p1, uint8_t *col)
{
    qim2col_loops(g, x, zp, p0, p1, col, 1);
}

#endif

static _Atomic int qim_portable; /* forced by the test hook */

/* Test hook: 1 runs the portable unfold, 0 the CPU's best again. Not thread-safe. */
int lgk_qim2col_force_portable(int portable);
int lgk_qim2col_force_portable(int portable)
{
    qim_portable = portable != 0;
    return LGK_OK;
}

/* Output pixels [p0, p1) of the unfolded input (kg rows of p1 - p0 bytes) of channels
 * [0, cg) of x; padding = zp byte. */
static void qim2col(const qconv_geom *g, const uint8_t *x, uint8_t zp, int64_t p0, int64_t p1,
                    uint8_t *col)
{
#ifdef QIM_X86
    if (!qim_portable && lgk_cpu_avx512bw()) {
        qim2col_avx512(g, x, zp, p0, p1, col);
        return;
    }
#endif
    qim2col_portable(g, x, zp, p0, p1, col);
}

/* Whether output pixel p's tap reads input element p + offset of its channel's plane: a
 * conv of unit strides and unit width dilation whose output rows are as wide as its input
 * rows (padding kw - 1 columns in all). A tap's row of the unfolded input is then one
 * copy, less the rows above or below the input and the columns left or right of it. */
static int is_width_preserving(const qconv_geom *g)
{
    const lgk_conv2d_params *p = g->p;
    return p->stride_h == 1 && p->stride_w == 1 && p->dilation_w == 1 && g->ow == p->w;
}

/* qim2col for is_width_preserving convs: per tap, the pixels of input rows inside the
 * image are copied in one run (its ends clamped to the plane: those bytes are padding
 * columns), the rest is zp, then the padding columns of each copied row are set to zp. */
static void qim2col_flat(const qconv_geom *g, const uint8_t *x, uint8_t zp, int64_t p0,
                         int64_t p1, uint8_t *col)
{
    const lgk_conv2d_params *p = g->p;
    int64_t np = p1 - p0, w = p->w, plane = g->plane_in;
    for (int64_t ci = 0; ci < g->cg; ++ci)
        for (int64_t ki = 0; ki < p->kh; ++ki) {
            int64_t dy = ki * p->dilation_h - p->pad_top; /* iy = oy + dy */
            /* pixels whose input row lies in [0, h) */
            int64_t v0 = LGK_MIN(LGK_MAX(p0, LGK_MAX(-dy, (int64_t)0) * w), p1);
            int64_t v1 = LGK_MAX(LGK_MIN(p1, LGK_MAX(p->h - dy, (int64_t)0) * w), v0);
            for (int64_t kj = 0; kj < p->kw; ++kj) {
                uint8_t *row = col + ((ci * p->kh + ki) * p->kw + kj) * np; /* pixel p0 first */
                int64_t dx = kj - p->pad_left, off = dy * w + dx; /* ix = ox + dx */
                memset(row, zp, (size_t)(v0 - p0));
                memset(row + (v1 - p0), zp, (size_t)(p1 - v1));
                if (v0 == v1)
                    continue;
                /* [c0, c1): the pixels whose element lies in the plane */
                int64_t c0 = LGK_MIN(LGK_MAX(v0, -off), v1);
                int64_t c1 = LGK_MAX(LGK_MIN(v1, plane - off), c0);
                memset(row + (v0 - p0), zp, (size_t)(c0 - v0));
                memset(row + (c1 - p0), zp, (size_t)(v1 - c1));
                if (c0 < c1)
                    memcpy(row + (c0 - p0), x + (ci * plane + c0 + off), (size_t)(c1 - c0));
                /* columns ox < -dx or ox >= w - dx read a neighbouring row: padding */
                int64_t left = LGK_MIN(LGK_MAX(-dx, (int64_t)0), w);
                int64_t right = LGK_MIN(LGK_MAX(dx, (int64_t)0), w);
                if (left == 0 && right == 0)
                    continue;
                for (int64_t r0 = v0 - v0 % w; r0 < v1; r0 += w) {
                    for (int64_t q = LGK_MAX(r0, v0); q < LGK_MIN(r0 + left, v1); ++q)
                        row[q - p0] = zp;
                    for (int64_t q = LGK_MAX(r0 + w - right, v0); q < LGK_MIN(r0 + w, v1); ++q)
                        row[q - p0] = zp;
                }
            }
        }
}

static int is_pointwise(const lgk_conv2d_params *p)
{
    return p->kh == 1 && p->kw == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_top == 0
           && p->pad_left == 0 && p->pad_bottom == 0 && p->pad_right == 0;
}

/* Pixels per block: its unfolded input (kg x block bytes) stays near 256 KiB, in L2
 * from unfolding through packing to the multiply. */
#define QCONV_BLOCK_BYTES (256 * 1024)

/* One image and group: blocks of output pixels, each unfolded and multiplied on its own. */
typedef struct {
    const qconv_geom *g;
    const uint8_t *x; /* the group's first channel of the image */
    lgk_qproblem base; /* A, the epilogue, c at the group's first output pixel */
    size_t esize;
    int64_t block;
    uint8_t zp;
    int pointwise, flat;
    const lgk_qcv *cv; /* the VNNI GEMM with its epilogue in registers, or NULL */
} qconv_job;

static int qconv_blocks(void *ctx, int64_t begin, int64_t end)
{
    const qconv_job *job = ctx;
    const qconv_geom *g = job->g;
    lgk_scratch col = {NULL, 0};
    if (!job->pointwise)
        LGK_TRY(lgk_scratch_acquire(g->kg * job->block / 4 + 1, &col));
    int status = LGK_OK;
    for (int64_t p0 = begin; p0 < end && status == LGK_OK; p0 += job->block) {
        int64_t p1 = LGK_MIN(p0 + job->block, end);
        lgk_qproblem pr = job->base;
        pr.N = p1 - p0;
        if (job->pointwise) {
            pr.b = job->x + p0;
            pr.rs_b = g->plane_out;
        } else {
            (job->flat ? qim2col_flat : qim2col)(g, job->x, job->zp, p0, p1,
                                                 (uint8_t *)col.data);
            pr.b = (const uint8_t *)col.data;
            pr.rs_b = pr.N;
        }
        pr.cs_b = 1;
        pr.ep.zb += p0;
        pr.c = (char *)pr.c + (size_t)p0 * job->esize;
        status = job->cv != NULL ? lgk_qcv_run(job->cv, pr.b, pr.rs_b, pr.N, pr.c, pr.ldc)
                                 : lgk_qgemm_run(&pr, 1);
    }
    lgk_scratch_release(&col);
    return status;
}

/* W @ im2col per image and group; A from `w` (o x kg rows) or prepacked panels. Threads
 * take blocks of output pixels. */
static int qconv_gemm(const qconv_geom *g, const uint8_t *x, const uint8_t *w,
                      const uint8_t *panels, const int32_t *sums, void *y,
                      const lgk_qparams *q, int nthreads)
{
    const lgk_conv2d_params *p = g->p;
    lgk_qparams rows = *q;
    rows.per_row = 1;
    lgk_qexpanded e;
    LGK_TRY(lgk_qparams_expand(&rows, p->o, g->plane_out, &e));
    size_t esize = q->out_type == LGK_QTYPE_INT32 ? 4 : 1;
    int vnni = panels != NULL && p->groups == 1 && lgk_qgemm_isa() == LGK_QISA_AVX512_VNNI;
    /* blocks of whole 48-pixel tiles on VNNI: 64 made a 16-pixel tile of every other one
     * (ResNet-50's 3x3 convs at 14^2: 7 tiles a filter sliver where 5 do) */
    int64_t unit = vnni ? 48 : 64;
    int64_t block = LGK_MAX(unit, QCONV_BLOCK_BYTES / LGK_MAX(g->kg, (int64_t)1) / unit * unit);
    if (g->plane_out - block < unit) /* no block of a few pixels (7^2 maps: 48 + 1) */
        block = g->plane_out;
    double macs = (double)g->og * (double)g->plane_out * (double)LGK_MAX(g->kg, (int64_t)1);
    int threads = macs < 2.0e6 ? 1 : nthreads;
    int status = LGK_OK;
    lgk_qcv cv;
    if (vnni)
        status = lgk_qcv_prepare(p->o, g->kg, panels, sums, q, &cv);
    for (int64_t n = 0; n < p->n && status == LGK_OK; ++n)
        for (int64_t gi = 0; gi < p->groups && status == LGK_OK; ++gi) {
            int64_t r0 = gi * g->og;
            lgk_qproblem base = {g->og, g->plane_out, g->kg, w == NULL ? NULL : w + r0 * g->kg,
                                 g->kg, 1, NULL, 0, 1, e.a_flip, e.b_flip, panels, sums, NULL,
                                 NULL, e.ep,
                                 (char *)y + (size_t)((n * p->o + r0) * g->plane_out) * esize,
                                 g->plane_out};
            base.ep.za += r0;
            base.ep.mult = base.ep.mult == NULL ? NULL : base.ep.mult + r0;
            base.ep.bias = base.ep.bias == NULL ? NULL : base.ep.bias + r0;
            qconv_job job = {g, x + (n * p->c + gi * g->cg) * g->plane_in, base, esize, block,
                             (uint8_t)q->b_zero_point[0], is_pointwise(p),
                             is_width_preserving(g), vnni ? &cv : NULL};
            status = lgk_parallel_for(threads, g->plane_out, block, qconv_blocks, &job);
        }
    if (vnni)
        lgk_qcv_release(&cv);
    lgk_scratch_release(&e.scratch);
    return status;
}

/* ---- entry points --------------------------------------------------------------------------- */

int lgk_qconv2d_nchw(const lgk_conv2d_params *p, const void *x, int64_t x_len,
                     const void *w, int64_t w_len, void *y, int64_t y_len,
                     const lgk_qparams *q, int nthreads)
{
    qconv_geom g;
    LGK_TRY(qconv_check(p, x, x_len, y, y_len, q, &g));
    int64_t count;
    const int64_t wd[2] = {p->o, g.kg};
    LGK_TRY(lgk_checked_count(2, wd, &count));
    LGK_TRY(lgk_check_buffer(w, w_len, count));
    if (p->n == 0 || p->o == 0 || g.plane_out == 0)
        return LGK_OK;
    if (p->groups == p->c && p->o == p->c && p->groups > 1)
        return lgk_qdwconv_nchw(p, g.oh, g.ow, (const uint8_t *)x, (const uint8_t *)w, y, q,
                                nthreads);
    return qconv_gemm(&g, x, w, NULL, NULL, y, q, nthreads);
}

int lgk_qconv2d_nchw_packed(const lgk_conv2d_params *p, const void *x, int64_t x_len,
                            const void *packed_w, int64_t packed_len, void *y,
                            int64_t y_len, const lgk_qparams *q, int nthreads)
{
    qconv_geom g;
    LGK_TRY(qconv_check(p, x, x_len, y, y_len, q, &g));
    LGK_CHECK(p->groups == 1, LGK_ERR_ARG);
    const uint8_t *panels;
    const int32_t *sums;
    LGK_TRY(lgk_qgemm_packed_a_view(p->o, g.kg, q->a_type, packed_w, packed_len, &panels,
                                    &sums));
    if (p->n == 0 || p->o == 0 || g.plane_out == 0)
        return LGK_OK;
    return qconv_gemm(&g, x, NULL, panels, sums, y, q, nthreads);
}
