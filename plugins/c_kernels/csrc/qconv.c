/*
 * qconv.c - quantized NCHW conv2d (ONNX QLinearConv / ConvInteger arithmetic).
 *
 * Grouped and dense convs are W @ im2col per image and group on the int8 GEMM
 * (qgemm.c): the weights are A (filters as rows, so per-filter zero points,
 * multipliers and biases are per-row parameters and the result lands in NCHW order),
 * the unfolded input is B with padding filled with the data zero point (whose shifted
 * value is 0, as in onnxruntime). A 1x1 conv with unit strides and no padding reads its
 * input in place. Depthwise convs (one filter per channel: groups == c == o) have no
 * GEMM worth the name (K = kh * kw) and run directly: each plane is shifted by its zero
 * point into a zero-padded float32 copy once (small integers, whose products and sums of
 * up to 258 taps float32 holds exactly), then every tap adds a scaled run of a row into
 * 64 sums held in registers.
 */
#include "lgk_qgemm.h"

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
    } else {
        for (int64_t ox = lo; ox < hi; ++ox)
            dst[ox - ox0] = src[ox * s + off];
    }
    for (int64_t ox = hi; ox < ox1; ++ox)
        dst[ox - ox0] = zp;
}

/* Output pixels [p0, p1) of the unfolded input (kg rows of p1 - p0 bytes) of channels
 * [0, cg) of x; padding = zp byte. */
LGK_CLONES static void qim2col(const qconv_geom *g, const uint8_t *x, uint8_t zp, int64_t p0,
                               int64_t p1, uint8_t *col)
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
                    qim2col_row(row + (oy * g->ow + ox0 - p0),
                                x + ci * g->plane_in + (empty ? 0 : iy * p->w), ox0, ox1,
                                empty ? ox1 : lo, empty ? ox1 : hi, p->stride_w,
                                xoff - p->pad_left, zp);
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
    int pointwise;
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
            qim2col(g, job->x, job->zp, p0, p1, (uint8_t *)col.data);
            pr.b = (const uint8_t *)col.data;
            pr.rs_b = pr.N;
        }
        pr.cs_b = 1;
        pr.ep.zb += p0;
        pr.c = (char *)pr.c + (size_t)p0 * job->esize;
        status = lgk_qgemm_run(&pr, 1);
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
    int64_t block = LGK_MAX((int64_t)64, QCONV_BLOCK_BYTES / LGK_MAX(g->kg, (int64_t)1) / 64 * 64);
    double macs = (double)g->og * (double)g->plane_out * (double)LGK_MAX(g->kg, (int64_t)1);
    int threads = macs < 2.0e6 ? 1 : nthreads;
    int status = LGK_OK;
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
                             (uint8_t)q->b_zero_point[0], is_pointwise(p)};
            status = lgk_parallel_for(threads, g->plane_out, block, qconv_blocks, &job);
        }
    lgk_scratch_release(&e.scratch);
    return status;
}

/* ---- depthwise ------------------------------------------------------------------------------ */

typedef struct {
    const qconv_geom *g;
    const uint8_t *x, *w;
    void *y;
    const lgk_qparams *q;
} qdw_ctx;

static int32_t qvalue(int type, uint8_t byte)
{
    return type == LGK_QTYPE_INT8 ? (int32_t)(int8_t)byte : (int32_t)byte;
}

#define QDW_LANES 16
/* vectors of outputs per pass over the taps (4 FMAs per weight), fewer on narrow maps:
 * a 7-wide row in 64 lanes did 9 times its work (MobileNetV2's 960-channel 7x7 convs) */
#define QDW_VECTORS 4
/* GCC vector types of QDW_LANES lanes: the clones compile them to zmm, ymm pairs or xmm
 * quadruples, where plain arrays of lanes were scalarized. */
typedef float qdw_f32 __attribute__((vector_size(4 * QDW_LANES)));
typedef int32_t qdw_i32 __attribute__((vector_size(4 * QDW_LANES)));
typedef uint32_t qdw_u32 __attribute__((vector_size(4 * QDW_LANES)));

