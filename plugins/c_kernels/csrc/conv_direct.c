/*
 * conv_direct.c - direct float32 conv2d (groups == 1) through channel-blocked data.
 *
 * im2col writes every input pixel kh * kw times into the GEMM's panels and the GEMM reads
 * them back: for a 3x3 conv of 64 channels on 56 x 56 that is 7 MiB of panels per call,
 * against 0.8 MiB of input. Here the input is instead copied once into blocks of 16
 * channels with the padding as zeros around each plane (NCHW16c: x_b[cb][hp][wp][16]),
 * and a register tile of up to 12 output pixels of one output row x 32 filters
 * accumulates straight from it: per input channel and tap, the 32 filters' weights are
 * two vector loads and each pixel's input value one broadcast, so every loaded value
 * feeds 2 or 12 multiply-adds. The weights are packed once (lgk_conv2d_direct_pack) as
 * groups of 32 filters, [group][cb][ky][kx][16 channels][32 filters], read front to
 * back by every tile of the group. Work units are (filter group, output row) pairs,
 * group-major, so a group's weights stay in L2 while its rows are computed, and the
 * input is streamed once per group. Tiles are transposed into NCHW on the way out, with
 * the bias as the accumulators' first value and the activation applied per tile.
 * Inputs of fewer than 16 channels (a network's RGB stem) are not padded to a block: their
 * "blocks" are single zero-padded planes (ci = 1, x_b[c][hp][wp]), the same tiles then
 * broadcasting one channel per tap. Where such an input's output rows are at least 16
 * pixels wide, the output pixels are the lanes instead (see "pixels in lanes" below).
 *
 * The kernel needs AVX-512 (lgk_conv2d_direct_available); callers fall back to
 * lgk_conv2d_nchw elsewhere.
 */
#include "lgk_internal.h"
#include "lgk_parallel.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define DIRECT_X86 1
#include <immintrin.h>

#include "lgk_transpose.h"
#endif

#define CB 16          /* filters per block (one zmm of floats); channels per block, ci, */
                       /* is 16 too, or 1 for fewer channels than that (in_block) */
#define GF 32          /* filters per group: two blocks */
#define TILE_PX 12     /* output pixels per register tile (24 accumulators with GF) */
#define PAIR_PX 7      /* pixels per row of a tile of two rows (28 accumulators) */
#define DIRECT_MAGIC 0x4443474cu /* "LGCD" */

typedef struct {
    uint32_t magic;
    int32_t reserved;
    int64_t o, c, kh, kw;
} direct_header;

_Static_assert(sizeof(direct_header) <= LGK_PACKED_HEADER_FLOATS * sizeof(float),
               "direct_header must fit its reserved cache line");

int lgk_conv2d_direct_available(void)
{
#ifdef DIRECT_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
#else
    return 0;
#endif
}

/* Input channels per block: 16, or 1 (planes) for fewer channels. */
static int64_t in_block(int64_t c)
{
    return c < CB ? 1 : CB;
}

/* Floats of the packed weights: the header, then ceil(o / 16) filter blocks of
 * ceil(c / ci) * ci * kh * kw * 16 floats (a last group of one block is half a group). */
static int packed_floats(int64_t o, int64_t c, int64_t kh, int64_t kw, int64_t *out)
{
    LGK_CHECK(o >= 1 && c >= 1 && kh >= 1 && kw >= 1, LGK_ERR_SHAPE);
    int64_t ci = in_block(c);
    const int64_t dims[5] = {(o + CB - 1) / CB, (c + ci - 1) / ci, kh, kw, ci * CB};
    int64_t n;
    LGK_TRY(lgk_checked_count(5, dims, &n));
    LGK_TRY(lgk_add(n, LGK_PACKED_HEADER_FLOATS, out));
    return lgk_checked_count(1, out, out);
}

int64_t lgk_conv2d_direct_packed_size(int64_t o, int64_t c, int64_t kh, int64_t kw)
{
    int64_t n;
    int status = packed_floats(o, c, kh, kw, &n);
    return status == LGK_OK ? n : -(int64_t)status;
}

