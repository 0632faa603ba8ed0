/*
 * norms.c - softmax / log_softmax, layer_norm, rms_norm and reductions.
 *
 * Everything works on a dense (outer, n, inner) view. With inner == 1 the op
 * runs along contiguous rows; row sums and maxima use LANES independent
 * accumulators, which both vectorizes (no reassociation flags needed) and
 * behaves like pairwise summation for accuracy. With inner > 1 the op runs
 * down columns, a tile of COL_TILE columns at a time so the running
 * statistics stay in L1 and every row access is a unit-stride vector loop.
 */
#include <float.h>

#include "lgk_internal.h"

/* Jump threading would split the loops over the math functions of lgk_internal.h into
 * one path per clamp (exp's range limits, the sign tests of sigmoid, tanh and gelu),
 * which vectorize as masked copies of the whole computation: sigmoid, silu and tanh-gelu
 * then divide three times per vector instead of once (2x the time per element). */
#pragma GCC optimize("no-thread-jumps")

#define LANES 16
#define COL_TILE 256
/* Row sums are accumulated in float blocks of this size and combined in
 * double, bounding float error growth on long rows. */
#define SUM_BLOCK 4096

/* ---- row primitives (inner == 1) ------------------------------------------------ */

/* Most row helpers are inlined into each SIMD clone of a per-row driver (softmax_rows,
 * layer_norm_rows, rms_norm_rows), so a short row (softmax over 64 keys, layer_norm
 * over 32 channels) costs no calls between its passes. */
#define ROW_INLINE static inline __attribute__((always_inline))
/* They pass 64-byte vectors by value, which would differ between the baseline and AVX-512
 * calling conventions if they were ever called rather than inlined. */
#pragma GCC diagnostic ignored "-Wpsabi"

static void reduce_cols(int op, const float *x, int64_t r, int64_t inner, int64_t w, float *y);
static float row_extreme(const float *x, int64_t n, int want_max);

LGK_CLONES static float row_sum_block(const float *x, int64_t n)
{
    float acc[LANES] = {0.0f};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; ++j)
            acc[j] += x[i + j];
    float s = 0.0f;
    for (; i < n; ++i)
        s += x[i];
    for (int j = 0; j < LANES; ++j)
        s += acc[j];
    return s;
}

static double row_sum(const float *x, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i += SUM_BLOCK)
        s += row_sum_block(x + i, LGK_MIN((int64_t)SUM_BLOCK, n - i));
    return s;
}

/* sum((x - c)^2) for the variance, same blocking as row_sum. */
ROW_INLINE float row_sq_dev_block(const float *x, int64_t n, float c)
{
    float acc[LANES] = {0.0f};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; ++j)
            acc[j] += (x[i + j] - c) * (x[i + j] - c);
    float s = 0.0f;
    for (; i < n; ++i)
        s += (x[i] - c) * (x[i] - c);
    for (int j = 0; j < LANES; ++j)
        s += acc[j];
    return s;
}

ROW_INLINE double row_sq_dev(const float *x, int64_t n, float c)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i += SUM_BLOCK)
        s += row_sq_dev_block(x + i, LGK_MIN((int64_t)SUM_BLOCK, n - i), c);
    return s;
}

/* Sums of d and d^2 with d = x - c, in one pass (the layer_norm statistics). GCC does
 * not vectorize two reductions in one loop from plain arrays, so this one is written
 * with vector extensions (16 floats: zmm, 2 ymm or 4 xmm per clone), with MOMENT_WAYS
 * independent accumulators so the adds do not wait on each other's latency. */
typedef float lgk_v16 __attribute__((vector_size(64)));
typedef int32_t lgk_vi16 __attribute__((vector_size(64)));
typedef uint32_t lgk_vu16 __attribute__((vector_size(64)));
#define MOMENT_WAYS 4

