/*
 * softmax_wide.c - softmax along contiguous rows with AVX-512 (attention's scores).
 *
 * The portable row code (norms.c) is compiled as SIMD clones of vector-extension C. On
 * AVX-512 this file takes over the plain softmax (not log_softmax) of whole rows, for
 * lgk_softmax and for the GEMM whose epilogue it is, with three changes that the clones
 * cannot express:
 *  - 2^n is applied by one vscalefps instead of the two exponent-field multiplies that
 *    keep the portable exp exact into the subnormal range (8 integer and multiply
 *    instructions per vector). p * 2^n is exact or rounds once either way, so every
 *    exp is the same value as lgk_expf's (FMA builds), bit for bit, including subnormal and
 *    overflowing results.
 *  - the maximum pass keeps two vmaxps chains, not one compare-and-blend chain, so a row
 *    needs no partner row to fill its latencies;
 *  - a row's last n % 16 values go through the same vector steps under a mask.
 * Measured on 6 x 1500 rows of 1500 (Whisper-tiny's attention; Zen 4, one thread, best
 * of 15): lgk_softmax 6.9 -> 4.7 ms (onnxruntime's Softmax 5.7 ms), the fused GEMM and
 * softmax 24.1 -> 21.8 ms, of which the GEMM alone is 17.8 ms.
 */
#include "lgk_internal.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#define WIDE __attribute__((target("avx512f")))
#define WIDE_INLINE static inline __attribute__((always_inline)) WIDE

/* lgk_expf on 16 lanes: its clamps, its rounding of x log2(e) to n with the 1.5 * 2^23
 * constant, its two-part ln2 and its polynomial, in the order (and multiply-adds) the
 * FMA clones compile them to; then p * 2^n in one scale. */
WIDE_INLINE __m512 exp16(__m512 x)
{
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);   /* NaN: the second operand, x */
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), magic);
    __m512 n = _mm512_sub_ps(t, magic);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r,
                               _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r);
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* The rows' maximum: whole vectors in two chains each, then the tail under a mask
 * (lanes past the row repeat x[0], which changes no maximum). A NaN may be skipped: it
 * makes the row's sum NaN, so the row comes out NaN as with a NaN maximum. */
WIDE_INLINE float row_max(const float *x, int64_t n)
{
    __m512 m0 = _mm512_set1_ps(x[0]), m1 = m0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
        m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
    }
    if (i + 16 <= n) {
        m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
        i += 16;
    }
    if (i < n)
        m1 = _mm512_max_ps(_mm512_mask_loadu_ps(m1, (__mmask16)((1u << (n - i)) - 1), x + i),
                           m1);
    return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

/* y = exp(x - shift) over the row, returning the sum of y. */
WIDE_INLINE float row_exp_sum(const float *x, int64_t n, float shift, float *y,
                              const float *next_row)
{
    const __m512 s = _mm512_set1_ps(shift);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        /* The next row comes in while the exps compute: its maximum pass then finds it
         * in cache (the hardware prefetcher stops at each 4 KiB page). */
        _mm_prefetch((const char *)(next_row + i), _MM_HINT_T0);
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), s));
        _mm512_storeu_ps(y + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), s));
        _mm512_mask_storeu_ps(y + i, k, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(k, e));
    }
    return _mm512_reduce_add_ps(acc);
}

WIDE_INLINE void row_scale(float *y, int64_t n, float scale)
{
    const __m512 s = _mm512_set1_ps(scale);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), s));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), s));
    }
}

WIDE static void softmax_rows_wide(int64_t rows, int64_t n, const float *x, int64_t ldx,
                                   float *y, int64_t ldy)
{
    for (int64_t r = 0; r < rows; ++r) {
        const float *row = x + r * ldx;
        const float *next_row = r + 1 < rows ? row + ldx : row;
        float s = row_exp_sum(row, n, row_max(row, n), y + r * ldy, next_row);
        row_scale(y + r * ldy, n, 1.0f / s);
    }
}

static int portable_forced = 0;

/* Tests: 1 makes softmax take the portable rows (those of CPUs without AVX-512) on any
 * CPU, 0 restores the choice by CPU. Not thread-safe. */
int lgk_softmax_force_portable(int on);
int lgk_softmax_force_portable(int on)
{
    portable_forced = on != 0;
    return LGK_OK;
}

int lgk_softmax_rows_wide(int64_t rows, int64_t n, const float *x, int64_t ldx, float *y,
                          int64_t ldy)
{
    if (portable_forced || !__builtin_cpu_supports("avx512f"))
        return 0;
    softmax_rows_wide(rows, n, x, ldx, y, ldy);
    return 1;
}

#else

int lgk_softmax_force_portable(int on);
int lgk_softmax_force_portable(int on)
{
    (void)on;
    return LGK_OK;
}

int lgk_softmax_rows_wide(int64_t rows, int64_t n, const float *x, int64_t ldx, float *y,
                          int64_t ldy)
{
    (void)rows, (void)n, (void)x, (void)ldx, (void)y, (void)ldy;
    return 0;
}

#endif