int lgk_conv2d_direct_pack(int64_t o, int64_t c, int64_t kh, int64_t kw, const float *w,
                           int64_t w_len, float *packed, int64_t packed_len)
{
    int64_t need, nw;
    LGK_TRY(packed_floats(o, c, kh, kw, &need));
    const int64_t wd[4] = {o, c, kh, kw};
    LGK_TRY(lgk_checked_count(4, wd, &nw));
    LGK_TRY(lgk_check_buffer(w, w_len, nw));
    LGK_TRY(lgk_check_buffer(packed, packed_len, need));
    LGK_CHECK((uintptr_t)packed % 64 == 0, LGK_ERR_ARG);
    direct_header h = {DIRECT_MAGIC, 0, o, c, kh, kw};
    memcpy(packed, &h, sizeof h);
    float *dst = packed + LGK_PACKED_HEADER_FLOATS;
    int64_t ci = in_block(c), cbs = (c + ci - 1) / ci, taps = kh * kw;
    for (int64_t f0 = 0; f0 < o; f0 += GF) {
        int64_t nf = LGK_MIN((int64_t)GF, (o - f0 + CB - 1) / CB * CB); /* 16 or 32 */
        for (int64_t cb = 0; cb < cbs; ++cb)
            for (int64_t t = 0; t < taps; ++t)
                for (int64_t i = 0; i < ci; ++i, dst += nf) {
                    int64_t ch = cb * ci + i;
                    for (int64_t f = 0; f < nf; ++f)
                        dst[f] = ch < c && f0 + f < o ? w[((f0 + f) * c + ch) * taps + t] : 0.0f;
                }
    }
    return LGK_OK;
}

static int check_packed(const lgk_conv2d_params *p, const float *packed, int64_t packed_len)
{
    int64_t need;
    LGK_TRY(packed_floats(p->o, p->c, p->kh, p->kw, &need));
    LGK_TRY(lgk_check_buffer(packed, packed_len, LGK_PACKED_HEADER_FLOATS));
    LGK_CHECK((uintptr_t)packed % 64 == 0, LGK_ERR_ARG);
    direct_header h;
    memcpy(&h, packed, sizeof h);
    LGK_CHECK(h.magic == DIRECT_MAGIC && h.o == p->o && h.c == p->c && h.kh == p->kh
                  && h.kw == p->kw,
              LGK_ERR_ARG);
    LGK_CHECK(need <= packed_len, LGK_ERR_SHAPE);
    return LGK_OK;
}

/* ---- the job ------------------------------------------------------------------------ */

typedef struct {
    const lgk_conv2d_params *p;
    int64_t oh, ow, ci, cbs, hp, wp, block; /* block: floats per channel block of x_b */
    int64_t groups;                     /* filter groups of GF */
    int64_t ru, rblocks;                /* output rows per unit (1 or 2), units per group */
    float *xb;                          /* the blocked, padded input of the current image */
    const float *w, *bias;              /* w: packed groups (header skipped) */
    const float *x;                     /* the current image */
    float *y;                           /* the current image's output */
    int activation;
    int64_t lane_len;                   /* pixels in lanes: floats per phase of a padded row */
} direct_job;

#ifdef DIRECT_X86
/* d[ix * 16 + i] = s[i * plane + ix] for ix in [0, w), i in [0, nc) (0 for i >= nc): one
 * input row of a block of 16 channels, by 16 x 16 transposes in registers (one channel at
 * a time, element by element, this copy cost 5% of a 3x3 conv of 64 channels at 56^2). */
__attribute__((target("avx512f")))
static void block_row_avx512(float *d, const float *s, int64_t plane, int64_t w, int64_t nc)
{
    for (int64_t ix = 0; ix < w; ix += CB) {
        int64_t n = LGK_MIN((int64_t)CB, w - ix);
        __mmask16 m = (__mmask16)((1u << n) - 1u);
        lgk_v16 v[CB];
#pragma GCC unroll 16
        for (int i = 0; i < CB; ++i)
            v[i] = i < nc ? (lgk_v16)_mm512_maskz_loadu_ps(m, s + i * plane + ix) : (lgk_v16){0};
        lgk_transpose16(v);
#pragma GCC unroll 16
        for (int px = 0; px < CB; ++px)
            if (px < n)
                _mm512_storeu_ps(d + (ix + px) * CB, (__m512)v[px]);
    }
}

/* phase_row's stride-2 copy of [m, hi) (columns first + 2m inside the row), 16 outputs
 * (32 inputs, the last of them masked at the row's end) at a time; returns hi. */
__attribute__((target("avx512f")))
static int64_t phase_row_s2_avx512(float *restrict d, int64_t m, int64_t hi,
                                   const float *restrict s, int64_t w, int64_t first)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);
    for (; m < hi; m += 16) {
        const float *x = s + first + 2 * m;
        int64_t n_in = LGK_MIN((int64_t)32, w - (first + 2 * m)), n_out = LGK_MIN(16, hi - m);
        __mmask16 m_lo = (__mmask16)(n_in >= 16 ? 0xffffu : (1u << n_in) - 1u);
        __mmask16 m_hi = (__mmask16)(n_in >= 32 ? 0xffffu : n_in <= 16 ? 0u
                                                          : (1u << (n_in - 16)) - 1u);
        __m512 lo = _mm512_maskz_loadu_ps(m_lo, x), up = _mm512_maskz_loadu_ps(m_hi, x + 16);
        _mm512_mask_storeu_ps(d + m, (__mmask16)((1u << n_out) - 1u),
                              _mm512_permutex2var_ps(lo, even, up));
    }
    return hi;
}
#endif

