/*
 * lgk_internal.h - helpers shared by the kernel translation units: argument
 * checking, checked size arithmetic, aligned scratch, a tiny parallel-for and
 * branch-free float math that the compiler can vectorize.
 */
#ifndef LGK_INTERNAL_H
#define LGK_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "legato_kernels.h"

/* ---- status plumbing ------------------------------------------------------ */
#define LGK_CHECK(cond, status) \
    do {                        \
        if (!(cond))            \
            return (status);    \
    } while (0)

#define LGK_TRY(expr)            \
    do {                         \
        int lgk_st_ = (expr);    \
        if (lgk_st_ != LGK_OK)   \
            return lgk_st_;      \
    } while (0)

#define LGK_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LGK_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- checked arithmetic ----------------------------------------------------
 * All sizes are int64_t; products must also fit in size_t for byte counts.
 * The result is only written on success. */
static inline int lgk_mul(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
#if defined(__GNUC__) || defined(__clang__)
    if (__builtin_mul_overflow(a, b, &r))
        return LGK_ERR_OVERFLOW;
#else
    if (a != 0 && (b > INT64_MAX / a || b < INT64_MIN / a))
        return LGK_ERR_OVERFLOW;
    r = a * b;
#endif
    *out = r;
    return LGK_OK;
}

static inline int lgk_add(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
#if defined(__GNUC__) || defined(__clang__)
    if (__builtin_add_overflow(a, b, &r))
        return LGK_ERR_OVERFLOW;
#else
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return LGK_ERR_OVERFLOW;
    r = a + b;
#endif
    *out = r;
    return LGK_OK;
}

/* Product of n non-negative dims, also checked to fit a float byte count. */
int lgk_checked_count(int n, const int64_t *dims, int64_t *out);
/* Number of elements a strided view spans (0 if any dim is 0). Dims and
 * strides must be >= 0. */
int lgk_view_extent(int n, const int64_t *dims, const int64_t *strides, int64_t *out);
/* A required buffer: non-NULL and holding at least `need` floats. */
int lgk_check_buffer(const void *p, int64_t len, int64_t need);

/* ---- scratch memory --------------------------------------------------------- */
/* 64-byte aligned (one cache line / one zmm); free with lgk_aligned_free. */
void *lgk_aligned_alloc(int64_t nfloats);
void lgk_aligned_free(void *p);

/* Reusable scratch: acquire takes a pooled block of >= nfloats (64-byte
 * aligned) or allocates one; release returns it to the pool (or frees it).
 * Repeated calls thus skip the mmap + page faults of fresh big allocations. */
typedef struct {
    float *data;
    int64_t cap; /* floats */
} lgk_scratch;

int lgk_scratch_acquire(int64_t nfloats, lgk_scratch *s);
void lgk_scratch_release(lgk_scratch *s);

/* softmax (not log) in place along each of `rows` rows of n >= 1 floats, ld apart, as
 * lgk_softmax computes each row (norms.c): for a GEMM whose epilogue it is. */
void lgk_softmax_rows_inplace(int64_t rows, int64_t n, float *x, int64_t ld);
/* softmax (not log) along `rows` rows of n >= 1 floats, ldx and ldy apart (y may equal
 * x), with AVX-512 (softmax_wide.c): 1 if done, 0 where the CPU lacks it and the
 * portable rows must run. */
int lgk_softmax_rows_wide(int64_t rows, int64_t n, const float *x, int64_t ldx, float *y,
                          int64_t ldy);

/* ---- threads ----------------------------------------------------------------
 * Runs fn(ctx, begin, end) over `nthreads` contiguous slices of [0, n) and
 * returns the first non-zero status. The calling thread runs slice 0, the others
 * run on persistent workers (started once, woken per call; a caller that finds
 * them busy with another call starts threads of its own); slices run under the
 * caller's floating-point mode. If a thread cannot be created its slice also runs
 * on the caller, so the result never depends on thread availability. */
