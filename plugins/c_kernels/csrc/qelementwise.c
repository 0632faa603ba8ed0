/*
 * qelementwise.c - quantized elementwise kernels: qnn.add (com.microsoft QLinearAdd),
 * qnn.quantize and qnn.dequantize (ONNX QuantizeLinear / DequantizeLinear).
 *
 * onnxruntime's MLAS computes QLinearAdd as y = a * ratio_a + (b * ratio_b + fixed), each
 * multiply-add one FMA (a single rounding), rounded to nearest even and saturated. The
 * float32 constants (ratios, `fixed`, and for a broadcast operand `fixed + a * ratio_a`)
 * are computed by the caller: each of their steps is rounded on its own, which this file's
 * -ffp-contract=fast would fuse. Here only fmaf, whose one rounding is what MLAS's
 * vfmadd gives (AVX-512, AVX2 + FMA, or portable C, chosen once from CPUID).
 */
#include <stdatomic.h>

#include "lgk_internal.h"

typedef struct {
    int type;
    int64_t span, a_rs, b_rs; /* row strides of a and b: span, or 0 (one row for all) */
    int64_t total;            /* elements of y: the last row may be shorter than span */
    const void *a, *b;
    float ratio_a, ratio_b;
    const float *addend;
    int64_t addend_len;
    void *y;
} qadd_ctx;

/* Elements of one run of a dense add: 16 KiB of each operand stays in L1. */
#define QADD_CHUNK ((int64_t)16384)

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define LGK_QADD_X86 1
#include <immintrin.h>
#endif

/* One value: the FMAs, then clamped to the type's range before the one rounding to an
 * integer (the bounds are integers, so clamp-then-round equals round-then-saturate, and
 * the conversion stays in range). lrintf rounds as cvtps2dq does, in the current mode. */
static inline int32_t qadd_one(int has_a, float a, float ra, float b, float rb, float add,
                               float lo, float hi)
{
    float v = fmaf(b, rb, add);
    if (has_a)
        v = fmaf(a, ra, v);
    return (int32_t)lrintf(fminf(fmaxf(v, lo), hi));
}

static inline float qadd_load(int type, const uint8_t *p, int64_t j)
{
    return type == LGK_QTYPE_INT8 ? (float)(int8_t)p[j] : (float)p[j];
}

/* Elements [from, n) of one row (a may be NULL). */
static void qadd_row_scalar(int type, int64_t from, int64_t n, const uint8_t *a, float ra,
                            const uint8_t *b, float rb, float add, uint8_t *y)
{
    float lo = type == LGK_QTYPE_UINT8 ? 0.0f : -128.0f;
    float hi = type == LGK_QTYPE_UINT8 ? 255.0f : 127.0f;
    for (int64_t j = from; j < n; ++j) {
        int32_t v = qadd_one(a != NULL, a != NULL ? qadd_load(type, a, j) : 0.0f, ra,
                             qadd_load(type, b, j), rb, add, lo, hi);
        y[j] = (uint8_t)v; /* the int8 value's byte for LGK_QTYPE_INT8 */
    }
}

#ifdef LGK_QADD_X86
__attribute__((target("avx512f,avx512bw,avx512vl")))
static __m512 qadd_load16(int type, const uint8_t *p, __mmask16 k)
{
    __m128i bytes = _mm_maskz_loadu_epi8(k, p);
    return _mm512_cvtepi32_ps(type == LGK_QTYPE_INT8 ? _mm512_cvtepi8_epi32(bytes)
                                                     : _mm512_cvtepu8_epi32(bytes));
}

__attribute__((target("avx512f,avx512bw,avx512vl")))
static void qadd_row_avx512(int type, int64_t n, const uint8_t *a, float ra,
                            const uint8_t *b, float rb, float add, uint8_t *y)
{
    __m512 lo = _mm512_set1_ps(type == LGK_QTYPE_UINT8 ? 0.0f : -128.0f);
    __m512 hi = _mm512_set1_ps(type == LGK_QTYPE_UINT8 ? 255.0f : 127.0f);
    __m512 vra = _mm512_set1_ps(ra), vrb = _mm512_set1_ps(rb), vadd = _mm512_set1_ps(add);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 k = (__mmask16)(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1u);
        __m512 v = _mm512_fmadd_ps(qadd_load16(type, b + j, k), vrb, vadd);
        if (a != NULL)
            v = _mm512_fmadd_ps(qadd_load16(type, a + j, k), vra, v);
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        _mm512_mask_cvtepi32_storeu_epi8(y + j, k, _mm512_cvtps_epi32(v));
    }
}

