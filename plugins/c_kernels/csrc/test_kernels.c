/*
 * test_kernels.c - C-level tests of legato_kernels: every error path returns
 * its status without touching memory, and the kernels agree with naive loops.
 * Built and run under AddressSanitizer + UBSan by `make test-c`.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "legato_kernels.h"

int lgk_conv_force_split(int on); /* test hook of conv_pool.c */

static int failures = 0, checks = 0;

#define EXPECT(cond)                                                       \
    do {                                                                   \
        ++checks;                                                          \
        if (!(cond)) {                                                     \
            ++failures;                                                    \
            fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                  \
    } while (0)

#define EXPECT_STATUS(call, status) EXPECT((call) == (status))

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float frand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static float *rand_buf(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; ++i)
        p[i] = frand();
    return p;
}

static int close_to(double got, double want, double rtol, double atol)
{
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return got == want;
    return fabs(got - want) <= atol + rtol * fabs(want);
}

static int all_close(const float *got, const double *want, int64_t n, double rtol, double atol)
{
    for (int64_t i = 0; i < n; ++i)
        if (!close_to(got[i], want[i], rtol, atol)) {
            fprintf(stderr, "  mismatch at %lld: got %.9g want %.9g\n", (long long)i, got[i], want[i]);
            return 0;
        }
    return 1;
}

/* ---- GEMM -------------------------------------------------------------------- */

static double act_ref(int act, double x)
{
    switch (act) {
    case LGK_ACT_RELU: return x > 0 ? x : 0;
    case LGK_ACT_GELU: return 0.5 * x * erfc(-x / sqrt(2.0));
    case LGK_ACT_GELU_TANH: return x / (1 + exp(-2 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case LGK_ACT_SILU: return x / (1 + exp(-x));
    case LGK_ACT_RELU6: return x < 0 ? 0 : (x > 6 ? 6 : x);
    default: return x;
    }
}

/* C = act(A @ B + bias) with A (M x K, strides rsa/csa), B (K x N, rsb/csb). */
static void gemm_ref(int64_t M, int64_t N, int64_t K, const float *a, int64_t rsa, int64_t csa,
                     const float *b, int64_t rsb, int64_t csb, const float *bias, int mode,
                     int act, double *c)
{
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
                s += (double)a[i * rsa + k * csa] * b[k * rsb + j * csb];
            s += mode == LGK_BIAS_COL ? bias[j] : mode == LGK_BIAS_ROW ? bias[i] : 0.0;
            c[i * N + j] = act_ref(act, s);
        }
}

static void check_gemm_case(int64_t M, int64_t N, int64_t K, int trans_b, int mode, int act,
                            int threads)
{
    float *a = rand_buf(M * K), *b = rand_buf(K * N), *bias = rand_buf(M > N ? M : N);
    float *c = rand_buf(M * N);
    double *want = malloc((size_t)(M * N > 0 ? M * N : 1) * sizeof(double));
    int64_t rsb = trans_b ? 1 : N, csb = trans_b ? K : 1;
    gemm_ref(M, N, K, a, K, 1, b, rsb, csb, bias, mode, act, want);
    int st = lgk_sgemm(M, N, K, a, M * K, K, 1, b, K * N, rsb, csb, c, M * N, N,
                       mode ? bias : NULL, M > N ? M : N, mode, act, threads);
    EXPECT(st == LGK_OK);
    EXPECT(all_close(c, want, M * N, 1e-4, 1e-5 * (double)(K + 1)));
    free(a), free(b), free(bias), free(c), free(want);
}

static void test_gemm_values(void)
{
    static const int64_t sizes[] = {1, 3, 17, 40};
    for (int isa = LGK_ISA_GENERIC; isa <= LGK_ISA_AVX512; ++isa) {
        if (lgk_gemm_force_isa(isa) != LGK_OK)
            continue; /* CPU lacks it */
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j)
                for (int k = 0; k < 4; ++k)
                    check_gemm_case(sizes[i], sizes[j], sizes[k], (i + j + k) % 2, LGK_BIAS_NONE,
                                    LGK_ACT_NONE, 1);
        for (int act = LGK_ACT_NONE; act <= LGK_ACT_LAST; ++act)
            check_gemm_case(19, 37, 23, act % 2, LGK_BIAS_COL, act, 1);
        check_gemm_case(33, 21, 50, 0, LGK_BIAS_ROW, LGK_ACT_RELU, 1);
        check_gemm_case(300, 420, 290, 1, LGK_BIAS_COL, LGK_ACT_GELU, 2); /* 2 threads, split N */
        check_gemm_case(640, 64, 640, 0, LGK_BIAS_ROW, LGK_ACT_SILU, 2);  /* 2 threads, split M */
        check_gemm_case(5, 7, 0, 0, LGK_BIAS_COL, LGK_ACT_SILU, 1);        /* K == 0 */
        /* K <= 32 and three row tiles or more: row tile by row tile along the slivers,
         * B packed by the first row tile (a partial last sliver), or packed ahead */
        check_gemm_case(50, 100, 16, 0, LGK_BIAS_ROW, LGK_ACT_RELU6, 1);
        check_gemm_case(97, 70, 32, 1, LGK_BIAS_COL, LGK_ACT_RELU, 1);
        check_gemm_case(37, 2100, 24, 0, LGK_BIAS_ROW, LGK_ACT_NONE, 1);
        check_gemm_case(400, 333, 20, 0, LGK_BIAS_ROW, LGK_ACT_RELU6, 2);
    }
    EXPECT_STATUS(lgk_gemm_force_isa(LGK_ISA_AUTO), LGK_OK);
    EXPECT_STATUS(lgk_gemm_force_isa(42), LGK_ERR_ARG);
}

static void test_gemm_batched(void)
{
    /* A broadcast over batch (offsets all 0), B per batch. */
    enum { BATCH = 3, M = 5, N = 6, K = 7 };
    float *a = rand_buf(M * K), *b = rand_buf(BATCH * K * N), *c = rand_buf(BATCH * M * N);
    int64_t aoff[BATCH] = {0, 0, 0}, boff[BATCH] = {0, K * N, 2 * K * N};
    double want[M * N];
    EXPECT_STATUS(lgk_sgemm_batched(BATCH, M, N, K, a, M * K, aoff, K, 1, b, BATCH * K * N, boff, N,
                                    1, c, BATCH * M * N, M * N, N, NULL, 0, 0, 0, 2),
                  LGK_OK);
    for (int i = 0; i < BATCH; ++i) {
        gemm_ref(M, N, K, a, K, 1, b + boff[i], N, 1, NULL, 0, 0, want);
        EXPECT(all_close(c + i * M * N, want, M * N, 1e-5, 1e-5));
    }
    boff[2] = 3 * K * N; /* past the end of b */
    EXPECT_STATUS(lgk_sgemm_batched(BATCH, M, N, K, a, M * K, aoff, K, 1, b, BATCH * K * N, boff, N,
                                    1, c, BATCH * M * N, M * N, N, NULL, 0, 0, 0, 1),
                  LGK_ERR_SHAPE);
    boff[2] = -1;
    EXPECT_STATUS(lgk_sgemm_batched(BATCH, M, N, K, a, M * K, aoff, K, 1, b, BATCH * K * N, boff, N,
                                    1, c, BATCH * M * N, M * N, N, NULL, 0, 0, 0, 1),
                  LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_sgemm_batched(BATCH, M, N, K, a, M * K, NULL, K, 1, b, BATCH * K * N, boff, N,
                                    1, c, BATCH * M * N, M * N, N, NULL, 0, 0, 0, 1),
                  LGK_ERR_NULL);
    /* overlapping output batches */
    boff[2] = 2 * K * N;
    EXPECT_STATUS(lgk_sgemm_batched(BATCH, M, N, K, a, M * K, aoff, K, 1, b, BATCH * K * N, boff, N,
                                    1, c, BATCH * M * N, M * N - 1, N, NULL, 0, 0, 0, 1),
                  LGK_ERR_SHAPE);
    free(a), free(b), free(c);
}

