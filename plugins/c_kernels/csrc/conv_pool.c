/*
 * conv_pool.c - NCHW conv2d (im2col + GEMM) and max/avg pooling.
 *
 * conv2d: the zero-padded input is split into stride phases (see make_phases), from
 * which im2col is written straight into the GEMM's packed panel layout, so the
 * unrolled matrix is never written twice; an unpadded conv (patchify, stride ==
 * kernel) needs no zeros, so its panels are gathered straight from the input by
 * per-tap and per-pixel offsets, without phase planes. Two orientations:
 *  - filters as the GEMM's rows: y (o x pixels) = W (o x c*kh*kw) @ im2col, with
 *    the bias and activation in the GEMM epilogue, straight into NCHW. W is read
 *    from OIHW or prepacked once (lgk_conv2d_nchw_packed_a). Large maps.
 *  - pixels as the GEMM's rows (lgk_conv2d_nchw_prepacked, weights prepacked as
 *    W^T): im2col^T (pixels x taps) @ W^T, so the GEMM's wide dimension is the
 *    filter count even on 2x2 maps and the weights stream once; the pixels x
 *    filters result is transposed into NCHW. Small maps.
 * A 1x1 stride-1 unpadded conv multiplies the input in place; bands of output rows
 * bound the scratch. Depthwise convs (one input channel per group) skip im2col and
 * GEMM: see depthwise.c.
 */
#include <stdlib.h>

#include "lgk_internal.h"
#include "lgk_parallel.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define CONV_X86 1
#include <immintrin.h>
#endif


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

/* Panel scratch budget in floats (4 MiB, the largest block the scratch pool keeps);
 * bigger problems go in bands of output rows. */
#define PANEL_BUDGET ((int64_t)1 << 20)

/*
 * im2col through phases. With strides (sh, sw) the zero-padded input of each channel
 * is split into sh * sw phase planes: plane (c, py, px) holds padded rows py, py + sh,
 * ... and columns px, px + sw, ... (hq x wq floats). A tap (ki, kj) of output pixel
 * (oy, ox) then reads one phase plane at "wide" index oy * wq + ox plus a fixed offset,
 * so for every tap an output row is one contiguous run of a phase plane, whatever the
 * padding, stride or dilation: the GEMM panels are filled by copies, not gathers.
 * Pixels as rows gather their panel rows anyway (see pixel_panels), so they split
 * no phases: one padded plane per channel, the strides applied by the gathers.
 */
typedef struct {
    const lgk_conv2d_params *p;
    int64_t oh, ow, cg, og, kg;    /* kg = cg * kh * kw: the GEMM's K */
    int64_t hq, wq, phase_plane;   /* phase plane rows, columns and floats (rounded up) */
    int64_t band_rows;             /* output rows per band */
    const float *x, *w, *bias;     /* w: OIHW weights, or packed panels (header skipped) */
    float *y;
    int activation;
    int by_pixels; /* rows of the GEMM: 0 filters (into NCHW), 1 pixels (transposed after) */
    int packed;    /* w holds packed panels */
    int direct;    /* unpadded: panels gathered straight from x, no phase planes */
    lgk_panel_layout layout;
    int64_t qh, qw; /* the phase split: the strides, or 1 x 1 (one padded plane per
                     * channel, strides applied by the pixel gathers) */
    const float *res; /* NULL, or a residual added to y before the activation (res_act;
                       * the GEMM epilogue then has none): y = act(conv + bias + res); y
                       * itself where the conv runs in place, onto the residual y holds */
    int res_act;
} conv_job;

/* Whether y holds the residual: the GEMM then adds it in its tiles' epilogue as it writes
 * them over it (lgk_sgemm_block_onto), with the activation; pixels as rows add t^T onto it
 * as they transpose. A residual apart from y was added in a pass over the blocks of a
 * cold y after the GEMM wrote them: in ResNet-50 (1 thread), where the planner gives the
 * conv its dying residual's buffer, the 1x1 expansions at 56^2 took 2.3 ms each with that
 * pass, 1.5 in place; at 28^2 1.5 -> 1.2, at 14^2 1.2 -> 1.0, at 7^2 1.5 -> 1.3. */
static int onto_y(const conv_job *j)
{
    return j->res != NULL && j->res == j->y;
}

typedef int (*gemm_block_fn)(int64_t M, int64_t N, int64_t K, lgk_operand a, lgk_operand b,
                             float *c, int64_t ldc, const float *bias, int bias_mode,
                             int activation, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

static int is_pointwise(const lgk_conv2d_params *p)
{
    return p->kh == 1 && p->kw == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_top == 0
           && p->pad_left == 0 && p->pad_bottom == 0 && p->pad_right == 0;
}

/* The residual of a fused epilogue: y[f * plane + q] += res[same] for filters [f0, f1) x
 * pixels [q0, q1) of the output block at yb (an image's, or its group's), then the
 * activation, right after the GEMM wrote the block (from L2 where it is a band): one pass
 * in place of the separate add's and activation's. The sums round as the separate add
 * did: (conv + bias) + res. (GEMM calls of a pointwise conv in chunks that stay in L2
 * were no faster: 64 -> 256 channels at 56^2 spent as long on the add, and the GEMM more.) */
static void add_residual(const conv_job *j, float *yb, int64_t plane, int64_t f0, int64_t f1,
                         int64_t q0, int64_t q1)
{
    if (j->res == NULL || onto_y(j))
        return;
    const float *rb = j->res + (yb - j->y);
    for (int64_t f = f0; f < f1; ++f) {
        float *restrict yr = yb + f * plane + q0;
        const float *restrict rr = rb + f * plane + q0;
        for (int64_t q = 0; q < q1 - q0; ++q)
            yr[q] += rr[q];
        if (j->res_act != LGK_ACT_NONE)
            lgk_activate(j->res_act, yr, q1 - q0);
    }
}

/* d[ox] = src[ox * stride + off_x] for ox in [a, b): a constant stride lets the
 * compiler vectorize the gather with shuffles. */
#define GATHER(stride) for (int64_t ox = a; ox < b; ++ox) d[ox] = src[ox * (stride) + off_x]

#ifdef CONV_X86
/* The first n (0..16) lanes. */
static inline __mmask16 lanes(int64_t n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n > 0 ? n : 0)) - 1u);
}

/* d[ox] = src[ox * stride + off_x] for ox in [a, b), stride 1 to 4, by masked
 * vectors: phase rows of small maps are shorter than the compiler's vector loops,
 * whose scalar tails did all the work. Per 16 outputs, the (n - 1) * stride + 1
 * floats from the first source are loaded (up to four vectors) and every stride-th
 * picked by two-source permutes (which use the index mod 32). */
__attribute__((target("avx512f"), always_inline)) static inline void phase_row_avx512(
    float *d, const float *src, int64_t a, int64_t b, int64_t stride, int64_t off_x)
{
    const __m512i pick = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int32_t)stride));
    const __mmask16 upper = _mm512_cmpge_epi32_mask(pick, _mm512_set1_epi32(32));
    for (int64_t ox = a; ox < b; ox += 16) {
        int64_t n = LGK_MIN((int64_t)16, b - ox), span = (n - 1) * stride + 1;
        const float *from = src + (ox * stride + off_x);
        __m512 v;
        if (stride == 1) {
            v = _mm512_maskz_loadu_ps(lanes(n), from);
        } else {
            v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lanes(span), from), pick,
                                       _mm512_maskz_loadu_ps(lanes(span - 16), from + 16));
            if (span > 32)
                v = _mm512_mask_blend_ps(
                    upper, v,
                    _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lanes(span - 32), from + 32),
                                           pick,
                                           _mm512_maskz_loadu_ps(lanes(span - 48), from + 48)));
        }
        _mm512_mask_storeu_ps(d + ox, lanes(n), v);
    }
}

static int phase_rows_vectors(int64_t stride)
{
    __builtin_cpu_init();
    return stride >= 1 && stride <= 4 && __builtin_cpu_supports("avx512f");
}

/* The phase (py, px) of channels [0, cg) (see make_phases) with vector rows inlined:
 * each plane zeroed by whole vectors (planes are rounded up to 16 floats), then its
 * rows [i0, i1) filled over their valid columns [a, b) (small maps: calls and memsets
 * per row cost more than the copies). */
__attribute__((target("avx512f"))) static void phase_planes_avx512(
    const conv_job *j, const float *xg, float *ph, int64_t py, int64_t px, int64_t i0,
    int64_t i1, int64_t a, int64_t b)
{
    const lgk_conv2d_params *p = j->p;
    int64_t sh = j->qh, sw = j->qw, wq = j->wq, off_x = px - p->pad_left;
    for (int64_t c = 0; c < j->cg; ++c) {
        float *plane = ph + ((c * sh + py) * sw + px) * j->phase_plane;
        for (int64_t x = 0; x < j->phase_plane; x += 16)
            _mm512_storeu_ps(plane + x, _mm512_setzero_ps());
        for (int64_t i = i0; i < i1; ++i)
            phase_row_avx512(plane + i * wq, xg + (c * p->h + i * sh + py - p->pad_top) * p->w,
                             a, b, sw, off_x);
    }
}
#else
static int phase_rows_vectors(int64_t stride)
{
    (void)stride;
    return 0;
}
#endif

