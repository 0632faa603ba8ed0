/*
 * depthwise.c - direct depthwise conv2d (one input channel per group), NCHW.
 *
 * Depthwise convs skip im2col and GEMM. With AVX-512, two forms:
 *  - channel bands (most convs): 16 output channels at once, one per vector lane.
 *    The input rows a strip of output rows reads are transposed to pixel-major
 *    order (16 channels per pixel) in scratch, with zeros where the padding is;
 *    each tap is then one vector multiply-add per output pixel whatever the map
 *    size, stride or dilation, and the result is transposed back to NCHW.
 *    Small maps (2x2..8x8) keep every lane busy, where a plane at a time would
 *    pay its per-plane setup for a handful of pixels.
 *  - planes (few channels on wide maps, small unit-stride kernels over rows of whole
 *    vectors, stride 2 along x over rows of whole vectors): one plane at a time from
 *    a zero-padded copy, vectorised along x, as in pooling; no transposes. With
 *    stride 2 along x the copy holds the even and the odd columns apart, so every
 *    tap loads whole vectors at unit stride.
 *  - 3x3 (stride 1 or 2, dilation 1) on maps at least 12 outputs wide: plane by plane
 *    straight from the input, rows of 16 outputs at once (depthwise_3x3.inc): no copy,
 *    no transposes; on 7-wide maps most of its lanes would idle. Small maps of stride 1
 *    (33..256 outputs, rows as wide as the input's) go as one run of pixels a plane,
 *    16 consecutive outputs a vector whatever rows they span. Maps at most 8 outputs
 *    wide from rows of at most 16 inputs go two planes a vector, one in each half.
 * Without AVX-512 every conv goes by planes of 8-lane vectors (depthwise_planes.inc
 * is the plane code for both widths). The 16-lane forms apply relu and relu6 in registers.
 * The caller (lgk_conv2d_nchw) has checked the shapes and buffer sizes.
 */
#include <string.h>

#include "lgk_internal.h"
#include "lgk_transpose.h"

/* The 16-lane forms (bands, wide planes) are written for AVX-512, one zmm per vector:
 * compiled for it alone and taken where the CPU has it. Elsewhere the 8-lane planes
 * (SIMD clones) serve every conv, as 16-lane vectors split into halves spill. */
#if defined(__GNUC__) && defined(__x86_64__)
#define DW_WIDE __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512cd,avx2,fma")))
#define DW_CPU_WIDE() __builtin_cpu_supports("avx512f")
#define DW_X86 1
#include <immintrin.h>
#else
#define DW_WIDE
#define DW_CPU_WIDE() 0
#endif

/* ---- activations in registers ------------------------------------------------------ */

typedef int dw_ivec __attribute__((vector_size(LGK_V16 * sizeof(int))));

/* relu and relu6 of n vectors in registers, as lgk_reluf / lgk_relu6f (NaN stays
 * NaN); 1 if done, 0 for the other activations (lgk_activate after the store). Each
 * bound is one comparison that is false for NaN (not x <= 0, x >= 6): GCC 12
 * scalarises an `x != x` mask in SIMD clones. */
static inline __attribute__((always_inline)) int dw_clamp(lgk_v16 *v, int n, int activation)
{
    if (activation != LGK_ACT_RELU && activation != LGK_ACT_RELU6)
        return activation == LGK_ACT_NONE;
    const lgk_v16 zero = {0}, six = zero + 6.0f;
    for (int k = 0; k < n; ++k) {
        lgk_v16 x = v[k];
        x = (lgk_v16)((dw_ivec)x & ~(x <= zero));
        if (activation == LGK_ACT_RELU6) {
            dw_ivec big = x >= six;
            x = (lgk_v16)(((dw_ivec)six & big) | ((dw_ivec)x & ~big));
        }
        v[k] = x;
    }
    return 1;
}

/* ---- planes: one plane at a time, vectorised along x ------------------------------ */