/* a where mask (all ones) else b, lane by lane */
ROW_INLINE lgk_v16 v16_select(lgk_vi16 mask, lgk_v16 a, lgk_v16 b)
{
    return (lgk_v16)(((lgk_vi16)a & mask) | ((lgk_vi16)b & ~mask));
}

/* Sum and maximum of the 16 lanes by halving shuffles (4 steps, no serial chain). */
ROW_INLINE float v16_hsum(lgk_v16 v)
{
    v += __builtin_shuffle(v, (lgk_vi16){8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7});
    v += __builtin_shuffle(v, (lgk_vi16){4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3});
    v += __builtin_shuffle(v, (lgk_vi16){2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1});
    v += __builtin_shuffle(v, (lgk_vi16){1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0});
    return v[0];
}

ROW_INLINE lgk_v16 v16_max(lgk_v16 a, lgk_v16 b) { return v16_select(a > b, a, b); }

ROW_INLINE float v16_hmax(lgk_v16 v)
{
    v = v16_max(v, __builtin_shuffle(v, (lgk_vi16){8, 9, 10, 11, 12, 13, 14, 15,
                                                   0, 1, 2, 3, 4, 5, 6, 7}));
    v = v16_max(v, __builtin_shuffle(v, (lgk_vi16){4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7,
                                                   0, 1, 2, 3}));
    v = v16_max(v, __builtin_shuffle(v, (lgk_vi16){2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1,
                                                   2, 3, 0, 1}));
    v = v16_max(v, __builtin_shuffle(v, (lgk_vi16){1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
                                                   1, 0, 1, 0}));
    return v[0];
}

/* lgk_expf on 16 lanes (the same steps and constants, so the same results). */
ROW_INLINE lgk_v16 v16_exp(lgk_v16 x)
{
    const float magic = 12582912.0f;
    const lgk_v16 hi = (lgk_v16){0} + 89.0f, lo = (lgk_v16){0} - 104.0f;
    x = v16_select(x > 89.0f, hi, x);
    x = v16_select(x < -104.0f, lo, x);
    lgk_v16 t = x * 1.44269504088896341f + magic;
    lgk_v16 n = t - magic;
    lgk_v16 r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    lgk_v16 p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    lgk_vu16 ni = (lgk_vu16)t - lgk_f2u(magic);
    lgk_vu16 n1 = (lgk_vu16)((lgk_vi16)ni >> 1);
    lgk_vu16 n2 = ni - n1;
    return p * (lgk_v16)((n1 + 127u) << 23) * (lgk_v16)((n2 + 127u) << 23);
}

ROW_INLINE void row_moments_block(const float *x, int64_t n, float c, float *sum,
                                         float *sq)
{
    lgk_v16 acc[MOMENT_WAYS] = {{0.0f}}, acc2[MOMENT_WAYS] = {{0.0f}};
    int64_t i = 0;
    for (; i + 16 * MOMENT_WAYS <= n; i += 16 * MOMENT_WAYS)
        for (int w = 0; w < MOMENT_WAYS; ++w) {
            lgk_v16 d;
            memcpy(&d, x + i + 16 * w, sizeof d); /* unaligned load */
            d -= c;
            acc[w] += d;
            acc2[w] += d * d;
        }
    for (; i + 16 <= n; i += 16) { /* short rows (32, 48 floats): one way at a time */
        lgk_v16 d;
        memcpy(&d, x + i, sizeof d);
        d -= c;
        acc[0] += d;
        acc2[0] += d * d;
    }
    /* Fold the ways, then the lanes pairwise: a chain of 64 scalar adds would cost
     * more than the whole of a short row. */
    for (int w = 1; w < MOMENT_WAYS; ++w) {
        acc[0] += acc[w];
        acc2[0] += acc2[w];
    }
    float a[16], a2[16];
    memcpy(a, &acc[0], sizeof a);
    memcpy(a2, &acc2[0], sizeof a2);
    for (int half = 8; half >= 1; half /= 2)
        for (int j = 0; j < half; ++j) {
            a[j] += a[j + half];
            a2[j] += a2[j + half];
        }
    float s = a[0], s2 = a2[0];
    for (; i < n; ++i) {
        float d = x[i] - c;
        s += d;
        s2 += d * d;
    }
    *sum = s;
    *sq = s2;
}