/* Whether a tap of a kernel k wide (dilation dil) reads phase `phase` of `stride`. */
static int phase_used(int64_t k, int64_t dil, int64_t stride, int64_t phase)
{
    for (int64_t t = 0; t < k && t < stride; ++t) /* (t * dil) % stride repeats after stride */
        if (t * dil % stride == phase)
            return 1;
    return 0;
}

/* The phase planes of one group's input xg into ph (see above); planes no tap reads
 * (a 1x1 stride-2 conv reads one of four) are skipped. */
LGK_CLONES static void make_phases(const conv_job *j, const float *xg, float *ph)
{
    const lgk_conv2d_params *p = j->p;
    int64_t sh = j->qh, sw = j->qw, wq = j->wq;
    int vectors = phase_rows_vectors(sw);
    (void)vectors; /* unused without the x86 kernels */
    for (int64_t px = 0; px < sw; ++px) {
        if (!phase_used(p->kw, p->dilation_w, sw, px))
            continue;
        /* Phase columns whose input column ox * sw + off_x lies inside the input. */
        int64_t a, b, off_x = px - p->pad_left;
        valid_range(p->w, wq, sw, off_x, &a, &b);
        /* Phase rows whose input row i * sh + py - pad_top lies inside the input. */
        for (int64_t py = 0; py < sh; ++py) {
            if (!phase_used(p->kh, p->dilation_h, sh, py))
                continue;
            int64_t i0, i1;
            valid_range(p->h, j->hq, sh, py - p->pad_top, &i0, &i1);
#ifdef CONV_X86
            if (vectors) {
                phase_planes_avx512(j, xg, ph, py, px, i0, i1, a, b);
                continue;
            }
#endif
            for (int64_t c = 0; c < j->cg; ++c) {
                float *plane = ph + ((c * sh + py) * sw + px) * j->phase_plane;
                /* zeros first (small maps: one call instead of a few per row) */
                memset(plane, 0, (size_t)j->phase_plane * sizeof(float));
                for (int64_t i = i0; i < i1; ++i) {
                    float *d = plane + i * wq;
                    /* Index, not pointer, arithmetic: off_x may be negative. */
                    const float *src = xg + (c * p->h + i * sh + py - p->pad_top) * p->w;
                    if (sw == 1)
                        GATHER(1);
                    else if (sw == 2)
                        GATHER(2);
                    else if (sw == 4)
                        GATHER(4);
                    else
                        GATHER(sw);
                }
            }
        }
    }
}

/* off[k]: where tap k = (c, ki, kj) reads in the phase planes (plus the wide pixel). */
static void tap_offsets(const conv_job *j, int64_t *off)
{
    const lgk_conv2d_params *p = j->p;
    int64_t sh = j->qh, sw = j->qw, taps = p->kh * p->kw;
    int64_t per_channel = sh * sw * j->phase_plane;
    if (j->direct) { /* tap (c, ki, kj) of pixel (oy, ox) reads x[c, oy*sh + ki*dh, ox*sw + kj*dw] */
        for (int64_t c = 0; c < j->cg; ++c)
            for (int64_t ki = 0; ki < p->kh; ++ki)
                for (int64_t kj = 0; kj < p->kw; ++kj)
                    off[(c * p->kh + ki) * p->kw + kj] =
                        (c * p->h + ki * p->dilation_h) * p->w + kj * p->dilation_w;
        return;
    }
    /* channel 0's taps, then every channel's (from the last: off[0:taps] is read) */
    for (int64_t ki = 0; ki < p->kh; ++ki)
        for (int64_t kj = 0; kj < p->kw; ++kj) {
            int64_t ry = ki * p->dilation_h, rx = kj * p->dilation_w;
            off[ki * p->kw + kj] = (ry % sh * sw + rx % sw) * j->phase_plane + ry / sh * j->wq
                                   + rx / sw;
        }
    for (int64_t c = j->cg - 1; c >= 0; --c)
        for (int64_t t = 0; t < taps; ++t)
            off[c * taps + t] = c * per_channel + off[t];
}

/* n floats, with the panel widths in use as constants (inlined vector moves). */
static inline void copy_floats(float *restrict d, const float *restrict s, int64_t n)
{
    switch (n) {
    case 32: memcpy(d, s, 32 * sizeof(float)); break;
    case 16: memcpy(d, s, 16 * sizeof(float)); break;
    case 8: memcpy(d, s, 8 * sizeof(float)); break;
    default: memcpy(d, s, (size_t)n * sizeof(float)); break;
    }
}

/* A run of an output row inside one B sliver: columns [at, at + len) of sliver
 * `sliver` come from the phase plane at wide pixel `src`. */
typedef struct {
    int64_t sliver, at, src, len;
} panel_piece;

/* Most pieces a band of `rows` output rows can be cut into. */
static int64_t max_pieces(const conv_job *j, int64_t rows)
{
    return rows * (j->ow / j->layout.nr + 2);
}

/* The output rows [oy0, oy0 + rows) as runs cut at sliver boundaries, in sliver
 * order (the same for every tap); returns how many. */
static int64_t panel_pieces(const conv_job *j, int64_t oy0, int64_t rows, panel_piece *pieces)
{
    int64_t width = j->layout.nr, count = 0, sliver = 0, at = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t x = 0; x < j->ow;) {
            int64_t len = LGK_MIN(j->ow - x, width - at);
            pieces[count++] = (panel_piece){sliver, at, (oy0 + r) * j->wq + x, len};
            x += len, at += len;
            if (at == width)
                ++sliver, at = 0;
        }
    return count;
}

/* Output rows [oy0, oy0 + rows) of every tap into B panels (nr-pixel slivers, see
 * lgk_panel_layout): each output row is one contiguous run of its phase plane, so
 * the GEMM writes NCHW rows straight into y. Sliver by sliver, so the panels are
 * written in order; the last sliver's pad columns are zeroed. */
LGK_CLONES static void phase_panels(const conv_job *j, const float *ph, const panel_piece *pieces,
                                    int64_t count, const int64_t *off, float *panels)
{
    int64_t width = j->layout.nr, kc = j->layout.kc;
    int64_t n = pieces[count - 1].sliver * width + pieces[count - 1].at + pieces[count - 1].len;
    int64_t npad = (n + width - 1) / width * width;
    for (int64_t pc = 0; pc < j->kg; pc += kc) {
        int64_t depth = LGK_MIN(kc, j->kg - pc);
        for (int64_t i = 0, end; i < count; i = end) {
            int64_t sliver = pieces[i].sliver;
            for (end = i; end < count && pieces[end].sliver == sliver;)
                ++end;
            int64_t filled = pieces[end - 1].at + pieces[end - 1].len;
            float *d = panels + pc * npad + sliver * width * depth;
            for (int64_t k = pc; k < pc + depth; ++k, d += width) {
                const float *src = ph + off[k];
                for (int64_t t = i; t < end; ++t)
                    copy_floats(d + pieces[t].at, src + pieces[t].src, pieces[t].len);
                for (int64_t x = filled; x < width; ++x)
                    d[x] = 0.0f;
            }
        }
    }
}

/* One thread's work buffers: phase planes, GEMM panels, the GEMM result where it
 * cannot go straight into y, pixels' source indices and the taps' offsets. */
typedef struct {
    float *ph, *panels, *t;
    int32_t *qidx;
    const int64_t *off;
    panel_piece *pieces;
} conv_scratch;

/* A sliver row per tap k and sliver: d[0:width] = base[off[k] + qidx[s + 0:width]]
 * (see pixel_panels), the slivers of each K block end to end. */
static void gather_panels(int64_t kg, int64_t kc, int64_t width, int64_t npad,
                          const float *base, const int64_t *off, const int32_t *qidx,
                          float *panels)
{
    for (int64_t pc = 0; pc < kg; pc += kc) {
        int64_t depth = LGK_MIN(kc, kg - pc);
        for (int64_t s = 0; s < npad; s += width) {
            float *d = panels + pc * npad + s * depth;
            for (int64_t k = pc; k < pc + depth; ++k, d += width)
                for (int64_t i = 0; i < width; ++i)
                    d[i] = base[off[k] + qidx[s + i]];
        }
    }
}

#ifdef CONV_X86
/* gather_panels with vectors, 16 lanes of a sliver row at a time (width <= 32): lanes
 * whose sources lie within 32 floats of the first (small maps, stride 1) take two
 * masked loads and one two-source permute per tap, within 64 (strides up to 4, as in
 * patchify convs) four loads, two permutes and a blend, else a masked gather (several
 * times slower). */