typedef struct {
    const lgk_conv2d_params *p;
    int64_t oh, ow, og; /* og: filters per input channel (the depth multiplier) */
    int64_t ph, pw;     /* the zero-padded copy of an input plane */
    const float *x, *w, *bias;
    float *y;
    int activation;
    /* split (stride 2 along x): the padded copy as two planes, the even and the odd
     * columns counted from padded column `flip` (the left padding's parity), so the
     * input's columns go whole to both, at index split_at of each row (a multiple of
     * the vector width: aligned stores); column k of the split sits at split_origin + k
     * (split_origin >= 1: the odd column -1 where flip is 1). */
    int split, flip;
    int64_t split_origin, split_at;
} dw_job;

/* Extent of the padded plane along one dim: the padded input, and every tap of the
 * last block of `block` outputs. */
static int dw_extent(int64_t in, int64_t pads, int64_t n_out, int64_t block, int64_t stride,
                     int64_t k, int64_t dil, int64_t *out)
{
    int64_t blocks = (n_out + block - 1) / block, reach, padded;
    LGK_TRY(lgk_mul(blocks * block, stride, &reach));
    LGK_TRY(lgk_add(reach, (k - 1) * dil + 1, &reach));
    LGK_TRY(lgk_add(in, pads, &padded));
    *out = LGK_MAX(padded, reach);
    return LGK_OK;
}

/* Portable: 8 pixels (a ymm on AVX2) x 4 rows per block, in every SIMD clone. */
#define DWP_LANES 8
#define DWP_ROWS 4
#define DWP(name) dw8_##name
#define DWP_TARGET LGK_CLONES
#define DWP_CLAMP 0
#include "depthwise_planes.inc"
#undef DWP_LANES
#undef DWP_ROWS
#undef DWP
#undef DWP_TARGET
#undef DWP_CLAMP

/* AVX-512: 16 pixels (a zmm) x 8 rows per block. */
#define DWP_LANES 16
#define DWP_ROWS 8
#define DWP(name) dw16_##name
#define DWP_TARGET DW_WIDE
#define DWP_CLAMP 1
#include "depthwise_planes.inc"
#undef DWP_LANES
#undef DWP_ROWS
#undef DWP
#undef DWP_TARGET
#undef DWP_CLAMP

#ifdef DW_X86
#include "depthwise_3x3.inc"
#endif

/* ---- channel bands: 16 channels per vector, pixel-major scratch ------------------- */

#define CB_LANES LGK_V16 /* channels of a band: one vector */
#define CB_PIX 8    /* output pixels per register block: independent accumulators */
#define CB_SMALL_FILL 4096 /* scratch rows of at most this many floats: one memset */

typedef struct {
    const lgk_conv2d_params *p;
    int64_t oh, ow, og;   /* og: filters per input channel (the depth multiplier) */
    int64_t bands, strips, strip_rows; /* a unit of work: (image, band, strip) */
    int64_t tw;           /* pixels per scratch row: the reach of the taps along x */
    int64_t t_floats, o_floats; /* scratch of the input rows / outputs of a strip */
    int64_t w_floats;           /* of the weights: taps rounded up to 16, x 16 lanes */
    const float *x, *x_end, *w, *bias;
    float *y;
    int activation;
    int nhwc; /* y is (n, oh, ow, o): the pixel-major outputs go out without a transpose */
} cb_job;

/* Zeros of the scratch rows r0..r0+nr outside the input rows iy_lo..iy_hi and,
 * in the others, outside the `valid` input columns from column pl. */
static inline __attribute__((always_inline)) void
cb_zero_borders(float *t, int64_t r0, int64_t nr, int64_t iy_lo, int64_t iy_hi, int64_t row,
                int64_t pl, int64_t valid, int64_t tw)
{
    if (iy_lo > r0)
        memset(t, 0, (size_t)((iy_lo - r0) * row) * sizeof(float));
    if (r0 + nr > iy_hi)
        memset(t + (iy_hi - r0) * row, 0, (size_t)((r0 + nr - iy_hi) * row) * sizeof(float));
    for (int64_t iy = iy_lo; iy < iy_hi; ++iy) {
        float *tr = t + (iy - r0) * row;
        memset(tr, 0, (size_t)(LGK_MIN(pl, tw) * CB_LANES) * sizeof(float));
        if (pl + valid < tw)
            memset(tr + (pl + valid) * CB_LANES, 0,
                   (size_t)((tw - pl - valid) * CB_LANES) * sizeof(float));
    }
}

