/*
 * conv_pool.c - NCHW conv2d (im2col + GEMM) and max/avg pooling.
 *
 * conv2d: for each image and group, the receptive fields of a band of output
 * rows are unrolled into a (C/g * kh * kw) x (rows * ow) scratch matrix, and
 * the group's weights (O/g x C/g*kh*kw, already row-major in OIHW) multiply it
 * straight into the output with the bias and activation fused into the GEMM
 * epilogue. Bands bound the scratch size; a 1x1 stride-1 unpadded conv skips
 * im2col and multiplies the input in place.
 *
 * Depthwise convs (one input channel per group) skip im2col and GEMM: see
 * depthwise.c.
 *
 * With weights prepacked once (lgk_conv2d_nchw_prepacked, groups == 1) the
 * product is taken the other way round: im2col(x)^T (pixels x taps) times the
 * packed weights^T (taps x filters), so the GEMM's wide dimension is the
 * filter count even on 2x2 maps, the weights stream once from their packed
 * panels, and the pixels x filters result is transposed into NCHW.
 */
#include <stdlib.h>

#include "lgk_internal.h"

/* im2col scratch budget in floats (16 MiB); bigger problems go in row bands. */
#define COL_BUDGET ((int64_t)1 << 22)

/* Outputs o in [*lo, *hi) whose tap o * stride + offset lies in [0, size). */
static void valid_range(int64_t size, int64_t n_out, int64_t stride, int64_t offset,
                        int64_t *lo, int64_t *hi)
{
    int64_t l = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
    int64_t h = size - 1 - offset < 0 ? 0 : (size - 1 - offset) / stride + 1;
    *hi = LGK_MIN(h, n_out);
    *lo = LGK_MIN(l, *hi);
}

/* Output length of one spatial dim (ONNX / PyTorch rules, including the
 * ceil-mode rule that the last window must start inside input + left pad).
 * An empty input dim is valid: with padding, windows may still fit. */
static int out_dim(int64_t in, int64_t k, int64_t stride, int64_t pad0, int64_t pad1, int64_t dil,
                   int ceil_mode, int64_t *out)
{
    int64_t span, padded;
    LGK_CHECK(in >= 0 && k >= 1 && stride >= 1 && dil >= 1, LGK_ERR_SHAPE);
    LGK_CHECK(pad0 >= 0 && pad1 >= 0, LGK_ERR_SHAPE);
    LGK_TRY(lgk_mul(dil, k - 1, &span));
    LGK_TRY(lgk_add(span, 1, &span));
    LGK_TRY(lgk_add(in, pad0, &padded));
    LGK_TRY(lgk_add(padded, pad1, &padded));
    LGK_CHECK(padded >= span, LGK_ERR_SHAPE);
    int64_t room = padded - span;
    int64_t n = room / stride + (ceil_mode && room % stride != 0) + 1, last_start;
    LGK_TRY(lgk_mul(n - 1, stride, &last_start));
    if (ceil_mode && last_start >= in + pad0)
        n -= 1; /* once, as ONNX and PyTorch: even a window floor mode would count */
    *out = n;
    return LGK_OK;
}

/* Taps of one output position along one dim: [lo, hi) hit the input,
 * `padded` of them lie inside the padded extent. */
typedef struct {
    int64_t lo, hi, padded;
} window;

/* ---- conv2d --------------------------------------------------------------------- */

int lgk_conv2d_out_shape(const lgk_conv2d_params *p, int64_t *oh, int64_t *ow)
{
    LGK_CHECK(p != NULL && oh != NULL && ow != NULL, LGK_ERR_NULL);
    /* Zero images, channels or filters are valid: with no input channels every
     * output is its bias (then the activation), as a sum over no taps. */
    LGK_CHECK(p->n >= 0 && p->c >= 0 && p->o >= 0 && p->groups >= 1, LGK_ERR_SHAPE);
    LGK_CHECK(p->c % p->groups == 0 && p->o % p->groups == 0, LGK_ERR_SHAPE);
    LGK_TRY(out_dim(p->h, p->kh, p->stride_h, p->pad_top, p->pad_bottom, p->dilation_h, 0, oh));
    LGK_TRY(out_dim(p->w, p->kw, p->stride_w, p->pad_left, p->pad_right, p->dilation_w, 0, ow));
    return LGK_OK;
}

