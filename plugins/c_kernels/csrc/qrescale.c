/*
 * qrescale.c - quantized kernels whose output stage rescales one value at a time:
 * qnn.multiply (com.microsoft QLinearMul), qnn.softmax (com.microsoft QLinearSoftmax) and
 * qnn.requantize.
 *
 * Each computes what the reference kernels compute, step by step in float32: products
 * and sums of integers exactly, the one float32 product by a multiplier, rounding half to
 * even, the zero point and saturation. The float32 constants (multipliers, the softmax's
 * table) are the caller's, computed as the reference computes them. This file is built
 * with -ffp-contract=fast, so the one product that is followed by an addition (the
 * softmax's `e * step + zero_point`) is stored before a compiler barrier: each is rounded.
 */
#include <math.h>

#include "lgk_internal.h"

/* A compiler barrier: memory written before it is read again after it, so a product
 * stored before it is not contracted with an addition after it into one FMA. */
static inline void lgk_rounding_barrier(float *p)
{
#if defined(__GNUC__) || defined(__clang__)
    __asm__ volatile("" : : "r"(p) : "memory");
#else
    volatile float *v = p;
    *v = *v;
#endif
}

static int qtype_range(int type, float *lo, float *hi)
{
    LGK_CHECK(type == LGK_QTYPE_UINT8 || type == LGK_QTYPE_INT8, LGK_ERR_ARG);
    *lo = type == LGK_QTYPE_UINT8 ? 0.0f : -128.0f;
    *hi = type == LGK_QTYPE_UINT8 ? 255.0f : 127.0f;
    return LGK_OK;
}

/* Elements an operand of `rows` rows of `span` values with strides rs, cs reaches. */
static int64_t qstrided_extent(int64_t rows, int64_t span, int64_t rs, int64_t cs)
{
    return rows == 0 || span == 0 ? 0 : (rows - 1) * rs + (span - 1) * cs + 1;
}

/* ---- qnn.multiply ----------------------------------------------------------------------- */

typedef struct {
    int type;
    int64_t span;
    const uint8_t *a, *b;
    int64_t a_rs, a_cs, b_rs, b_cs;
    int32_t za, zb, zy;
    float mult;
    uint8_t *y;
} qmul_ctx;

/* One row: cs 0 or 1 each (constant after inlining, so each case vectorizes). The clamp
 * comes before the rounding: the bounds are integers, so it equals round-then-saturate. */
static inline __attribute__((always_inline)) void
qmul_span(int is_int8, int64_t n, const uint8_t *a, int64_t acs, int32_t za,
          const uint8_t *b, int64_t bcs, int32_t zb, float m, int32_t zy, uint8_t *y)
{
    float lo = (is_int8 ? -128.0f : 0.0f) - (float)zy, hi = (is_int8 ? 127.0f : 255.0f) - (float)zy;
    for (int64_t j = 0; j < n; ++j) {
        int32_t av = is_int8 ? (int32_t)(int8_t)a[j * acs] : (int32_t)a[j * acs];
        int32_t bv = is_int8 ? (int32_t)(int8_t)b[j * bcs] : (int32_t)b[j * bcs];
        float v = (float)((av - za) * (bv - zb)) * m;
        v = v > lo ? v : lo;
        v = v < hi ? v : hi;
        y[j] = (uint8_t)((int32_t)rintf(v) + zy);
    }
}

LGK_CLONES static void qmul_row(const qmul_ctx *c, const uint8_t *a, const uint8_t *b,
                                uint8_t *y)
{
    int i8 = c->type == LGK_QTYPE_INT8;
    if (c->a_cs && c->b_cs) {
        if (i8)
            qmul_span(1, c->span, a, 1, c->za, b, 1, c->zb, c->mult, c->zy, y);
        else
            qmul_span(0, c->span, a, 1, c->za, b, 1, c->zb, c->mult, c->zy, y);
    } else if (c->a_cs) {
        if (i8)
            qmul_span(1, c->span, a, 1, c->za, b, 0, c->zb, c->mult, c->zy, y);
        else
            qmul_span(0, c->span, a, 1, c->za, b, 0, c->zb, c->mult, c->zy, y);
    } else if (c->b_cs) { /* a one value per row: the product commutes */
        if (i8)
            qmul_span(1, c->span, b, 1, c->zb, a, 0, c->za, c->mult, c->zy, y);
        else
            qmul_span(0, c->span, b, 1, c->zb, a, 0, c->za, c->mult, c->zy, y);
    } else if (i8) {
        qmul_span(1, c->span, a, 0, c->za, b, 0, c->zb, c->mult, c->zy, y);
    } else {
        qmul_span(0, c->span, a, 0, c->za, b, 0, c->zb, c->mult, c->zy, y);
    }
}