/* Pixels q..end of the planes src[l] (whole rows of width w), transposed to pixel-major
 * at dst (a scratch row every `row` floats), the first `valid` of each row. The rows
 * are contiguous in each plane: one run of pixels, 16 at a time; the last few too
 * where reading 16 floats past them stays inside the input (ending at x_end). */
static inline __attribute__((always_inline)) void
cb_transpose_in(const float *const *src, int64_t q, int64_t end, int64_t w, int64_t valid,
                float *dst, int64_t row, const float *x_end)
{
    int64_t ix = 0;
    while (q < end) {
        int64_t n = LGK_MIN((int64_t)CB_LANES, end - q);
        if (n < CB_LANES && x_end - (src[CB_LANES - 1] + q) < CB_LANES)
            break; /* the scalar loop below */
        lgk_v16 v[CB_LANES];
        LGK_UNROLL16
        for (int l = 0; l < CB_LANES; ++l)
            memcpy(&v[l], src[l] + q, sizeof v[l]);
        lgk_transpose16(v);
        if (n == CB_LANES && ix + CB_LANES <= valid) { /* 16 pixels of one row */
            LGK_UNROLL16
            for (int k = 0; k < CB_LANES; ++k)
                memcpy(dst + (ix + k) * CB_LANES, &v[k], sizeof v[k]);
            ix += CB_LANES;
            if (ix == w)
                ix = 0, dst += row;
            q += n;
            continue;
        }
        LGK_UNROLL16
        for (int k = 0; k < CB_LANES; ++k) {
            if (k < n && ix < valid)
                memcpy(dst + ix * CB_LANES, &v[k], sizeof v[k]);
            if (k < n && ++ix == w)
                ix = 0, dst += row;
        }
        q += n;
    }
    for (; q < end; ++q) {
        if (ix < valid)
            for (int l = 0; l < CB_LANES; ++l)
                dst[ix * CB_LANES + l] = src[l][q];
        if (++ix == w)
            ix = 0, dst += row;
    }
}

/* The scratch rows t of padded input rows r0..r0+nr (r0 possibly negative): zeros
 * outside the input, the input pixels of the planes src[l] transposed inside. */
static inline __attribute__((always_inline)) void
cb_fill(const cb_job *j, const float *const *src, int64_t r0, int64_t nr, float *t)
{
    const lgk_conv2d_params *p = j->p;
    int64_t tw = j->tw, pl = p->pad_left, row = tw * CB_LANES;
    int64_t valid = LGK_MAX((int64_t)0, LGK_MIN(p->w, tw - pl)); /* input columns used */
    int64_t iy_lo = LGK_MAX((int64_t)0, r0), iy_hi = LGK_MIN(p->h, r0 + nr);
    int none = valid == 0 || iy_lo >= iy_hi;
    if (none || nr * row <= CB_SMALL_FILL)
        memset(t, 0, (size_t)(nr * row) * sizeof(float)); /* one call for a small map */
    else
        cb_zero_borders(t, r0, nr, iy_lo, iy_hi, row, pl, valid, tw);
    if (!none)
        cb_transpose_in(src, iy_lo * p->w, iy_hi * p->w, p->w, valid,
                        t + (iy_lo - r0) * row + pl * CB_LANES, row, j->x_end);
}

/* The weights of filters o0..o0+lanes tap-major (a vector of the 16 filters per tap)
 * at wp; spare lanes repeat the last filter. */
static inline __attribute__((always_inline)) void
cb_pack_weights(const cb_job *j, int64_t o0, int lanes, float *wp)
{
    int64_t taps = j->p->kh * j->p->kw, k0 = 0;
    const float *wb = j->w + o0 * taps;
    /* 16 taps of 16 filters by one transpose, where the reads stay inside w */
    for (; lanes == CB_LANES && k0 < taps &&
           (o0 + CB_LANES - 1) * taps + k0 + CB_LANES <= j->p->o * taps; k0 += CB_LANES) {
        lgk_v16 v[CB_LANES];
        LGK_UNROLL16
        for (int l = 0; l < CB_LANES; ++l)
            memcpy(&v[l], wb + l * taps + k0, sizeof v[l]);
        lgk_transpose16(v);
        memcpy(wp + k0 * CB_LANES, v, sizeof v); /* past the last tap too: there is room */
    }
    for (int l = 0; l < CB_LANES; ++l) {
        const float *wl = wb + LGK_MIN(l, lanes - 1) * taps;
        for (int64_t k = k0; k < taps; ++k)
            wp[k * CB_LANES + l] = wl[k];
    }
}