__attribute__((target("avx2,fma")))
static __m256 qadd_load8(int type, const uint8_t *p)
{
    __m128i bytes = _mm_loadl_epi64((const __m128i *)p);
    return _mm256_cvtepi32_ps(type == LGK_QTYPE_INT8 ? _mm256_cvtepi8_epi32(bytes)
                                                     : _mm256_cvtepu8_epi32(bytes));
}

__attribute__((target("avx2,fma")))
static void qadd_row_avx2(int type, int64_t n, const uint8_t *a, float ra, const uint8_t *b,
                          float rb, float add, uint8_t *y)
{
    __m256 lo = _mm256_set1_ps(type == LGK_QTYPE_UINT8 ? 0.0f : -128.0f);
    __m256 hi = _mm256_set1_ps(type == LGK_QTYPE_UINT8 ? 255.0f : 127.0f);
    __m256 vra = _mm256_set1_ps(ra), vrb = _mm256_set1_ps(rb), vadd = _mm256_set1_ps(add);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_fmadd_ps(qadd_load8(type, b + j), vrb, vadd);
        if (a != NULL)
            v = _mm256_fmadd_ps(qadd_load8(type, a + j), vra, v);
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        __m256i w = _mm256_cvtps_epi32(v); /* in the byte range: packing keeps it */
        __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storel_epi64((__m128i *)(y + j),
                         type == LGK_QTYPE_UINT8 ? _mm_packus_epi16(h, h) : _mm_packs_epi16(h, h));
    }
    qadd_row_scalar(type, j, n, a, ra, b, rb, add, y);
}
#endif

/* 2: AVX-512, 1: AVX2 + FMA, 0: portable; chosen once (or forced by the test hook) */
static _Atomic int qadd_selected = -1;

static int qadd_cpu_isa(void)
{
#ifdef LGK_QADD_X86
    if (lgk_cpu_avx512bw())
        return 2;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return 1;
#endif
    return 0;
}

static int qadd_isa(void)
{
    int v = qadd_selected;
    if (v < 0)
        qadd_selected = v = qadd_cpu_isa();
    return v;
}

/* Test hook: run the paths up to `isa` (-1: the CPU's best again); LGK_ERR_ARG past what
 * the CPU has. Not thread-safe. */
int lgk_qadd_force_isa(int isa);
int lgk_qadd_force_isa(int isa)
{
    LGK_CHECK(isa >= -1 && isa <= qadd_cpu_isa(), LGK_ERR_ARG);
    qadd_selected = isa;
    return LGK_OK;
}

static int qadd_rows(void *ctx, int64_t begin, int64_t end)
{
    const qadd_ctx *c = ctx;
    int isa = qadd_isa();
    for (int64_t r = begin; r < end; ++r) {
        float add = c->addend[c->addend_len == 1 ? 0 : r];
        int64_t len = LGK_MIN(c->span, c->total - r * c->span);
        const uint8_t *a = c->a == NULL ? NULL : (const uint8_t *)c->a + r * c->a_rs;
        const uint8_t *b = (const uint8_t *)c->b + r * c->b_rs;
        uint8_t *y = (uint8_t *)c->y + r * c->span;
#ifdef LGK_QADD_X86
        if (isa == 2) {
            qadd_row_avx512(c->type, len, a, c->ratio_a, b, c->ratio_b, add, y);
            continue;
        }
        if (isa == 1) {
            qadd_row_avx2(c->type, len, a, c->ratio_a, b, c->ratio_b, add, y);
            continue;
        }
#endif
        (void)isa;
        qadd_row_scalar(c->type, 0, len, a, c->ratio_a, b, c->ratio_b, add, y);
    }
    return LGK_OK;
}

/* The rows an operand of row stride rs (0 or span) spans: 1 or rows. */
static int64_t qadd_extent(int64_t rows, int64_t span, int64_t rs)
{
    return rs == 0 ? LGK_MIN(rows, (int64_t)1) * span : rows * span;
}