/* Sums of d and d^2 with d = x - c over a row, in float blocks added in double. */
ROW_INLINE void row_dev_sums(const float *x, int64_t n, float c, double *sum, double *sq)
{
    double s = 0.0, s2 = 0.0;
    for (int64_t i = 0; i < n; i += SUM_BLOCK) {
        float bs, bs2;
        row_moments_block(x + i, LGK_MIN((int64_t)SUM_BLOCK, n - i), c, &bs, &bs2);
        s += bs;
        s2 += bs2;
    }
    *sum = s;
    *sq = s2;
}

/* Mean (as shift + offset) and population variance (in double, see needs_wide) of a
 * row in two reads (the second from L1). The first finds the mean to about float
 * precision, shifted by the row's first element so that a large mean does not swamp the
 * sum; the second sums d and d^2 about that mean, where sum(d^2)/n - (sum(d)/n)^2 no
 * longer cancels. One read shifted by the first element left the float sum of d^2
 * carrying the square of that element's distance from the mean: ~4 ulp of mean error
 * per output on 768-wide rows, against ~1 for this. */
ROW_INLINE double row_mean_var(const float *x, int64_t n, float *shift, float *offset)
{
    double s, s2;
    row_dev_sums(x, n, x[0], &s, &s2);
    const float c = (float)((double)x[0] + s / (double)n);
    row_dev_sums(x, n, c, &s, &s2);
    double m = s / (double)n;
    double v = s2 / (double)n - m * m;
    double mean = (double)c + m;
    /* the float nearest the mean, and what it misses: x - shift is exact near the mean */
    *shift = (float)mean;
    *offset = (float)(mean - (double)*shift);
    return v < 0.0 ? 0.0 : v; /* rounding may go below 0; NaN (overflow) stays */
}

/* The float statistics hold for rows whose squared deviations stay in float range.
 * Beyond |x - mean| ~ 1.8e19 the squares overflow (the variance is inf or NaN); below
 * ~1e-19 they lose bits to underflow, which matters only when epsilon does not
 * dominate. Given var + epsilon in float, such rows are rare and go through
 * row_norm_wide. */
static int needs_wide(float var_eps)
{
    return __builtin_expect(!(var_eps >= 1e-30f && var_eps <= FLT_MAX), 0);
}

/* y = (x - mean) / sqrt(mean((x - mean)^2) + epsilon) * gamma + beta, everything in
 * double (two passes; mean = 0 for rms_norm): double holds the square of any float
 * difference, so no input can overflow or underflow the statistics. */
__attribute__((noinline, cold)) static void row_norm_wide(const float *x, int64_t n,
                                                           int centered, const float *gamma,
                                                           const float *beta, float epsilon,
                                                           float *y)
{
    double mean = 0.0, ss = 0.0;
    if (centered) {
        for (int64_t i = 0; i < n; ++i)
            mean += x[i];
        mean /= (double)n;
    }
    for (int64_t i = 0; i < n; ++i)
        ss += ((double)x[i] - mean) * ((double)x[i] - mean);
    double rstd = 1.0 / sqrt(ss / (double)n + (double)epsilon);
    for (int64_t i = 0; i < n; ++i) {
        double v = ((double)x[i] - mean) * rstd;
        v = gamma != NULL ? v * gamma[i] : v;
        y[i] = (float)(beta != NULL ? v + beta[i] : v);
    }
}

/* y = exp(x - shift), returning the sum of y (y may equal x): 16 lanes at a time in
 * vector extensions (GCC left the same loop over a lanes array partly scalar). */