/* acc[k] = bias + every tap of the output pixel whose first tap is at base[k]. */
static inline __attribute__((always_inline)) void
cb_taps(lgk_v16 *acc, const float *const *base, const float *wp, const lgk_v16 *bias,
        const lgk_conv2d_params *p, int64_t tw)
{
    for (int k = 0; k < CB_PIX; ++k)
        acc[k] = *bias;
    int64_t dy = p->dilation_h * tw * CB_LANES, dx = p->dilation_w * CB_LANES;
    for (int64_t ki = 0; ki < p->kh; ++ki)
        for (int64_t kj = 0; kj < p->kw; ++kj) {
            lgk_v16 wv;
            memcpy(&wv, wp + (ki * p->kw + kj) * CB_LANES, sizeof wv);
            int64_t off = ki * dy + kj * dx;
            for (int k = 0; k < CB_PIX; ++k) {
                lgk_v16 v;
                memcpy(&v, base[k] + off, sizeof v);
                acc[k] += wv * v;
            }
        }
}

/* As cb_taps for CB_PIX pixels side by side in one output row, `step` floats apart
 * in the scratch (a constant where inlined: the stride times CB_LANES). */
static inline __attribute__((always_inline)) void
cb_taps_row(lgk_v16 *acc, const float *base, int64_t step, const float *wp, const lgk_v16 *bias,
            const lgk_conv2d_params *p, int64_t tw)
{
    for (int k = 0; k < CB_PIX; ++k)
        acc[k] = *bias;
    int64_t dy = p->dilation_h * tw * CB_LANES, dx = p->dilation_w * CB_LANES;
    for (int64_t ki = 0; ki < p->kh; ++ki)
        for (int64_t kj = 0; kj < p->kw; ++kj) {
            lgk_v16 wv;
            memcpy(&wv, wp + (ki * p->kw + kj) * CB_LANES, sizeof wv);
            const float *s = base + ki * dy + kj * dx;
            for (int k = 0; k < CB_PIX; ++k) {
                lgk_v16 v;
                memcpy(&v, s + k * step, sizeof v);
                acc[k] += wv * v;
            }
        }
}

/* cb_taps_row at stride 1 and no dilation along x, the kernel's width kw (3, 5 or 7) a
 * constant where inlined: the CB_PIX + kw - 1 input vectors of a kernel row are loaded
 * once for its kw taps (cb_taps_row loads 9 vectors per 8 multiply-adds, more than the
 * load ports feed; here 21 per 56 at kw = 7). Same products, summed in the same order. */
static inline __attribute__((always_inline)) void
cb_taps_row_s1(lgk_v16 *acc, const float *base, const float *wp, const lgk_v16 *bias,
               int64_t kh, const int kw, int64_t dy)
{
    for (int k = 0; k < CB_PIX; ++k)
        acc[k] = *bias;
    for (int64_t ki = 0; ki < kh; ++ki) {
        const float *s = base + ki * dy;
        lgk_v16 in[CB_PIX + 6];
#pragma GCC unroll 14
        for (int i = 0; i < CB_PIX + kw - 1; ++i)
            memcpy(&in[i], s + i * CB_LANES, sizeof in[i]);
#pragma GCC unroll 7
        for (int kj = 0; kj < kw; ++kj) {
            lgk_v16 wv;
            memcpy(&wv, wp + (ki * kw + kj) * CB_LANES, sizeof wv);
#pragma GCC unroll 8
            for (int k = 0; k < CB_PIX; ++k)
                acc[k] += wv * in[k + kj];
        }
    }
}

/* Whether cb_taps_s1 applies: stride 1 and no dilation along x, a 3, 5 or 7 wide kernel. */
static inline int cb_unit_x(const lgk_conv2d_params *p)
{
    return p->stride_w == 1 && p->dilation_w == 1 && (p->kw == 3 || p->kw == 5 || p->kw == 7);
}