typedef struct {
    const lgk_conv2d_params *p;
    int64_t oh, ow, cg, og, kg; /* kg = cg * kh * kw: the GEMM's K */
    int64_t band;               /* output rows per im2col band */
    const float *x, *w, *bias;
    float *y;
    int activation, gemm_threads;
} conv_job;

/* Kernel widths up to this get their valid output ranges computed once per band. */
#define IM2COL_MAX_KW 32

/* Unrolls output rows [oy0, oy1) of one group's input planes into col,
 * row (c, ki, kj) holding the tap x[c, iy, ix] for every output pixel. The
 * valid range of each kernel column is the same for every channel and row:
 * computed once (its divisions cost more than a small map's copies). */
static void im2col(const conv_job *j, const float *x, int64_t oy0, int64_t oy1, float *col)
{
    const lgk_conv2d_params *p = j->p;
    int64_t ncols = (oy1 - oy0) * j->ow, ow = j->ow;
    window kx[IM2COL_MAX_KW];
    int cached = p->kw <= IM2COL_MAX_KW;
    for (int64_t kj = 0; cached && kj < p->kw; ++kj)
        valid_range(p->w, ow, p->stride_w, kj * p->dilation_w - p->pad_left, &kx[kj].lo,
                    &kx[kj].hi);
    for (int64_t c = 0; c < j->cg; ++c)
        for (int64_t ki = 0; ki < p->kh; ++ki)
            for (int64_t kj = 0; kj < p->kw; ++kj, col += ncols) {
                int64_t xlo, xhi, off_x = kj * p->dilation_w - p->pad_left;
                if (cached)
                    xlo = kx[kj].lo, xhi = kx[kj].hi;
                else
                    valid_range(p->w, ow, p->stride_w, off_x, &xlo, &xhi);
                for (int64_t oy = oy0; oy < oy1; ++oy) {
                    float *dst = col + (oy - oy0) * ow;
                    int64_t iy = oy * p->stride_h - p->pad_top + ki * p->dilation_h;
                    if (iy < 0 || iy >= p->h) {
                        for (int64_t ox = 0; ox < ow; ++ox)
                            dst[ox] = 0.0f;
                        continue;
                    }
                    /* Index, not pointer, arithmetic: off_x may be negative. */
                    const float *src = x + (c * p->h + iy) * p->w;
                    for (int64_t ox = 0; ox < xlo; ++ox)
                        dst[ox] = 0.0f;
                    if (p->stride_w == 1)
                        for (int64_t ox = xlo; ox < xhi; ++ox)
                            dst[ox] = src[ox + off_x];
                    else
                        for (int64_t ox = xlo; ox < xhi; ++ox)
                            dst[ox] = src[ox * p->stride_w + off_x];
                    for (int64_t ox = xhi; ox < ow; ++ox)
                        dst[ox] = 0.0f;
                }
            }
}

static int is_pointwise(const lgk_conv2d_params *p)
{
    return p->kh == 1 && p->kw == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_top == 0
           && p->pad_left == 0 && p->pad_bottom == 0 && p->pad_right == 0;
}