__attribute__((target("avx512f"))) static void gather_panels_avx512(
    int64_t kg, int64_t kc, int64_t width, int64_t npad, const float *base,
    const int64_t *off, const int32_t *qidx, float *panels)
{
    for (int64_t s = 0; s < npad; s += width)
        for (int64_t h = 0; h < width; h += 16) {
            __mmask16 m = lanes(width - h);
            const int32_t *q = qidx + s + h;
            int32_t first = q[0], span = 0;
            for (int64_t i = 0; i < LGK_MIN((int64_t)16, width - h); ++i)
                span = q[i] - first + 1 > span ? q[i] - first + 1 : span;
            __m512i rel = _mm512_sub_epi32(_mm512_maskz_loadu_epi32(m, q),
                                           _mm512_set1_epi32(first));
            int sorted = _mm512_mask_cmplt_epi32_mask(m, rel, _mm512_setzero_si512()) == 0;
            int loads = !sorted ? 0 : span <= 32 ? 2 : span <= 64 ? 4 : 0;
            __mmask16 upper = _mm512_mask_cmpge_epi32_mask(m, rel, _mm512_set1_epi32(32));
            __mmask16 m0 = lanes(span), m1 = lanes(span - 16), m2 = lanes(span - 32),
                      m3 = lanes(span - 48);
            for (int64_t pc = 0; pc < kg; pc += kc) {
                int64_t depth = LGK_MIN(kc, kg - pc);
                float *d = panels + pc * npad + s * depth + h;
                for (int64_t k = pc; k < pc + depth; ++k, d += width) {
                    const float *src = base + off[k] + first;
                    __m512 v;
                    if (loads == 2) {
                        v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(m0, src), rel,
                                                   _mm512_maskz_loadu_ps(m1, src + 16));
                    } else if (loads == 4) { /* permutes use the index mod 32 */
                        __m512 lo = _mm512_permutex2var_ps(
                            _mm512_maskz_loadu_ps(m0, src), rel,
                            _mm512_maskz_loadu_ps(m1, src + 16));
                        __m512 hi = _mm512_permutex2var_ps(
                            _mm512_maskz_loadu_ps(m2, src + 32), rel,
                            _mm512_maskz_loadu_ps(m3, src + 48));
                        v = _mm512_mask_blend_ps(upper, lo, hi);
                    } else {
                        v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, rel, src, 4);
                    }
                    _mm512_mask_storeu_ps(d, m, v);
                }
            }
        }
}
#endif

/* Output pixels [oy0 * ow + first, oy0 * ow + first + n) of every tap into `width`-pixel
 * slivers (A slivers of mr rows by pixels, B slivers of nr columns by filters), pixels
 * compact (no dropped wide pixels: on small maps those would be a third to half of
 * the rows), slivers past n repeating the last pixel. `src` is the phase planes, or
 * the group's input where the conv is unpadded (each tap a fixed shift of a pixel's
 * first input cell). qidx: room for n + width indices; off: the taps' offsets. */
static void pixel_panels(const conv_job *j, const float *src, int64_t oy0, int64_t first,
                         int64_t n, int64_t width, const conv_scratch *s)
{
    const lgk_conv2d_params *p = j->p;
    int64_t npad = (n + width - 1) / width * width;
    int64_t row_step = j->direct ? p->stride_h * p->w : p->stride_h / j->qh * j->wq;
    int64_t col_step = j->direct ? p->stride_w : p->stride_w / j->qw;
    for (int64_t i = 0; i < npad; ++i) {
        int64_t px = first + LGK_MIN(i, n - 1);
        s->qidx[i] = (int32_t)(px / j->ow * row_step + px % j->ow * col_step);
    }
    const float *base = src + oy0 * row_step;
#ifdef CONV_X86
    __builtin_cpu_init();
    if (width <= 32 && __builtin_cpu_supports("avx512f")) {
        gather_panels_avx512(j->kg, j->layout.kc, width, npad, base, s->off, s->qidx,
                             s->panels);
        return;
    }
#endif
    gather_panels(j->kg, j->layout.kc, width, npad, base, s->off, s->qidx, s->panels);
}

/* dst[o * ldd + i] = src[i * lds + o] (+= with `add`) for i in [i0, i1), o in [o0, o1). */
static void transpose_block(int64_t i0, int64_t i1, int64_t o0, int64_t o1, const float *src,
                            int64_t lds, float *dst, int64_t ldd, int add)
{
    for (int64_t o = o0; o < o1; ++o)
        for (int64_t i = i0; i < i1; ++i)
            dst[o * ldd + i] = add ? src[i * lds + o] + dst[o * ldd + i] : src[i * lds + o];
}

#ifdef CONV_X86
#define PS_PD _mm512_castps_pd
#define PD_PS _mm512_castpd_ps

/* A 16 x 16 block: dst[k * ldd + i] = src[i * lds + k] (+= with `add`), in registers
 * (pairs of rows interleaved by floats, then by pairs, then 128-bit lanes twice). */
__attribute__((target("avx512f"))) static void transpose16_avx512(const float *src, int64_t lds,
                                                                 float *dst, int64_t ldd,
                                                                 int add)
{
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i)
        r[i] = _mm512_loadu_ps(src + i * lds);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* r[i + j], lane L: rows i..i+3 of column 4L + j */
        r[i] = PD_PS(_mm512_unpacklo_pd(PS_PD(t[i]), PS_PD(t[i + 2])));
        r[i + 1] = PD_PS(_mm512_unpackhi_pd(PS_PD(t[i]), PS_PD(t[i + 2])));
        r[i + 2] = PD_PS(_mm512_unpacklo_pd(PS_PD(t[i + 1]), PS_PD(t[i + 3])));
        r[i + 3] = PD_PS(_mm512_unpackhi_pd(PS_PD(t[i + 1]), PS_PD(t[i + 3])));
    }
    for (int h = 0; h < 16; h += 8)
        for (int j = 0; j < 4; ++j) {
            t[h + j] = _mm512_shuffle_f32x4(r[h + j], r[h + 4 + j], 0x88);
            t[h + 4 + j] = _mm512_shuffle_f32x4(r[h + j], r[h + 4 + j], 0xdd);
        }
    for (int j = 0; j < 8; ++j) { /* columns j and j + 8 */
        __m512 lo = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        __m512 hi = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
        if (add) {
            lo = _mm512_add_ps(lo, _mm512_loadu_ps(dst + j * ldd));
            hi = _mm512_add_ps(hi, _mm512_loadu_ps(dst + (j + 8) * ldd));
        }
        _mm512_storeu_ps(dst + j * ldd, lo);
        _mm512_storeu_ps(dst + (j + 8) * ldd, hi);
    }
}
#undef PS_PD
#undef PD_PS
#endif

/* dst[o * ldd + i] = src[i * lds + o] (+= with `add`) for i < rows, o < cols: 16 x 16
 * blocks in registers where the CPU has AVX-512, else L1-sized tiles. */
static void transpose_into(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst,
                           int64_t ldd, int add)
{
    int64_t full_rows = 0, full_cols = 0;
#ifdef CONV_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        full_rows = rows / 16 * 16, full_cols = cols / 16 * 16;
        for (int64_t i0 = 0; i0 < full_rows; i0 += 16)
            for (int64_t o0 = 0; o0 < full_cols; o0 += 16)
                transpose16_avx512(src + i0 * lds + o0, lds, dst + o0 * ldd + i0, ldd, add);
        transpose_block(0, full_rows, full_cols, cols, src, lds, dst, ldd, add);
    }
#endif
    const int64_t block = 32;
    for (int64_t i0 = full_rows; i0 < rows; i0 += block)
        for (int64_t o0 = 0; o0 < cols; o0 += block)
            transpose_block(i0, LGK_MIN(rows, i0 + block), o0, LGK_MIN(cols, o0 + block), src,
                            lds, dst, ldd, add);
}

/* One thread's work buffers (phases; panels with their indices, offsets and pieces;
 * the pixels x filters result) into *s, from blocks[4] (release them with
 * conv_scratch_release, also after a failure). */
static int conv_scratch_acquire(const conv_job *j, conv_scratch *s, lgk_scratch blocks[4])
{
    int64_t width = j->by_pixels ? j->layout.mr : j->layout.nr, n = j->band_rows * j->wq;
    int pointwise = is_pointwise(j->p);
    /* phases, panels, t, then qidx (int32), off (int64) and pieces in one float block */
    int64_t need[4] = {0, 0, 0, 0}, idx_floats = (n + width + 1) / 2 * 2;
    if (!pointwise && !j->direct)
        need[0] = j->cg * j->qh * j->qw * j->phase_plane;
    if (!pointwise) {
        need[1] = j->kg * ((n + width - 1) / width * width);
        need[3] = idx_floats + 2 * j->kg + 8 * max_pieces(j, j->band_rows);
    }
    if (j->by_pixels)
        need[2] = n * j->p->o;
    int status = LGK_OK;
    for (int i = 0; i < 4; ++i) {
        blocks[i] = (lgk_scratch){NULL, 0};
        if (need[i] > 0 && status == LGK_OK)
            status = lgk_scratch_acquire(need[i], &blocks[i]);
    }
    int64_t *off = blocks[3].data != NULL ? (int64_t *)(blocks[3].data + idx_floats) : NULL;
    if (status == LGK_OK && off != NULL)
        tap_offsets(j, off);
    panel_piece *pieces = off != NULL ? (panel_piece *)(off + j->kg) : NULL;
    *s = (conv_scratch){blocks[0].data, blocks[1].data, blocks[2].data,
                        (int32_t *)blocks[3].data, off, pieces};
    return status;
}