static inline __attribute__((always_inline)) void
cb_taps_s1(lgk_v16 *acc, const float *base, const float *wp, const lgk_v16 *bias,
           const lgk_conv2d_params *p, int64_t dy)
{
    if (p->kw == 7)
        cb_taps_row_s1(acc, base, wp, bias, p->kh, 7, dy);
    else if (p->kw == 5)
        cb_taps_row_s1(acc, base, wp, bias, p->kh, 5, dy);
    else
        cb_taps_row_s1(acc, base, wp, bias, p->kh, 3, dy);
}

/* The `rows` output rows of a strip, pixel-major into o, from the scratch rows t. */
static inline __attribute__((always_inline)) void
cb_compute(const cb_job *j, const float *t, const float *wp, const lgk_v16 *bias, int64_t rows,
           float *o, int *done)
{
    const lgk_conv2d_params *p = j->p;
    int64_t ow = j->ow, npix = rows * ow, tw = j->tw;
    int64_t ystep = p->stride_h * tw * CB_LANES, xstep = p->stride_w * CB_LANES;
    int64_t dy = p->dilation_h * tw * CB_LANES, oy = 0, ox = 0; /* of pixel q */
    int unit_x = cb_unit_x(p);
    if (unit_x && ow < CB_PIX) { /* 7 x 7 maps: a block per row (not blocks across rows,
                                  * which read each tap of each pixel apart); its spare
                                  * pixels read past the row (the scratch has room) and
                                  * are stored over the next row's, computed after */
        for (int64_t r = 0; r < rows; ++r) {
            lgk_v16 acc[CB_PIX];
            cb_taps_s1(acc, t + r * ystep, wp, bias, p, dy);
            *done = dw_clamp(acc, CB_PIX, j->activation);
            for (int k = 0; k < CB_PIX; ++k)
                memcpy(o + (r * ow + k) * CB_LANES, &acc[k], sizeof acc[k]);
        }
        return;
    }
    for (int64_t q = 0; q < npix; q += CB_PIX) {
        lgk_v16 acc[CB_PIX];
        if (ox + CB_PIX <= ow) {
            const float *base = t + oy * ystep + ox * xstep;
            if (unit_x)
                cb_taps_s1(acc, base, wp, bias, p, dy);
            else if (p->stride_w == 1)
                cb_taps_row(acc, base, CB_LANES, wp, bias, p, tw);
            else if (p->stride_w == 2)
                cb_taps_row(acc, base, 2 * CB_LANES, wp, bias, p, tw);
            else
                cb_taps_row(acc, base, xstep, wp, bias, p, tw);
            ox += CB_PIX;
            if (ox == ow)
                ox = 0, ++oy;
        } else { /* the block wraps to the next row or ends the strip */
            const float *base[CB_PIX];
            for (int k = 0; k < CB_PIX; ++k) {
                base[k] = t + oy * ystep + ox * xstep; /* past the end: the last again */
                if (q + k + 1 < npix && ++ox == ow)
                    ox = 0, ++oy;
            }
            cb_taps(acc, base, wp, bias, p, tw);
        }
        *done = dw_clamp(acc, CB_PIX, j->activation);
        /* a constant count (past npix too: there is room) stores from registers */
        for (int k = 0; k < CB_PIX; ++k)
            memcpy(o + (q + k) * CB_LANES, &acc[k], sizeof acc[k]);
    }
}

/* The pixel-major outputs o (npix pixels) into the first `lanes` planes dst[l]. */
static inline __attribute__((always_inline)) void
cb_store(const float *o, int64_t npix, int lanes, float *const *dst)
{
    int64_t q = 0;
    for (; q + CB_LANES <= npix; q += CB_LANES) {
        lgk_v16 v[CB_LANES];
        memcpy(v, o + q * CB_LANES, sizeof v);
        lgk_transpose16(v);
        if (lanes == CB_LANES) { /* a constant count keeps v in registers */
            LGK_UNROLL16
            for (int l = 0; l < CB_LANES; ++l)
                memcpy(dst[l] + q, &v[l], sizeof v[l]);
        } else {
            for (int l = 0; l < lanes; ++l)
                memcpy(dst[l] + q, &v[l], sizeof v[l]);
        }
    }
    for (; q < npix; ++q)
        for (int l = 0; l < lanes; ++l)
            dst[l][q] = o[q * CB_LANES + l];
}