ROW_INLINE float row_exp_shifted(const float *x, int64_t n, float shift, float *y)
{
    lgk_v16 acc = {0.0f};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        lgk_v16 v;
        memcpy(&v, x + i, sizeof v); /* unaligned load */
        v = v16_exp(v - shift);
        memcpy(y + i, &v, sizeof v);
        acc += v;
    }
    float s = v16_hsum(acc);
    for (; i < n; ++i) {
        y[i] = lgk_expf(x[i] - shift);
        s += y[i];
    }
    return s;
}

/* y = (x - shift) * scale, optionally times gamma and plus beta (elementwise).
 * Subtracting before scaling keeps x - mean exact-ish when |mean| >> std. */
ROW_INLINE void row_affine(const float *x, int64_t n, float shift, float shift_lo, float scale,
                           const float *gamma, const float *beta, float *y)
{
    /* (x - shift) - shift_lo: a shift split in two keeps the mean's low bits, which a
     * single float loses when the mean is large compared with the spread. */
    if (gamma != NULL && beta != NULL) {
        for (int64_t i = 0; i < n; ++i)
            y[i] = ((x[i] - shift) - shift_lo) * scale * gamma[i] + beta[i];
    } else if (gamma != NULL) {
        for (int64_t i = 0; i < n; ++i)
            y[i] = ((x[i] - shift) - shift_lo) * scale * gamma[i];
    } else if (beta != NULL) {
        for (int64_t i = 0; i < n; ++i)
            y[i] = ((x[i] - shift) - shift_lo) * scale + beta[i];
    } else {
        for (int64_t i = 0; i < n; ++i)
            y[i] = ((x[i] - shift) - shift_lo) * scale;
    }
}

/* ---- softmax ---------------------------------------------------------------------- */

/* The row's max for the softmax shift, in LANES lanes (maxps). A NaN may be skipped
 * here: it makes the sum of exps NaN, so the whole row comes out NaN all the same, as
 * it does with a NaN shift. n >= 1. */
ROW_INLINE float softmax_shift(const float *x, int64_t n)
{
    lgk_v16 acc = (lgk_v16){0} + x[0];
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        lgk_v16 v;
        memcpy(&v, x + i, sizeof v); /* unaligned load */
        acc = v16_max(v, acc);
    }
    float m = v16_hmax(acc);
    for (; i < n; ++i)
        m = x[i] > m ? x[i] : m;
    return m;
}

ROW_INLINE void softmax_row(const float *x, int64_t n, float *y, int log_domain)
{
    float m = softmax_shift(x, n);
    if (log_domain) {
        /* log_softmax = x - m - log(sum exp(x - m)). The exps go to a stack
         * scratch, not y, because y may alias x. */
        float scratch[COL_TILE];
        double s = 0.0;
        for (int64_t i = 0; i < n; i += COL_TILE)
            s += row_exp_shifted(x + i, LGK_MIN((int64_t)COL_TILE, n - i), m, scratch);
        /* (x - m) - lse, not x - (m + lse): m + lse would round at ulp(m). */
        row_affine(x, n, m, 0.0f, 1.0f, NULL, NULL, y);
        row_affine(y, n, lgk_logf((float)s), 0.0f, 1.0f, NULL, NULL, y);
    } else {
        float s = row_exp_shifted(x, n, m, y);
        row_affine(y, n, 0.0f, 0.0f, 1.0f / s, NULL, NULL, y);
    }
}