/* One image, one group: y_g (og x oh*ow) = w_g (og x kg) @ im2col(x_g). */
static int conv_group(const conv_job *j, int64_t img, int64_t g, float *col)
{
    const lgk_conv2d_params *p = j->p;
    int64_t plane = j->oh * j->ow;
    const float *xg = j->x + (img * p->c + g * j->cg) * p->h * p->w;
    const float *wg = j->w + g * j->og * j->kg;
    float *yg = j->y + (img * p->o + g * j->og) * plane;
    const float *bias = j->bias != NULL ? j->bias + g * j->og : NULL;
    int bias_mode = bias != NULL ? LGK_BIAS_ROW : LGK_BIAS_NONE;
    int64_t y_len = j->og * plane;
    if (is_pointwise(p))
        return lgk_sgemm(j->og, plane, j->kg, wg, j->og * j->kg, j->kg, 1, xg, j->kg * plane,
                         plane, 1, yg, y_len, plane, bias, j->og, bias_mode, j->activation,
                         j->gemm_threads);
    for (int64_t oy0 = 0; oy0 < j->oh; oy0 += j->band) {
        int64_t oy1 = LGK_MIN(j->oh, oy0 + j->band), ncols = (oy1 - oy0) * j->ow;
        im2col(j, xg, oy0, oy1, col);
        LGK_TRY(lgk_sgemm(j->og, ncols, j->kg, wg, j->og * j->kg, j->kg, 1, col, j->kg * ncols,
                          ncols, 1, yg + oy0 * j->ow, y_len - oy0 * j->ow, plane, bias, j->og,
                          bias_mode, j->activation, j->gemm_threads));
    }
    return LGK_OK;
}

static int conv_images(void *ctx, int64_t begin, int64_t end)
{
    const conv_job *j = ctx;
    lgk_scratch col = {NULL, 0};
    if (!is_pointwise(j->p) && begin < end)
        LGK_TRY(lgk_scratch_acquire(j->kg * j->band * j->ow, &col));
    int status = LGK_OK;
    for (int64_t img = begin; img < end && status == LGK_OK; ++img)
        for (int64_t g = 0; g < j->p->groups && status == LGK_OK; ++g)
            status = conv_group(j, img, g, col.data);
    lgk_scratch_release(&col);
    return status;
}

/* Checks that every buffer holds its tensor; products are overflow-checked. */
static int check_conv_buffers(const lgk_conv2d_params *p, int64_t oh, int64_t ow, int64_t kg,
                              int64_t x_len, int64_t w_len, int64_t y_len, const float *bias,
                              int64_t bias_len, const float *x, const float *w, const float *y)
{
    int64_t nx, nw, ny;
    const int64_t xd[4] = {p->n, p->c, p->h, p->w}, wd[2] = {p->o, kg},
                  yd[4] = {p->n, p->o, oh, ow};
    LGK_TRY(lgk_checked_count(4, xd, &nx));
    LGK_TRY(lgk_checked_count(2, wd, &nw));
    LGK_TRY(lgk_checked_count(4, yd, &ny));
    LGK_TRY(lgk_check_buffer(x, x_len, nx));
    if (w_len >= 0) /* a negative length: prepacked weights, checked by the GEMM */
        LGK_TRY(lgk_check_buffer(w, w_len, nw));
    LGK_TRY(lgk_check_buffer(y, y_len, ny));
    if (bias != NULL)
        LGK_CHECK(bias_len >= p->o, LGK_ERR_SHAPE);
    return LGK_OK;
}

int lgk_conv2d_nchw(const lgk_conv2d_params *p,
                    const float *x, int64_t x_len,
                    const float *w, int64_t w_len,
                    const float *bias, int64_t bias_len,
                    float *y, int64_t y_len, int activation, int nthreads)
{
    int64_t oh, ow, kg;
    LGK_TRY(lgk_conv2d_out_shape(p, &oh, &ow));
    LGK_CHECK(activation >= LGK_ACT_NONE && activation <= LGK_ACT_LAST, LGK_ERR_ARG);
    const int64_t kd[3] = {p->c / p->groups, p->kh, p->kw};
    LGK_TRY(lgk_checked_count(3, kd, &kg));
    LGK_TRY(check_conv_buffers(p, oh, ow, kg, x_len, w_len, y_len, bias, bias_len, x, w, y));
    if (p->n == 0 || p->o == 0)
        return LGK_OK;
    nthreads = lgk_clamp_threads(nthreads);
    if (p->c == p->groups && p->c > 0)
        return lgk_depthwise_conv2d(p, oh, ow, x, w, bias, y, activation, nthreads);
    int64_t band = LGK_MAX((int64_t)1, LGK_MIN(oh, COL_BUDGET / LGK_MAX(kg * ow, (int64_t)1)));
    int64_t col_count;
    LGK_TRY(lgk_mul(kg, band * ow, &col_count));
    /* Enough images: one image per thread, single-threaded GEMMs. */
    int per_image = p->n >= nthreads;
    conv_job j = {p, oh, ow, p->c / p->groups, p->o / p->groups, kg, band, x, w, bias, y,
                  activation, per_image ? 1 : nthreads};
    return lgk_parallel_for(per_image ? nthreads : 1, p->n, 1, conv_images, &j);
}