static void conv_scratch_release(lgk_scratch blocks[4])
{
    for (int i = 0; i < 4; ++i)
        lgk_scratch_release(&blocks[i]);
}

/* ---- one image over several threads ------------------------------------------------
 * With fewer images than threads, each image's conv is split into one part per thread.
 * Filters as rows (larger maps): by output rows; 1x1 convs with many filters by filters
 * (no panels to build, and short pixel ranges cut the GEMM's rows). Pixels as rows
 * (small maps): by pixels while the weights are small enough for every thread to read
 * them all from its cache, else by filters, each thread streaming its part of the
 * weights (on 2x2..4x4 maps the weights are most of the memory traffic). Every part
 * builds its own phase planes and panels, although that repeats some work: a buffer one
 * core writes and the other reads crosses between the cores' caches on every call, and
 * on the 2-core VM this was measured on that cost more than the split saved (a 4x4 map
 * conv: 51 us on 2 threads sharing the caller's panels, 33 us on one). Below
 * CONV_MIN_FLOPS_PER_THREAD of work per thread a conv stays on one thread. */
#ifndef CONV_MIN_FLOPS_PER_THREAD
#define CONV_MIN_FLOPS_PER_THREAD 0.5e6
#endif
/* The work of streaming one weight, in flops (a conv's weights come from memory: a
 * 1x1 conv of 112 -> 1280 channels on a 2x2 map, 1.1 MFLOP, took 20 us in a model). */
#define CONV_FLOPS_PER_WEIGHT 8.0
/* Weights (floats) that every thread splitting the pixels of a small map reads whole. */
#define CONV_SHARED_WEIGHTS (64 * 1024)

static int conv_split_forced = 0;

/* Tests: 1 splits every conv and pooling over all the threads it is given, however small
 * (so that small cases cover the split paths), 0 restores the work thresholds. Not
 * thread-safe. */
int lgk_conv_force_split(int on);
int lgk_conv_force_split(int on)
{
    conv_split_forced = on != 0;
    return LGK_OK;
}

int lgk_conv_threads_for(double flops, int nthreads)
{
    if (conv_split_forced)
        return nthreads;
    double t = flops / CONV_MIN_FLOPS_PER_THREAD;
    return t < 2.0 ? 1 : (t >= nthreads ? nthreads : (int)t);
}

/* A part of one image's conv: output pixels [p0, p1) (whole output rows where filters
 * are the GEMM's rows, unless it is a 1x1 conv) of filters [f0, f1) of its group (f0 a
 * multiple of the micro-kernel's rows or columns, whichever the filters are). */
typedef struct {
    int64_t p0, p1, f0, f1;
} conv_part;

/* A part of one image and group, filters as the GEMM's rows: per band of output rows,
 * y_g[f0:f1, band] = w_g @ im2col(x_g)[:, band] with the bias (per row) and activation
 * in the epilogue, straight into NCHW. A 1x1 stride-1 unpadded conv multiplies the
 * input in place. */
static int conv_filter_rows(const conv_job *j, int64_t img, int64_t g, conv_part part,
                            const conv_scratch *s)
{
    const lgk_conv2d_params *p = j->p;
    int64_t plane = j->oh * j->ow;
    const float *xg = j->x + (img * p->c + g * j->cg) * p->h * p->w;
    float *yg = j->y + (img * p->o + g * j->og) * plane;
    const float *bias = j->bias != NULL ? j->bias + g * j->og : NULL;
    int bias_mode = bias != NULL ? LGK_BIAS_ROW : LGK_BIAS_NONE;
    lgk_operand w = {j->w + g * j->og * j->kg, j->kg, 1, NULL};
    if (j->packed)
        w = (lgk_operand){NULL, 0, 0, j->w};
    gemm_block_fn gemm = onto_y(j) ? lgk_sgemm_block_onto : lgk_sgemm_block;
    int act = onto_y(j) ? j->res_act : j->activation;
    if (is_pointwise(p)) {
        lgk_operand b = {xg, plane, 1, NULL};
        LGK_TRY(gemm(j->og, plane, j->kg, w, b, yg, plane, bias, bias_mode, act, part.f0,
                     part.f1, part.p0, part.p1));
        add_residual(j, yg, plane, part.f0, part.f1, part.p0, part.p1);
        return LGK_OK;
    }
    if (!j->direct)
        make_phases(j, xg, s->ph);
    for (int64_t oy0 = part.p0 / j->ow; oy0 < part.p1 / j->ow; oy0 += j->band_rows) {
        int64_t rows = LGK_MIN(j->band_rows, part.p1 / j->ow - oy0), n = rows * j->ow;
        if (j->direct) {
            pixel_panels(j, xg, oy0, 0, n, j->layout.nr, s);
        } else {
            int64_t count = panel_pieces(j, oy0, rows, s->pieces);
            phase_panels(j, s->ph, s->pieces, count, s->off, s->panels);
        }
        lgk_operand b = {NULL, 0, 0, s->panels};
        LGK_TRY(gemm(j->og, n, j->kg, w, b, yg + oy0 * j->ow, plane, bias, bias_mode, act,
                     part.f0, part.f1, 0, n));
        add_residual(j, yg, plane, part.f0, part.f1, oy0 * j->ow, oy0 * j->ow + n);
    }
    return LGK_OK;
}

/* A part of one image (groups == 1, weights packed as B = W^T), pixels as the GEMM's
 * rows: per band, t (pixels x filters) = im2col^T @ W^T[:, f0:f1] with the bias (per
 * column) and activation in the epilogue, then t^T into the output. On small maps this
 * keeps the GEMM's wide dimension the filter count and streams the weights once. */
static int conv_pixel_rows(const conv_job *j, int64_t img, conv_part part,
                           const conv_scratch *s)
{
    const lgk_conv2d_params *p = j->p;
    int64_t plane = j->oh * j->ow;
    const float *xi = j->x + img * p->c * p->h * p->w;
    float *yi = j->y + img * p->o * plane;
    int pointwise = is_pointwise(p);
    lgk_operand w = {NULL, 0, 0, j->w};
    if (!pointwise && !j->direct)
        make_phases(j, xi, s->ph);
    for (int64_t oy0 = 0; oy0 < j->oh; oy0 += j->band_rows) {
        int64_t rows = LGK_MIN(j->band_rows, j->oh - oy0);
        int64_t q0 = LGK_MAX(part.p0, oy0 * j->ow), q1 = LGK_MIN(part.p1, (oy0 + rows) * j->ow);
        if (q0 >= q1)
            continue;
        lgk_operand a = {xi + q0, 1, plane, NULL}; /* pointwise: x is already taps x pixels */
        if (!pointwise) {
            pixel_panels(j, j->direct ? xi : s->ph, oy0, q0 - oy0 * j->ow, q1 - q0,
                         j->layout.mr, s);
            a = (lgk_operand){NULL, 0, 0, s->panels};
        }
        LGK_TRY(lgk_sgemm_block(q1 - q0, p->o, j->kg, a, w, s->t, p->o, j->bias,
                                j->bias != NULL ? LGK_BIAS_COL : LGK_BIAS_NONE, j->activation,
                                0, q1 - q0, part.f0, part.f1));
        /* onto the residual y holds: t^T added as it is transposed (t + res: the sum of
         * (conv + bias) + res), then the activation on the rows still in cache */
        transpose_into(q1 - q0, part.f1 - part.f0, s->t + part.f0, p->o,
                       yi + part.f0 * plane + q0, plane, onto_y(j));
        for (int64_t f = part.f0; f < part.f1 && onto_y(j) && j->res_act != LGK_ACT_NONE; ++f)
            lgk_activate(j->res_act, yi + f * plane + q0, q1 - q0);
        add_residual(j, yi, plane, part.f0, part.f1, q0, q1);
    }
    return LGK_OK;
}

/* Runs one part with work buffers of its own. */
static int conv_part_run(const conv_job *j, int64_t img, int64_t g, conv_part part)
{
    lgk_scratch blocks[4];
    conv_scratch s;
    int status = conv_scratch_acquire(j, &s, blocks);
    if (status == LGK_OK)
        status = j->by_pixels ? conv_pixel_rows(j, img, part, &s)
                              : conv_filter_rows(j, img, g, part, &s);
    conv_scratch_release(blocks);
    return status;
}

/* Units [begin, end) of images x groups, each whole on one thread. */
static int conv_units(void *ctx, int64_t begin, int64_t end)
{
    const conv_job *j = ctx;
    conv_part whole = {0, j->oh * j->ow, 0, j->by_pixels ? j->p->o : j->og};
    for (int64_t u = begin; u < end; ++u)
        LGK_TRY(conv_part_run(j, u / j->p->groups, u % j->p->groups, whole));
    return LGK_OK;
}