/* Softmax down `w` columns (w <= COL_TILE) of an n x inner block. */
LGK_CLONES static void softmax_cols(const float *x, int64_t n, int64_t inner, int64_t w,
                                    float *y, int log_domain)
{
    float m[COL_TILE], s[COL_TILE];
    for (int64_t j = 0; j < w; ++j) {
        m[j] = x[j];
        s[j] = 0.0f;
    }
    for (int64_t r = 1; r < n; ++r)
        for (int64_t j = 0; j < w; ++j)
            m[j] = lgk_maxf(m[j], x[r * inner + j]);
    for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < w; ++j) {
            float e = lgk_expf(x[r * inner + j] - m[j]);
            s[j] += e;
            if (!log_domain)
                y[r * inner + j] = e;
        }
    for (int64_t j = 0; j < w; ++j)
        s[j] = log_domain ? lgk_logf(s[j]) : 1.0f / s[j];
    for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < w; ++j)
            y[r * inner + j] = log_domain ? (x[r * inner + j] - m[j]) - s[j] : y[r * inner + j] * s[j];
}

/* Softmax along each of `rows` contiguous rows of n >= 1. */
ROW_INLINE lgk_v16 v16_load(const float *p)
{
    lgk_v16 v;
    memcpy(&v, p, sizeof v); /* unaligned */
    return v;
}

/* softmax_row (not log) of two rows at once, with the same operations in the same
 * order, so a row's result does not depend on its partner. The passes over one short
 * row are a chain of dependent reductions (max, exps and their sum, the scale) whose
 * latencies a lone row mostly waits out; two interleaved rows fill those waits. */
ROW_INLINE void softmax_row_pair(const float *x0, const float *x1, int64_t n, float *y0,
                                 float *y1)
{
    lgk_v16 m0 = (lgk_v16){0} + x0[0], m1 = (lgk_v16){0} + x1[0];
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = v16_max(v16_load(x0 + i), m0);
        m1 = v16_max(v16_load(x1 + i), m1);
    }
    float a0 = v16_hmax(m0), a1 = v16_hmax(m1);
    for (; i < n; ++i) {
        a0 = x0[i] > a0 ? x0[i] : a0;
        a1 = x1[i] > a1 ? x1[i] : a1;
    }
    lgk_v16 s0 = {0.0f}, s1 = {0.0f};
    for (i = 0; i + 16 <= n; i += 16) {
        /* The next pair's rows (x0 + 2n .. x0 + 4n, contiguous in softmax_rows) come in
         * while the exps compute: its max pass then finds them in cache (the hardware
         * prefetcher stops at each 4 KiB page of a row read once). */
        __builtin_prefetch(x0 + 2 * n + 2 * i);
        __builtin_prefetch(x0 + 2 * n + 2 * i + 16);
        lgk_v16 e0 = v16_exp(v16_load(x0 + i) - a0), e1 = v16_exp(v16_load(x1 + i) - a1);
        memcpy(y0 + i, &e0, sizeof e0);
        memcpy(y1 + i, &e1, sizeof e1);
        s0 += e0;
        s1 += e1;
    }
    float t0 = v16_hsum(s0), t1 = v16_hsum(s1);
    for (int64_t k = i; k < n; ++k) {
        y0[k] = lgk_expf(x0[k] - a0);
        t0 += y0[k];
        y1[k] = lgk_expf(x1[k] - a1);
        t1 += y1[k];
    }
    float r0 = 1.0f / t0, r1 = 1.0f / t1;
    for (i = 0; i + 16 <= n; i += 16) {
        lgk_v16 v0 = v16_load(y0 + i) * r0, v1 = v16_load(y1 + i) * r1;
        memcpy(y0 + i, &v0, sizeof v0);
        memcpy(y1 + i, &v1, sizeof v1);
    }
    for (; i < n; ++i) {
        y0[i] *= r0;
        y1[i] *= r1;
    }
}

LGK_CLONES static void softmax_rows(int64_t rows, int64_t n, const float *x, float *y,
                                    int log_domain)
{
    int64_t r = 0;
    for (; !log_domain && r + 2 <= rows; r += 2)
        softmax_row_pair(x + r * n, x + (r + 1) * n, n, y + r * n, y + (r + 1) * n);
    for (; r < rows; ++r)
        softmax_row(x + r * n, n, y + r * n, log_domain);
}