int lgk_qadd_strided(int type, int64_t rows, int64_t span, const void *a, int64_t a_len,
                     int64_t a_rs, float ratio_a, const void *b, int64_t b_len, int64_t b_rs,
                     float ratio_b, const float *addend, int64_t addend_len, void *y,
                     int64_t y_len, int nthreads)
{
    LGK_CHECK(type == LGK_QTYPE_UINT8 || type == LGK_QTYPE_INT8, LGK_ERR_ARG);
    LGK_CHECK(rows >= 0 && span >= 0, LGK_ERR_SHAPE);
    LGK_CHECK((a_rs == 0 || a_rs == span) && (b_rs == 0 || b_rs == span), LGK_ERR_SHAPE);
    int64_t n;
    const int64_t dims[2] = {rows, span};
    LGK_TRY(lgk_checked_count(2, dims, &n));
    LGK_CHECK(isfinite(ratio_a) && isfinite(ratio_b), LGK_ERR_ARG);
    LGK_CHECK(addend != NULL, LGK_ERR_NULL);
    LGK_CHECK(addend_len == 1 || addend_len == rows, LGK_ERR_SHAPE);
    for (int64_t i = 0; i < addend_len; ++i)
        LGK_CHECK(isfinite(addend[i]), LGK_ERR_ARG);
    if (a != NULL)
        LGK_TRY(lgk_check_buffer(a, a_len, qadd_extent(rows, span, a_rs)));
    LGK_TRY(lgk_check_buffer(b, b_len, qadd_extent(rows, span, b_rs)));
    LGK_TRY(lgk_check_buffer(y, y_len, n));
    if (n == 0)
        return LGK_OK;
    /* Dense operands under one addend are one run of n elements, cut into chunks: a
     * conv's NCHW output has rows of 7-56 values, and each row's call, masked tail and
     * broadcasts cost more than its vectors (ResNet-50's 2048x7x7 add: 3.3 ns an element). */
    if (addend_len == 1 && (a == NULL || a_rs == span) && b_rs == span && span < QADD_CHUNK) {
        span = QADD_CHUNK;
        rows = (n + span - 1) / span;
        a_rs = a == NULL ? 0 : span;
        b_rs = span;
    }
    qadd_ctx c = {type, span, a_rs, b_rs, n, a, b, ratio_a, ratio_b, addend, addend_len, y};
    /* below 64 Ki elements a second thread costs more */
    int threads = n < 65536 ? 1 : nthreads;
    int64_t grain = LGK_MAX((int64_t)1, 16384 / LGK_MAX(span, (int64_t)1));
    return lgk_parallel_for(threads, rows, grain, qadd_rows, &c);
}

int lgk_qadd(int type, int64_t rows, int64_t span, const void *a, int64_t a_len,
             float ratio_a, const void *b, int64_t b_len, float ratio_b, const float *addend,
             int64_t addend_len, void *y, int64_t y_len, int nthreads)
{
    return lgk_qadd_strided(type, rows, span, a, a_len, span, ratio_a, b, b_len, span, ratio_b,
                            addend, addend_len, y, y_len, nthreads);
}

/* ---- quantize / dequantize ----------------------------------------------------------- */

typedef struct {
    int type;
    int64_t channels, inner;
    const void *x;
    const float *scale;
    const int32_t *zp;
    int64_t params_len;
    void *y;
} qconvert_ctx;

/* QuantizeLinear as MLAS computes it: x / scale (a true division), clamped to the
 * range shifted by the zero point (NaN to its low end, as maxps gives), rounded to even,
 * plus the zero point. Equal to saturate(round(x / scale) + zp): the bounds are integers. */
static void quantize_row_scalar(int type, int64_t from, int64_t n, const float *x, float s,
                                int32_t zp, uint8_t *y)
{
    float lo = (type == LGK_QTYPE_UINT8 ? 0.0f : -128.0f) - (float)zp;
    float hi = (type == LGK_QTYPE_UINT8 ? 255.0f : 127.0f) - (float)zp;
    for (int64_t j = from; j < n; ++j) {
        float v = x[j] / s;
        v = v > lo ? v : lo;
        v = v < hi ? v : hi;
        y[j] = (uint8_t)((int32_t)lrintf(v) + zp);
    }
}

static void dequantize_row_scalar(int type, int64_t from, int64_t n, const uint8_t *x,
                                  float s, int32_t zp, float *y)
{
    for (int64_t j = from; j < n; ++j)
        y[j] = (float)((type == LGK_QTYPE_INT8 ? (int32_t)(int8_t)x[j] : (int32_t)x[j]) - zp) * s;
}