static int qmul_rows(void *ctx, int64_t begin, int64_t end)
{
    const qmul_ctx *c = ctx;
    for (int64_t r = begin; r < end; ++r)
        qmul_row(c, c->a + r * c->a_rs, c->b + r * c->b_rs, c->y + r * c->span);
    return LGK_OK;
}

int lgk_qmul(int type, int64_t rows, int64_t span, const void *a, int64_t a_len, int64_t a_rs,
             int64_t a_cs, int32_t a_zero_point, const void *b, int64_t b_len, int64_t b_rs,
             int64_t b_cs, int32_t b_zero_point, float multiplier, int32_t y_zero_point,
             void *y, int64_t y_len, int nthreads)
{
    float lo, hi;
    LGK_TRY(qtype_range(type, &lo, &hi));
    LGK_CHECK(rows >= 0 && span >= 0 && a_rs >= 0 && b_rs >= 0, LGK_ERR_SHAPE);
    LGK_CHECK((a_cs == 0 || a_cs == 1) && (b_cs == 0 || b_cs == 1), LGK_ERR_SHAPE);
    LGK_CHECK(a_rs <= INT64_MAX / LGK_MAX(rows, (int64_t)1)
              && b_rs <= INT64_MAX / LGK_MAX(rows, (int64_t)1), LGK_ERR_SHAPE);
    int64_t n;
    const int64_t dims[2] = {rows, span};
    LGK_TRY(lgk_checked_count(2, dims, &n));
    LGK_CHECK(isfinite(multiplier), LGK_ERR_ARG);
    LGK_CHECK(a_zero_point >= lo && a_zero_point <= hi && b_zero_point >= lo
              && b_zero_point <= hi && y_zero_point >= lo && y_zero_point <= hi, LGK_ERR_ARG);
    LGK_TRY(lgk_check_buffer(a, a_len, qstrided_extent(rows, span, a_rs, a_cs)));
    LGK_TRY(lgk_check_buffer(b, b_len, qstrided_extent(rows, span, b_rs, b_cs)));
    LGK_TRY(lgk_check_buffer(y, y_len, n));
    if (n == 0)
        return LGK_OK;
    qmul_ctx c = {type, span, a, b, a_rs, a_cs, b_rs, b_cs, a_zero_point, b_zero_point,
                  y_zero_point, multiplier, y};
    int threads = n < 65536 ? 1 : nthreads; /* about 1 ns an element, as qnn.add */
    int64_t grain = LGK_MAX((int64_t)1, 16384 / LGK_MAX(span, (int64_t)1));
    return lgk_parallel_for(threads, rows, grain, qmul_rows, &c);
}

/* ---- qnn.softmax ------------------------------------------------------------------------ */

/* numpy's pairwise sum of n floats widened to double (eight partial sums in blocks of up
 * to 128, halves beyond): the reference adds the exponentials with np.sum in float64, and
 * this order gives its sum to the last bit. */
static inline __attribute__((always_inline)) double pairwise_block(const float *x, int64_t n)
{
    if (n < 8) {
        double s = 0.0;
        for (int64_t i = 0; i < n; ++i)
            s += (double)x[i];
        return s;
    }
    double r[8];
    for (int j = 0; j < 8; ++j)
        r[j] = (double)x[j];
    int64_t i = 8;
    for (; i < n - n % 8; i += 8)
        for (int j = 0; j < 8; ++j)
            r[j] += (double)x[i + j];
    double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i)
        s += (double)x[i];
    return s;
}