void lgk_softmax_rows_inplace(int64_t rows, int64_t n, float *x, int64_t ld)
{
    if (lgk_softmax_rows_wide(rows, n, x, ld, x, ld))
        return;
    if (ld == n) {
        softmax_rows(rows, n, x, x, 0);
        return;
    }
    for (int64_t r = 0; r < rows; ++r) /* a row's result does not depend on its partner */
        softmax_rows(1, n, x + r * ld, x + r * ld, 0);
}

static int check_oni(int64_t outer, int64_t n, int64_t inner, const float *x, const float *y)
{
    int64_t count;
    const int64_t dims[3] = {outer, n, inner};
    LGK_TRY(lgk_checked_count(3, dims, &count));
    LGK_CHECK(x != NULL && y != NULL, LGK_ERR_NULL);
    return LGK_OK;
}

typedef struct {
    const float *x;
    float *y;
    int64_t n, inner, tiles; /* tiles: COL_TILE-wide column tiles per outer index */
    int log_domain;
} softmax_task;

/* Rows [begin, end) of the inner == 1 case: a row's result does not depend on which
 * rows share its call (a pair's rows compute as lone rows do). */
static int softmax_row_range(void *ctx, int64_t begin, int64_t end)
{
    const softmax_task *t = ctx;
    const float *x = t->x + begin * t->n;
    if (!t->log_domain && lgk_softmax_rows_wide(end - begin, t->n, x, t->n, t->y + begin * t->n,
                                                t->n))
        return LGK_OK;
    softmax_rows(end - begin, t->n, x, t->y + begin * t->n, t->log_domain);
    return LGK_OK;
}

/* Column tiles [begin, end) of the inner > 1 case, numbered outer-major. */
static int softmax_tile_range(void *ctx, int64_t begin, int64_t end)
{
    const softmax_task *t = ctx;
    for (int64_t u = begin; u < end; ++u) {
        int64_t o = u / t->tiles, j = u % t->tiles * COL_TILE;
        int64_t at = o * t->n * t->inner + j;
        softmax_cols(t->x + at, t->n, t->inner, LGK_MIN((int64_t)COL_TILE, t->inner - j),
                     t->y + at, t->log_domain);
    }
    return LGK_OK;
}

static int softmax_impl(int64_t outer, int64_t n, int64_t inner, const float *x, float *y,
                        int log_domain, int nthreads)
{
    LGK_TRY(check_oni(outer, n, inner, x, y));
    if (outer == 0 || n == 0 || inner == 0)
        return LGK_OK;
    unsigned mode = lgk_flush_subnormals(); /* masked positions: exp(-100) and below */
    softmax_task t = {x, y, n, inner, (inner + COL_TILE - 1) / COL_TILE, log_domain};
    int status;
    if (inner == 1) /* whole row pairs per slice */
        status = lgk_parallel_for(nthreads, outer,
                                  (LGK_STREAM_MIN_PER_THREAD / n + 2) & ~(int64_t)1,
                                  softmax_row_range, &t);
    else
        status = lgk_parallel_for(nthreads, outer * t.tiles,
                                  LGK_STREAM_MIN_PER_THREAD / (n * LGK_MIN(inner, COL_TILE)) + 1,
                                  softmax_tile_range, &t);
    lgk_restore_fp_mode(mode);
    return status;
}

int lgk_softmax(int64_t outer, int64_t n, int64_t inner, const float *x, float *y, int nthreads)
{
    return softmax_impl(outer, n, inner, x, y, 0, nthreads);
}

int lgk_log_softmax(int64_t outer, int64_t n, int64_t inner, const float *x, float *y,
                    int nthreads)
{
    return softmax_impl(outer, n, inner, x, y, 1, nthreads);
}

/* ---- layer / rms norm ---------------------------------------------------------------- */