#ifdef LGK_QADD_X86
__attribute__((target("avx512f,avx512bw,avx512vl")))
static void quantize_row_avx512(int type, int64_t n, const float *x, float s, int32_t zp,
                                uint8_t *y)
{
    __m512 lo = _mm512_set1_ps((type == LGK_QTYPE_UINT8 ? 0.0f : -128.0f) - (float)zp);
    __m512 hi = _mm512_set1_ps((type == LGK_QTYPE_UINT8 ? 255.0f : 127.0f) - (float)zp);
    __m512 vs = _mm512_set1_ps(s);
    __m512i vz = _mm512_set1_epi32(zp);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 k = (__mmask16)(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1u);
        __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(k, x + j), vs);
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi); /* maxps: NaN gives lo */
        _mm512_mask_cvtepi32_storeu_epi8(y + j, k, _mm512_add_epi32(_mm512_cvtps_epi32(v), vz));
    }
}

__attribute__((target("avx512f,avx512bw,avx512vl")))
static void dequantize_row_avx512(int type, int64_t n, const uint8_t *x, float s, int32_t zp,
                                  float *y)
{
    __m512 vs = _mm512_set1_ps(s);
    __m512i vz = _mm512_set1_epi32(zp);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 k = (__mmask16)(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1u);
        __m128i bytes = _mm_maskz_loadu_epi8(k, x + j);
        __m512i w = type == LGK_QTYPE_INT8 ? _mm512_cvtepi8_epi32(bytes)
                                           : _mm512_cvtepu8_epi32(bytes);
        __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(w, vz));
        _mm512_mask_storeu_ps(y + j, k, _mm512_mul_ps(v, vs));
    }
}

__attribute__((target("avx2,fma")))
static void quantize_row_avx2(int type, int64_t n, const float *x, float s, int32_t zp,
                              uint8_t *y)
{
    __m256 lo = _mm256_set1_ps((type == LGK_QTYPE_UINT8 ? 0.0f : -128.0f) - (float)zp);
    __m256 hi = _mm256_set1_ps((type == LGK_QTYPE_UINT8 ? 255.0f : 127.0f) - (float)zp);
    __m256 vs = _mm256_set1_ps(s);
    __m256i vz = _mm256_set1_epi32(zp);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_div_ps(_mm256_loadu_ps(x + j), vs);
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        __m256i w = _mm256_add_epi32(_mm256_cvtps_epi32(v), vz); /* in the byte range */
        __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storel_epi64((__m128i *)(y + j),
                         type == LGK_QTYPE_UINT8 ? _mm_packus_epi16(h, h) : _mm_packs_epi16(h, h));
    }
    quantize_row_scalar(type, j, n, x, s, zp, y);
}

__attribute__((target("avx2,fma")))
static void dequantize_row_avx2(int type, int64_t n, const uint8_t *x, float s, int32_t zp,
                                float *y)
{
    __m256 vs = _mm256_set1_ps(s);
    __m256i vz = _mm256_set1_epi32(zp);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m128i bytes = _mm_loadl_epi64((const __m128i *)(x + j));
        __m256i w = type == LGK_QTYPE_INT8 ? _mm256_cvtepi8_epi32(bytes)
                                           : _mm256_cvtepu8_epi32(bytes);
        __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(w, vz));
        _mm256_storeu_ps(y + j, _mm256_mul_ps(v, vs));
    }
    dequantize_row_scalar(type, j, n, x, s, zp, y);
}
#endif

static int quantize_rows(void *ctx, int64_t begin, int64_t end)
{
    const qconvert_ctx *c = ctx;
    int isa = qadd_isa();
    for (int64_t r = begin; r < end; ++r) {
        int64_t at = c->params_len == 1 ? 0 : r % c->channels;
        const float *x = (const float *)c->x + r * c->inner;
        uint8_t *y = (uint8_t *)c->y + r * c->inner;
#ifdef LGK_QADD_X86
        if (isa == 2) {
            quantize_row_avx512(c->type, c->inner, x, c->scale[at], c->zp[at], y);
            continue;
        }
        if (isa == 1) {
            quantize_row_avx2(c->type, c->inner, x, c->scale[at], c->zp[at], y);
            continue;
        }
#endif
        (void)isa;
        quantize_row_scalar(c->type, 0, c->inner, x, c->scale[at], c->zp[at], y);
    }
    return LGK_OK;
}