/* Few columns (N <= 4, streamed as dot products) next to N = 5 (packed), with B's
 * columns contiguous or strided, epilogues, 2 threads, M = 1, K = 1. */
static void test_gemm_small_n(void)
{
    for (int isa = LGK_ISA_GENERIC; isa <= LGK_ISA_AVX512; ++isa) {
        if (lgk_gemm_force_isa(isa) != LGK_OK)
            continue;
        for (int64_t n = 1; n <= 5; ++n)
            for (int trans_b = 0; trans_b < 2; ++trans_b) {
                check_gemm_case(257, n, 65, trans_b, LGK_BIAS_NONE, LGK_ACT_NONE, 1);
                check_gemm_case(300, n, 130, trans_b, LGK_BIAS_COL, LGK_ACT_SILU, 2);
                check_gemm_case(33, n, 1, trans_b, LGK_BIAS_ROW, LGK_ACT_RELU, 1);
                check_gemm_case(1, n, 9, trans_b, LGK_BIAS_NONE, LGK_ACT_NONE, 1);
            }
        check_gemm_case(4000, 1, 300, 0, LGK_BIAS_ROW, LGK_ACT_GELU, 2); /* threads split M */
    }
    EXPECT_STATUS(lgk_gemm_force_isa(LGK_ISA_AUTO), LGK_OK);
    /* A with strided rows (cs_a != 1) takes the packed path: same result. */
    enum { M = 37, K = 19 };
    float *a = rand_buf(2 * M * K), *b = rand_buf(K), *c = rand_buf(M);
    double want[M];
    gemm_ref(M, 1, K, a, 1, 2 * M, b, 1, 1, NULL, 0, 0, want);
    EXPECT_STATUS(lgk_sgemm(M, 1, K, a, 2 * M * K, 1, 2 * M, b, K, 1, 1, c, M, 1, NULL, 0, 0, 0, 1),
                  LGK_OK);
    EXPECT(all_close(c, want, M, 1e-4, 1e-4));
    free(a), free(b), free(c);
}

/* Batched mat-vecs (a mixture of experts: 32 x [256, 64] @ [64, 1]), and batch 0. */
static void test_gemm_batched_matvec(void)
{
    enum { BATCH = 32, M = 256, K = 64, N = 1 };
    float *a = rand_buf(BATCH * M * K), *b = rand_buf(BATCH * K * N), *c = rand_buf(BATCH * M * N);
    int64_t aoff[BATCH], boff[BATCH];
    for (int i = 0; i < BATCH; ++i)
        aoff[i] = (int64_t)(i % 4) * M * K, boff[i] = (int64_t)i * K * N; /* experts gathered */
    static double want[M * N];
    for (int threads = 1; threads <= 2; ++threads) {
        EXPECT_STATUS(lgk_sgemm_batched(BATCH, M, N, K, a, BATCH * M * K, aoff, K, 1, b,
                                        BATCH * K * N, boff, N, 1, c, BATCH * M * N, M * N, N,
                                        NULL, 0, 0, 0, threads),
                      LGK_OK);
        for (int i = 0; i < BATCH; ++i) {
            gemm_ref(M, N, K, a + aoff[i], K, 1, b + boff[i], N, 1, NULL, 0, 0, want);
            EXPECT(all_close(c + i * M * N, want, M * N, 1e-4, 1e-4));
        }
    }
    float before = c[0];
    EXPECT_STATUS(lgk_sgemm_batched(0, M, N, K, a, BATCH * M * K, aoff, K, 1, b, BATCH * K * N,
                                    boff, N, 1, c, BATCH * M * N, M * N, N, NULL, 0, 0, 0, 1),
                  LGK_OK);
    EXPECT(c[0] == before); /* batch 0 writes nothing */
    free(a), free(b), free(c);
}