/* One image split over threads: slices [b, e) of filters, or of pixels in steps of
 * `pixel_step` (a whole output row where filters are the GEMM's rows). */
typedef struct {
    const conv_job *j;
    int64_t img, pixel_step;
    int by_filters;
} split_task;

static int split_slice(void *ctx, int64_t b, int64_t e)
{
    const split_task *t = ctx;
    const conv_job *j = t->j;
    int64_t plane = j->oh * j->ow;
    conv_part part = {0, plane, b, e};
    if (!t->by_filters)
        part = (conv_part){b * t->pixel_step, LGK_MIN(plane, e * t->pixel_step), 0,
                           j->by_pixels ? j->p->o : j->og};
    return conv_part_run(j, t->img, 0, part);
}

/* Every image (groups == 1) split over `threads` (see above), one part per thread. */
static int conv_images_split(const conv_job *j, int threads)
{
    const lgk_conv2d_params *p = j->p;
    int64_t mr = j->layout.mr, nr = j->layout.nr, plane = j->oh * j->ow;
    split_task t = {j, 0, j->ow, 0};
    int64_t units = j->oh, grain = 1;
    if (!j->by_pixels && is_pointwise(p) && j->og >= 2 * mr * threads) {
        t.by_filters = 1, units = j->og, grain = mr;
    } else if (j->by_pixels) {
        int by_pixels = plane >= mr * threads && j->band_rows >= j->oh
                        && (j->kg * p->o <= CONV_SHARED_WEIGHTS || p->o <= nr);
        t.by_filters = !by_pixels, t.pixel_step = 1;
        units = by_pixels ? plane : p->o, grain = by_pixels ? mr : nr;
    }
    int64_t blocks = (units + grain - 1) / grain;
    int64_t per = (blocks + threads - 1) / threads * grain;
    for (; t.img < p->n; ++t.img)
        LGK_TRY(lgk_parallel_slices(threads, units, per, split_slice, &t));
    return LGK_OK;
}

int lgk_conv2d_check_buffers(const lgk_conv2d_params *p, int64_t oh, int64_t ow, int64_t kg,
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
    if (w_len >= 0) /* a negative length: packed weights, checked by their header */
        LGK_TRY(lgk_check_buffer(w, w_len, nw));
    LGK_TRY(lgk_check_buffer(y, y_len, ny));
    if (bias != NULL)
        LGK_CHECK(bias_len >= p->o, LGK_ERR_SHAPE);
    return LGK_OK;
}

/* Validates the call and fills the shape part of *j; *done when there is no work. */
static int conv_setup(const lgk_conv2d_params *p, const float *x, int64_t x_len,
                      const float *w, int64_t w_len, const float *bias, int64_t bias_len,
                      float *y, int64_t y_len, int activation, conv_job *j, int *done)
{
    int64_t oh, ow, kg;
    LGK_TRY(lgk_conv2d_out_shape(p, &oh, &ow));
    LGK_CHECK(activation >= LGK_ACT_NONE && activation <= LGK_ACT_LAST, LGK_ERR_ARG);
    const int64_t kd[3] = {p->c / p->groups, p->kh, p->kw};
    LGK_TRY(lgk_checked_count(3, kd, &kg));
    LGK_TRY(lgk_conv2d_check_buffers(p, oh, ow, kg, x_len, w_len, y_len, bias, bias_len, x, w, y));
    *j = (conv_job){p, oh, ow, p->c / p->groups, p->o / p->groups, kg, 0, 0, 0, 0, x, w, bias,
                    y, activation, 0, 0, 0, lgk_gemm_panel_layout(kg), 1, 1, NULL, 0};
    /* Unpadded convs need no zeros: the panels are gathered from x itself, by int32
     * indices within an image's channel plane. */
    j->direct = p->pad_top == 0 && p->pad_left == 0 && p->pad_bottom == 0 && p->pad_right == 0
                && !is_pointwise(p) && p->h <= (INT32_MAX - 1) / LGK_MAX(p->w, (int64_t)1);
    *done = p->n == 0 || p->o == 0;
    return LGK_OK;
}

/* The phase planes: hq x wq, rounded up to whole cache lines. Pixels as rows split
 * no phases: one zero-padded copy per channel, the strides applied by the pixel
 * gathers (on small maps their loads are nearly free, while a stride-2 split built
 * four planes of short permuted rows per channel). */
static int phase_geometry(conv_job *j)
{
    const lgk_conv2d_params *p = j->p;
    int64_t hp, wp, phases;
    j->qh = j->by_pixels ? 1 : p->stride_h;
    j->qw = j->by_pixels ? 1 : p->stride_w;
    LGK_TRY(lgk_add(p->h, p->pad_top, &hp));
    LGK_TRY(lgk_add(hp, p->pad_bottom, &hp));
    LGK_TRY(lgk_add(p->w, p->pad_left, &wp));
    LGK_TRY(lgk_add(wp, p->pad_right, &wp));
    j->hq = hp / j->qh + (hp % j->qh != 0);
    j->wq = wp / j->qw + (wp % j->qw != 0);
    const int64_t pd[2] = {j->hq, j->wq};
    LGK_TRY(lgk_checked_count(2, pd, &j->phase_plane));
    LGK_TRY(lgk_add(j->phase_plane, 15, &phases));
    j->phase_plane = phases / 16 * 16;
    const int64_t all[4] = {j->cg, j->qh, j->qw, j->phase_plane};
    return lgk_checked_count(4, all, &phases);
}

/* Filters as rows: output rows per band whose panels fit BAND_L2_FLOATS, but at least
 * BAND_MIN_PIXELS pixels (the GEMM's columns; with many taps, 14 x 14 maps of 256
 * channels, fewer made the GEMM re-read its weights for too little work). Panels of up
 * to 4 MiB went out to memory between im2col and the GEMM: bands in L2 took 10-20% off
 * the 3x3 convs of ResNet-50 at 56^2 and 28^2 and 20% off its 7x7 stem. */
#define BAND_L2_FLOATS ((int64_t)128 * 1024)
#define BAND_MIN_PIXELS 256

static int64_t l2_band_rows(const conv_job *j)
{
    int64_t min_rows = (BAND_MIN_PIXELS + j->ow - 1) / j->ow;
    int64_t per_row = LGK_MAX(j->kg * j->ow, (int64_t)1); /* <= conv_run's checked n */
    return LGK_MAX(min_rows, BAND_L2_FLOATS / per_row);
}

/* Whether threads split each image of a 1x1 conv (filters as rows) as the GEMM splits
 * itself, by lgk_choose_grid's blocks of filters and pixels, rather than by
 * conv_images_split's slices of whole filter tiles (36 + 28 of 64 filters on 2 threads).
 * 2 threads, in the model: ResNet-50 35.0-35.1 -> 34.4-34.5 ms, MobileNetV2 3.78-3.81 ->
 * 3.74-3.79 ms; alone, 64 -> 384 channels at 14^2 75-80 -> 63-72 us, 96 -> 576 118-128 ->
 * 108-113 us. With K <= PW_GRID_MIN_K the grid lost (24 -> 144 at 56^2: 127 -> 170-197 us,
 * its blocks each packing B for few multiply-adds). Not with a residual apart from y
 * (added in a pass per part). */
#define PW_GRID_MIN_K 32

static int pointwise_grid(const conv_job *j, int threads)
{
    return is_pointwise(j->p) && !j->by_pixels && j->p->groups == 1 && j->p->n < threads
           && j->kg > PW_GRID_MIN_K && (j->res == NULL || onto_y(j));
}

static int pointwise_by_grid(const conv_job *j, int threads)
{
    const lgk_conv2d_params *p = j->p;
    int64_t plane = j->oh * j->ow;
    lgk_operand w = {j->w, j->kg, 1, NULL};
    if (j->packed)
        w = (lgk_operand){NULL, 0, 0, j->w};
    for (int64_t img = 0; img < p->n; ++img) {
        lgk_operand b = {j->x + img * p->c * plane, plane, 1, NULL};
        LGK_TRY(lgk_sgemm_split(p->o, plane, j->kg, w, b, j->y + img * p->o * plane, plane,
                                j->bias, j->bias != NULL ? LGK_BIAS_ROW : LGK_BIAS_NONE,
                                onto_y(j) ? j->res_act : j->activation, onto_y(j), threads));
    }
    return LGK_OK;
}

/* Bands of output rows bound the panel scratch and the result t; threads go to images
 * (or groups) when there are enough of them, else into each image (see above). */