/* The pixel-major outputs o (npix pixels) into an NHWC image's rows of `o_total`
 * channels, from its channel `lanes` wide at dst: per pixel one run of channels. */
static inline __attribute__((always_inline)) void
cb_store_nhwc(const float *o, int64_t npix, int lanes, float *dst, int64_t o_total)
{
    if (lanes == CB_LANES) { /* a constant size: one vector per pixel */
        for (int64_t q = 0; q < npix; ++q)
            memcpy(dst + q * o_total, o + q * CB_LANES, CB_LANES * sizeof(float));
        return;
    }
    for (int64_t q = 0; q < npix; ++q)
        for (int l = 0; l < lanes; ++l)
            dst[q * o_total + l] = o[q * CB_LANES + l];
}

/* One unit: the band's 16 (or fewer, the last band) filters over one strip of output
 * rows of one image. Scratch: input rows, outputs, weights, bias. */
DW_WIDE static void cb_unit(const cb_job *j, int64_t unit, float *scratch)
{
    const lgk_conv2d_params *p = j->p;
    /* NCHW: a band's strips in turn, its planes written row after row; NHWC: a strip's
     * bands in turn, so that its pixels' rows of channels are written whole while in
     * cache (band by band, each pass over a map of 96 channels at 56 x 56 wrote 64 of
     * every 384 bytes, and every line came in from memory again for the next band) */
    int64_t strip = j->nhwc ? unit / j->bands % j->strips : unit % j->strips;
    int64_t band = j->nhwc ? unit % j->bands : unit / j->strips % j->bands;
    int64_t img = unit / j->strips / j->bands;
    int64_t o0 = band * CB_LANES, oy0 = strip * j->strip_rows;
    int64_t rows = LGK_MIN(j->strip_rows, j->oh - oy0), plane = j->oh * j->ow;
    int lanes = (int)LGK_MIN((int64_t)CB_LANES, p->o - o0);
    float *t = scratch, *o = t + j->t_floats, *wp = o + j->o_floats;
    lgk_v16 bias;
    const float *src[CB_LANES];
    float *dst[CB_LANES];
    cb_pack_weights(j, o0, lanes, wp);
    for (int l = 0; l < CB_LANES; ++l) {
        int64_t oc = o0 + LGK_MIN(l, lanes - 1); /* spare lanes repeat the last filter */
        bias[l] = j->bias != NULL ? j->bias[oc] : 0.0f;
        int64_t ic = j->og == 1 ? oc : oc / j->og; /* a division per lane costs */
        src[l] = j->x + (img * p->c + ic) * p->h * p->w;
        dst[l] = j->y + (img * p->o + oc) * plane + oy0 * j->ow;
    }
    int64_t nr = (rows - 1) * p->stride_h + (p->kh - 1) * p->dilation_h + 1;
    cb_fill(j, src, oy0 * p->stride_h - p->pad_top, nr, t);
    int done = 1;
    cb_compute(j, t, wp, &bias, rows, o, &done);
    if (!done)
        lgk_activate(j->activation, o, rows * j->ow * CB_LANES);
    if (j->nhwc)
        cb_store_nhwc(o, rows * j->ow, lanes, j->y + ((img * j->oh + oy0) * j->ow) * p->o + o0,
                      p->o);
    else
        cb_store(o, rows * j->ow, lanes, dst);
}

static int cb_units(void *ctx, int64_t begin, int64_t end)
{
    const cb_job *j = ctx;
    lgk_scratch s = {NULL, 0};
    LGK_TRY(lgk_scratch_acquire(j->t_floats + j->o_floats + j->w_floats, &s));
    for (int64_t unit = begin; unit < end; ++unit)
        cb_unit(j, unit, s.data);
    lgk_scratch_release(&s);
    return LGK_OK;
}

/* Scratch rows of a strip (floats) stay within this, so they stay in L2. */
#define CB_STRIP_FLOATS 32768