/* Shifted values are integers of magnitude <= 255, their products <= 65025: sums of up
 * to this many are below 2^24 and so exact in float32, where a multiply-add is one
 * instruction (the int32 multiply is two and the conversions more). Kernels with more
 * taps sum in int32. */
#define QDW_FLOAT_TAPS 258

/* Geometry of the zero-padded float32 copy of a plane: rows of `width` values (the padded
 * row, or more: the last block of QDW_LANES outputs reads past the row's end) and `rows`
 * rows; in the copy, output (oy, ox) and tap (ki, kj) read (oy sh + ki dh, ox sw + kj dw). */
typedef struct {
    int64_t rows, width, ow_lanes; /* ow_lanes: ow rounded up to a block */
    int vectors;                   /* per block: 1, 2 or QDW_VECTORS */
} qdw_layout;

static qdw_layout qdw_geometry(const qconv_geom *g)
{
    const lgk_conv2d_params *p = g->p;
    qdw_layout l;
    l.vectors = g->ow <= QDW_LANES ? 1 : g->ow <= 2 * QDW_LANES ? 2 : QDW_VECTORS;
    int64_t block = QDW_LANES * l.vectors;
    l.ow_lanes = (g->ow + block - 1) / block * block;
    l.rows = p->h + p->pad_top + p->pad_bottom;
    l.width = LGK_MAX(p->w + p->pad_left + p->pad_right,
                      (l.ow_lanes - 1) * p->stride_w + (p->kw - 1) * p->dilation_w + 1);
    return l;
}

/* acc[0, ow rounded up to blocks of nv vectors) = one output row's sums: every tap of a
 * block of nv QDW_LANES outputs accumulates in registers. */
__attribute__((always_inline)) static inline void
qdw_row(const int nv, const lgk_conv2d_params *p, int64_t ow, int64_t width,
        const float *restrict row, const float *restrict wk, uint32_t bias,
        uint32_t *restrict acc)
{
    int64_t taps = p->kh * p->kw, sw = p->stride_w;
    for (int64_t ox0 = 0; ox0 < ow; ox0 += nv * QDW_LANES) {
        qdw_f32 f[QDW_VECTORS]; /* exact sums (QDW_FLOAT_TAPS) */
        qdw_u32 a[QDW_VECTORS];
        for (int u = 0; u < nv; ++u) {
            f[u] = (qdw_f32){0};
            a[u] = (qdw_u32){0} + bias;
        }
        for (int64_t ki = 0; ki < p->kh; ++ki)
            for (int64_t kj = 0; kj < p->kw; ++kj) {
                const float *r = row + ki * p->dilation_h * width + kj * p->dilation_w
                                 + ox0 * sw;
                float wv = wk[ki * p->kw + kj];
                for (int u = 0; u < nv; ++u) {
                    qdw_f32 v;
                    if (sw == 1) {
                        memcpy(&v, r + u * QDW_LANES, sizeof v);
                    } else {
                        for (int j = 0; j < QDW_LANES; ++j)
                            v[j] = r[(u * QDW_LANES + j) * sw];
                    }
                    if (taps <= QDW_FLOAT_TAPS)
                        f[u] += v * wv;
                    else /* int32 products (|x - zp| |w - zp| <= 65025), wrapping sums */
                        a[u] += (qdw_u32)(__builtin_convertvector(v, qdw_i32) * (int32_t)wv);
                }
            }
        for (int u = 0; u < nv; ++u) {
            a[u] += (qdw_u32)__builtin_convertvector(f[u], qdw_i32);
            memcpy(acc + ox0 + u * QDW_LANES, &a[u], sizeof a[u]);
        }
    }
}

/* One plane, compiled per instruction set: every tap of a block of QDW_LANES outputs
 * accumulates in registers, reading the padded copy without bounds tests (uint32 sums:
 * they wrap, never overflow). */