typedef int (*lgk_range_fn)(void *ctx, int64_t begin, int64_t end);
int lgk_parallel_for(int nthreads, int64_t n, int64_t grain, lgk_range_fn fn, void *ctx);

/* Floats of streaming work (elementwise ops, softmax and norm rows) a thread takes at
 * least: below it the hand-off to a pool worker (1-2 us) costs about what its share saves. */
#define LGK_STREAM_MIN_PER_THREAD 16384
/* Clamp a caller's thread request to [1, LGK_MAX_THREADS]. */
int lgk_clamp_threads(int nthreads);

/* ---- CPU features --------------------------------------------------------------
 * Whether the CPU has AVX-512 F, BW and VL (the byte and word moves of the int8
 * kernels), looked up once; 0 off x86. */
int lgk_cpu_avx512bw(void);

/* ---- subnormals ----------------------------------------------------------------
 * Arithmetic on subnormal floats takes microcode assists on x86 (4-12x slower GEMMs and
 * softmaxes, e.g. attention probabilities of masked positions, exp(-100) ~ 4e-44).
 * Kernels whose results are sums of many products set flush-to-zero and
 * denormals-are-zero for the duration of a call (threads they start inherit it) and
 * restore the caller's mode: values below 1.2e-38 in magnitude count as 0, an absolute
 * change far below any tolerance those kernels have. */