LGK_CLONES static void layer_norm_rows(int64_t rows, int64_t n, const float *x,
                                       const float *gamma, const float *beta, float epsilon,
                                       float *y)
{
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * n;
        float shift, offset;
        double var = row_mean_var(xr, n, &shift, &offset);
        float var_eps = (float)var + epsilon;
        if (needs_wide(var_eps)) {
            row_norm_wide(xr, n, 1, gamma, beta, epsilon, y + r * n);
            continue;
        }
        float rstd = (float)(1.0 / sqrt(var + (double)epsilon)); /* one rounding */
        row_affine(xr, n, shift, offset, rstd, gamma, beta, y + r * n);
    }
}

typedef struct {
    const float *x, *gamma, *beta;
    float *y;
    int64_t n;
    float epsilon;
} norm_task;

/* Rows [begin, end) of a layer norm; a row's result does not depend on its slice. */
static int layer_norm_range(void *ctx, int64_t begin, int64_t end)
{
    const norm_task *t = ctx;
    layer_norm_rows(end - begin, t->n, t->x + begin * t->n, t->gamma, t->beta, t->epsilon,
                    t->y + begin * t->n);
    return LGK_OK;
}

/* The rows of one thread's slice: at least LGK_STREAM_MIN_PER_THREAD floats. */
static int64_t norm_row_grain(int64_t n) { return LGK_STREAM_MIN_PER_THREAD / n + 1; }

int lgk_layer_norm(int64_t rows, int64_t n, const float *x, const float *gamma,
                   const float *beta, float epsilon, float *y, int nthreads)
{
    LGK_TRY(check_oni(rows, n, 1, x, y));
    if (n == 0)
        return LGK_OK;
    norm_task t = {x, gamma, beta, y, n, epsilon};
    return lgk_parallel_for(nthreads, rows, norm_row_grain(n), layer_norm_range, &t);
}

LGK_CLONES static void rms_norm_rows(int64_t rows, int64_t n, const float *x,
                                     const float *gamma, float epsilon, float *y)
{
    for (int64_t r = 0; r < rows; ++r) {
        const float *xr = x + r * n;
        float ms_eps = (float)(row_sq_dev(xr, n, 0.0f) / (double)n) + epsilon;
        if (needs_wide(ms_eps)) {
            row_norm_wide(xr, n, 0, gamma, NULL, epsilon, y + r * n);
            continue;
        }
        row_affine(xr, n, 0.0f, 0.0f, 1.0f / sqrtf(ms_eps), gamma, NULL, y + r * n);
    }
}

static int rms_norm_range(void *ctx, int64_t begin, int64_t end)
{
    const norm_task *t = ctx;
    rms_norm_rows(end - begin, t->n, t->x + begin * t->n, t->gamma, t->epsilon,
                  t->y + begin * t->n);
    return LGK_OK;
}

int lgk_rms_norm(int64_t rows, int64_t n, const float *x, const float *gamma, float epsilon,
                 float *y, int nthreads)
{
    LGK_TRY(check_oni(rows, n, 1, x, y));
    if (n == 0)
        return LGK_OK;
    norm_task t = {x, gamma, NULL, y, n, epsilon};
    return lgk_parallel_for(nthreads, rows, norm_row_grain(n), rms_norm_range, &t);
}

/* ---- reductions ------------------------------------------------------------------------- */

/* Column sums are accumulated per chunk of rows and then added to the total,
 * so float error grows with chunk + r / chunk rather than r. */
#define COL_SUM_CHUNK 64