LGK_CLONES static void qdw_plane(const qdw_ctx *d, const qdw_layout *l, int64_t plane,
                                 float *restrict xp, uint32_t *restrict acc,
                                 float *restrict wk)
{
    const qconv_geom *g = d->g;
    const lgk_conv2d_params *p = g->p;
    const lgk_qparams *q = d->q;
    int64_t c = plane % p->c, taps = p->kh * p->kw;
    int32_t xzp = q->b_zero_point[0];
    int32_t wzp = q->a_zero_point[q->a_zero_point_len == 1 ? 0 : c];
    for (int64_t t = 0; t < taps; ++t)
        wk[t] = (float)(qvalue(q->a_type, d->w[c * taps + t]) - wzp);
    const uint8_t *x = d->x + plane * g->plane_in;
    memset(xp, 0, (size_t)(l->rows * l->width) * sizeof(float)); /* padding: shifted 0 */
    for (int64_t iy = 0; iy < p->h; ++iy) {
        float *dst = xp + (iy + p->pad_top) * l->width + p->pad_left;
        const uint8_t *src = x + iy * p->w;
        if (q->b_type == LGK_QTYPE_INT8)
            for (int64_t ix = 0; ix < p->w; ++ix)
                dst[ix] = (float)((int8_t)src[ix] - xzp);
        else
            for (int64_t ix = 0; ix < p->w; ++ix)
                dst[ix] = (float)(src[ix] - xzp);
    }
    uint32_t bias = q->bias == NULL ? 0u : (uint32_t)q->bias[c];
    lgk_qepilogue ep = {NULL, NULL, NULL, NULL, 1, q->out_type, q->relu, q->out_zero_point};
    const float *mult = q->out_type == LGK_QTYPE_INT32 ? NULL
                        : q->multiplier + (q->multiplier_len == 1 ? 0 : c);
    size_t esize = q->out_type == LGK_QTYPE_INT32 ? 4 : 1;
    char *y = (char *)d->y + (size_t)(plane * g->plane_out) * esize;
    for (int64_t oy = 0; oy < g->oh; ++oy) {
        const float *row = xp + oy * p->stride_h * l->width;
        switch (l->vectors) { /* a constant count in each: the sums stay in registers */
        case 1: qdw_row(1, p, g->ow, l->width, row, wk, bias, acc); break;
        case 2: qdw_row(2, p, g->ow, l->width, row, wk, bias, acc); break;
        default: qdw_row(QDW_VECTORS, p, g->ow, l->width, row, wk, bias, acc); break;
        }
        lgk_qstore(&ep, (const int32_t *)acc, g->ow, mult, 0, y + (size_t)(oy * g->ow) * esize);
    }
}

static int qdw_range(void *ctx, int64_t begin, int64_t end)
{
    const qdw_ctx *d = ctx;
    const lgk_conv2d_params *p = d->g->p;
    qdw_layout l = qdw_geometry(d->g);
    int64_t plane_values, dims[2] = {l.rows, l.width};
    LGK_TRY(lgk_checked_count(2, dims, &plane_values));
    /* in floats, each part 64-byte aligned: the padded plane, an int32 row of sums, the
     * taps' shifted weights */
    int64_t row_at = (plane_values + 16) / 16 * 16;
    int64_t taps_at = row_at + (l.ow_lanes + 15) / 16 * 16;
    lgk_scratch s = {NULL, 0};
    LGK_TRY(lgk_scratch_acquire(taps_at + p->kh * p->kw + 16, &s));
    for (int64_t plane = begin; plane < end; ++plane)
        qdw_plane(d, &l, plane, s.data, (uint32_t *)(s.data + row_at), s.data + taps_at);
    lgk_scratch_release(&s);
    return LGK_OK;
}

static int qconv_depthwise(const qconv_geom *g, const uint8_t *x, const uint8_t *w, void *y,
                           const lgk_qparams *q, int nthreads)
{
    const lgk_conv2d_params *p = g->p;
    qdw_ctx d = {g, x, w, y, q};
    double macs = (double)p->n * (double)p->c * (double)g->plane_out * (double)(p->kh * p->kw);
    int threads = macs < 4.0e5 ? 1 : nthreads;
    return lgk_parallel_for(threads, p->n * p->c, 1, qdw_range, &d);
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
        return qconv_depthwise(&g, x, w, y, q, nthreads);
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