static int conv_run(conv_job *j, int nthreads)
{
    const lgk_conv2d_params *p = j->p;
    LGK_TRY(phase_geometry(j));
    int64_t per_row = LGK_MAX(j->kg, j->by_pixels ? p->o : j->og), rows_budget, n;
    LGK_TRY(lgk_mul(per_row, j->wq + LGK_MAX(j->layout.mr, j->layout.nr), &n));
    rows_budget = PANEL_BUDGET / LGK_MAX(n, (int64_t)1);
    j->band_rows = LGK_MAX((int64_t)1, LGK_MIN(j->oh, rows_budget));
    if (!j->by_pixels) /* bands whose panels the GEMM then reads from L2 */
        j->band_rows = LGK_MIN(j->band_rows, l2_band_rows(j));
    /* pixel rows index a band's wide pixels with int32 (vector gathers) */
    LGK_CHECK(!j->by_pixels || j->direct
                  || j->band_rows * (p->stride_h / j->qh) * j->wq < INT32_MAX,
              LGK_ERR_SHAPE);
    /* the weights count too: on 2x2 maps they are most of the time, not the flops */
    double weights = (double)p->o * (double)j->kg;
    double flops = 2.0 * (double)p->n * (double)p->o * (double)j->oh * (double)j->ow
                   * (double)LGK_MAX(j->kg, (int64_t)1);
    int threads = lgk_conv_threads_for(flops + CONV_FLOPS_PER_WEIGHT * weights,
                                   lgk_clamp_threads(nthreads));
    int64_t units = p->n * p->groups;
    if (threads <= 1)
        return conv_units(j, 0, units);
    if (pointwise_grid(j, threads))
        return pointwise_by_grid(j, threads);
    if (p->groups > 1 || p->n >= threads)
        return lgk_parallel_for(threads, units, 1, conv_units, j);
    return conv_images_split(j, threads);
}

/* ---- strided 1x1 convs ---------------------------------------------------------------
 * A 1x1 unpadded conv with strides (ResNet's downsampling projections) reads every
 * sh-th row and sw-th column only: those pixels are gathered into a dense copy first, and
 * the conv is then a pointwise one, whose GEMM reads its input in place. Gathered into
 * the GEMM's panels pixel by pixel instead, 256 -> 512 channels at 56^2 ran at 38 GFLOP/s
 * (the stride-1 1x1 convs beside it at 80-100). */
static int is_strided_pointwise(const lgk_conv2d_params *p)
{
    return p->kh == 1 && p->kw == 1 && (p->stride_h > 1 || p->stride_w > 1) && p->groups == 1
           && p->pad_top == 0 && p->pad_left == 0 && p->pad_bottom == 0 && p->pad_right == 0;
}

typedef struct {
    const conv_job *j;
    float *dense; /* (n, c, oh, ow) */
} subsample_task;

/* Planes [b, e) of the n * c input planes, subsampled into the dense copy. */
static int subsample_planes(void *ctx, int64_t b, int64_t e)
{
    const subsample_task *t = ctx;
    const conv_job *j = t->j;
    const lgk_conv2d_params *p = j->p;
    for (int64_t pl = b; pl < e; ++pl) {
        const float *src = j->x + pl * p->h * p->w;
        float *dst = t->dense + pl * j->oh * j->ow;
        for (int64_t oy = 0; oy < j->oh; ++oy, dst += j->ow) {
            const float *row = src + oy * p->stride_h * p->w;
            for (int64_t ox = 0; ox < j->ow; ++ox)
                dst[ox] = row[ox * p->stride_w];
        }
    }
    return LGK_OK;
}

/* j (a strided 1x1 conv, checked) as a pointwise conv of its subsampled input. */
static int subsampled_conv(const conv_job *j, int nthreads)
{
    const lgk_conv2d_params *p = j->p;
    lgk_conv2d_params q = *p;
    q.h = j->oh, q.w = j->ow, q.stride_h = q.stride_w = 1;
    int64_t planes = p->n * p->c, n; /* <= the checked input's size */
    const int64_t dims[2] = {planes, j->oh * j->ow};
    LGK_TRY(lgk_checked_count(2, dims, &n));
    lgk_scratch s = {NULL, 0};
    LGK_TRY(lgk_scratch_acquire(n, &s));
    subsample_task t = {j, s.data};
    int threads = conv_split_forced || n >= 65536 ? lgk_clamp_threads(nthreads) : 1;
    int status = lgk_parallel_for(threads, planes, 1, subsample_planes, &t);
    if (status == LGK_OK) {
        conv_job dense = *j;
        dense.p = &q, dense.x = s.data, dense.direct = 0;
        status = conv_run(&dense, nthreads);
    }
    lgk_scratch_release(&s);
    return status;
}

/* The conv j (checked, with work to do) into j->y, NCHW. */
static int conv_dispatch(conv_job *j, int nthreads)
{
    const lgk_conv2d_params *p = j->p;
    if (p->c == p->groups && p->c > 0)
        return lgk_depthwise_conv2d(p, j->oh, j->ow, j->x, j->w, j->bias, j->y, j->activation,
                                    lgk_clamp_threads(nthreads));
    return is_strided_pointwise(p) ? subsampled_conv(j, nthreads) : conv_run(j, nthreads);
}

int lgk_conv2d_nchw(const lgk_conv2d_params *p,
                    const float *x, int64_t x_len,
                    const float *w, int64_t w_len,
                    const float *bias, int64_t bias_len,
                    float *y, int64_t y_len, int activation, int nthreads)
{
    conv_job j;
    int done;
    LGK_TRY(conv_setup(p, x, x_len, w, w_len, bias, bias_len, y, y_len, activation, &j, &done));
    return done ? LGK_OK : conv_dispatch(&j, nthreads);
}

int lgk_conv2d_nchw_to_nhwc(const lgk_conv2d_params *p,
                            const float *x, int64_t x_len,
                            const float *w, int64_t w_len,
                            const float *bias, int64_t bias_len,
                            float *y, int64_t y_len, int activation, int nthreads)
{
    conv_job j;
    int done;
    LGK_TRY(conv_setup(p, x, x_len, w, w_len, bias, bias_len, y, y_len, activation, &j, &done));
    if (done)
        return LGK_OK;
    if (p->c == p->groups && p->c > 0 && lgk_depthwise_bands_nhwc(p, j.oh, j.ow))
        return lgk_depthwise_conv2d_nhwc(p, j.oh, j.ow, x, w, bias, y, activation,
                                         lgk_clamp_threads(nthreads));
    /* the other forms write NCHW planes: into scratch, then one transposing copy */
    int64_t count;
    const int64_t dims[4] = {p->n, p->o, j.oh, j.ow};
    LGK_TRY(lgk_checked_count(4, dims, &count));
    lgk_scratch s = {NULL, 0};
    LGK_TRY(lgk_scratch_acquire(count, &s));
    j.y = s.data;
    int status = conv_dispatch(&j, nthreads);
    if (status == LGK_OK) {
        const int64_t shape[4] = {p->n, j.oh, j.ow, p->o};
        const int64_t strides[4] = {p->o * j.oh * j.ow, j.ow, 1, j.oh * j.ow};
        status = lgk_permute_copy_threads(4, shape, s.data, count, strides, y, count, nthreads);
    }
    lgk_scratch_release(&s);
    return status;
}

/* ---- packed weights ------------------------------------------------------------- */

/* A groups == 1 conv with weights packed once: as the GEMM's right operand (pixels x
 * filters, `by_pixels`) or as its left one (filters x pixels, written into NCHW); `res`
 * (NULL or y's size: apart from y, or y itself, the conv then written over it) is added
 * before the activation. */
static int packed_conv(const lgk_conv2d_params *p, const float *x, int64_t x_len,
                       const float *packed_w, int64_t packed_len, const float *bias,
                       int64_t bias_len, const float *res, int64_t res_len, float *y,
                       int64_t y_len, int activation, int nthreads, int by_pixels)
{
    conv_job j;
    int done;
    LGK_CHECK(p != NULL, LGK_ERR_NULL);
    LGK_CHECK(p->groups == 1, LGK_ERR_ARG);
    LGK_CHECK(packed_w != NULL, LGK_ERR_NULL);
    LGK_TRY(conv_setup(p, x, x_len, NULL, -1, bias, bias_len, y, y_len, activation, &j, &done));
    LGK_TRY(by_pixels ? lgk_sgemm_check_packed_b(j.kg, p->o, packed_w, packed_len)
                      : lgk_sgemm_check_packed_a(p->o, j.kg, packed_w, packed_len));
    if (res != NULL) { /* y's size (checked by conv_setup); y itself or apart from it */
        int64_t ny;
        const int64_t yd[4] = {p->n, p->o, j.oh, j.ow};
        LGK_TRY(lgk_checked_count(4, yd, &ny));
        LGK_TRY(lgk_check_buffer(res, res_len, ny));
        LGK_CHECK(res == y || res + ny <= y || y + ny <= res, LGK_ERR_ARG);
        j.res = res, j.res_act = activation, j.activation = LGK_ACT_NONE;
    }
    if (done)
        return LGK_OK;
    j.w = packed_w + LGK_PACKED_HEADER_FLOATS;
    j.packed = 1;
    j.by_pixels = by_pixels;
    return is_strided_pointwise(p) ? subsampled_conv(&j, nthreads) : conv_run(&j, nthreads);
}

