/*
 * qpool.c - max pooling of int8 / uint8 NCHW data (an int8 CNN's pool between quantized
 * convs): each output row is the running maximum of its window's taps, one pass per tap
 * over the output columns whose input column lies inside the input (padded cells never
 * win: they count as the type's lowest value). The byte loops vectorize, the stride-2 one
 * included; planes are split over threads.
 */
#include <stdatomic.h>

#include "lgk_internal.h"

typedef struct {
    const lgk_pool2d_params *p;
    int64_t oh, ow;
    const uint8_t *x;
    uint8_t *y;
    int is_int8, avx512;
} qpool_ctx;

/* Output columns [lo, hi) whose input column ox * s - pad + off lies in [0, w). */
static void qpool_cols(int64_t ow, int64_t s, int64_t pad, int64_t off, int64_t w,
                       int64_t *lo, int64_t *hi)
{
    int64_t start = pad - off; /* ox * s >= start */
    *lo = start <= 0 ? 0 : (start + s - 1) / s;
    int64_t end = w + pad - off; /* ox * s < end */
    *hi = end <= 0 ? 0 : LGK_MIN(ow, (end + s - 1) / s);
    *lo = LGK_MIN(*lo, *hi);
}

/* acc[i] = max(acc[i], src[i * s]) for i in [0, n); s 1 and 2 as constants. */
__attribute__((always_inline)) static inline void qpool_tap(int is_int8, uint8_t *restrict acc,
                                                             const uint8_t *restrict src,
                                                             int64_t n, int64_t s)
{
#define QPOOL_LOOP(T, S)                                                              \
    for (int64_t ox = 0; ox < n; ++ox) {                                              \
        T v = (T)src[ox * (S)], a = (T)acc[ox];                                       \
        acc[ox] = (uint8_t)(v > a ? v : a);                                           \
    }
    if (is_int8) {
        if (s == 1) {
            QPOOL_LOOP(int8_t, 1)
        } else if (s == 2) {
            QPOOL_LOOP(int8_t, 2)
        } else {
            QPOOL_LOOP(int8_t, s)
        }
    } else if (s == 1) {
        QPOOL_LOOP(uint8_t, 1)
    } else if (s == 2) {
        QPOOL_LOOP(uint8_t, 2)
    } else {
        QPOOL_LOOP(uint8_t, s)
    }
#undef QPOOL_LOOP
}

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
#define QPOOL_X86 1
#define QPOOL_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
#define QPOOL_MAX_KW 64 /* wider windows: the portable loops */

/* Bits [a, b) of a mask, 0 <= a <= b <= 64. */
QPOOL_TARGET static inline __mmask64 qpool_bits(int64_t a, int64_t b)
{
    __mmask64 below_b = b >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << b) - 1;
    __mmask64 below_a = a >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << a) - 1;
    return below_b & ~below_a;
}

/* One output row with masked AVX-512 moves, in chunks of 64 columns (32 at stride 2) whose
 * running maximum stays in a register over the window's taps: a row of tens of bytes is a
 * move or two per tap, where the compiler's loops ran the bytes past the last whole vector
 * one at a time (ResNet-50's 56-wide rows: all of them), and a maximum stored and read
 * again per tap waited for the masked store each time. Stride 2 reads 2 m - 1 bytes
 * (never past the last one needed) and keeps the even ones (vpmovwb). */
QPOOL_TARGET static void qpool_row_avx512(const qpool_ctx *c, const uint8_t *x, int64_t oy,
                                          const int64_t *cols_lo, const int64_t *cols_hi,
                                          uint8_t *y)
{
    const lgk_pool2d_params *p = c->p;
    int64_t s = p->stride_w, step = s == 1 ? 64 : 32;
    __m512i lowest = _mm512_set1_epi8(c->is_int8 ? (char)0x80 : 0);
    for (int64_t c0 = 0; c0 < c->ow; c0 += step) {
        int64_t c1 = LGK_MIN(c0 + step, c->ow);
        __m512i acc = lowest;
        for (int64_t ki = 0; ki < p->kh; ++ki) {
            int64_t iy = oy * p->stride_h - p->pad_top + ki * p->dilation_h;
            if (iy < 0 || iy >= p->h)
                continue;
            for (int64_t kj = 0; kj < p->kw; ++kj) {
                int64_t off = kj * p->dilation_w;
                int64_t lo = LGK_MAX(cols_lo[kj], c0), hi = LGK_MIN(cols_hi[kj], c1);
                if (lo >= hi)
                    continue;
                /* lane j: column c0 + j, read at `base` + j s (lanes outside [lo, hi)
                 * masked: their addresses may lie outside the row, never touched) */
                uintptr_t base = (uintptr_t)(x + iy * p->w) + (uintptr_t)(c0 * s + off)
                                 - (uintptr_t)p->pad_left;
                __m512i v;
                if (s == 1)
                    v = _mm512_maskz_loadu_epi8(qpool_bits(lo - c0, hi - c0),
                                                (const void *)base);
                else
                    v = _mm512_castsi256_si512(_mm512_cvtepi16_epi8(_mm512_maskz_loadu_epi8(
                        qpool_bits(2 * (lo - c0), 2 * (hi - c0) - 1), (const void *)base)));
                __mmask64 k = qpool_bits(lo - c0, hi - c0);
                acc = c->is_int8 ? _mm512_mask_max_epi8(acc, k, acc, v)
                                 : _mm512_mask_max_epu8(acc, k, acc, v);
            }
        }
        int64_t n = c1 - c0;
        _mm512_mask_storeu_epi8(y + c0, qpool_bits(0, n), acc);
    }
}
#endif