/* ---- prepacked weights: pixels x filters ---------------------------------------- */

/* dst[o * ldd + i] = src[i * cols + o] for i < rows, o < cols, in L1-sized tiles. */
static void transpose_into(int64_t rows, int64_t cols, const float *src, float *dst, int64_t ldd)
{
    const int64_t block = 32;
    for (int64_t i0 = 0; i0 < rows; i0 += block)
        for (int64_t o0 = 0; o0 < cols; o0 += block) {
            int64_t i1 = LGK_MIN(rows, i0 + block), o1 = LGK_MIN(cols, o0 + block);
            for (int64_t o = o0; o < o1; ++o)
                for (int64_t i = i0; i < i1; ++i)
                    dst[o * ldd + i] = src[i * cols + o];
        }
}

typedef struct {
    conv_job base;
    int64_t packed_len, x_len;
} packed_job;

/* One image: per band of output rows, t (pixels x filters) = im2col^T @ W^T with
 * bias and activation in the epilogue, then t^T into the image's output. */
static int packed_image(const packed_job *pj, int64_t img, float *col, float *t)
{
    const conv_job *j = &pj->base;
    const lgk_conv2d_params *p = j->p;
    int64_t plane = j->oh * j->ow, in_plane = p->h * p->w;
    const float *xi = j->x + img * p->c * in_plane;
    float *yi = j->y + img * p->o * plane;
    int bias_mode = j->bias != NULL ? LGK_BIAS_COL : LGK_BIAS_NONE;
    for (int64_t oy0 = 0; oy0 < j->oh; oy0 += j->band) {
        int64_t oy1 = LGK_MIN(j->oh, oy0 + j->band), rows = (oy1 - oy0) * j->ow;
        const float *a = col;
        int64_t cs_a = rows, a_len = j->kg * rows;
        if (is_pointwise(p)) { /* the input is already taps x pixels */
            a = xi + oy0 * j->ow;
            cs_a = in_plane;
            a_len = pj->x_len - img * p->c * in_plane - oy0 * j->ow;
        } else {
            im2col(j, xi, oy0, oy1, col);
        }
        LGK_TRY(lgk_sgemm_prepacked(rows, p->o, j->kg, a, a_len, 1, cs_a, j->w, pj->packed_len,
                                    t, rows * p->o, p->o, j->bias, j->bias != NULL ? p->o : 0,
                                    bias_mode, j->activation, j->gemm_threads));
        transpose_into(rows, p->o, t, yi + oy0 * j->ow, plane);
    }
    return LGK_OK;
}

static int packed_images(void *ctx, int64_t begin, int64_t end)
{
    const packed_job *pj = ctx;
    const conv_job *j = &pj->base;
    int64_t rows = j->band * j->ow;
    lgk_scratch col = {NULL, 0}, t = {NULL, 0};
    if (begin >= end)
        return LGK_OK;
    int status = lgk_scratch_acquire(rows * j->p->o, &t);
    if (status == LGK_OK && !is_pointwise(j->p))
        status = lgk_scratch_acquire(j->kg * rows, &col);
    for (int64_t img = begin; img < end && status == LGK_OK; ++img)
        status = packed_image(pj, img, col.data, t.data);
    lgk_scratch_release(&col);
    lgk_scratch_release(&t);
    return status;
}