/* Plans the bands and strips of a depthwise conv into *j. */
static int cb_plan(cb_job *j, int nthreads)
{
    const lgk_conv2d_params *p = j->p;
    int64_t reach_w, row, taps_h, rows, units, floats;
    LGK_TRY(lgk_mul(j->ow - 1, p->stride_w, &reach_w));
    LGK_TRY(lgk_add(reach_w, (p->kw - 1) * p->dilation_w + 1, &j->tw));
    LGK_TRY(lgk_mul(j->tw, CB_LANES, &row));
    taps_h = (p->kh - 1) * p->dilation_h + 1;
    /* as many output rows as keep the input rows within budget, at least one */
    rows = (CB_STRIP_FLOATS / row - taps_h) / p->stride_h + 1;
    rows = LGK_MAX((int64_t)1, LGK_MIN(rows, j->oh));
    j->bands = (p->o + CB_LANES - 1) / CB_LANES;
    units = p->n * j->bands * ((j->oh + rows - 1) / rows);
    /* A few units that do not divide among the threads (3 bands on 2): the threads split
     * the rows too. Not with many: the imbalance is small, and every strip packs the
     * weights and transposes its halo rows again (also when the workers are late and
     * the caller runs every unit: 21 bands of 2x2 took 2x as long in 42 strips). */
    if (units % nthreads != 0 && units < 4 * nthreads)
        rows = LGK_MAX((int64_t)1, LGK_MIN(rows, (j->oh + nthreads - 1) / nthreads));
    j->strip_rows = rows;
    j->strips = (j->oh + rows - 1) / rows;
    LGK_TRY(lgk_mul(row, (rows - 1) * p->stride_h + taps_h, &j->t_floats));
    /* a block of a row narrower than CB_PIX reads up to CB_PIX pixels past the last row */
    LGK_TRY(lgk_add(j->t_floats, CB_PIX * CB_LANES, &j->t_floats));
    /* outputs and weights have room for whole blocks: constant-count stores */
    LGK_TRY(lgk_mul(rows * j->ow + CB_PIX, CB_LANES, &j->o_floats));
    j->w_floats = (p->kh * p->kw + CB_LANES) / CB_LANES * CB_LANES * CB_LANES;
    LGK_TRY(lgk_add(j->t_floats, j->o_floats, &floats));
    return lgk_add(floats, j->w_floats, &floats);
}

/* ---- dispatch ---------------------------------------------------------------------- */

/* Convs of fewer multiply-adds per thread (about 1.5 us) run on one thread. Handing a
 * slice to a spinning pool worker costs ~0.4 us; with the worker on the other core
 * (measured under SCHED_FIFO, 1 -> 2 threads) 3x3 96x8x8 ran 1.2x faster, 3x3 s2 48x32x32
 * 1.5x, 7x7 32x16x16 1.6x, 3x3 96x32x32 1.9x, while 3x3 s2 on 8x8 maps (1.5 us) ran
 * 0.75x. Where the worker is late (other processes on the cores), the caller runs every
 * slice itself for ~0.1 us more than on one thread. (Before the pool's workers spun,
 * each 2-thread call paid two futex wake-ups and ran both slices on the caller's CPU:
 * the zoo's depthwise convs took 4-10x as long as on one thread.) */
#define DW_MIN_WORK_PER_THREAD ((int64_t)24576)

/* Bands need this many filters to fill most of their lanes; with fewer, wide maps
 * go plane by plane (their rows fill the vectors instead). */
#define CB_MIN_FILTERS 8
#define CB_WIDE_MAP 16

/* 3x3 convs on maps this wide go by depthwise_3x3.inc. Single-conv A/B, 1 thread,
 * against the bands / 16-lane planes, us: 32x112^2 390 -> 251, stride 2 96x112^2 566 ->
 * 399, 144x56^2 418 -> 324, 192x28^2 156 -> 136, 576x14^2 141 -> 128; but 960x7^2
 * 82 -> 118 and stride 2 576x14^2 (7 wide) 75 -> 96. */
#define DW3_MIN_OW 12

/* Planes also win on wide maps of small unit-stride kernels whose rows are whole
 * vectors: no transposes, and few taps to amortise them over (16x32x32 3x3: 7.5 vs
 * 11.7 us; with 5x5 and larger kernels or row tails the bands win); and with stride 2
 * along x on rows of whole vectors, where the bands transpose four input pixels per
 * output pixel and the planes split each input row in even and odd columns once
 * (3x3 s2 48x32x32: 10.4 -> 8.0 us, 5x5 s2 32x32x32 with silu: 12.6 -> 11.4). */