/* d[m] = s[first + m * sw] for m in [0, len), 0 where that is outside [0, w). */
static void phase_row(float *restrict d, int64_t len, const float *restrict s, int64_t w,
                      int64_t sw, int64_t first)
{
    /* [lo, hi): the m whose column lies in the row */
    int64_t lo = first >= 0 ? 0 : LGK_MIN(len, (-first + sw - 1) / sw);
    int64_t hi = first >= w ? lo : LGK_MAX(lo, LGK_MIN(len, (w - first + sw - 1) / sw));
    memset(d, 0, (size_t)lo * sizeof(float));
    int64_t m = lo;
    if (sw == 1) {
        memcpy(d + lo, s + first + lo, (size_t)(hi - lo) * sizeof(float));
        m = hi;
    }
#ifdef DIRECT_X86
    if (sw == 2)
        m = phase_row_s2_avx512(d, lo, hi, s, w, first);
#endif
    for (; m < hi; ++m)
        d[m] = s[first + m * sw];
    memset(d + hi, 0, (size_t)(len - hi) * sizeof(float));
}

/* Pixels in lanes: channel c's padded row r as stride_w phases of lane_len floats, phase q
 * holding the padded columns q, q + stride_w, ... (zeros past the padded row), so that the
 * inputs of 16 consecutive output pixels for one tap are 16 consecutive floats. */
static void lanes_input(const direct_job *j, int64_t c)
{
    const lgk_conv2d_params *p = j->p;
    const int64_t sw = p->stride_w, len = j->lane_len;
    float *xb = j->xb + c * j->block;
    const float *src = j->x + c * p->h * p->w;
    for (int64_t r = 0; r < j->hp; ++r) {
        int64_t iy = r - p->pad_top;
        for (int64_t q = 0; q < sw; ++q) {
            float *d = xb + (r * sw + q) * len;
            if (iy < 0 || iy >= p->h)
                memset(d, 0, (size_t)len * sizeof(float));
            else
                phase_row(d, len, src + iy * p->w, p->w, sw, q - p->pad_left);
        }
    }
}

/* x_b[cb] of the current image: zero borders and channels past c, the plane's pixels
 * transposed in from ci NCHW planes (or the phase rows of pixels in lanes). */
static int block_input(void *ctx, int64_t cb0, int64_t cb1)
{
    const direct_job *j = ctx;
    const lgk_conv2d_params *p = j->p;
    int64_t ci = j->ci;
    for (int64_t cb = cb0; cb < cb1 && j->lane_len > 0; ++cb)
        lanes_input(j, cb);
    for (int64_t cb = cb0; cb < cb1 && j->lane_len == 0; ++cb) {
        float *xb = j->xb + cb * j->block;
        int64_t nc = LGK_MIN(ci, p->c - cb * ci);
        const float *src = j->x + cb * ci * p->h * p->w;
        memset(xb, 0, (size_t)(p->pad_top * j->wp * ci) * sizeof(float));
        for (int64_t iy = 0; iy < p->h; ++iy) {
            float *row = xb + (iy + p->pad_top) * j->wp * ci;
            memset(row, 0, (size_t)(p->pad_left * ci) * sizeof(float));
            float *d = row + p->pad_left * ci;
            const float *s = src + iy * p->w;
            if (ci == 1) {
                memcpy(d, s, (size_t)p->w * sizeof(float));
                d += p->w;
            } else {
#ifdef DIRECT_X86
                block_row_avx512(d, s, p->h * p->w, p->w, nc);
                d += p->w * ci;
#else
                for (int64_t ix = 0; ix < p->w; ++ix, d += ci) {
                    for (int64_t i = 0; i < nc; ++i)
                        d[i] = s[i * p->h * p->w + ix];
                    for (int64_t i = nc; i < ci; ++i)
                        d[i] = 0.0f;
                }
#endif
            }
            memset(d, 0, (size_t)(p->pad_right * ci) * sizeof(float));
        }
        int64_t done = (p->pad_top + p->h) * j->wp * ci;
        memset(xb + done, 0, (size_t)(j->block - done) * sizeof(float));
    }
    return LGK_OK;
}

#ifdef DIRECT_X86
/* One register tile: nr (constant, 1 or 2) rows of np (constant) output pixels from x
 * (the tile's first tap, block 0; the second row ry floats on) x nf (constant, 1 or 2)
 * filter blocks, over every channel block of ci (constant, 16 or 1) channels and tap;
 * `sx` is the column stride in floats (a constant for strides 1 and 2). t[r * np +
 * px][GF] gets bias + the sums. Two rows of a small map (7 or 14 wide) load each weight
 * once for 14 pixels instead of 7. */