LGK_CLONES static void reduce_cols(int op, const float *x, int64_t r, int64_t inner, int64_t w,
                                   float *y)
{
    float acc[COL_TILE], part[COL_TILE];
    for (int64_t j = 0; j < w; ++j)
        acc[j] = op == LGK_REDUCE_MAX || op == LGK_REDUCE_MIN ? x[j] : 0.0f;
    if (op == LGK_REDUCE_MAX || op == LGK_REDUCE_MIN) {
        int want_max = op == LGK_REDUCE_MAX;
        for (int64_t k = 1; k < r; ++k)
            for (int64_t j = 0; j < w; ++j)
                acc[j] = want_max ? lgk_maxf(acc[j], x[k * inner + j])
                                  : lgk_minf(acc[j], x[k * inner + j]);
    } else {
        for (int64_t k0 = 0; k0 < r; k0 += COL_SUM_CHUNK) {
            int64_t k1 = LGK_MIN(r, k0 + COL_SUM_CHUNK);
            for (int64_t j = 0; j < w; ++j)
                part[j] = 0.0f;
            for (int64_t k = k0; k < k1; ++k)
                for (int64_t j = 0; j < w; ++j)
                    part[j] += x[k * inner + j];
            for (int64_t j = 0; j < w; ++j)
                acc[j] += part[j];
        }
    }
    float scale = op == LGK_REDUCE_MEAN ? 1.0f / (float)r : 1.0f;
    for (int64_t j = 0; j < w; ++j)
        y[j] = acc[j] * scale;
}

/* NaN-propagating max (want_max) or min of n >= 1 floats, run as a column
 * reduction over a (n / ROW_W, ROW_W) view plus a scalar tail: GCC vectorizes
 * that loop, but not the same NaN-aware select over a small lanes array. */
#define ROW_W 256

static float row_extreme(const float *x, int64_t n, int want_max)
{
    float part[ROW_W];
    int64_t rows = n / ROW_W;
    float r = x[0];
    if (rows > 0) {
        reduce_cols(want_max ? LGK_REDUCE_MAX : LGK_REDUCE_MIN, x, rows, ROW_W, ROW_W, part);
        for (int j = 0; j < ROW_W; ++j)
            r = want_max ? lgk_maxf(r, part[j]) : lgk_minf(r, part[j]);
    }
    for (int64_t i = rows * ROW_W; i < n; ++i)
        r = want_max ? lgk_maxf(r, x[i]) : lgk_minf(r, x[i]);
    return r;
}

static float reduce_row(int op, const float *x, int64_t r)
{
    switch (op) {
    case LGK_REDUCE_MAX: return row_extreme(x, r, 1);
    case LGK_REDUCE_MIN: return row_extreme(x, r, 0);
    case LGK_REDUCE_MEAN: return (float)(row_sum(x, r) / (double)r);
    default: return (float)row_sum(x, r);
    }
}

int lgk_reduce(int op, int64_t outer, int64_t r, int64_t inner, const float *x, float *y)
{
    LGK_CHECK(op >= LGK_REDUCE_SUM && op <= LGK_REDUCE_MIN, LGK_ERR_ARG);
    LGK_TRY(check_oni(outer, r, inner, x, y));
    int64_t out_count;
    const int64_t out_dims[2] = {outer, inner};
    LGK_TRY(lgk_checked_count(2, out_dims, &out_count));
    if (r == 0) { /* numpy: empty sum is 0, empty mean NaN, empty max an error */
        LGK_CHECK(op == LGK_REDUCE_SUM || op == LGK_REDUCE_MEAN || out_count == 0, LGK_ERR_SHAPE);
        for (int64_t i = 0; i < out_count; ++i)
            y[i] = op == LGK_REDUCE_SUM ? 0.0f : NAN;
        return LGK_OK;
    }
    for (int64_t o = 0; o < outer; ++o) {
        const float *xo = x + o * r * inner;
        float *yo = y + o * inner;
        if (inner == 1) {
            yo[0] = reduce_row(op, xo, r);
            continue;
        }
        for (int64_t j = 0; j < inner; j += COL_TILE)
            reduce_cols(op, xo + j, r, inner, LGK_MIN((int64_t)COL_TILE, inner - j), yo + j);
    }
    return LGK_OK;
}