static void test_gemm_errors(void)
{
    float buf[16] = {0};
    const int64_t huge = (int64_t)1 << 40;
    EXPECT_STATUS(lgk_sgemm(-1, 2, 2, buf, 16, 2, 1, buf, 16, 2, 1, buf, 16, 2, NULL, 0, 0, 0, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_sgemm(2, 2, 2, NULL, 16, 2, 1, buf, 16, 2, 1, buf, 16, 2, NULL, 0, 0, 0, 1), LGK_ERR_NULL);
    EXPECT_STATUS(lgk_sgemm(2, 2, 2, buf, 16, 2, 1, buf, 16, 2, 1, NULL, 16, 2, NULL, 0, 0, 0, 1), LGK_ERR_NULL);
    EXPECT_STATUS(lgk_sgemm(2, 2, 2, buf, 3, 2, 1, buf, 16, 2, 1, buf, 16, 2, NULL, 0, 0, 0, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_sgemm(2, 2, 2, buf, 16, 2, 1, buf, 16, 2, 1, buf, 3, 2, NULL, 0, 0, 0, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_sgemm(2, 2, 2, buf, 16, -2, 1, buf, 16, 2, 1, buf, 16, 2, NULL, 0, 0, 0, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_sgemm(2, 3, 2, buf, 16, 2, 1, buf, 16, 3, 1, buf, 16, 2, NULL, 0, 0, 0, 1), LGK_ERR_SHAPE); /* ldc < N */
    EXPECT_STATUS(lgk_sgemm(2, 2, 2, buf, 16, 2, 1, buf, 16, 2, 1, buf, 16, 2, NULL, 0, 0, 7, 1), LGK_ERR_ARG);
    EXPECT_STATUS(lgk_sgemm(2, 2, 2, buf, 16, 2, 1, buf, 16, 2, 1, buf, 16, 2, NULL, 0, 5, 0, 1), LGK_ERR_ARG);
    EXPECT_STATUS(lgk_sgemm(2, 2, 2, buf, 16, 2, 1, buf, 16, 2, 1, buf, 16, 2, NULL, 0, LGK_BIAS_COL, 0, 1), LGK_ERR_NULL);
    EXPECT_STATUS(lgk_sgemm(2, 2, 2, buf, 16, 2, 1, buf, 16, 2, 1, buf, 16, 2, buf, 1, LGK_BIAS_COL, 0, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_sgemm(huge, huge, huge, buf, 16, 1, 1, buf, 16, 1, 1, buf, 16, huge, NULL, 0, 0, 0, 1), LGK_ERR_OVERFLOW);
    EXPECT_STATUS(lgk_sgemm(2, 2, 2, buf, 16, INT64_MAX, 1, buf, 16, 2, 1, buf, 16, 2, NULL, 0, 0, 0, 1), LGK_ERR_OVERFLOW);
    /* empty problems are fine and touch nothing */
    EXPECT_STATUS(lgk_sgemm(0, 5, 2, buf, 0, 2, 1, buf, 16, 5, 1, buf, 0, 5, NULL, 0, 0, 0, 1), LGK_OK);
}

/* ---- prepacked GEMM ------------------------------------------------------------- */

static float *packed_alloc(int64_t nfloats) /* 64-byte aligned, as lgk_sgemm_prepacked needs */
{
    size_t bytes = ((size_t)nfloats * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes > 0 ? bytes : 64);
}

/* B packed once (row-major or transposed), then used like lgk_sgemm. */
static void check_prepacked_case(int64_t M, int64_t N, int64_t K, int trans_b, int mode, int act,
                                 int threads)
{
    float *a = rand_buf(M * K), *b = rand_buf(K * N), *bias = rand_buf(M > N ? M : N);
    float *c = rand_buf(M * N);
    double *want = malloc((size_t)(M * N > 0 ? M * N : 1) * sizeof(double));
    int64_t rsb = trans_b ? 1 : N, csb = trans_b ? K : 1, size = lgk_sgemm_packed_b_size(K, N);
    EXPECT(size >= 16 + K * N);
    float *packed = packed_alloc(size);
    EXPECT_STATUS(lgk_sgemm_pack_b(K, N, b, K * N, rsb, csb, packed, size), LGK_OK);
    gemm_ref(M, N, K, a, K, 1, b, rsb, csb, bias, mode, act, want);
    int st = lgk_sgemm_prepacked(M, N, K, a, M * K, K, 1, packed, size, c, M * N, N,
                                 mode ? bias : NULL, M > N ? M : N, mode, act, threads);
    EXPECT(st == LGK_OK);
    EXPECT(all_close(c, want, M * N, 1e-4, 1e-5 * (double)(K + 1)));
    free(a), free(b), free(bias), free(c), free(want), free(packed);
}

static void test_gemm_prepacked_values(void)
{
    static const int64_t sizes[] = {1, 3, 17, 40};
    for (int isa = LGK_ISA_GENERIC; isa <= LGK_ISA_AVX512; ++isa) {
        if (lgk_gemm_force_isa(isa) != LGK_OK)
            continue;
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j)
                for (int k = 0; k < 4; ++k)
                    check_prepacked_case(sizes[i], sizes[j], sizes[k], (i + j + k) % 2,
                                         LGK_BIAS_NONE, LGK_ACT_NONE, 1);
        for (int act = LGK_ACT_NONE; act <= LGK_ACT_LAST; ++act)
            check_prepacked_case(19, 37, 23, act % 2, LGK_BIAS_COL, act, 1);
        check_prepacked_case(33, 21, 50, 1, LGK_BIAS_ROW, LGK_ACT_RELU, 1);
        check_prepacked_case(64, 300, 784, 1, LGK_BIAS_COL, LGK_ACT_GELU, 2); /* K in 4 blocks, split N */
        check_prepacked_case(700, 64, 300, 0, LGK_BIAS_NONE, LGK_ACT_NONE, 2); /* split M */
        check_prepacked_case(5, 7, 0, 0, LGK_BIAS_COL, LGK_ACT_SILU, 1);       /* K == 0 */
        check_prepacked_case(61, 45, 24, 0, LGK_BIAS_ROW, LGK_ACT_RELU6, 1); /* rows outer */
        /* AVX-512 keeps K <= 1024 one block, deeper K in blocks of at most 768 */
        check_prepacked_case(49, 70, 1024, 1, LGK_BIAS_COL, LGK_ACT_RELU, 1);
        check_prepacked_case(49, 70, 1025, 0, LGK_BIAS_ROW, LGK_ACT_NONE, 1);
        check_prepacked_case(30, 100, 1700, 1, LGK_BIAS_COL, LGK_ACT_RELU6, 2);
    }
    EXPECT_STATUS(lgk_gemm_force_isa(LGK_ISA_AUTO), LGK_OK);
}

/* A stored by columns (rs 1, cs M: a 1x1 conv's pixels as the rows), so that the call
 * packs it; B prepacked or not. */
static void check_gemm_a_cols(int64_t M, int64_t N, int64_t K, int prepacked, int act,
                              int threads)
{
    float *a = rand_buf(M * K), *b = rand_buf(K * N), *bias = rand_buf(N), *c = rand_buf(M * N);
    double *want = malloc((size_t)(M * N) * sizeof(double));
    int64_t size = lgk_sgemm_packed_b_size(K, N);
    float *packed = packed_alloc(size);
    EXPECT_STATUS(lgk_sgemm_pack_b(K, N, b, K * N, N, 1, packed, size), LGK_OK);
    gemm_ref(M, N, K, a, 1, M, b, N, 1, bias, LGK_BIAS_COL, act, want);
    int st = prepacked ? lgk_sgemm_prepacked(M, N, K, a, M * K, 1, M, packed, size, c, M * N, N,
                                             bias, N, LGK_BIAS_COL, act, threads)
                       : lgk_sgemm(M, N, K, a, M * K, 1, M, b, K * N, N, 1, c, M * N, N, bias, N,
                                   LGK_BIAS_COL, act, threads);
    EXPECT(st == LGK_OK);
    if (!all_close(c, want, M * N, 1e-4, 1e-5 * (double)(K + 1)))
        fprintf(stderr, "  gemm A by columns M %ld N %ld K %ld prepacked %d\n", (long)M, (long)N,
                (long)K, prepacked);
    free(a), free(b), free(bias), free(c), free(want), free(packed);
}

/* Row counts whose last micro-tile would be a single row (one past a multiple of the
 * micro-kernel's rows: 4, 6 or 12), whose last rows are re-split into two tiles; K in one
 * and in two blocks, 1 and 2 threads. */
static void test_gemm_lone_row(void)
{
    static const int64_t rows[] = {5, 7, 13, 25, 49, 241, 253};
    for (int isa = LGK_ISA_GENERIC; isa <= LGK_ISA_AVX512; ++isa) {
        if (lgk_gemm_force_isa(isa) != LGK_OK)
            continue;
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
            check_gemm_a_cols(rows[i], 160, 96, 1, LGK_ACT_RELU6, 1);
            check_gemm_a_cols(rows[i], 70, 40, 0, LGK_ACT_NONE, 1);
            check_gemm_a_cols(rows[i], 300, 960, 1, LGK_ACT_RELU, 2);
        }
    }
    EXPECT_STATUS(lgk_gemm_force_isa(LGK_ISA_AUTO), LGK_OK);
}

/* Packs a 6 x 5 B with the current ISA; returns the buffer and its length. */
static float *packed_6x5(const float *b, int64_t *len)
{
    *len = lgk_sgemm_packed_b_size(6, 5);
    float *packed = packed_alloc(*len);
    EXPECT_STATUS(lgk_sgemm_pack_b(6, 5, b, 30, 5, 1, packed, *len), LGK_OK);
    return packed;
}

static void test_gemm_prepacked_errors(void)
{
    enum { M = 4, N = 5, K = 6 };
    float *a = rand_buf(M * K), *b = rand_buf(K * N), *c = rand_buf(M * N), *bias = rand_buf(N);
    int64_t len, big = (int64_t)1 << 62;
    EXPECT(lgk_sgemm_packed_b_size(-1, 5) == -LGK_ERR_SHAPE);
    EXPECT(lgk_sgemm_packed_b_size(5, -1) == -LGK_ERR_SHAPE);
    EXPECT(lgk_sgemm_packed_b_size(big, big) == -LGK_ERR_OVERFLOW);
    EXPECT(lgk_sgemm_packed_b_size(2, INT64_MAX) == -LGK_ERR_OVERFLOW); /* padding N overflows */
    EXPECT(lgk_sgemm_packed_b_size(0, 0) > 0);                         /* the header alone */
    float *packed = packed_6x5(b, &len);
    /* pack_b argument checks: nothing is written on failure */
    EXPECT_STATUS(lgk_sgemm_pack_b(K, N, NULL, K * N, N, 1, packed, len), LGK_ERR_NULL);
    EXPECT_STATUS(lgk_sgemm_pack_b(K, N, b, K * N, N, 1, NULL, len), LGK_ERR_NULL);
    EXPECT_STATUS(lgk_sgemm_pack_b(K, N, b, K * N - 1, N, 1, packed, len), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_sgemm_pack_b(K, N, b, K * N, N, 1, packed, len - 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_sgemm_pack_b(K, N, b, K * N, -N, 1, packed, len), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_sgemm_pack_b(-K, N, b, K * N, N, 1, packed, len), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_sgemm_pack_b(big, big, b, K * N, 1, 1, packed, len), LGK_ERR_OVERFLOW);
    float *roomy = packed_alloc(len + 1);
    EXPECT_STATUS(lgk_sgemm_pack_b(K, N, b, K * N, N, 1, roomy + 1, len), LGK_ERR_ARG); /* misaligned */
    free(roomy);
#define PREPACKED(m, n, k, pk, plen, cl, bias_ptr, mode, act) \
    lgk_sgemm_prepacked(m, n, k, a, M * K, K, 1, pk, plen, c, cl, n, bias_ptr, N, mode, act, 1)
    EXPECT_STATUS(PREPACKED(M, N, K, packed, len, M * N, bias, LGK_BIAS_COL, LGK_ACT_RELU), LGK_OK);
    EXPECT_STATUS(PREPACKED(M, N, K, packed, len - 1, M * N, NULL, 0, 0), LGK_ERR_SHAPE);
    EXPECT_STATUS(PREPACKED(M, N, K, packed, 3, M * N, NULL, 0, 0), LGK_ERR_SHAPE); /* not even a header */
    EXPECT_STATUS(PREPACKED(M, N, K, NULL, len, M * N, NULL, 0, 0), LGK_ERR_NULL);
    EXPECT_STATUS(PREPACKED(M, N, K, packed + 16, len - 16, M * N, NULL, 0, 0), LGK_ERR_ARG); /* no header */
    EXPECT_STATUS(PREPACKED(M, N, K, packed, len, M * N - 1, NULL, 0, 0), LGK_ERR_SHAPE);
    EXPECT_STATUS(PREPACKED(M, N, K, packed, len, M * N, NULL, LGK_BIAS_COL, 0), LGK_ERR_NULL);
    EXPECT_STATUS(PREPACKED(M, N, K, packed, len, M * N, NULL, 0, 99), LGK_ERR_ARG);
    EXPECT_STATUS(PREPACKED(-1, N, K, packed, len, M * N, NULL, 0, 0), LGK_ERR_SHAPE);
    /* packed for other shapes: rejected even where the buffer would be big enough */
    EXPECT_STATUS(PREPACKED(M, N - 1, K, packed, len, M * N, NULL, 0, 0), LGK_ERR_ARG);
    EXPECT_STATUS(lgk_sgemm_prepacked(M, N, K - 1, a, M * K, K, 1, packed, len, c, M * N, N, NULL,
                                      0, 0, 0, 1), LGK_ERR_ARG);
    float *garbage = packed_alloc(len);
    memset(garbage, 0, (size_t)len * sizeof(float));
    EXPECT_STATUS(PREPACKED(M, N, K, garbage, len, M * N, NULL, 0, 0), LGK_ERR_ARG);
    EXPECT_STATUS(PREPACKED(0, N, K, packed, len, 0, NULL, 0, 0), LGK_OK); /* empty: fine */
    /* packed under one ISA, used under another */
    int isa = lgk_gemm_isa();
    for (int other = LGK_ISA_GENERIC; other <= LGK_ISA_AVX512; ++other) {
        if (other == isa || lgk_gemm_force_isa(other) != LGK_OK)
            continue;
        EXPECT_STATUS(PREPACKED(M, N, K, packed, len, M * N, NULL, 0, 0), LGK_ERR_ARG);
        int64_t other_len;
        float *repacked = packed_6x5(b, &other_len);
        EXPECT_STATUS(PREPACKED(M, N, K, repacked, other_len, M * N, NULL, 0, 0), LGK_OK);
        free(repacked);
    }
#undef PREPACKED
    EXPECT_STATUS(lgk_gemm_force_isa(LGK_ISA_AUTO), LGK_OK);
    free(a), free(b), free(c), free(bias), free(packed), free(garbage);
}

/* ---- conv / pool ---------------------------------------------------------------- */

static lgk_conv2d_params conv_params(void)
{
    lgk_conv2d_params p = {2, 4, 9, 8, 6, 3, 2, 2, 1, 1, 0, 2, 1, 2, 1, 2};
    return p; /* n c h w | o kh kw | stride | pads t l b r | dilation | groups */
}

static void conv_ref(const lgk_conv2d_params *p, int64_t oh, int64_t ow, const float *x,
                     const float *w, const float *bias, double *y)
{
    int64_t cg = p->c / p->groups, og = p->o / p->groups;
    for (int64_t n = 0; n < p->n; ++n)
        for (int64_t o = 0; o < p->o; ++o)
            for (int64_t oy = 0; oy < oh; ++oy)
                for (int64_t ox = 0; ox < ow; ++ox) {
                    double s = bias ? bias[o] : 0.0;
                    for (int64_t c = 0; c < cg; ++c)
                        for (int64_t i = 0; i < p->kh; ++i)
                            for (int64_t j = 0; j < p->kw; ++j) {
                                int64_t iy = oy * p->stride_h - p->pad_top + i * p->dilation_h;
                                int64_t ix = ox * p->stride_w - p->pad_left + j * p->dilation_w;
                                if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w)
                                    continue;
                                int64_t ci = (o / og) * cg + c;
                                s += (double)x[((n * p->c + ci) * p->h + iy) * p->w + ix]
                                     * w[((o * cg + c) * p->kh + i) * p->kw + j];
                            }
                    y[((n * p->o + o) * oh + oy) * ow + ox] = s;
                }
}

/* Convolves with p (with and without bias) and compares with the naive loops. */
static void check_conv(lgk_conv2d_params p, int64_t want_oh, int64_t want_ow, int threads)
{
    int64_t oh, ow;
    EXPECT_STATUS(lgk_conv2d_out_shape(&p, &oh, &ow), LGK_OK);
    EXPECT(oh == want_oh && ow == want_ow);
    int64_t nx = p.n * p.c * p.h * p.w, nw = p.o * (p.c / p.groups) * p.kh * p.kw;
    int64_t ny = p.n * p.o * oh * ow;
    float *x = rand_buf(nx), *w = rand_buf(nw), *bias = rand_buf(p.o), *y = rand_buf(ny);
    double *want = malloc((size_t)(ny > 0 ? ny : 1) * sizeof(double));
    for (int with_bias = 0; with_bias < 2; ++with_bias) {
        conv_ref(&p, oh, ow, x, w, with_bias ? bias : NULL, want);
        EXPECT_STATUS(lgk_conv2d_nchw(&p, x, nx, w, nw, with_bias ? bias : NULL,
                                      with_bias ? p.o : 0, y, ny, LGK_ACT_NONE, threads), LGK_OK);
        EXPECT(all_close(y, want, ny, 1e-4, 1e-5));
        if (p.groups == 1 && nw > 0) { /* the same through weights packed once */
            int64_t k = p.c * p.kh * p.kw, np = lgk_sgemm_packed_b_size(k, p.o);
            float *packed = packed_alloc(np);
            EXPECT_STATUS(lgk_sgemm_pack_b(k, p.o, w, nw, 1, k, packed, np), LGK_OK);
            for (int64_t i = 0; i < ny; ++i)
                y[i] = 7.0f;
            EXPECT_STATUS(lgk_conv2d_nchw_prepacked(&p, x, nx, packed, np,
                                                    with_bias ? bias : NULL, with_bias ? p.o : 0,
                                                    y, ny, LGK_ACT_NONE, threads), LGK_OK);
            EXPECT(all_close(y, want, ny, 1e-4, 1e-5));
            free(packed);
        }
    }
    free(x), free(w), free(bias), free(y), free(want);
}

static void test_conv_edges(void)
{
    /* n c h w | o kh kw | stride | pads t l b r | dilation | groups */
    lgk_conv2d_params p = conv_params();
    check_conv(p, 4, 8, 2);
    lgk_conv2d_params one = {1, 3, 1, 1, 2, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1};
    check_conv(one, 1, 1, 1); /* 1x1 map, pointwise */
    lgk_conv2d_params big = {2, 2, 1, 2, 3, 5, 4, 1, 1, 2, 2, 2, 2, 1, 1, 1};
    check_conv(big, 1, 3, 2); /* kernel larger than the input, padding makes it fit */
    lgk_conv2d_params e = p;
    e.n = 0;
    check_conv(e, 4, 8, 2); /* no images */
    e = p, e.c = 0, e.groups = 1;
    check_conv(e, 4, 8, 1); /* no input channels: the bias alone */
    e = p, e.o = 0;
    check_conv(e, 4, 8, 1); /* no filters */
    lgk_conv2d_params empty = {1, 2, 0, 0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    check_conv(empty, 2, 2, 1); /* empty map, only padding */
    lgk_conv2d_params half = {1, 2, 0, 3, 3, 1, 2, 1, 1, 1, 0, 0, 0, 1, 1, 1};
    check_conv(half, 1, 2, 1); /* empty height, padded on top */
    empty.pad_top = empty.pad_bottom = 0;
    EXPECT_STATUS(lgk_conv2d_out_shape(&empty, &e.n, &e.c), LGK_ERR_SHAPE); /* nothing fits */
    /* depthwise (groups == c): the direct kernel */
    lgk_conv2d_params dw = {2, 5, 11, 19, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 5};
    check_conv(dw, 11, 19, 2);
    lgk_conv2d_params dw7 = {1, 3, 16, 16, 3, 7, 7, 1, 1, 3, 3, 3, 3, 1, 1, 3};
    check_conv(dw7, 16, 16, 1);
    lgk_conv2d_params dws = {1, 4, 9, 17, 8, 3, 2, 2, 2, 1, 0, 1, 1, 1, 2, 4};
    check_conv(dws, 5, 8, 2); /* stride 2, multiplier 2, dilation */
    lgk_conv2d_params dw3 = {1, 2, 10, 10, 2, 3, 3, 3, 3, 4, 4, 4, 4, 2, 2, 2};
    check_conv(dw3, 5, 5, 1); /* stride 3, padding larger than the kernel */
    lgk_conv2d_params dw1 = {1, 4, 1, 1, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4};
    check_conv(dw1, 1, 1, 1); /* 1x1 map */
    lgk_conv2d_params dwbig = {1, 2, 2, 3, 2, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 2};
    check_conv(dwbig, 2, 3, 1); /* kernel larger than the input */
    dw.n = 0;
    check_conv(dw, 11, 19, 2); /* zero-size batch */
    /* small maps: the pixels x filters form of a packed weight */
    lgk_conv2d_params small = {1, 33, 2, 2, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    check_conv(small, 2, 2, 2);
    lgk_conv2d_params point = {2, 9, 3, 5, 17, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1};
    check_conv(point, 3, 5, 1);
}

static void test_conv(void)
{
    lgk_conv2d_params p = conv_params();
    int64_t oh, ow;
    EXPECT_STATUS(lgk_conv2d_out_shape(&p, &oh, &ow), LGK_OK);
    EXPECT(oh == 4 && ow == 8);
    int64_t nx = p.n * p.c * p.h * p.w, nw = p.o * (p.c / p.groups) * p.kh * p.kw, ny = p.n * p.o * oh * ow;
    float *x = rand_buf(nx), *w = rand_buf(nw), *bias = rand_buf(p.o), *y = rand_buf(ny);
    /* error paths */
    EXPECT_STATUS(lgk_conv2d_nchw(&p, x, nx - 1, w, nw, NULL, 0, y, ny, 0, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_conv2d_nchw(&p, x, nx, w, nw, NULL, 0, y, ny - 1, 0, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_conv2d_nchw(&p, x, nx, w, nw, bias, p.o - 1, y, ny, 0, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_conv2d_nchw(&p, NULL, nx, w, nw, NULL, 0, y, ny, 0, 1), LGK_ERR_NULL);
    EXPECT_STATUS(lgk_conv2d_nchw(&p, x, nx, w, nw, NULL, 0, y, ny, 99, 1), LGK_ERR_ARG);
    EXPECT_STATUS(lgk_conv2d_nchw(NULL, x, nx, w, nw, NULL, 0, y, ny, 0, 1), LGK_ERR_NULL);
    lgk_conv2d_params bad = p;
    bad.groups = 3; /* does not divide c */
    EXPECT_STATUS(lgk_conv2d_out_shape(&bad, &oh, &ow), LGK_ERR_SHAPE);
    bad = p, bad.stride_h = 0;
    EXPECT_STATUS(lgk_conv2d_out_shape(&bad, &oh, &ow), LGK_ERR_SHAPE);
    bad = p, bad.kh = 40; /* kernel larger than the padded input */
    EXPECT_STATUS(lgk_conv2d_out_shape(&bad, &oh, &ow), LGK_ERR_SHAPE);
    bad = p, bad.pad_left = -1;
    EXPECT_STATUS(lgk_conv2d_out_shape(&bad, &oh, &ow), LGK_ERR_SHAPE);
    bad = p, bad.dilation_w = INT64_MAX;
    EXPECT_STATUS(lgk_conv2d_out_shape(&bad, &oh, &ow), LGK_ERR_OVERFLOW);
    bad = p, bad.n = (int64_t)1 << 62;
    EXPECT_STATUS(lgk_conv2d_nchw(&bad, x, nx, w, nw, NULL, 0, y, ny, 0, 1), LGK_ERR_OVERFLOW);
    free(x), free(w), free(bias), free(y);
}

static void pool_ref(const lgk_pool2d_params *p, int64_t oh, int64_t ow, const float *x,
                     int is_max, double *y)
{
    for (int64_t pl = 0; pl < p->n * p->c; ++pl)
        for (int64_t oy = 0; oy < oh; ++oy)
            for (int64_t ox = 0; ox < ow; ++ox) {
                double acc = is_max ? -INFINITY : 0.0;
                int64_t valid = 0, padded = 0;
                for (int64_t i = 0; i < p->kh; ++i)
                    for (int64_t j = 0; j < p->kw; ++j) {
                        int64_t iy = oy * p->stride_h - p->pad_top + i * p->dilation_h;
                        int64_t ix = ox * p->stride_w - p->pad_left + j * p->dilation_w;
                        padded += iy < p->h + p->pad_bottom && ix < p->w + p->pad_right;
                        if (iy < 0 || iy >= p->h || ix < 0 || ix >= p->w)
                            continue;
                        double v = x[(pl * p->h + iy) * p->w + ix];
                        acc = is_max ? (v > acc ? v : acc) : acc + v;
                        ++valid;
                    }
                int64_t div = p->count_include_pad ? padded : valid;
                y[(pl * oh + oy) * ow + ox] = is_max ? acc : (div ? acc / (double)div : NAN);
            }
}

/* Pools with p (max and avg) and compares with the naive loops. */
static void check_pool(lgk_pool2d_params p, int64_t want_oh, int64_t want_ow)
{
    int64_t oh, ow;
    EXPECT_STATUS(lgk_pool2d_out_shape(&p, &oh, &ow), LGK_OK);
    EXPECT(oh == want_oh && ow == want_ow);
    int64_t nx = p.n * p.c * p.h * p.w, ny = p.n * p.c * oh * ow;
    float *x = rand_buf(nx), *y = rand_buf(ny);
    double *want = malloc((size_t)(ny > 0 ? ny : 1) * sizeof(double));
    for (int is_max = 0; is_max < 2; ++is_max) {
        pool_ref(&p, oh, ow, x, is_max, want);
        for (int threads = 1; threads <= 3; threads += 2) { /* 3: planes split, however few */
            lgk_conv_force_split(threads > 1);
            int st = is_max ? lgk_max_pool2d_nchw(&p, x, nx, y, ny, threads)
                            : lgk_avg_pool2d_nchw(&p, x, nx, y, ny, threads);
            lgk_conv_force_split(0);
            EXPECT(st == LGK_OK);
            EXPECT(all_close(y, want, ny, 1e-5, 1e-6));
        }
    }
    free(x), free(y), free(want);
}

static void test_pool(void)
{
    /* n c h w | kh kw | stride | pads t l b r | dilation | ceil, count_include_pad */
    lgk_pool2d_params p = {2, 3, 11, 10, 3, 2, 2, 3, 1, 0, 2, 1, 2, 1, 1, 1};
    check_pool(p, 6, 4);                /* ceil mode; short rows: window by window */
    lgk_pool2d_params wide = {1, 2, 7, 45, 2, 3, 1, 2, 0, 2, 1, 3, 1, 2, 0, 0};
    check_pool(wide, 7, 23);            /* long rows: tap passes */
    /* edges: a 1x1 map; a window larger than the input, padding making it fit; no
     * images or channels; an empty map whose windows hold only padding */
    lgk_pool2d_params one = {1, 2, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
    check_pool(one, 1, 1);
    lgk_pool2d_params big = {2, 1, 2, 1, 4, 3, 2, 1, 1, 1, 1, 1, 1, 1, 0, 1};
    check_pool(big, 1, 1);
    lgk_pool2d_params none = p;
    none.n = 0;
    check_pool(none, 6, 4);
    none = p, none.c = 0;
    check_pool(none, 6, 4);
    lgk_pool2d_params empty = {1, 2, 0, 2, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 0, 1};
    check_pool(empty, 2, 2);
    /* ceil mode drops a last window that starts in the end padding, even one that
     * floor mode counts (ONNX, PyTorch) */
    lgk_pool2d_params late = {1, 1, 1, 3, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0};
    check_pool(late, 1, 3);
    late.ceil_mode = 0;
    check_pool(late, 2, 3);
    int64_t oh = 6, ow = 4, nx = p.n * p.c * p.h * p.w, ny = p.n * p.c * oh * ow;
    float *x = rand_buf(nx), *y = rand_buf(ny);
    EXPECT_STATUS(lgk_max_pool2d_nchw(&p, x, nx - 1, y, ny, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_avg_pool2d_nchw(&p, x, nx, NULL, ny, 1), LGK_ERR_NULL);
    lgk_pool2d_params bad = p;
    bad.kh = 0;
    EXPECT_STATUS(lgk_max_pool2d_nchw(&bad, x, nx, y, ny, 1), LGK_ERR_SHAPE);
    bad = p, bad.c = -1;
    EXPECT_STATUS(lgk_pool2d_out_shape(&bad, &oh, &ow), LGK_ERR_SHAPE);
    free(x), free(y);
}

/* ---- elementwise -------------------------------------------------------------------- */

/* An op's code by its name (the library lists its ops by name; codes are not fixed). */
static int code_by_name(int count, const char *(*name_of)(int), const char *name)
{
    for (int op = 0; op < count; ++op)
        if (strcmp(name_of(op), name) == 0)
            return op;
    fprintf(stderr, "no elementwise op named %s\n", name);
    exit(2);
}

static int unary_code(const char *name) { return code_by_name(lgk_unary_count(), lgk_unary_name, name); }
static int binary_code(const char *name) { return code_by_name(lgk_binary_count(), lgk_binary_name, name); }

static void test_op_names(void)
{
    EXPECT(lgk_unary_count() > 0 && lgk_binary_count() > 0);
    for (int op = 0; op < lgk_unary_count(); ++op)
        EXPECT(lgk_unary_name(op) != NULL && unary_code(lgk_unary_name(op)) == op);
    for (int op = 0; op < lgk_binary_count(); ++op)
        EXPECT(lgk_binary_name(op) != NULL && binary_code(lgk_binary_name(op)) == op);
    EXPECT(lgk_unary_name(-1) == NULL && lgk_unary_name(lgk_unary_count()) == NULL);
    EXPECT(lgk_binary_name(-1) == NULL && lgk_binary_name(lgk_binary_count()) == NULL);
    EXPECT(lgk_activation_name(LGK_ACT_NONE) == NULL);
    for (int act = LGK_ACT_RELU; act <= LGK_ACT_LAST; ++act)
        EXPECT(lgk_activation_name(act) != NULL && unary_code(lgk_activation_name(act)) >= 0);
}

static void test_unary(void)
{
    enum { N = 1000 };
    float *x = rand_buf(N), y[N];
    double want[N];
    for (int i = 0; i < N; ++i)
        x[i] *= 20.0f;
    EXPECT_STATUS(lgk_unary(unary_code("exp"), N, x, y, 1), LGK_OK);
    for (int i = 0; i < N; ++i) want[i] = exp(x[i]);
    EXPECT(all_close(y, want, N, 2e-6, 0));
    EXPECT_STATUS(lgk_unary(unary_code("tanh"), N, x, y, 1), LGK_OK);
    for (int i = 0; i < N; ++i) want[i] = tanh(x[i]);
    EXPECT(all_close(y, want, N, 2e-6, 0));
    EXPECT_STATUS(lgk_unary(unary_code("erf"), N, x, y, 1), LGK_OK);
    for (int i = 0; i < N; ++i) want[i] = erf(x[i]);
    EXPECT(all_close(y, want, N, 2e-6, 1e-30));
    for (int i = 0; i < N; ++i) x[i] = fabsf(x[i]) + 1e-3f;
    EXPECT_STATUS(lgk_unary(unary_code("log"), N, x, y, 1), LGK_OK);
    for (int i = 0; i < N; ++i) want[i] = log(x[i]);
    EXPECT(all_close(y, want, N, 2e-6, 1e-7));
    for (int i = 0; i < N; ++i) want[i] = 1.0 / sqrt(x[i]);
    EXPECT_STATUS(lgk_unary(unary_code("rsqrt"), N, x, x, 1), LGK_OK); /* in place */
    EXPECT(all_close(x, want, N, 1e-5, 0));
    EXPECT_STATUS(lgk_unary(lgk_unary_count(), N, x, y, 1), LGK_ERR_ARG);
    EXPECT_STATUS(lgk_unary(-1, N, x, y, 1), LGK_ERR_ARG);
    EXPECT_STATUS(lgk_unary(unary_code("exp"), -1, x, y, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_unary(unary_code("exp"), N, NULL, y, 1), LGK_ERR_NULL);
    EXPECT_STATUS(lgk_unary(unary_code("exp"), INT64_MAX, x, y, 1), LGK_ERR_OVERFLOW);
    free(x);
}

static void test_binary(void)
{
    /* (2, 3, 4) + (3, 1) broadcast */
    const int64_t shape[3] = {2, 3, 4}, sa[3] = {12, 4, 1}, sb[3] = {0, 1, 0};
    float *a = rand_buf(24), *b = rand_buf(3), out[24];
    double want[24];
    EXPECT_STATUS(lgk_binary(binary_code("subtract"), 3, shape, a, 24, sa, b, 3, sb, out, 24, 1), LGK_OK);
    for (int i = 0; i < 24; ++i) want[i] = (double)a[i] - b[(i / 4) % 3];
    EXPECT(all_close(out, want, 24, 0, 0));
    EXPECT_STATUS(lgk_binary(binary_code("maximum"), 3, shape, b, 3, sb, a, 24, sa, out, 24, 1), LGK_OK);
    for (int i = 0; i < 24; ++i) want[i] = fmax(a[i], b[(i / 4) % 3]);
    EXPECT(all_close(out, want, 24, 0, 0));
    /* scalar (ndim 0) */
    EXPECT_STATUS(lgk_binary(binary_code("multiply"), 0, NULL, a, 1, NULL, b, 1, NULL, out, 1, 1), LGK_OK);
    EXPECT(out[0] == a[0] * b[0]);
    /* errors */
    const int64_t big_stride[3] = {12, 4, 2}, neg[3] = {12, -4, 1}, bad_shape[3] = {2, -3, 4};
    EXPECT_STATUS(lgk_binary(binary_code("add"), 3, shape, a, 24, big_stride, b, 3, sb, out, 24, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_binary(binary_code("add"), 3, shape, a, 24, neg, b, 3, sb, out, 24, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_binary(binary_code("add"), 3, bad_shape, a, 24, sa, b, 3, sb, out, 24, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_binary(binary_code("add"), 3, shape, a, 24, sa, b, 3, sb, out, 23, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_binary(binary_code("add"), 9, shape, a, 24, sa, b, 3, sb, out, 24, 1), LGK_ERR_ARG);
    EXPECT_STATUS(lgk_binary(lgk_binary_count(), 3, shape, a, 24, sa, b, 3, sb, out, 24, 1), LGK_ERR_ARG);
    EXPECT_STATUS(lgk_binary(binary_code("add"), 3, shape, a, 24, NULL, b, 3, sb, out, 24, 1), LGK_ERR_NULL);
    EXPECT_STATUS(lgk_binary(binary_code("add"), 3, shape, a, 24, sa, NULL, 3, sb, out, 24, 1), LGK_ERR_NULL);
    free(a), free(b);
}

static void test_strided_copy(void)
{
    /* transpose of a (37, 45) matrix: exercises the blocked 2-D path */
    enum { R = 37, C = 45 };
    float *src = rand_buf(R * C), *dst = rand_buf(R * C);
    const int64_t shape[2] = {C, R}, strides[2] = {1, C};
    EXPECT_STATUS(lgk_strided_copy(2, shape, src, R * C, strides, dst, R * C), LGK_OK);
    int ok = 1;
    for (int i = 0; i < C; ++i)
        for (int j = 0; j < R; ++j)
            ok &= dst[i * R + j] == src[j * C + i];
    EXPECT(ok);
    const int64_t too_far[2] = {1, C + 1};
    EXPECT_STATUS(lgk_strided_copy(2, shape, src, R * C, too_far, dst, R * C), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_strided_copy(2, shape, src, R * C, strides, dst, R * C - 1), LGK_ERR_SHAPE);
    free(src), free(dst);
}

/* ---- norms and reductions ----------------------------------------------------------------- */

static void test_softmax_norms(void)
{
    enum { ROWS = 3, N = 50 };
    float *x = rand_buf(ROWS * N), y[ROWS * N], *g = rand_buf(N), *b = rand_buf(N);
    double want[ROWS * N];
    EXPECT_STATUS(lgk_softmax(ROWS, N, 1, x, y, 1), LGK_OK);
    for (int r = 0; r < ROWS; ++r) {
        double m = -INFINITY, s = 0;
        for (int i = 0; i < N; ++i) m = fmax(m, x[r * N + i]);
        for (int i = 0; i < N; ++i) s += exp(x[r * N + i] - m);
        for (int i = 0; i < N; ++i) want[r * N + i] = exp(x[r * N + i] - m) / s;
    }
    EXPECT(all_close(y, want, ROWS * N, 1e-5, 0));
    /* same data viewed as (1, ROWS, N) reducing the middle axis */
    EXPECT_STATUS(lgk_log_softmax(1, ROWS, N, x, y, 1), LGK_OK);
    for (int i = 0; i < N; ++i) {
        double m = -INFINITY, s = 0;
        for (int r = 0; r < ROWS; ++r) m = fmax(m, x[r * N + i]);
        for (int r = 0; r < ROWS; ++r) s += exp(x[r * N + i] - m);
        for (int r = 0; r < ROWS; ++r) want[r * N + i] = x[r * N + i] - m - log(s);
    }
    EXPECT(all_close(y, want, ROWS * N, 1e-5, 1e-6));
    EXPECT_STATUS(lgk_layer_norm(ROWS, N, x, g, b, 1e-5f, y, 1), LGK_OK);
    for (int r = 0; r < ROWS; ++r) {
        double mean = 0, var = 0;
        for (int i = 0; i < N; ++i) mean += x[r * N + i] / (double)N;
        for (int i = 0; i < N; ++i) var += (x[r * N + i] - mean) * (x[r * N + i] - mean) / N;
        for (int i = 0; i < N; ++i)
            want[r * N + i] = (x[r * N + i] - mean) / sqrt(var + 1e-5) * g[i] + b[i];
    }
    EXPECT(all_close(y, want, ROWS * N, 1e-4, 1e-5));
    EXPECT_STATUS(lgk_rms_norm(ROWS, N, x, NULL, 1e-5f, y, 1), LGK_OK);
    for (int r = 0; r < ROWS; ++r) {
        double ms = 0;
        for (int i = 0; i < N; ++i) ms += (double)x[r * N + i] * x[r * N + i] / N;
        for (int i = 0; i < N; ++i) want[r * N + i] = x[r * N + i] / sqrt(ms + 1e-5);
    }
    EXPECT(all_close(y, want, ROWS * N, 1e-4, 1e-5));
    EXPECT_STATUS(lgk_softmax(-1, N, 1, x, y, 1), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_softmax(ROWS, N, 1, x, NULL, 1), LGK_ERR_NULL);
    EXPECT_STATUS(lgk_layer_norm(INT64_MAX, 2, x, NULL, NULL, 1e-5f, y, 1), LGK_ERR_OVERFLOW);
    EXPECT_STATUS(lgk_rms_norm(ROWS, -N, x, NULL, 1e-5f, y, 1), LGK_ERR_SHAPE);
    free(x), free(g), free(b);
}

/* layer_norm (centered) or rms_norm of one row, in double. */
static void norm_ref(const float *x, int64_t n, int centered, float eps, double *want)
{
    double mean = 0, ss = 0;
    for (int64_t i = 0; centered && i < n; ++i) mean += x[i] / (double)n;
    for (int64_t i = 0; i < n; ++i) ss += (x[i] - mean) * (x[i] - mean);
    for (int64_t i = 0; i < n; ++i) want[i] = (x[i] - mean) / sqrt(ss / (double)n + eps);
}

/* Rows far outside [1e-19, 1.8e19], where squares overflow or underflow a float, and
 * rows with a mean much larger than their spread. */
static void test_norm_ranges(void)
{
    enum { N = 300 };
    const float scales[] = {1e-30f, 1e-20f, 1.0f, 1e19f, 1e20f, 1e30f, 1e38f};
    const float epsilons[] = {1e-5f, 0.0f};
    float *unit = rand_buf(N), x[N], y[N];
    double want[N];
    for (size_t k = 0; k < sizeof scales / sizeof scales[0]; ++k)
        for (int e = 0; e < 2; ++e)
            for (int offset = 0; offset < 2; ++offset) {
                for (int i = 0; i < N; ++i) /* offset: |mean| 100x the spread (not at 1e38) */
                    x[i] = unit[i] * scales[k] * (offset && k < 6 ? 0.01f : 1.0f)
                           + (offset && k < 6 ? scales[k] : 0.0f);
                float eps = epsilons[e];
                int tiny = scales[k] < 1e-10f;
                EXPECT_STATUS(lgk_layer_norm(1, N, x, NULL, NULL, eps, y, 1), LGK_OK);
                norm_ref(x, N, 1, eps, want);
                EXPECT(all_close(y, want, N, offset ? 1e-3 : 1e-4, tiny && eps > 0 ? 1e-6 : 1e-5));
                EXPECT_STATUS(lgk_rms_norm(1, N, x, NULL, eps, y, 1), LGK_OK);
                norm_ref(x, N, 0, eps, want);
                EXPECT(all_close(y, want, N, 1e-5, tiny && eps > 0 ? 1e-6 : 1e-6));
            }
    free(unit);
}

/* sigmoid against double over [-100, 100]: a few ulp everywhere (subnormals: within
 * one step), and correctly
 * rounded just below 1 (x in [10, 20]), where float32 steps by 2^-24. */
static void test_sigmoid_tails(void)
{
    enum { N = 20001 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    for (int i = 0; i < N; ++i) x[i] = -100.0f + 0.01f * (float)i;
    EXPECT_STATUS(lgk_unary(unary_code("sigmoid"), N, x, y, 1), LGK_OK);
    int bad = 0;
    for (int i = 0; i < N; ++i) {
        double v = x[i], want = v >= 0 ? 1.0 / (1.0 + exp(-v)) : exp(v) / (1.0 + exp(v));
        double err = fabs(y[i] - want);
        if (v >= 10 && v <= 20 ? err > 0.5 * 5.9604645e-8 * 1.001 : err > 4 * 1.1920929e-7 * want + 1.5e-45)
            ++bad;
    }
    EXPECT(bad == 0);
    free(x), free(y);
}

static void test_reduce(void)
{
    enum { OUTER = 3, R = 70, INNER = 5 };
    float *x = rand_buf(OUTER * R * INNER), y[OUTER * INNER];
    double want[OUTER * INNER];
    static const int ops[] = {LGK_REDUCE_SUM, LGK_REDUCE_MEAN, LGK_REDUCE_MAX, LGK_REDUCE_MIN};
    for (int k = 0; k < 4; ++k) {
        for (int inner = 1; inner <= INNER; inner += INNER - 1) {
            EXPECT_STATUS(lgk_reduce(ops[k], OUTER, R, inner, x, y), LGK_OK);
            for (int o = 0; o < OUTER; ++o)
                for (int i = 0; i < inner; ++i) {
                    double acc = ops[k] >= LGK_REDUCE_MAX ? x[o * R * inner + i] : 0.0;
                    for (int r = 0; r < R; ++r) {
                        double v = x[(o * R + r) * inner + i];
                        acc = ops[k] == LGK_REDUCE_MAX ? fmax(acc, v)
                              : ops[k] == LGK_REDUCE_MIN ? fmin(acc, v) : acc + v;
                    }
                    want[o * inner + i] = ops[k] == LGK_REDUCE_MEAN ? acc / R : acc;
                }
            EXPECT(all_close(y, want, OUTER * inner, 1e-5, 1e-6));
        }
    }
    EXPECT_STATUS(lgk_reduce(LGK_REDUCE_MAX, OUTER, 0, INNER, x, y), LGK_ERR_SHAPE);
    EXPECT_STATUS(lgk_reduce(LGK_REDUCE_SUM, OUTER, 0, INNER, x, y), LGK_OK);
    EXPECT(y[0] == 0.0f);
    EXPECT_STATUS(lgk_reduce(LGK_REDUCE_MEAN, 1, 0, 1, x, y), LGK_OK);
    EXPECT(isnan(y[0]));
    EXPECT_STATUS(lgk_reduce(9, OUTER, R, INNER, x, y), LGK_ERR_ARG);
    EXPECT_STATUS(lgk_reduce(LGK_REDUCE_SUM, OUTER, R, INNER, NULL, y), LGK_ERR_NULL);
    free(x);
}

static void test_strerror(void)
{
    for (int s = LGK_OK; s <= LGK_ERR_THREAD + 1; ++s)
        EXPECT(lgk_strerror(s) != NULL && strlen(lgk_strerror(s)) > 0);
}

#if defined(__x86_64__)
#include <xmmintrin.h>
/* Subnormal operands: the GEMM and softmax flush them (fast) and leave the caller's
 * floating-point mode as it was; the results stay within the usual tolerance. */
static void test_subnormals(void)
{
    unsigned before = _mm_getcsr();
    enum { M = 5, N = 7, K = 9 };
    float a[M * K], b[K * N], c[M * N], x[16], y[16];
    double want[M * N] = {0};
    for (int i = 0; i < M * K; ++i)
        a[i] = (i % 3 == 0) ? 1e-40f : (float)(i % 5) - 2.0f;
    for (int i = 0; i < K * N; ++i)
        b[i] = (float)(i % 7) - 3.0f;
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n)
            for (int k = 0; k < K; ++k)
                want[m * N + n] += (double)a[m * K + k] * b[k * N + n];
    EXPECT_STATUS(lgk_sgemm(M, N, K, a, M * K, K, 1, b, K * N, N, 1, c, M * N, N, NULL, 0,
                            LGK_BIAS_NONE, LGK_ACT_NONE, 1), LGK_OK);
    EXPECT(all_close(c, want, M * N, 1e-5, 1e-30));
    for (int i = 0; i < 16; ++i)
        x[i] = i < 8 ? 0.0f : -100.0f; /* exp(-100) relative: a subnormal share */
    EXPECT_STATUS(lgk_softmax(1, 16, 1, x, y, 1), LGK_OK);
    for (int i = 0; i < 16; ++i)
        EXPECT(i < 8 ? fabsf(y[i] - 0.125f) < 1e-6f : y[i] >= 0.0f && y[i] < 1e-37f);
    EXPECT(_mm_getcsr() == before);
}
#else
static void test_subnormals(void) {}
#endif

#include "test_conv.inc"
#include "test_conv_bands.inc"
#include "test_conv_direct.inc"
#include "test_conv_winograd.inc"
#include "test_conv_residual.inc"
#include "test_depthwise.inc"
#include "test_elementwise.inc"
#include "test_threads.inc"
#include "test_qgemm.inc"
#include "test_grid_split.inc"
#include "test_gemm_direct.inc"
#include "test_gemm_pack_in_tiles.inc"
#include "test_gemm_cols.inc"
#include "test_gemm_lanes.inc"
#include "test_pool_3s2.inc"
#include "test_qdwconv.inc"
#include "test_qconv_vnni.inc"
#include "test_qim2col.inc"
#include "test_qpool.inc"
#include "test_qelementwise.inc"
#include "test_qrescale.inc"
#include "test_movement_int8.inc"
#include "test_gemm_softmax.inc"

int main(void)
{
    test_gemm_values();
    test_gemm_batched();
    test_gemm_small_n();
    test_gemm_batched_matvec();
    test_gemm_errors();
    test_gemm_prepacked_values();
    test_gemm_lone_row();
    test_gemm_prepacked_errors();
    test_conv();
    test_conv_edges();
    test_pool();
    test_op_names();
    test_unary();
    test_binary();
    test_strided_copy();
    test_softmax_norms();
    test_norm_ranges();
    test_sigmoid_tails();
    test_reduce();
    test_strerror();
    test_subnormals();
    test_conv_more();
    test_conv_l2_bands();
    test_conv_direct();
    test_conv_winograd();
    test_conv_residual();
    test_gemm_packed_panels();
    test_depthwise_more();
    test_elementwise_more();
    test_thread_pool();
    test_qgemm_values();
    test_qgemm_errors();
    test_grid_split();
    test_gemm_direct();
    test_gemm_pack_in_tiles();
    test_gemm_cols();
    test_gemm_lanes();
    test_pool_3s2();
    test_qconv();
    test_qdwconv();
    test_qconv_vnni();
    test_qim2col();
    test_qpool();
    test_qadd();
    test_quantize();
    test_cast_to_byte();
    test_qrescale_all();
    test_movement_elems();
    test_gemm_softmax();
    lgk_free_scratch(); /* the pool is empty afterwards: nothing left for LSan */
    lgk_free_scratch();
    printf("test_kernels: %d checks, %d failures (gemm isa %d)\n", checks, failures, lgk_gemm_isa());
    return failures == 0 ? 0 : 1;
}