__attribute__((target("avx512f"), always_inline))
static inline void tile_avx512(const int nf, const int np, const int nr, const int64_t sx,
                               const int ci, const direct_job *j, const float *x, int64_t ry,
                               const float *w, const float *bias, float *t)
{
    const lgk_conv2d_params *p = j->p;
    __m512 acc[2 * PAIR_PX > TILE_PX ? 2 * PAIR_PX : TILE_PX][2];
    __m512 b0 = _mm512_load_ps(bias), b1 = _mm512_load_ps(bias + CB);
#pragma GCC unroll 14
    for (int q = 0; q < nr * np; ++q) {
        acc[q][0] = b0;
        acc[q][1] = b1;
    }
    const int64_t dy = p->dilation_h * j->wp * ci, dx = p->dilation_w * ci;
    for (int64_t cb = 0; cb < j->cbs; ++cb) {
        const float *xc = x + cb * j->block;
        for (int64_t ky = 0; ky < p->kh; ++ky) {
            for (int64_t kx = 0; kx < p->kw; ++kx) {
                const float *xt = xc + ky * dy + kx * dx;
#pragma GCC unroll 4
                for (int i = 0; i < ci; ++i) {
                    __m512 w0 = _mm512_load_ps(w), w1 = w0;
                    if (nf > 1)
                        w1 = _mm512_load_ps(w + CB);
#pragma GCC unroll 14
                    for (int q = 0; q < nr * np; ++q) {
                        __m512 v = _mm512_set1_ps(xt[(q / np) * ry + (q % np) * sx + i]);
                        acc[q][0] = _mm512_fmadd_ps(v, w0, acc[q][0]);
                        if (nf > 1)
                            acc[q][1] = _mm512_fmadd_ps(v, w1, acc[q][1]);
                    }
                    w += nf * CB;
                }
            }
        }
    }
#pragma GCC unroll 14
    for (int q = 0; q < nr * np; ++q) {
        _mm512_store_ps(t + q * GF, acc[q][0]);
        if (nf > 1)
            _mm512_store_ps(t + q * GF + CB, acc[q][1]);
    }
}

#define TILE_CASE(NF, NP, SX, CI) \
    case NP: tile_avx512(NF, NP, 1, SX, CI, j, x, 0, w, bias, t); break;
#define PAIR_CASE(NF, NP, SX) \
    case NP: tile_avx512(NF, NP, 2, SX, CB, j, x, ry, w, bias, t); break;
#define TILE_CASES(NF, SX, CI)                                                              \
    switch (np) {                                                                           \
    TILE_CASE(NF, 1, SX, CI) TILE_CASE(NF, 2, SX, CI) TILE_CASE(NF, 3, SX, CI)              \
    TILE_CASE(NF, 4, SX, CI) TILE_CASE(NF, 5, SX, CI) TILE_CASE(NF, 6, SX, CI)              \
    TILE_CASE(NF, 7, SX, CI) TILE_CASE(NF, 8, SX, CI) TILE_CASE(NF, 9, SX, CI)              \
    TILE_CASE(NF, 10, SX, CI) TILE_CASE(NF, 11, SX, CI) TILE_CASE(NF, 12, SX, CI)           \
    default: break;                                                                         \
    }

/* One function per (filters, stride, channel block) so that each switch's cases inline a
 * tile with all its offsets constant. */
#define TILE_FN(NAME, NF, SX, CI)                                                           \
    __attribute__((target("avx512f"))) static void NAME(                                   \
        int np, int64_t sx, const direct_job *j, const float *x, int64_t ry, const float *w, \
        const float *bias, float *t)                                                       \
    {                                                                                       \
        (void)sx, (void)ry;                                                                 \
        TILE_CASES(NF, SX, CI)                                                              \
    }
/* The same for tiles of two rows of up to PAIR_PX pixels. */
#define PAIR_FN(NAME, NF, SX)                                                               \
    __attribute__((target("avx512f"))) static void NAME(                                   \
        int np, int64_t sx, const direct_job *j, const float *x, int64_t ry, const float *w, \
        const float *bias, float *t)                                                       \
    {                                                                                       \
        (void)sx;                                                                           \
        switch (np) {                                                                       \
        PAIR_CASE(NF, 1, SX) PAIR_CASE(NF, 2, SX) PAIR_CASE(NF, 3, SX) PAIR_CASE(NF, 4, SX) \
        PAIR_CASE(NF, 5, SX) PAIR_CASE(NF, 6, SX) PAIR_CASE(NF, 7, SX)                      \
        default: break;                                                                     \
        }                                                                                   \
    }