#if defined(__x86_64__) || defined(__SSE2__)
#include <xmmintrin.h>
static inline unsigned lgk_flush_subnormals(void)
{
    unsigned mode = _mm_getcsr();
    _mm_setcsr(mode | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
    return mode;
}
static inline void lgk_restore_fp_mode(unsigned mode) { _mm_setcsr(mode); }
static inline unsigned lgk_fp_mode(void) { return _mm_getcsr(); }
#else
static inline unsigned lgk_fp_mode(void) { return 0; }
static inline unsigned lgk_flush_subnormals(void) { return 0; }
static inline void lgk_restore_fp_mode(unsigned mode) { (void)mode; }
#endif

/* ---- function multiversioning ------------------------------------------------
 * Elementwise loops are compiled for AVX-512 and AVX2+FMA as well as the
 * baseline and picked at load time (ifunc), so the library stays portable and
 * never needs -march=native. Only GCC on x86-64 glibc supports this well. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) \
    && !defined(LGK_NO_CLONES)
#define LGK_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LGK_CLONES
#endif

/* ---- vectorizable float math ---------------------------------------------------
 * libm calls block auto-vectorization (errno, no SIMD variants without
 * -ffast-math), so the transcendental functions are written branch-free with
 * bit tricks and polynomials. Accuracy is within a few ulp, except the erfc
 * tails used by erf/gelu for |x| > 4, which lose up to ~5e-6 relative to the
 * rounding of x*x inside exp(-x*x). Special values (inf, NaN, 0, negatives for
 * log) follow libm. */
static inline uint32_t lgk_f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float lgk_u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* e^r for |r| <= ln2/2 (Cephes' expf polynomial), shared by the exp kernels below. */
static inline float lgk_exp_poly(float r)
{
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    return p * r * r + r + 1.0f;
}

/* exp: x = n ln2 + r, |r| <= ln2/2; e^r by a Cephes polynomial; 2^n applied as
 * two factors so results down to the subnormal range come out right. */
static inline float lgk_expf(float x)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    x = x > 89.0f ? 89.0f : x;        /* exp(89) overflows to inf below */
    x = x < -104.0f ? -104.0f : x;    /* exp(-104) underflows to 0 below */
    float t = x * 1.44269504088896341f + magic;
    float n = t - magic;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = lgk_exp_poly(r);
    /* n in [-150, 129]: both halves give normal powers of two. Unsigned
     * arithmetic keeps NaN inputs (garbage n, result NaN anyway) defined. */
    uint32_t ni = lgk_f2u(t) - lgk_f2u(magic);
    uint32_t n1 = (uint32_t)((int32_t)ni >> 1);
    uint32_t n2 = ni - n1;
    return p * lgk_u2f((n1 + 127u) << 23) * lgk_u2f((n2 + 127u) << 23);
}

/* log: x = m 2^e with m in [sqrt(1/2), sqrt 2); log(m) by a Cephes polynomial. */
static inline float lgk_logf(float x)
{
    /* Subnormals are rescaled by 2^23 first; the exponent correction is read
     * back from the scale's bits rather than from a second test of the same
     * condition, which GCC would turn into a branch and stop vectorizing. */
    float scale = x < 1.17549435e-38f ? 8388608.0f : 1.0f;
    uint32_t u = lgk_f2u(x * scale);
    int32_t k = (int32_t)((u >> 23) & 0xffu) - (int32_t)(lgk_f2u(scale) >> 23);
    float e = (float)(k + 1);
    float m = lgk_u2f((u & 0x007fffffu) | 0x3f000000u); /* [0.5, 1) */
    int lo = m < 0.707106781186547524f;
    e = lo ? e - 1.0f : e;
    m = lo ? m + m - 1.0f : m - 1.0f;
    float z = m * m;
    float p = 7.0376836292e-2f;
    p = p * m - 1.1514610310e-1f;
    p = p * m + 1.1676998740e-1f;
    p = p * m - 1.2420140846e-1f;
    p = p * m + 1.4249322787e-1f;
    p = p * m - 1.6668057665e-1f;
    p = p * m + 2.0000714765e-1f;
    p = p * m - 2.4999993993e-1f;
    p = p * m + 3.3333331174e-1f;
    float y = p * m * z + e * -2.12194440e-4f - 0.5f * z;
    y = m + y + e * 0.693359375f;
    y = x == 0.0f ? -INFINITY : y;
    y = x < 0.0f ? NAN : y;
    y = x == INFINITY ? x : y;
    return x != x ? x : y;
}

/* tanh: odd polynomial near 0 (no cancellation), 1 - 2/(e^2|x| + 1) beyond. */
static inline float lgk_tanhf(float x)
{
    float ax = x < 0.0f ? -x : x;
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float small = p * z * x + x;
    float big = 1.0f - 2.0f / (lgk_expf(2.0f * ax) + 1.0f);
    big = x < 0.0f ? -big : big;
    return ax < 0.625f ? small : big;
}

/* exp(-a) for a >= 0, as lgk_expf(-a) but with its clamp on the bits of a (NaN and
 * values beyond 104 become 104, where exp underflows to 0 anyway): a float clamp is a
 * branch, and GCC's partial redundancy elimination folds its clamped arm to a constant
 * and then masks every operation of the other one. 2^n, n in [-150, 0], is applied as
 * 2^(n + 64) 2^-64: one factor built from n's bits, subnormal results rounded once. */
static inline float lgk_exp_neg(float a)
{
    a = lgk_u2f(LGK_MIN(lgk_f2u(a), lgk_f2u(104.0f)));
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float t = a * -1.44269504088896341f + magic;
    float n = t - magic;
    float r = n * -0.693359375f - a; /* -a - n ln2, in two parts */
    r = r - n * -2.12194440e-4f;
    float p = lgk_exp_poly(r);
    uint32_t ni = lgk_f2u(t) - lgk_f2u(magic);
    return p * lgk_u2f((ni + 127u + 64u) << 23) * 5.42101086e-20f; /* 2^-64 */
}

/* sigmoid(-a) = e / (1 + e) with e = exp(-a) <= 1, a = |x|: one exp and one division
 * (which runs beside the FMAs), no overflow, full relative accuracy down to the
 * subnormal range. The callers take 1 - t for x >= 0 rather than 1 / (1 + e): a single
 * rounding near 1, where 1/(1+e) would round 1 + e first and reach 1.0 at x ~ 16.6
 * instead of ~ 17.3 (float32 has no value between sigmoid(x) and 1 there). */
static inline float lgk_sigmoid_neg_abs(float a)
{
    float e = lgk_exp_neg(a);
    return e / (1.0f + e);
}

static inline float lgk_sigmoidf(float x)
{
    float t = lgk_sigmoid_neg_abs(fabsf(x));
    float y = x < 0.0f ? t : 1.0f - t;
    return x != x ? x : y;
}

/* x sigmoid(x) = x - |x| t for x >= 0 and -|x| t below (t = sigmoid(-|x|)): no select
 * between t and 1 - t; x * 0 keeps -0 and makes silu(-inf) NaN, as x sigmoid(x) is. */
static inline float lgk_siluf(float x)
{
    /* |x| clamped to 104 (t < 1e-45 there) so that +inf gives inf - 104 t, not inf - inf */
    float ax = lgk_u2f(LGK_MIN(lgk_f2u(fabsf(x)), lgk_f2u(104.0f)));
    float t = lgk_sigmoid_neg_abs(ax);
    float base = x < 0.0f ? x * 0.0f : x;
    return base - ax * t;
}

/* erfc(x) for x >= 1 as exp(-x^2) h(1/x) / x, h fitted on 1/x in (0, 1]. One
 * reciprocal serves both the polynomial argument and the final 1/x. */
static inline float lgk_erfc_ge1(float x)
{
    x = x < 1.0f ? 1.0f : x;
    float r = 1.0f / x;
    float s = r - 0.5f;
    float h = -1.520212176e-1f;
    h = h * s + 4.740887386e-2f;
    h = h * s + 1.564193784e-1f;
    h = h * s - 1.394648379e-1f;
    h = h * s + 3.704832868e-2f;
    h = h * s + 4.639222716e-2f;
    h = h * s - 1.085973675e-1f;
    h = h * s + 1.187883123e-1f;
    h = h * s - 3.663540452e-2f;
    h = h * s - 1.672088335e-1f;
    h = h * s + 5.107913545e-1f;
    return lgk_expf(-x * x) * h * r;
}

/* erf(x) / x for |x| <= 1 (odd polynomial, no cancellation near 0). */
static inline float lgk_erf_small_over_x(float x)
{
    float z = x * x;
    float p = -5.625395974e-4f;
    p = p * z + 4.916023389e-3f;
    p = p * z - 2.670994955e-2f;
    p = p * z + 1.128013026e-1f;
    p = p * z - 3.761231973e-1f;
    return p * z + 1.128379121e+00f;
}

static inline float lgk_erff(float x)
{
    float ax = x < 0.0f ? -x : x;
    float big = 1.0f - lgk_erfc_ge1(ax);
    big = x < 0.0f ? -big : big;
    return ax <= 1.0f ? x * lgk_erf_small_over_x(x) : big;
}

/* Exact GELU, ~0.58 ns per element vectorized (the erf form through an erfc tail with
 * two polynomials and a selection took ~0.85). With h = erfc(|x| / sqrt 2) / 2,
 *   gelu(x) = x - |x| h for x >= 0,  -|x| h below,
 *   h = exp(-x^2/2 - G(|x|)) / 2,  G(|x|) = -ln erfcx(|x| / sqrt 2).
 * G is smooth and small (0 to 2.9), unlike ln erfc or erfcx, which need about twice the
 * polynomial degree; as a polynomial in v = |x| / (|x| + 9), which maps [0, 13] to
 * [0, 0.59] and takes G's logarithmic growth out, one of degree 11 (v times degree 10)
 * covers it all. Its division runs beside the FMAs. |x| is clamped to 13: below -13
 * |gelu| < 8e-38 and the result is -0 (h = 2^-127 e^r rounds to 0); above 5.5, h < 2^-25
 * and x - |x| h rounds to x. x^2 / 2 enters the exponent exactly: its rounding error
 * (from an FMA) is subtracted separately, as rounding it would cost x^2 2^-24 relative,
 * 16 ulp at x = -5.5. Within 8 ulp of float64 (5e-7 relative) down to x = -12.9; no lane
 * branches. gelu(-inf) is NaN, as 0.5 x (1 + erf) is. */
static inline float lgk_geluf(float x)
{
    /* min on the bits (NaN and inf go to the bound): a float clamp would be a branch, and
     * GCC's partial redundancy elimination then folds the clamped path to a constant and
     * masks every operation of the other one. */
    float ax = lgk_u2f(LGK_MIN(lgk_f2u(fabsf(x)), lgk_f2u(13.0f)));
    float x2 = ax * ax;
    float x2lo = fmaf(ax, ax, -x2); /* exact: x^2 == x2 + x2lo */
    float v = ax / (ax + 9.0f);
    float s = v * 3.3846154f - 1.0f; /* [-1, 1] */
    float g = 4.089527356e-04f;      /* G / v, G within 5e-7 */
    g = g * s - 1.072880230e-03f;
    g = g * s + 6.233823951e-04f;
    g = g * s + 3.321462078e-03f;
    g = g * s - 9.289496578e-03f;
    g = g * s + 2.027261630e-02f;
    g = g * s + 1.228056644e-04f;
    g = g * s - 7.145982236e-02f;
    g = g * s + 4.995433986e-01f;
    g = g * s - 1.175237179e+00f;
    g = g * s + 5.465428352e+00f;
    g = g * v;
    float half_x2 = 0.5f * x2;
    /* exp(-(x^2/2 + g)) = 2^-n e^r with r = n ln2 - x^2/2 - g in [-ln2/2, ln2/2] */
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float t = (half_x2 + g) * 1.44269504088896341f + magic;
    float n = t - magic;                  /* 0 .. 126 */
    float r = n * 0.693359375f - half_x2; /* n ln2_hi is exact */
    r = r + n * -2.12194440e-4f;
    r = r - g;
    r = r - 0.5f * x2lo;
    float p = 1.384175965e-03f; /* e^r, within 2e-8 relative */
    p = p * r + 8.375782520e-03f;
    p = p * r + 4.166811332e-02f;
    p = p * r + 1.666641235e-01f;
    p = p * r + 4.999999404e-01f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t ni = lgk_f2u(t) - lgk_f2u(magic);
    float h = p * lgk_u2f((126u - ni) << 23); /* 2^-(n+1) e^r = erfc(|x| / sqrt 2) / 2 */
    /* x * 0 keeps -0 and makes -inf NaN */
    float base = x < 0.0f ? x * 0.0f : x;
    return base - ax * h;
}

/* 0.5 x (1 + tanh(z)) == x sigmoid(2z): same value, no cancellation for x << 0; z has
 * the sign of x, so as in lgk_siluf it is x - |x| t for x >= 0 and -|x| t below. */
static inline float lgk_gelu_tanhf(float x)
{
    float ax = lgk_u2f(LGK_MIN(lgk_f2u(fabsf(x)), lgk_f2u(104.0f))); /* as in silu */
    float z2 = 1.5957691216057308f * (ax + 0.044715f * ax * ax * ax); /* 2|z| */
    float t = lgk_sigmoid_neg_abs(z2);
    float base = x < 0.0f ? x * 0.0f : x;
    return base - ax * t;
}

/* NaN-propagating max/min (numpy maximum/minimum, max/min reductions). */
static inline float lgk_maxf(float a, float b)
{
    return (a > b || a != a) ? a : b;
}

static inline float lgk_minf(float a, float b)
{
    return (a < b || a != a) ? a : b;
}

/* relu and clip(x, 0, 6) with one comparison per bound, false for NaN, so NaN stays NaN
 * (and -0 gives +0, as maximum(x, 0)): GCC 12 turned the two-test NaN checks of lgk_maxf
 * into a scalar comparison per lane inside the SIMD clones. */
static inline float lgk_reluf(float x) { return x <= 0.0f ? 0.0f : x; }

static inline float lgk_relu6f(float x) { return x <= 0.0f ? 0.0f : (x >= 6.0f ? 6.0f : x); }

/* In-place activation of n floats (shared by the GEMM epilogue and conv). */
void lgk_activate(int activation, float *x, int64_t n);

/* Threads worth using for `flops` of conv work: at least 1, at most nthreads (already
 * clamped by the caller); all of them while lgk_conv_force_split(1) is in effect. */
int lgk_conv_threads_for(double flops, int nthreads);

/* Checks that every buffer of a conv holds its tensor (x (n, c, h, w), the weights o x kg
 * unless w_len < 0 (packed weights, checked by their header), y (n, o, oh, ow), a bias of
 * o if any); products are overflow-checked (conv_pool.c). */
int lgk_conv2d_check_buffers(const lgk_conv2d_params *p, int64_t oh, int64_t ow, int64_t kg,
                             int64_t x_len, int64_t w_len, int64_t y_len, const float *bias,
                             int64_t bias_len, const float *x, const float *w, const float *y);

/* Depthwise conv2d (c == groups) into y, oh x ow per plane; shapes already checked. */
int lgk_depthwise_conv2d(const lgk_conv2d_params *p, int64_t oh, int64_t ow, const float *x,
                         const float *w, const float *bias, float *y, int activation,
                         int nthreads);
/* Whether lgk_depthwise_conv2d goes by channel bands here, whose pixel-major results
 * lgk_depthwise_conv2d_nhwc writes out channels last (n, oh, ow, o) without a transpose
 * (LGK_ERR_ARG for the convs that go another way). */
int lgk_depthwise_bands_nhwc(const lgk_conv2d_params *p, int64_t oh, int64_t ow);
int lgk_depthwise_conv2d_nhwc(const lgk_conv2d_params *p, int64_t oh, int64_t ow,
                              const float *x, const float *w, const float *bias, float *y,
                              int activation, int nthreads);

/* GEMM operands packed by their caller (gemm.c). A packed operand holds, per K block
 * of depth kc (the last may be shallower), its rows (A: mr-row slivers) or columns
 * (B: nr-column slivers) rounded up to whole slivers, sliver after sliver, each
 * k-major: element (k, j) of a B panel set over n columns lies at
 *   pc * ceil(n / nr) * nr + (j / nr) * nr * min(kc, K - pc) + (k - pc) * nr + j % nr
 * with pc = k / kc * kc (A the same with rows, mr). Pad rows/columns may hold
 * anything finite or not: they only feed results the GEMM never stores. */
typedef struct {
    int mr, nr;
    int64_t kc; /* K block depth for this K */
} lgk_panel_layout;
lgk_panel_layout lgk_gemm_panel_layout(int64_t K);

/* Floats of the header in front of the panels of lgk_sgemm_pack_a / _pack_b. */
#define LGK_PACKED_HEADER_FLOATS 16

/* One GEMM operand: `panels` (no header) if packed, else `data` with strides rs, cs. */
typedef struct {
    const float *data;
    int64_t rs, cs;
    const float *panels;
} lgk_operand;

/* c = act(a @ b + bias) like lgk_sgemm, either operand possibly packed; arguments
 * are not checked (internal callers check their buffers). */
int lgk_sgemm_operands(int64_t M, int64_t N, int64_t K, lgk_operand a, lgk_operand b,
                       float *c, int64_t ldc, const float *bias, int bias_mode, int activation,
                       int nthreads);
/* The header check of lgk_sgemm_prepacked / of a buffer from lgk_sgemm_pack_a. */
int lgk_sgemm_check_packed_b(int64_t K, int64_t N, const float *packed, int64_t packed_len);
int lgk_sgemm_check_packed_a(int64_t M, int64_t K, const float *packed, int64_t packed_len);

#endif /* LGK_INTERNAL_H */