static int dequantize_rows(void *ctx, int64_t begin, int64_t end)
{
    const qconvert_ctx *c = ctx;
    int isa = qadd_isa();
    for (int64_t r = begin; r < end; ++r) {
        int64_t at = c->params_len == 1 ? 0 : r % c->channels;
        const uint8_t *x = (const uint8_t *)c->x + r * c->inner;
        float *y = (float *)c->y + r * c->inner;
#ifdef LGK_QADD_X86
        if (isa == 2) {
            dequantize_row_avx512(c->type, c->inner, x, c->scale[at], c->zp[at], y);
            continue;
        }
        if (isa == 1) {
            dequantize_row_avx2(c->type, c->inner, x, c->scale[at], c->zp[at], y);
            continue;
        }
#endif
        (void)isa;
        dequantize_row_scalar(c->type, 0, c->inner, x, c->scale[at], c->zp[at], y);
    }
    return LGK_OK;
}

/* The checks both share: sizes, the parameters' count and the zero points' range. */
static int qconvert_check(int type, int64_t outer, int64_t channels, int64_t inner,
                          const void *x, int64_t x_len, const float *scale,
                          const int32_t *zero_point, int64_t params_len, const void *y,
                          int64_t y_len, int64_t *n)
{
    LGK_CHECK(type == LGK_QTYPE_UINT8 || type == LGK_QTYPE_INT8, LGK_ERR_ARG);
    LGK_CHECK(outer >= 0 && channels >= 0 && inner >= 0, LGK_ERR_SHAPE);
    const int64_t dims[3] = {outer, channels, inner};
    LGK_TRY(lgk_checked_count(3, dims, n));
    LGK_CHECK(scale != NULL && zero_point != NULL, LGK_ERR_NULL);
    LGK_CHECK(params_len == 1 || params_len == channels, LGK_ERR_SHAPE);
    int32_t lo = type == LGK_QTYPE_UINT8 ? 0 : -128, hi = type == LGK_QTYPE_UINT8 ? 255 : 127;
    for (int64_t i = 0; i < params_len; ++i)
        LGK_CHECK(zero_point[i] >= lo && zero_point[i] <= hi, LGK_ERR_ARG);
    LGK_TRY(lgk_check_buffer(x, x_len, *n));
    return lgk_check_buffer(y, y_len, *n);
}

static int qconvert_run(qconvert_ctx *c, int64_t outer, int64_t n, lgk_range_fn fn,
                        int nthreads)
{
    if (n == 0)
        return LGK_OK;
    int64_t rows = outer * c->channels;
    int threads = n < 65536 ? 1 : nthreads;
    int64_t grain = LGK_MAX((int64_t)1, 16384 / LGK_MAX(c->inner, (int64_t)1));
    return lgk_parallel_for(threads, rows, grain, fn, c);
}

int lgk_quantize(int out_type, int64_t outer, int64_t channels, int64_t inner,
                 const float *x, int64_t x_len, const float *scale, const int32_t *zero_point,
                 int64_t params_len, void *y, int64_t y_len, int nthreads)
{
    int64_t n;
    LGK_TRY(qconvert_check(out_type, outer, channels, inner, x, x_len, scale, zero_point,
                           params_len, y, y_len, &n));
    for (int64_t i = 0; i < params_len; ++i) /* x / 0 and x / NaN have no integer */
        LGK_CHECK(isfinite(scale[i]) && scale[i] != 0.0f, LGK_ERR_ARG);
    qconvert_ctx c = {out_type, channels, inner, x, scale, zero_point, params_len, y};
    return qconvert_run(&c, outer, n, quantize_rows, nthreads);
}

int lgk_dequantize(int in_type, int64_t outer, int64_t channels, int64_t inner,
                   const void *x, int64_t x_len, const float *scale,
                   const int32_t *zero_point, int64_t params_len, float *y, int64_t y_len,
                   int nthreads)
{
    int64_t n;
    LGK_TRY(qconvert_check(in_type, outer, channels, inner, x, x_len, scale, zero_point,
                           params_len, y, y_len, &n));
    qconvert_ctx c = {in_type, channels, inner, x, scale, zero_point, params_len, y};
    return qconvert_run(&c, outer, n, dequantize_rows, nthreads);
}