TILE_FN(tile_f2_s1, 2, CB, CB)
TILE_FN(tile_f1_s1, 1, CB, CB)
TILE_FN(tile_f2_s2, 2, 2 * CB, CB)
TILE_FN(tile_f1_s2, 1, 2 * CB, CB)
TILE_FN(tile_f2_sx, 2, sx, CB)
TILE_FN(tile_f1_sx, 1, sx, CB)
TILE_FN(plane_f2_s1, 2, 1, 1)
TILE_FN(plane_f1_s1, 1, 1, 1)
TILE_FN(plane_f2_s2, 2, 2, 1)
TILE_FN(plane_f1_s2, 1, 2, 1)
TILE_FN(plane_f2_sx, 2, sx, 1)
TILE_FN(plane_f1_sx, 1, sx, 1)
PAIR_FN(pair_f2_s1, 2, CB)
PAIR_FN(pair_f1_s1, 1, CB)
PAIR_FN(pair_f2_s2, 2, 2 * CB)
PAIR_FN(pair_f1_s2, 1, 2 * CB)
PAIR_FN(pair_f2_sx, 2, sx)
PAIR_FN(pair_f1_sx, 1, sx)

typedef void (*tile_fn)(int np, int64_t sx, const direct_job *j, const float *x, int64_t ry,
                        const float *w, const float *bias, float *t);

/* [channel block of 16, 1; or 16 in row pairs][filter blocks 2 or 1][stride 1, 2, other] */
static const tile_fn tile_fns[3][2][3] = {
    {{tile_f2_s1, tile_f2_s2, tile_f2_sx}, {tile_f1_s1, tile_f1_s2, tile_f1_sx}},
    {{plane_f2_s1, plane_f2_s2, plane_f2_sx}, {plane_f1_s1, plane_f1_s2, plane_f1_sx}},
    {{pair_f2_s1, pair_f2_s2, pair_f2_sx}, {pair_f1_s1, pair_f1_s2, pair_f1_sx}},
};

/* The tile t[px][GF] (np pixels) into NCHW rows y[f * plane + 0:np] of its nfilt filters:
 * 16 x 16 transposes in registers (a scalar copy cost as much as the multiply-adds of a
 * 3-channel stem's tile). */
__attribute__((target("avx512f")))
static void store_tile(const float *t, int64_t np, int64_t nfilt, float *y, int64_t plane)
{
    __mmask16 m = (__mmask16)((1u << np) - 1u);
    for (int64_t h = 0; h * CB < nfilt; ++h) {
        lgk_v16 v[16];
#pragma GCC unroll 16
        for (int px = 0; px < 16; ++px)
            v[px] = px < np ? *(const lgk_v16 *)(t + px * GF + h * CB) : (lgk_v16){0};
        lgk_transpose16(v);
        int64_t nf = LGK_MIN((int64_t)CB, nfilt - h * CB);
        for (int64_t f = 0; f < nf; ++f)
            _mm512_mask_storeu_ps(y + (h * CB + f) * plane, m, (__m512)v[f]);
    }
}

/* The n output floats from y in each of nfilt filter planes, into L2, a line at a time,
 * for the unit after this one: a model's output buffer is often last used long ago and out
 * in memory, and the tiles' partial-line stores each waited on a read for ownership
 * (stems of 3 -> 32 channels at 224^2 stride 2 took 372 us with the output flushed from
 * the caches, 307 with it in cache). Integer addresses: past the last unit they lie
 * past y. */
static void prefetch_outputs(const float *y, int64_t n, int64_t nfilt, int64_t plane)
{
    for (int64_t f = 0; f < nfilt; ++f)
        for (int64_t q = 0; q < n; q += 16)
            _mm_prefetch((const char *)((uintptr_t)y + (uintptr_t)((f * plane + q)
                                                                   * (int64_t)sizeof(float))),
                         _MM_HINT_T1);
}

/* ---- pixels in lanes ----------------------------------------------------------------
 * Inputs of a few channel planes (a network's RGB stem: 3 channels, 27 multiply-adds per
 * output) leave little work per tile to pay for a 16 x 16 transpose per 16 filters into
 * NCHW and an activation pass over the tile: in a 3 -> 32 channel 3x3 stride-2 stem at
 * 224^2 those took a third of the time. Here a tile is nv (constant) vectors of 16
 * consecutive output pixels of one row x LANE_F filters: per channel and tap, nv vector
 * loads of the input's phase rows (lanes_input) and LANE_F weight broadcasts feed
 * nv x LANE_F multiply-adds, and the accumulators (the bias first, then the taps in the
 * order of the tiles above, so the sums are the same) go straight into the output rows
 * with relu / relu6 applied in registers. */
#define LANE_F 4  /* filters per tile */
#define LANE_NV 6 /* most vectors per tile: 24 accumulators, 4 weights and an input */

/* relu / relu6 as lgk_reluf / lgk_relu6f (NaN stays NaN, -0 becomes 0), as the GEMM tiles
 * apply them: max(0, x) keeps a NaN x and gives x for -0 (vmaxps returns its second operand
 * then), min(6, x) keeps a NaN, and + 0 turns -0 into +0; three plain ops where compares
 * into masks and masked moves took four (MobileNetV2's stem, 3 -> 32 channels at 224^2
 * stride 2 with relu6, per step in the model at 1 thread: 296-306 -> 289-297 us). */