/* The plane's output rows, each the running maximum of its window's taps. */
LGK_CLONES static void qpool_plane_portable(const qpool_ctx *c, const uint8_t *x, uint8_t *y)
{
    const lgk_pool2d_params *p = c->p;
    uint8_t lowest = c->is_int8 ? 0x80 : 0x00;
    for (int64_t oy = 0; oy < c->oh; ++oy) {
        uint8_t *acc = y + oy * c->ow;
        memset(acc, lowest, (size_t)c->ow);
        for (int64_t ki = 0; ki < p->kh; ++ki) {
            int64_t iy = oy * p->stride_h - p->pad_top + ki * p->dilation_h;
            if (iy < 0 || iy >= p->h)
                continue;
            for (int64_t kj = 0; kj < p->kw; ++kj) {
                int64_t off = kj * p->dilation_w, lo, hi;
                qpool_cols(c->ow, p->stride_w, p->pad_left, off, p->w, &lo, &hi);
                if (lo < hi)
                    qpool_tap(c->is_int8, acc + lo,
                              x + iy * p->w + (lo * p->stride_w + off - p->pad_left),
                              hi - lo, p->stride_w);
            }
        }
    }
}

static void qpool_plane(const qpool_ctx *c, const uint8_t *x, uint8_t *y)
{
#ifdef QPOOL_X86
    const lgk_pool2d_params *p = c->p;
    if (c->avx512 && (p->stride_w == 1 || p->stride_w == 2) && p->kw <= QPOOL_MAX_KW) {
        int64_t lo[QPOOL_MAX_KW], hi[QPOOL_MAX_KW]; /* each tap's output columns */
        for (int64_t kj = 0; kj < p->kw; ++kj)
            qpool_cols(c->ow, p->stride_w, p->pad_left, kj * p->dilation_w, p->w, &lo[kj],
                       &hi[kj]);
        for (int64_t oy = 0; oy < c->oh; ++oy)
            qpool_row_avx512(c, x, oy, lo, hi, y + oy * c->ow);
        return;
    }
#endif
    qpool_plane_portable(c, x, y);
}

static _Atomic int qpool_portable; /* forced by the test hook */

/* Test hook: 1 runs the portable loops, 0 the CPU's best again. Not thread-safe. */
int lgk_qpool_force_portable(int portable);
int lgk_qpool_force_portable(int portable)
{
    qpool_portable = portable != 0;
    return LGK_OK;
}

static int qpool_planes(void *ctx, int64_t begin, int64_t end)
{
    const qpool_ctx *c = ctx;
    for (int64_t i = begin; i < end; ++i)
        qpool_plane(c, c->x + i * c->p->h * c->p->w, c->y + i * c->oh * c->ow);
    return LGK_OK;
}

int lgk_qmax_pool2d_nchw(const lgk_pool2d_params *p, int type, const void *x, int64_t x_len,
                         void *y, int64_t y_len, int nthreads)
{
    LGK_CHECK(type == LGK_QTYPE_UINT8 || type == LGK_QTYPE_INT8, LGK_ERR_ARG);
    int64_t oh, ow, nx, ny, planes;
    LGK_TRY(lgk_pool2d_out_shape(p, &oh, &ow));
    const int64_t pd[2] = {p->n, p->c};
    LGK_TRY(lgk_checked_count(2, pd, &planes));
    const int64_t xdims[3] = {planes, p->h, p->w}, ydims[3] = {planes, oh, ow};
    LGK_TRY(lgk_checked_count(3, xdims, &nx));
    LGK_TRY(lgk_checked_count(3, ydims, &ny));
    LGK_TRY(lgk_check_buffer(x, x_len, nx));
    LGK_TRY(lgk_check_buffer(y, y_len, ny));
    if (ny == 0)
        return LGK_OK;
    qpool_ctx c = {p, oh, ow, x, y, type == LGK_QTYPE_INT8,
                   !qpool_portable && lgk_cpu_avx512bw()};
    /* about 0.1 ns a tap: below 1 Mi taps a second thread costs more */
    double taps = (double)ny * (double)p->kh * (double)p->kw;
    int threads = taps < 1048576.0 ? 1 : nthreads;
    return lgk_parallel_for(threads, planes, 1, qpool_planes, &c);
}