static int dw_planes_win(const lgk_conv2d_params *p, int64_t ow)
{
    if (p->stride_w == 2)
        return ow % 16 == 0;
    return p->stride_w == 1 && p->kw <= 3 && ow >= 32 && ow % 16 == 0;
}

static int dw_portable_forced = 0;

/* Tests: 1 makes lgk_depthwise_conv2d take its portable form (the one for CPUs
 * without AVX-512) on any CPU, 0 restores the choice by CPU. Not thread-safe. */
int lgk_depthwise_force_portable(int on);
int lgk_depthwise_force_portable(int on)
{
    dw_portable_forced = on != 0;
    return LGK_OK;
}

static int dw_wide(void)
{
    return !dw_portable_forced && DW_CPU_WIDE();
}

/* Threads for a depthwise conv of this size: 1 below DW_MIN_WORK_PER_THREAD per thread. */
static int dw_threads(const lgk_conv2d_params *p, int64_t oh, int64_t ow, int nthreads)
{
    int64_t work = p->n * p->o * oh * ow * p->kh * p->kw;
    return (int)LGK_MAX((int64_t)1, LGK_MIN((int64_t)nthreads, work / DW_MIN_WORK_PER_THREAD));
}

/* Whether the conv goes by channel bands (cb_*) rather than one of the plane forms: with
 * AVX-512, when none of the forms for narrow maps, tall-and-few-filter maps or 3x3 convs
 * fits and the planes do not win. The one statement of the choice for both layouts. */
static int dw_by_bands(const lgk_conv2d_params *p, int64_t oh, int64_t ow)
{
    if (!dw_wide())
        return 0;
#ifdef DW_X86
    if (dwn_fits(p, ow) || dwf_fits(p, oh, ow) || (dw3_fits(p) && ow >= DW3_MIN_OW))
        return 0;
#else
    (void)oh;
#endif
    return !((p->o < CB_MIN_FILTERS && ow >= CB_WIDE_MAP) || dw_planes_win(p, ow));
}

static int dw_bands(const lgk_conv2d_params *p, int64_t oh, int64_t ow, const float *x,
                    const float *w, const float *bias, float *y, int activation, int threads,
                    int nhwc)
{
    cb_job j = {p, oh, ow, p->o / p->c, 0, 0, 0, 0, 0, 0, 0, x, x + p->n * p->c * p->h * p->w,
                w, bias, y, activation, nhwc};
    LGK_TRY(cb_plan(&j, threads));
    return lgk_parallel_for(threads, p->n * j.bands * j.strips, 1, cb_units, &j);
}

int lgk_depthwise_conv2d(const lgk_conv2d_params *p, int64_t oh, int64_t ow, const float *x,
                         const float *w, const float *bias, float *y, int activation,
                         int nthreads)
{
    int threads = dw_threads(p, oh, ow, nthreads);
    if (dw_by_bands(p, oh, ow))
        return dw_bands(p, oh, ow, x, w, bias, y, activation, threads, 0);
    if (!dw_wide())
        return dw8_by_planes(p, oh, ow, x, w, bias, y, activation, threads);
#ifdef DW_X86
    if (dwn_fits(p, ow))
        return dwn_by_pairs(p, oh, ow, x, w, bias, y, activation, threads);
    if (dwf_fits(p, oh, ow))
        return dwf_by_planes(p, oh, ow, x, w, bias, y, activation, threads);
    if (dw3_fits(p) && ow >= DW3_MIN_OW)
        return dw3_by_planes(p, oh, ow, x, w, bias, y, activation, threads);
#endif
    return dw16_by_planes(p, oh, ow, x, w, bias, y, activation, threads);
}

int lgk_depthwise_bands_nhwc(const lgk_conv2d_params *p, int64_t oh, int64_t ow)
{
    return dw_by_bands(p, oh, ow);
}

int lgk_depthwise_conv2d_nhwc(const lgk_conv2d_params *p, int64_t oh, int64_t ow,
                              const float *x, const float *w, const float *bias, float *y,
                              int activation, int nthreads)
{
    LGK_CHECK(dw_by_bands(p, oh, ow), LGK_ERR_ARG);
    return dw_bands(p, oh, ow, x, w, bias, y, activation, dw_threads(p, oh, ow, nthreads), 1);
}