__attribute__((target("avx512f"), always_inline))
static inline __m512 lanes_clamp(__m512 v, int activation)
{
    if (activation != LGK_ACT_RELU && activation != LGK_ACT_RELU6)
        return v;
    const __m512 zero = _mm512_setzero_ps();
    v = _mm512_max_ps(zero, v);
    if (activation == LGK_ACT_RELU6)
        v = _mm512_min_ps(_mm512_set1_ps(6.0f), v);
    return _mm512_add_ps(v, zero);
}

/* One tile: x is the output row's first padded input row at the tile's first pixel, w the
 * LANE_F filters' weights of the first channel and tap (the next tap wstep floats on), y
 * the first filter's output at the tile's first pixel; nfilt (<= LANE_F) filters stored,
 * the last vector's pixels masked by `last`. */
__attribute__((target("avx512f"), always_inline))
static inline void lanes_tile(const int nv, const direct_job *j, const float *x, const float *w,
                              int64_t wstep, const float *bias, float *y, int64_t plane,
                              int nfilt, __mmask16 last)
{
    const lgk_conv2d_params *p = j->p;
    const int64_t sw = p->stride_w, len = j->lane_len, dy = p->dilation_h * sw * len;
    __m512 acc[LANE_NV][LANE_F];
#pragma GCC unroll 4
    for (int f = 0; f < LANE_F; ++f) {
        __m512 b = _mm512_set1_ps(bias[f]);
#pragma GCC unroll 6
        for (int v = 0; v < nv; ++v)
            acc[v][f] = b;
    }
    for (int64_t c = 0; c < p->c; ++c) {
        for (int64_t ky = 0; ky < p->kh; ++ky) {
            const float *xr = x + c * j->block + ky * dy;
            int64_t q = 0, off = 0; /* tap kx: phase kx % sw, kx / sw columns on */
            for (int64_t kx = 0; kx < p->kw; ++kx) {
                const float *xs = xr + q * len + off;
                __m512 wv[LANE_F];
#pragma GCC unroll 4
                for (int f = 0; f < LANE_F; ++f)
                    wv[f] = _mm512_set1_ps(w[f]);
                w += wstep;
#pragma GCC unroll 6
                for (int v = 0; v < nv; ++v) {
                    __m512 xv = _mm512_loadu_ps(xs + 16 * v);
#pragma GCC unroll 4
                    for (int f = 0; f < LANE_F; ++f)
                        acc[v][f] = _mm512_fmadd_ps(xv, wv[f], acc[v][f]);
                }
                if (++q == sw)
                    q = 0, ++off;
            }
        }
    }
#pragma GCC unroll 4
    for (int f = 0; f < LANE_F; ++f) {
        if (f >= nfilt)
            break;
#pragma GCC unroll 6
        for (int v = 0; v < nv; ++v)
            _mm512_mask_storeu_ps(y + f * plane + 16 * v, v == nv - 1 ? last : (__mmask16)0xffff,
                                  lanes_clamp(acc[v][f], j->activation));
    }
}

#define LANES_CASE(NV) \
    case NV: lanes_tile(NV, j, x, w, wstep, bias, y, plane, nfilt, last); break;

__attribute__((target("avx512f")))
static void lanes_tiles(int nv, const direct_job *j, const float *x, const float *w,
                        int64_t wstep, const float *bias, float *y, int64_t plane, int nfilt,
                        __mmask16 last)
{
    switch (nv) {
    LANES_CASE(1) LANES_CASE(2) LANES_CASE(3) LANES_CASE(4) LANES_CASE(5) LANES_CASE(6)
    default: break;
    }
}

/* The next of `parts` balanced pieces of the `left` items still to split: ceil(left /
 * parts), so that 56 pixels in 5 tiles are 12 + 4 x 11 and 14 in 2 are 7 + 7. */
static int64_t balanced_step(int64_t left, int64_t parts)
{
    return left / parts + (left % parts != 0);
}

/* bias[0:n] = the bias of filters f0 .. f0 + nfilt (zeros past them, or all with none). */
static void fill_bias(float *bias, int64_t n, const float *src, int64_t f0, int64_t nfilt)
{
    for (int64_t f = 0; f < n; ++f)
        bias[f] = src != NULL && f < nfilt ? src[f0 + f] : 0.0f;
}
#endif /* DIRECT_X86 */

/* Tiles per output row: balanced, 56 = 12 + 4 x 11, 14 = 7 + 7. */
static int64_t row_tiles(int64_t ow)
{
    return (ow + TILE_PX - 1) / TILE_PX;
}

/* Output rows of filter groups: units u = group * rblocks + rb of ru rows each, in
 * [u0, u1). */