/* ---- float32 to int8 / uint8 casts ---------------------------------------------------
 * The cast op's float-to-integer conversion: truncation toward zero, saturation, NaN to
 * 0. Clamping first to the type's bounds (integers, exact in float32) then truncating
 * equals truncating then saturating. */

static void cast_row_scalar(int type, int64_t from, int64_t n, const float *x, uint8_t *y)
{
    float lo = type == LGK_QTYPE_UINT8 ? 0.0f : -128.0f;
    float hi = type == LGK_QTYPE_UINT8 ? 255.0f : 127.0f;
    for (int64_t j = from; j < n; ++j) {
        float v = x[j];
        v = isnan(v) ? 0.0f : v < lo ? lo : v > hi ? hi : v;
        y[j] = (uint8_t)(int32_t)v; /* the int8 value's byte for LGK_QTYPE_INT8 */
    }
}

#ifdef LGK_QADD_X86
__attribute__((target("avx512f,avx512bw,avx512vl")))
static void cast_row_avx512(int type, int64_t n, const float *x, uint8_t *y)
{
    __m512 lo = _mm512_set1_ps(type == LGK_QTYPE_UINT8 ? 0.0f : -128.0f);
    __m512 hi = _mm512_set1_ps(type == LGK_QTYPE_UINT8 ? 255.0f : 127.0f);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 k = (__mmask16)(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1u);
        __m512 v = _mm512_maskz_loadu_ps(k, x + j);
        __mmask16 number = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
        v = _mm512_maskz_mov_ps(number, _mm512_min_ps(_mm512_max_ps(v, lo), hi));
        _mm512_mask_cvtepi32_storeu_epi8(y + j, k, _mm512_cvttps_epi32(v));
    }
}

__attribute__((target("avx2,fma")))
static void cast_row_avx2(int type, int64_t n, const float *x, uint8_t *y)
{
    __m256 lo = _mm256_set1_ps(type == LGK_QTYPE_UINT8 ? 0.0f : -128.0f);
    __m256 hi = _mm256_set1_ps(type == LGK_QTYPE_UINT8 ? 255.0f : 127.0f);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        __m256 number = _mm256_cmp_ps(v, v, _CMP_ORD_Q);
        v = _mm256_and_ps(number, _mm256_min_ps(_mm256_max_ps(v, lo), hi));
        __m256i w = _mm256_cvttps_epi32(v);
        __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        _mm_storel_epi64((__m128i *)(y + j),
                         type == LGK_QTYPE_UINT8 ? _mm_packus_epi16(h, h) : _mm_packs_epi16(h, h));
    }
    cast_row_scalar(type, j, n, x, y);
}
#endif

static int cast_rows(void *ctx, int64_t begin, int64_t end)
{
    const qconvert_ctx *c = ctx;
    int isa = qadd_isa();
    for (int64_t r = begin; r < end; ++r) {
        const float *x = (const float *)c->x + r * c->inner;
        uint8_t *y = (uint8_t *)c->y + r * c->inner;
#ifdef LGK_QADD_X86
        if (isa == 2) {
            cast_row_avx512(c->type, c->inner, x, y);
            continue;
        }
        if (isa == 1) {
            cast_row_avx2(c->type, c->inner, x, y);
            continue;
        }
#endif
        (void)isa;
        cast_row_scalar(c->type, 0, c->inner, x, y);
    }
    return LGK_OK;
}

int lgk_cast_f32_to_byte(int out_type, int64_t rows, int64_t inner, const float *x,
                         int64_t x_len, void *y, int64_t y_len, int nthreads)
{
    LGK_CHECK(out_type == LGK_QTYPE_UINT8 || out_type == LGK_QTYPE_INT8, LGK_ERR_ARG);
    LGK_CHECK(rows >= 0 && inner >= 0, LGK_ERR_SHAPE);
    int64_t n;
    const int64_t dims[2] = {rows, inner};
    LGK_TRY(lgk_checked_count(2, dims, &n));
    LGK_TRY(lgk_check_buffer(x, x_len, n));
    LGK_TRY(lgk_check_buffer(y, y_len, n));
    qconvert_ctx c = {out_type, 1, inner, x, NULL, NULL, 1, y};
    return qconvert_run(&c, rows, n, cast_rows, nthreads);
}