int lgk_conv2d_nchw_prepacked(const lgk_conv2d_params *p,
                              const float *x, int64_t x_len,
                              const float *packed_w, int64_t packed_len,
                              const float *bias, int64_t bias_len,
                              float *y, int64_t y_len, int activation, int nthreads)
{
    int64_t oh, ow, kg;
    LGK_TRY(lgk_conv2d_out_shape(p, &oh, &ow));
    LGK_CHECK(p->groups == 1, LGK_ERR_ARG);
    LGK_CHECK(activation >= LGK_ACT_NONE && activation <= LGK_ACT_LAST, LGK_ERR_ARG);
    LGK_CHECK(packed_w != NULL, LGK_ERR_NULL);
    const int64_t kd[3] = {p->c, p->kh, p->kw};
    LGK_TRY(lgk_checked_count(3, kd, &kg));
    LGK_TRY(check_conv_buffers(p, oh, ow, kg, x_len, -1, y_len, bias, bias_len, x, NULL, y));
    if (p->n == 0 || p->o == 0)
        return LGK_OK;
    /* Bands bound both scratch blocks: im2col (kg x rows) and the result (rows x o). */
    int64_t per_row = LGK_MAX(LGK_MAX(kg, p->o) * ow, (int64_t)1);
    int64_t band = LGK_MAX((int64_t)1, LGK_MIN(oh, COL_BUDGET / per_row)), count;
    LGK_TRY(lgk_mul(LGK_MAX(kg, p->o), band * ow, &count));
    nthreads = lgk_clamp_threads(nthreads);
    int per_image = p->n >= nthreads;
    packed_job pj = {{p, oh, ow, p->c, p->o, kg, band, x, packed_w, bias, y, activation,
                      per_image ? 1 : nthreads},
                     packed_len, x_len};
    return lgk_parallel_for(per_image ? nthreads : 1, p->n, 1, packed_images, &pj);
}

/* ---- pooling ------------------------------------------------------------------------- */

int lgk_pool2d_out_shape(const lgk_pool2d_params *p, int64_t *oh, int64_t *ow)
{
    LGK_CHECK(p != NULL && oh != NULL && ow != NULL, LGK_ERR_NULL);
    LGK_CHECK(p->n >= 0 && p->c >= 0, LGK_ERR_SHAPE);
    LGK_TRY(out_dim(p->h, p->kh, p->stride_h, p->pad_top, p->pad_bottom, p->dilation_h,
                    p->ceil_mode, oh));
    LGK_TRY(out_dim(p->w, p->kw, p->stride_w, p->pad_left, p->pad_right, p->dilation_w,
                    p->ceil_mode, ow));
    return LGK_OK;
}

static void make_windows(int64_t in, int64_t n_out, int64_t k, int64_t stride, int64_t pad0,
                         int64_t pad1, int64_t dil, window *win)
{
    for (int64_t o = 0; o < n_out; ++o) {
        int64_t plo, phi;
        valid_range(in, k, dil, o * stride - pad0, &win[o].lo, &win[o].hi);
        valid_range(in + pad0 + pad1, k, dil, o * stride, &plo, &phi);
        win[o].padded = phi - plo;
    }
}

/* Output rows shorter than this are pooled window by window. */
#define POOL_MIN_ROW 8

/* One output row. Each valid tap (ki, kj) is one strided pass over the output
 * positions it reaches (kx[kj] bounds them), so the inner loops vectorize
 * along x instead of walking every window separately. */
LGK_CLONES static void pool_row(const lgk_pool2d_params *p, const float *plane, const window *wy,
                                int64_t oy, const window *kx, int64_t ow, float *y, int is_max)
{
    for (int64_t ox = 0; ox < ow; ++ox)
        y[ox] = is_max ? -INFINITY : 0.0f;
    for (int64_t ki = wy->lo; ki < wy->hi; ++ki) {
        const float *row = plane + (oy * p->stride_h - p->pad_top + ki * p->dilation_h) * p->w;
        for (int64_t kj = 0; kj < p->kw; ++kj) {
            /* Index, not pointer, arithmetic: off may be negative. */
            int64_t off = kj * p->dilation_w - p->pad_left, s = p->stride_w;
            if (is_max) {
                for (int64_t ox = kx[kj].lo; ox < kx[kj].hi; ++ox)
                    y[ox] = lgk_maxf(y[ox], row[ox * s + off]);
            } else {
                for (int64_t ox = kx[kj].lo; ox < kx[kj].hi; ++ox)
                    y[ox] += row[ox * s + off];
            }
        }
    }
}