static int direct_units(void *ctx, int64_t u0, int64_t u1)
{
#ifdef DIRECT_X86
    const direct_job *j = ctx;
    const lgk_conv2d_params *p = j->p;
    int64_t plane = j->oh * j->ow, sx = p->stride_w * j->ci, ry = p->stride_h * j->wp * j->ci;
    int64_t ntiles = row_tiles(j->ow);
    int64_t group_floats = j->cbs * p->kh * p->kw * j->ci * GF;
    _Alignas(64) float t[2 * TILE_PX * GF];
    _Alignas(64) float bias[GF];
    int64_t last_group = -1;
    tile_fn one = NULL, two = NULL;
    int64_t nf = 0, nfilt = 0;
    for (int64_t u = u0; u < u1; ++u) {
        int64_t g = u / j->rblocks, oy = u % j->rblocks * j->ru, f0 = g * GF;
        if (g != last_group) {
            last_group = g;
            nfilt = LGK_MIN((int64_t)GF, p->o - f0);
            nf = (nfilt + CB - 1) / CB;
            fill_bias(bias, GF, j->bias, f0, nfilt);
            int s = p->stride_w == 1 ? 0 : p->stride_w == 2 ? 1 : 2;
            one = tile_fns[j->ci == 1][nf == 1][s];
            two = tile_fns[2][nf == 1][s];
        }
        int64_t rows = LGK_MIN(j->ru, j->oh - oy);
        tile_fn fn = rows == 2 ? two : one;
        const float *w = j->w + g * group_floats;
        const float *xrow = j->xb + oy * ry;
        float *yrow = j->y + f0 * plane + oy * j->ow;
        prefetch_outputs(yrow + rows * j->ow, rows * j->ow, nfilt, plane);
        int64_t ox0 = 0;
        for (int64_t k = 0; k < ntiles; ++k) {
            int64_t np = balanced_step(j->ow - ox0, ntiles - k);
            fn((int)np, sx, j, xrow + ox0 * sx, ry, w, bias, t);
            if (j->activation != LGK_ACT_NONE)
                lgk_activate(j->activation, t, rows * np * GF);
            for (int64_t r = 0; r < rows; ++r)
                store_tile(t + r * np * GF, np, nfilt, yrow + r * j->ow + ox0, plane);
            ox0 += np;
        }
    }
    return LGK_OK;
#else
    (void)ctx, (void)u0, (void)u1;
    return LGK_ERR_ARG;
#endif
}

/* Pixels in lanes: output rows [oy0, oy1), every filter, LANE_F at a time, in bands of
 * LANE_BAND rows: per band, each group of LANE_F filters over all its rows, so that the
 * stores run along LANE_F output planes (LANE_BAND rows of a plane are consecutive)
 * rather than along all the filters' planes a row at a time; the band's input rows stay
 * in L1/L2 for the filter groups. A 3 -> 32 channel stem at 224^2, stride 2, in a model
 * (its output out in memory): 366 -> 312 us with bands of 16 rows (8: 317, 32: 315), the
 * prefetch of the next row's outputs that row by row needed no longer helping; ResNet-50's
 * 7x7 stem 2441 -> 2285 us. */
#define LANE_BAND 16

/* Pixels in lanes: output rows [oy0, oy1), every filter, LANE_F at a time. */
static int lanes_units(void *ctx, int64_t oy0, int64_t oy1)
{
#ifdef DIRECT_X86
    const direct_job *j = ctx;
    const lgk_conv2d_params *p = j->p;
    int64_t plane = j->oh * j->ow, nvec = (j->ow + 15) / 16;
    int64_t chunks = (nvec + LANE_NV - 1) / LANE_NV, tail = j->ow - (nvec - 1) * 16;
    int64_t group_floats = j->cbs * p->kh * p->kw * GF;
    __mmask16 last = (__mmask16)((1u << tail) - 1u);
    for (int64_t b0 = oy0; b0 < oy1; b0 += LANE_BAND) {
        int64_t b1 = LGK_MIN(oy1, b0 + LANE_BAND);
        for (int64_t f0 = 0; f0 < p->o; f0 += LANE_F) {
            int64_t g = f0 / GF, in_group = f0 % GF;
            int64_t wstep = LGK_MIN((int64_t)GF, (p->o - g * GF + CB - 1) / CB * CB);
            const float *w = j->w + g * group_floats + in_group;
            int nfilt = (int)LGK_MIN((int64_t)LANE_F, p->o - f0);
            float bias[LANE_F];
            fill_bias(bias, LANE_F, j->bias, f0, nfilt);
            for (int64_t oy = b0; oy < b1; ++oy) {
                const float *xrow = j->xb + oy * p->stride_h * p->stride_w * j->lane_len;
                float *yrow = j->y + oy * j->ow;
                int64_t v0 = 0;
                for (int64_t k = 0; k < chunks; ++k) {
                    int64_t nv = balanced_step(nvec - v0, chunks - k);
                    float *y = yrow + f0 * plane + v0 * 16;
                    lanes_tiles((int)nv, j, xrow + v0 * 16, w, wstep, bias, y, plane, nfilt,
                                v0 + nv == nvec ? last : (__mmask16)0xffff);
                    if (j->activation != LGK_ACT_NONE && j->activation != LGK_ACT_RELU
                        && j->activation != LGK_ACT_RELU6)
                        for (int f = 0; f < nfilt; ++f)
                            lgk_activate(j->activation, y + f * plane,
                                         LGK_MIN(nv * 16, j->ow - v0 * 16));
                    v0 += nv;
                }
            }
        }
    }
    return LGK_OK;
#else
    (void)ctx, (void)oy0, (void)oy1;
    return LGK_ERR_ARG;
#endif
}