static double pairwise_sum(const float *x, int64_t n)
{
    if (n <= 128)
        return pairwise_block(x, n);
    int64_t half = n / 2;
    half -= half % 8;
    return pairwise_sum(x, half) + pairwise_sum(x + half, n - half);
}

typedef struct {
    int type;
    int64_t count;
    const uint8_t *x;
    const float *table;
    float quotient, lo, hi;
    int32_t zy;
    uint8_t *y;
} qsoftmax_ctx;

/* One row: x to the exponentials e (the row's sum returned), then e to y. Each loop
 * vectorizes (the rounding to even of rintf included); the barrier keeps e * step and
 * + zy two roundings. */
LGK_CLONES static float qsoftmax_exps(int i8, int64_t n, const uint8_t *restrict x,
                                      const float *restrict table, float *restrict e)
{
    int32_t max = i8 ? -128 : 0;
    for (int64_t j = 0; j < n; ++j) {
        int32_t v = i8 ? (int8_t)x[j] : x[j];
        max = v > max ? v : max;
    }
    for (int64_t j = 0; j < n; ++j) /* 255 + x - max lies in [0, 255] */
        e[j] = table[255 + (i8 ? (int8_t)x[j] : x[j]) - max];
    return (float)(n <= 128 ? pairwise_block(e, n) : pairwise_sum(e, n));
}

LGK_CLONES static void qsoftmax_store(int64_t n, float *e, float step, float zy, float lo,
                                      float hi, uint8_t *y)
{
    for (int64_t j = 0; j < n; ++j)
        e[j] = e[j] * step;
    lgk_rounding_barrier(e);
    for (int64_t j = 0; j < n; ++j) {
        float v = rintf(e[j] + zy);
        v = v == v ? v : 0.0f; /* NaN gives 0, as the reference's cast */
        v = v > lo ? v : lo;
        v = v < hi ? v : hi;
        y[j] = (uint8_t)(int32_t)v;
    }
}

static int qsoftmax_rows(void *ctx, int64_t begin, int64_t end)
{
    const qsoftmax_ctx *c = ctx;
    int64_t n = c->count;
    lgk_scratch s;
    LGK_TRY(lgk_scratch_acquire(n, &s));
    float *e = s.data;
    int i8 = c->type == LGK_QTYPE_INT8;
    for (int64_t r = begin; r < end; ++r) {
        float total = qsoftmax_exps(i8, n, c->x + r * n, c->table, e);
        float step = (1.0f / total) * c->quotient;
        qsoftmax_store(n, e, step, (float)c->zy, c->lo, c->hi, c->y + r * n);
    }
    lgk_scratch_release(&s);
    return LGK_OK;
}

int lgk_qsoftmax(int type, int64_t rows, int64_t count, const void *x, int64_t x_len,
                 const float *table, float quotient, int32_t y_zero_point, void *y,
                 int64_t y_len, int nthreads)
{
    float lo, hi;
    LGK_TRY(qtype_range(type, &lo, &hi));
    LGK_CHECK(rows >= 0 && count >= 0, LGK_ERR_SHAPE);
    int64_t n;
    const int64_t dims[2] = {rows, count};
    LGK_TRY(lgk_checked_count(2, dims, &n));
    LGK_CHECK(count <= INT64_MAX / 16, LGK_ERR_SHAPE);
    LGK_CHECK(table != NULL, LGK_ERR_NULL);
    LGK_CHECK(y_zero_point >= lo && y_zero_point <= hi, LGK_ERR_ARG);
    LGK_TRY(lgk_check_buffer(x, x_len, n));
    LGK_TRY(lgk_check_buffer(y, y_len, n));
    if (n == 0)
        return LGK_OK;
    qsoftmax_ctx c = {type, count, x, table, quotient, lo, hi, y_zero_point, y};
    int threads = n < 65536 ? 1 : nthreads;
    int64_t grain = LGK_MAX((int64_t)1, 16384 / LGK_MAX(count, (int64_t)1));
    return lgk_parallel_for(threads, rows, grain, qsoftmax_rows, &c);
}