int lgk_conv2d_nchw_prepacked(const lgk_conv2d_params *p,
                              const float *x, int64_t x_len,
                              const float *packed_w, int64_t packed_len,
                              const float *bias, int64_t bias_len,
                              float *y, int64_t y_len, int activation, int nthreads)
{
    return packed_conv(p, x, x_len, packed_w, packed_len, bias, bias_len, NULL, 0, y, y_len,
                       activation, nthreads, 1);
}

int lgk_conv2d_nchw_packed_a(const lgk_conv2d_params *p,
                             const float *x, int64_t x_len,
                             const float *packed_w, int64_t packed_len,
                             const float *bias, int64_t bias_len,
                             float *y, int64_t y_len, int activation, int nthreads)
{
    return packed_conv(p, x, x_len, packed_w, packed_len, bias, bias_len, NULL, 0, y, y_len,
                       activation, nthreads, 0);
}

int lgk_conv2d_nchw_prepacked_residual(const lgk_conv2d_params *p, const float *x,
                                       int64_t x_len, const float *packed_w,
                                       int64_t packed_len, const float *bias, int64_t bias_len,
                                       const float *res, int64_t res_len, float *y,
                                       int64_t y_len, int activation, int nthreads)
{
    LGK_CHECK(res != NULL, LGK_ERR_NULL);
    return packed_conv(p, x, x_len, packed_w, packed_len, bias, bias_len, res, res_len, y,
                       y_len, activation, nthreads, 1);
}

int lgk_conv2d_nchw_packed_a_residual(const lgk_conv2d_params *p, const float *x,
                                      int64_t x_len, const float *packed_w, int64_t packed_len,
                                      const float *bias, int64_t bias_len, const float *res,
                                      int64_t res_len, float *y, int64_t y_len, int activation,
                                      int nthreads)
{
    LGK_CHECK(res != NULL, LGK_ERR_NULL);
    return packed_conv(p, x, x_len, packed_w, packed_len, bias, bias_len, res, res_len, y,
                       y_len, activation, nthreads, 0);
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

/* for (i = 0; i < n; ++i) BODY, in blocks of 16 with a constant trip count (one
 * vector op each, no run-time prologue or epilogue: rows here are short) and a
 * scalar tail. */
#define BLOCKS16(n, BODY)                                                        \
    do {                                                                         \
        int64_t i0_ = 0;                                                         \
        for (; i0_ + 16 <= (n); i0_ += 16)                                       \
            for (int64_t i = i0_; i < i0_ + 16; ++i)                             \
                BODY;                                                            \
        for (int64_t i = i0_; i < (n); ++i)                                      \
            BODY;                                                                \
    } while (0)

/* y[i] = op(y[i], r[i * stride + off]) over the output row, max or sum; a constant
 * stride lets the compiler vectorize the gather with shuffles. */
#define POOL_COLUMNS(stride)                                                     \
    do {                                                                         \
        if (is_max)                                                              \
            BLOCKS16(ow, y[i] = lgk_maxf(y[i], r[i * (stride) + off]));          \
        else                                                                     \
            BLOCKS16(ow, y[i] += r[i * (stride) + off]);                         \
    } while (0)

/* One output row, separably: the window's valid input rows reduced into r (rw
 * cells from input column -pad_left, the identity outside the input), then each
 * output the reduction of its kw cells of r. Both passes are unit- or
 * constant-stride loops along x. */
LGK_CLONES static void pool_row(const lgk_pool2d_params *p, const float *restrict plane,
                                const window *wy, int64_t oy, int64_t ow, int64_t rw,
                                float *restrict r, float *restrict y, int is_max)
{
    float identity = is_max ? -INFINITY : 0.0f;
    int64_t x0 = LGK_MIN(p->pad_left, rw), cols = LGK_MAX((int64_t)0, LGK_MIN(p->w, rw - x0));
    float *rin = r + x0; /* rin[ix]: input column ix */
    for (int64_t i = 0; i < x0; ++i)
        r[i] = identity;
    if (wy->hi <= wy->lo) {
        for (int64_t ix = 0; ix < cols; ++ix)
            rin[ix] = identity;
    }
    for (int64_t ki = wy->lo; ki < wy->hi; ++ki) {
        const float *restrict row =
            plane + (oy * p->stride_h - p->pad_top + ki * p->dilation_h) * p->w;
        if (ki == wy->lo)
            memcpy(rin, row, (size_t)cols * sizeof(float));
        else if (is_max)
            BLOCKS16(cols, rin[i] = lgk_maxf(rin[i], row[i]));
        else
            BLOCKS16(cols, rin[i] += row[i]);
    }
    for (int64_t i = x0 + cols; i < rw; ++i)
        r[i] = identity;
    for (int64_t ox = 0; ox < ow; ++ox)
        y[ox] = identity;
    for (int64_t kj = 0; kj < p->kw; ++kj) {
        int64_t off = kj * p->dilation_w;
        if (p->stride_w == 1)
            POOL_COLUMNS(1);
        else if (p->stride_w == 2)
            POOL_COLUMNS(2);
        else
            POOL_COLUMNS(p->stride_w);
    }
}

#ifdef CONV_X86
/* lgk_maxf lane by lane (acc where acc > v or acc is NaN, else v), or the sum. */
__attribute__((target("avx512f"))) static inline __m512 pool_op(__m512 acc, __m512 v, int is_max)
{
    if (!is_max)
        return _mm512_add_ps(acc, v);
    __mmask16 keep = _mm512_cmp_ps_mask(acc, v, _CMP_GT_OQ)
                     | _mm512_cmp_ps_mask(acc, acc, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(keep, v, acc);
}

/* pool_row for column strides 1 and 2 with explicit masked vectors: the
 * compiler's versions of these short loops spent more in set-up and scalar tails
 * than in the work (a 3x3 stride-2 max pool on 32x32 maps: 33 us, 4x this). */
__attribute__((target("avx512f"))) static void pool_row_avx512(
    const lgk_pool2d_params *p, const float *plane, const window *wy, int64_t oy, int64_t ow,
    int64_t rw, float *r, float *y, int is_max)
{
    float identity = is_max ? -INFINITY : 0.0f;
    int64_t x0 = LGK_MIN(p->pad_left, rw), cols = LGK_MAX((int64_t)0, LGK_MIN(p->w, rw - x0));
    float *rin = r + x0; /* rin[ix]: input column ix */
    for (int64_t i = 0; i < x0; ++i)
        r[i] = identity;
    for (int64_t i = x0 + cols; i < rw; ++i)
        r[i] = identity;
    for (int64_t i = 0; i < cols; i += 16) {
        __mmask16 m = lanes(cols - i);
        __m512 acc = _mm512_set1_ps(identity);
        for (int64_t ki = wy->lo; ki < wy->hi; ++ki) {
            const float *row =
                plane + (oy * p->stride_h - p->pad_top + ki * p->dilation_h) * p->w;
            __m512 v = _mm512_maskz_loadu_ps(m, row + i);
            acc = ki == wy->lo ? v : pool_op(acc, v, is_max);
        }
        _mm512_mask_storeu_ps(rin + i, m, acc);
    }
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    for (int64_t i = 0; i < ow; i += 16) {
        int64_t n = LGK_MIN((int64_t)16, ow - i);
        __m512 acc = _mm512_set1_ps(identity);
        for (int64_t kj = 0; kj < p->kw; ++kj) {
            const float *base = r + kj * p->dilation_w + i * p->stride_w;
            __m512 v;
            if (p->stride_w == 1) {
                v = _mm512_maskz_loadu_ps(lanes(n), base);
            } else { /* the 2n - 1 cells from base, even ones picked */
                __m512 lo = _mm512_maskz_loadu_ps(lanes(2 * n - 1), base);
                __m512 hi = _mm512_maskz_loadu_ps(lanes(2 * n - 17), base + 16);
                v = _mm512_permutex2var_ps(lo, even, hi);
            }
            acc = pool_op(acc, v, is_max);
        }
        _mm512_mask_storeu_ps(y + i, lanes(n), acc);
    }
}

/* Output columns [i, i + n) of a 3-wide stride-2 max row exactly as pool_row_avx512 does
 * them (each column's rows in order, then its 3 columns in order, lgk_maxf): for the
 * groups holding a NaN, whose propagation vmaxps does not keep. */
static void max_3s2_exact(const lgk_pool2d_params *p, const float *plane, const window *wy,
                          int64_t oy, int64_t i, int64_t n, float *y)
{
    for (int64_t t = 0; t < n; ++t) {
        float out = -INFINITY;
        for (int64_t kj = 0; kj < 3; ++kj) {
            int64_t col = 2 * (i + t) + kj - p->pad_left;
            float c = -INFINITY;
            for (int64_t ki = wy->lo; ki < wy->hi && col >= 0 && col < p->w; ++ki) {
                float v = plane[(oy * p->stride_h - p->pad_top + ki * p->dilation_h) * p->w + col];
                c = ki == wy->lo ? v : lgk_maxf(c, v);
            }
            out = lgk_maxf(out, c);
        }
        y[i + t] = out;
    }
}

/* Input columns [c, c + 32) of a row of a 3-wide stride-2 max pool, reduced down the
 * window's rows into v[0], v[1] (columns at or past w read as -inf). Returns nonzero
 * where a NaN was read: vmaxps(acc, x) is lgk_maxf(acc, x) except where acc is NaN. */
__attribute__((target("avx512f"), always_inline)) static inline int max_3s2_rows(
    const float *first, int64_t row_step, const window *wy, int64_t c, int64_t w, __m512 *v)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __mmask16 m0 = lanes(w - c), m1 = lanes(w - c - 16), nan = 0;
    int masked = c + 32 > w; /* merge-masked loads cost more than plain ones */
    v[0] = v[1] = ninf;
    for (int64_t ki = wy->lo; ki < wy->hi; ++ki) {
        const float *row = first + ki * row_step + c;
        __m512 r0, r1;
        if (masked) {
            r0 = _mm512_mask_loadu_ps(ninf, m0, row);
            r1 = _mm512_mask_loadu_ps(ninf, m1, row + 16);
        } else {
            r0 = _mm512_loadu_ps(row);
            r1 = _mm512_loadu_ps(row + 16);
        }
        nan |= _mm512_cmp_ps_mask(r0, r1, _CMP_UNORD_Q);
        v[0] = ki == wy->lo ? r0 : _mm512_max_ps(v[0], r0);
        v[1] = ki == wy->lo ? r1 : _mm512_max_ps(v[1], r1);
    }
    return nan != 0;
}

/* Max pooling 3 columns wide at column stride 2 with one column of left padding
 * (ResNet's 3x3 stride-2 pool), 16 outputs from the 32 input columns [2i, 2i + 32)
 * reduced down the rows in registers: columns 2t and 2t + 1 picked by permutes, column
 * 2t - 1 from the same vectors moved one lane on, the previous group's last column
 * carried in. The reduced row went through memory, and each tap through masked loads
 * and a NaN-keeping blend: 2x this one's time. Bit-identical to pool_row_avx512: a
 * group that may hold a NaN (and the one after it, which reads its last column) is
 * redone in lgk_maxf's order by max_3s2_exact. */
__attribute__((target("avx512f"))) static void max_row_3s2_avx512(
    const lgk_pool2d_params *p, const float *plane, const window *wy, int64_t oy, int64_t ow,
    float *y)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const float *first = plane + (oy * p->stride_h - p->pad_top) * p->w;
    __m512 prev = _mm512_set1_ps(-INFINITY); /* columns 2i - 16 .. 2i - 1: column -1 pads */
    int nan_before = 0;
    for (int64_t i = 0; i < ow; i += 16) {
        int64_t n = LGK_MIN((int64_t)16, ow - i);
        __m512 v[2];
        int nan = max_3s2_rows(first, p->dilation_h * p->w, wy, 2 * i, p->w, v);
        if (nan || nan_before) {
            max_3s2_exact(p, plane, wy, oy, i, n, y);
        } else {
            __m512i v0 = _mm512_castps_si512(v[0]), v1 = _mm512_castps_si512(v[1]);
            __m512 left0 = _mm512_castsi512_ps(
                _mm512_alignr_epi32(v0, _mm512_castps_si512(prev), 15));
            __m512 left1 = _mm512_castsi512_ps(_mm512_alignr_epi32(v1, v0, 15));
            __m512 acc = _mm512_max_ps(_mm512_permutex2var_ps(left0, even, left1),
                                       _mm512_permutex2var_ps(v[0], even, v[1]));
            acc = _mm512_max_ps(acc, _mm512_permutex2var_ps(v[0], odd, v[1]));
            if (n == 16)
                _mm512_storeu_ps(y + i, acc);
            else
                _mm512_mask_storeu_ps(y + i, lanes(n), acc);
        }
        prev = v[1], nan_before = nan;
    }
}