int lgk_conv2d_direct(const lgk_conv2d_params *p, const float *x, int64_t x_len,
                      const float *packed_w, int64_t packed_len, const float *bias,
                      int64_t bias_len, float *y, int64_t y_len, int activation, int nthreads)
{
    int64_t oh, ow, hp, wp, block;
    LGK_CHECK(p != NULL, LGK_ERR_NULL);
    LGK_TRY(lgk_conv2d_out_shape(p, &oh, &ow));
    LGK_CHECK(p->groups == 1, LGK_ERR_ARG);
    LGK_CHECK(activation >= LGK_ACT_NONE && activation <= LGK_ACT_LAST, LGK_ERR_ARG);
    LGK_CHECK(lgk_conv2d_direct_available(), LGK_ERR_ARG);
    LGK_TRY(check_packed(p, packed_w, packed_len));
    LGK_TRY(lgk_conv2d_check_buffers(p, oh, ow, 0, x_len, -1, y_len, bias, bias_len, x, NULL,
                                     y));
    if (p->n == 0 || p->o == 0)
        return LGK_OK;
    /* the padded extent; a window never reaches past it (lgk_conv2d_out_shape) */
    LGK_TRY(lgk_add(p->h, p->pad_top + p->pad_bottom, &hp));
    LGK_TRY(lgk_add(p->w, p->pad_left + p->pad_right, &wp));
    int64_t ci = in_block(p->c), cbs = (p->c + ci - 1) / ci, lane_len = 0;
    const int64_t bd[3] = {hp, wp, ci};
    LGK_TRY(lgk_checked_count(3, bd, &block));
    /* pixels in lanes: planes, rows of at least a vector, consecutive taps along x */
    if (ci == 1 && ow >= 16 && p->dilation_w == 1) {
        /* the last vector of a row reads (kw - 1) / stride_w floats past its 16 */
        LGK_TRY(lgk_add((ow + 15) / 16 * 16, (p->kw - 1) / p->stride_w + 15, &lane_len));
        lane_len = lane_len / 16 * 16;
        const int64_t ld[3] = {hp, p->stride_w, lane_len};
        LGK_TRY(lgk_checked_count(3, ld, &block));
    }
    const int64_t all[2] = {cbs, block};
    int64_t xb_floats;
    LGK_TRY(lgk_checked_count(2, all, &xb_floats));
    lgk_scratch s = {NULL, 0};
    LGK_TRY(lgk_scratch_acquire(xb_floats, &s));
    /* rows in pairs where a row's tiles are narrow enough (maps up to 14 wide) */
    int64_t ru = ci == CB && (ow + row_tiles(ow) - 1) / row_tiles(ow) <= PAIR_PX ? 2 : 1;
    direct_job j = {p, oh, ow, ci, cbs, hp, wp, block, (p->o + GF - 1) / GF, ru,
                    (oh + ru - 1) / ru, s.data,
                    packed_w + LGK_PACKED_HEADER_FLOATS, bias, NULL, NULL, activation,
                    lane_len};
    double flops = 2.0 * (double)p->o * (double)oh * (double)ow * (double)p->c
                   * (double)(p->kh * p->kw);
    int threads = lgk_conv_threads_for(flops, lgk_clamp_threads(nthreads));
    unsigned mode = lgk_flush_subnormals();
    int status = LGK_OK;
    for (int64_t img = 0; img < p->n && status == LGK_OK; ++img) {
        j.x = x + img * p->c * p->h * p->w;
        j.y = y + img * p->o * oh * ow;
        status = lgk_parallel_for(threads, cbs, 1, block_input, &j);
        if (status == LGK_OK && lane_len > 0)
            status = lgk_parallel_for(threads, oh, 1, lanes_units, &j);
        else if (status == LGK_OK)
            status = lgk_parallel_for(threads, j.groups * j.rblocks, 1, direct_units, &j);
    }
    lgk_restore_fp_mode(mode);
    lgk_scratch_release(&s);
    return status;
}