/* Few outputs per row (global pooling): tap passes over 1-2 outputs would be
 * all loop overhead, so walk each window instead. */
static void pool_row_by_window(const lgk_pool2d_params *p, const float *plane, const window *wy,
                               int64_t oy, const window *wx, int64_t ow, float *y, int is_max)
{
    for (int64_t ox = 0; ox < ow; ++ox) {
        float acc = is_max ? -INFINITY : 0.0f;
        int64_t x0 = ox * p->stride_w - p->pad_left; /* may be negative: index arithmetic */
        for (int64_t ki = wy->lo; ki < wy->hi; ++ki) {
            const float *row = plane + (oy * p->stride_h - p->pad_top + ki * p->dilation_h) * p->w;
            for (int64_t kj = wx[ox].lo; kj < wx[ox].hi; ++kj) {
                float v = row[x0 + kj * p->dilation_w];
                acc = is_max ? lgk_maxf(acc, v) : acc + v;
            }
        }
        y[ox] = acc;
    }
}

/* Average: divide each sum by its window's tap count (NaN for an empty one). */
static void pool_divide(const lgk_pool2d_params *p, const window *wy, const window *wx, int64_t ow,
                        float *y)
{
    for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t count = p->count_include_pad ? wy->padded * wx[ox].padded
                                             : (wy->hi - wy->lo) * (wx[ox].hi - wx[ox].lo);
        y[ox] = count > 0 ? y[ox] / (float)count : NAN;
    }
}

static int pool_impl(const lgk_pool2d_params *p, const float *x, int64_t x_len, float *y,
                     int64_t y_len, int is_max)
{
    int64_t oh, ow, nx, ny;
    LGK_TRY(lgk_pool2d_out_shape(p, &oh, &ow));
    const int64_t xd[4] = {p->n, p->c, p->h, p->w}, yd[4] = {p->n, p->c, oh, ow};
    LGK_TRY(lgk_checked_count(4, xd, &nx));
    LGK_TRY(lgk_checked_count(4, yd, &ny));
    LGK_TRY(lgk_check_buffer(x, x_len, nx));
    LGK_TRY(lgk_check_buffer(y, y_len, ny));
    window *wy = malloc((size_t)(oh + ow + p->kw) * sizeof(window));
    LGK_CHECK(wy != NULL, LGK_ERR_NOMEM);
    window *wx = wy + oh, *kx = wx + ow;
    make_windows(p->h, oh, p->kh, p->stride_h, p->pad_top, p->pad_bottom, p->dilation_h, wy);
    make_windows(p->w, ow, p->kw, p->stride_w, p->pad_left, p->pad_right, p->dilation_w, wx);
    for (int64_t kj = 0; kj < p->kw; ++kj)
        valid_range(p->w, ow, p->stride_w, kj * p->dilation_w - p->pad_left, &kx[kj].lo, &kx[kj].hi);
    for (int64_t plane = 0; plane < p->n * p->c; ++plane) {
        const float *xp = x + plane * p->h * p->w;
        for (int64_t oy = 0; oy < oh; ++oy) {
            float *yr = y + (plane * oh + oy) * ow;
            if (ow < POOL_MIN_ROW)
                pool_row_by_window(p, xp, &wy[oy], oy, wx, ow, yr, is_max);
            else
                pool_row(p, xp, &wy[oy], oy, kx, ow, yr, is_max);
            if (!is_max)
                pool_divide(p, &wy[oy], wx, ow, yr);
        }
    }
    free(wy);
    return LGK_OK;
}

int lgk_max_pool2d_nchw(const lgk_pool2d_params *p, const float *x, int64_t x_len, float *y,
                        int64_t y_len)
{
    return pool_impl(p, x, x_len, y, y_len, 1);
}

int lgk_avg_pool2d_nchw(const lgk_pool2d_params *p, const float *x, int64_t x_len, float *y,
                        int64_t y_len)
{
    return pool_impl(p, x, x_len, y, y_len, 0);
}