static int pool_row_vectors(const lgk_pool2d_params *p)
{
    __builtin_cpu_init();
    return (p->stride_w == 1 || p->stride_w == 2) && __builtin_cpu_supports("avx512f");
}
#else
static int pool_row_vectors(const lgk_pool2d_params *p)
{
    (void)p;
    return 0;
}
#endif

/* Whether max_row_3s2_avx512 pools the rows. */
static int pool_row_3s2(const lgk_pool2d_params *p, int is_max)
{
    return is_max && p->kw == 3 && p->stride_w == 2 && p->dilation_w == 1 && p->pad_left == 1
           && pool_row_vectors(p);
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

/* A pooling call's geometry, shared read-only by the threads pooling its planes. */
typedef struct {
    const lgk_pool2d_params *p;
    int64_t oh, ow, rw; /* rw: the reduced row of pool_row, from input column -pad_left */
    const window *wy, *wx;
    const float *x;
    float *y;
    int is_max;
} pool_job;

/* Planes [begin, end), with a reduced-row buffer of this thread's own. */
static int pool_planes(void *ctx, int64_t begin, int64_t end)
{
    const pool_job *j = ctx;
    const lgk_pool2d_params *p = j->p;
    float *r = malloc((size_t)j->rw * sizeof(float));
    LGK_CHECK(r != NULL, LGK_ERR_NOMEM);
    int vectors = pool_row_vectors(p), three_by_two = pool_row_3s2(p, j->is_max);
    (void)vectors, (void)three_by_two; /* unused without the x86 kernels */
    for (int64_t plane = begin; plane < end; ++plane) {
        const float *xp = j->x + plane * p->h * p->w;
        for (int64_t oy = 0; oy < j->oh; ++oy) {
            float *yr = j->y + (plane * j->oh + oy) * j->ow;
            if (j->ow < POOL_MIN_ROW)
                pool_row_by_window(p, xp, &j->wy[oy], oy, j->wx, j->ow, yr, j->is_max);
#ifdef CONV_X86
            else if (three_by_two)
                max_row_3s2_avx512(p, xp, &j->wy[oy], oy, j->ow, yr);
            else if (vectors)
                pool_row_avx512(p, xp, &j->wy[oy], oy, j->ow, j->rw, r, yr, j->is_max);
#endif
            else
                pool_row(p, xp, &j->wy[oy], oy, j->ow, j->rw, r, yr, j->is_max);
            if (!j->is_max)
                pool_divide(p, &j->wy[oy], j->wx, j->ow, yr);
        }
    }
    free(r);
    return LGK_OK;
}

/* Window taps (output cells x kernel cells) below which a pooling stays on one thread
 * (a 3x3 stride-2 max pool of 32 x 32 x 32, 74 k taps, took 14 us on one). */
#define POOL_MIN_TAPS_PER_THREAD 32768.0

static int pool_impl(const lgk_pool2d_params *p, const float *x, int64_t x_len, float *y,
                     int64_t y_len, int is_max, int nthreads)
{
    int64_t oh, ow, nx, ny;
    LGK_TRY(lgk_pool2d_out_shape(p, &oh, &ow));
    const int64_t xd[4] = {p->n, p->c, p->h, p->w}, yd[4] = {p->n, p->c, oh, ow};
    LGK_TRY(lgk_checked_count(4, xd, &nx));
    LGK_TRY(lgk_checked_count(4, yd, &ny));
    LGK_TRY(lgk_check_buffer(x, x_len, nx));
    LGK_TRY(lgk_check_buffer(y, y_len, ny));
    int64_t rw = (ow - 1) * p->stride_w + (p->kw - 1) * p->dilation_w + 1;
    window *wy = malloc((size_t)(oh + ow) * sizeof(window));
    LGK_CHECK(wy != NULL, LGK_ERR_NOMEM);
    window *wx = wy + oh;
    make_windows(p->h, oh, p->kh, p->stride_h, p->pad_top, p->pad_bottom, p->dilation_h, wy);
    make_windows(p->w, ow, p->kw, p->stride_w, p->pad_left, p->pad_right, p->dilation_w, wx);
    pool_job j = {p, oh, ow, rw, wy, wx, x, y, is_max};
    double taps = (double)ny * (double)p->kh * (double)p->kw;
    int threads = conv_split_forced ? nthreads
                                    : (int)LGK_MIN((double)lgk_clamp_threads(nthreads),
                                                   LGK_MAX(1.0, taps / POOL_MIN_TAPS_PER_THREAD));
    int status = lgk_parallel_for(threads, p->n * p->c, 1, pool_planes, &j);
    free(wy);
    return status;
}

int lgk_max_pool2d_nchw(const lgk_pool2d_params *p, const float *x, int64_t x_len, float *y,
                        int64_t y_len, int nthreads)
{
    return pool_impl(p, x, x_len, y, y_len, 1, nthreads);
}

int lgk_avg_pool2d_nchw(const lgk_pool2d_params *p, const float *x, int64_t x_len, float *y,
                        int64_t y_len, int nthreads)
{
    return pool_impl(p, x, x_len, y, y_len, 0, nthreads);
}
