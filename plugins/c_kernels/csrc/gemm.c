/*
 * gemm.c - single-precision GEMM: C = act(A @ B + bias).
 *
 * Classic Goto/BLIS structure. For each NC-wide column block of B and each
 * KC-deep slice of K, a KC x NC panel of B is packed into NR-wide slivers;
 * for each MC-tall row block of A, an MC x KC panel of A is packed into
 * MR-tall slivers; the macro-kernel then runs an MR x NR register-blocked
 * micro-kernel over every sliver pair. Packing makes the micro-kernel's loads
 * unit-stride and aligned whatever the operand strides are (transposed B is
 * free), and the block sizes keep the A panel in L2 and one B sliver in L1.
 *
 * A constant B can be packed once into the same panel layout
 * (lgk_sgemm_pack_b), after which lgk_sgemm_prepacked skips the B packing.
 *
 * C is row-major, so the micro-kernels vectorize along N (B rows) and
 * broadcast A values. The micro-kernel family (AVX-512, AVX2+FMA, portable)
 * is chosen once at run time from CPUID; no -march flags are needed.
 */
#include <stdatomic.h>

#include "lgk_internal.h"
#include "lgk_parallel.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define LGK_X86_KERNELS 1
#include <immintrin.h>
#endif

/* A bias and an activation applied to a finished tile in registers, before its one
 * store: a separate pass re-read every block of C (mc x nc, up to 1 MiB) from L2 or
 * memory, 25-40% of a 1x1 conv with 16-64 input channels (MobileNetV2's expansions). */
typedef struct {
    const float *row_bias; /* the bias of the tile's row 0, one per row, or NULL */
    const float *col_bias; /* the bias of the tile's column 0, one per column, or NULL */
    int activation;        /* LGK_ACT_NONE, LGK_ACT_RELU or LGK_ACT_RELU6 */
    int add_c;             /* C held an addend: added after the bias, before the activation */
    int far_c;             /* C far larger than the caches (AVX-512 only; see avx512_rows) */
} tile_ep;

/* Computes the full MR x NR tile c = a_sliver @ b_sliver (+ c if accumulate), then
 * applies ep (NULL: none). */
typedef void (*lgk_ukernel)(int64_t kc, const float *a, const float *b, float *c,
                            int64_t ldc, int accumulate, const tile_ep *ep);
/* The same for only the first `rows` (1 .. MR-1) rows of the tile. */
typedef void (*lgk_edge_ukernel)(int rows, int64_t kc, const float *a, const float *b, float *c,
                                 int64_t ldc, int accumulate, const tile_ep *ep);
/* The tile of `rows` (1 .. MR) rows with A read in place: A[i, k] = a[i * lda + k]. */
typedef void (*lgk_direct_ukernel)(int rows, int64_t kc, const float *a, int64_t lda,
                                   const float *b, float *c, int64_t ldc, int accumulate,
                                   const tile_ep *ep);
/* The tile of `rows` (1 .. MR) rows from a packed A sliver with B read in place, row k
 * at b + k * ldb (NR floats), which it also packs into the sliver at `pack` for the
 * tiles after it, prefetching the rows of a later sliver. */
typedef void (*lgk_direct_b_ukernel)(int rows, int64_t kc, const float *a, const float *b,
                                     int64_t ldb, float *pack, float *c, int64_t ldc,
                                     int accumulate, const tile_ep *ep);

/* The tile of `rows` (1 .. MR) rows and only its first `cols` (1 .. NR - 1) columns, A
 * packed (lda == 0) or read in place (lda > 0, as the direct kernel), from a whole
 * packed B sliver: C outside the columns is neither read nor written. */
typedef void (*lgk_cols_ukernel)(int rows, int cols, int64_t kc, const float *a, int64_t lda,
                                 const float *b, float *c, int64_t ldc, int accumulate,
                                 const tile_ep *ep);

/* ep on one value v whose C element held c_old, as lgk_activate does it (NaN stays NaN,
 * -0 becomes +0). */
static inline float tile_ep_value(const tile_ep *ep, int i, int j, float v, float c_old)
{
    v += ep->row_bias != NULL ? ep->row_bias[i] : 0.0f;
    v += ep->col_bias != NULL ? ep->col_bias[j] : 0.0f;
    if (ep->add_c)
        v += c_old;
    if (ep->activation == LGK_ACT_RELU)
        return lgk_reluf(v);
    return ep->activation == LGK_ACT_RELU6 ? lgk_relu6f(v) : v;
}

typedef struct {
    int isa;
    int mr, nr;
    int64_t kc, mc, nc; /* cache blocking; mc % mr == 0, nc % nr == 0 */
    lgk_ukernel kernel;
    lgk_edge_ukernel edge; /* NULL: edge rows go through a scratch tile */
    lgk_direct_ukernel direct; /* NULL: A is always packed */
    lgk_direct_b_ukernel direct_b; /* NULL: B is always packed */
    lgk_cols_ukernel cols; /* NULL: a partial sliver goes through a scratch tile */
} gemm_impl;

#define MAX_MR 16
#define MAX_NR 32

/* ---- micro-kernels ---------------------------------------------------------- */

/* 4 x 8 keeps the 8 accumulator vectors in SSE/NEON registers (measured 38
 * GFLOP/s; a 4 x 16 tile spills and drops to 12). */
#define GEN_MR 4
#define GEN_NR 8

/* Portable kernel: fixed trip counts let any compiler keep acc in vector
 * registers (SSE on baseline x86-64, NEON on arm64). */
static void ukernel_generic(int64_t kc, const float *restrict a, const float *restrict b,
                            float *restrict c, int64_t ldc, int accumulate, const tile_ep *ep)
{
    float acc[GEN_MR][GEN_NR] = {{0.0f}};
    for (int64_t k = 0; k < kc; ++k) {
        for (int i = 0; i < GEN_MR; ++i)
            for (int j = 0; j < GEN_NR; ++j)
                acc[i][j] += a[i] * b[j];
        a += GEN_MR;
        b += GEN_NR;
    }
    for (int i = 0; i < GEN_MR; ++i)
        for (int j = 0; j < GEN_NR; ++j) {
            float v = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
            c[i * ldc + j] = ep != NULL ? tile_ep_value(ep, i, j, v, c[i * ldc + j]) : v;
        }
}

#ifdef LGK_X86_KERNELS
/* AVX2 + FMA: 6 x 16 tile = 12 ymm accumulators + 2 B vectors + 1 broadcast
 * of the 16 registers. */
#define AVX2_MR 6
#define AVX2_NR 16

/* tile_ep_value on the 8 columns [j, j + 8) of row i, whose C row is ci. */
__attribute__((target("avx2,fma"), always_inline))
static inline __m256 avx2_ep(const tile_ep *ep, int i, int j, const float *ci, __m256 v)
{
    if (ep->row_bias != NULL)
        v = _mm256_add_ps(v, _mm256_set1_ps(ep->row_bias[i]));
    if (ep->col_bias != NULL)
        v = _mm256_add_ps(v, _mm256_loadu_ps(ep->col_bias + j));
    if (ep->add_c)
        v = _mm256_add_ps(v, _mm256_loadu_ps(ci + j));
    if (ep->activation != LGK_ACT_NONE) { /* x <= 0 and x >= 6 are false for NaN */
        __m256 zero = _mm256_setzero_ps();
        v = _mm256_blendv_ps(v, zero, _mm256_cmp_ps(v, zero, _CMP_LE_OQ));
        if (ep->activation == LGK_ACT_RELU6) {
            __m256 six = _mm256_set1_ps(6.0f);
            v = _mm256_blendv_ps(v, six, _mm256_cmp_ps(v, six, _CMP_GE_OQ));
        }
    }
    return v;
}

/* `rows` is a constant at every call site, so the loops unroll fully and acc
 * lives in registers; one body serves the full tile and the edge-row kernels. */
__attribute__((target("avx2,fma"), always_inline))
static inline void avx2_rows(const int rows, int64_t kc, const float *restrict a,
                             const float *restrict b, float *restrict c, int64_t ldc,
                             int accumulate, const tile_ep *ep)
{
    __m256 acc[AVX2_MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < rows; ++i)
        acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
        for (int i = 0; i < rows; ++i) {
            __m256 ai = _mm256_broadcast_ss(a + i);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
        a += AVX2_MR;
        b += AVX2_NR;
    }
#pragma GCC unroll 6
    for (int i = 0; i < rows; ++i) {
        float *ci = c + i * ldc;
        if (accumulate) {
            acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_loadu_ps(ci));
            acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_loadu_ps(ci + 8));
        }
        if (ep != NULL) {
            acc[i][0] = avx2_ep(ep, i, 0, ci, acc[i][0]);
            acc[i][1] = avx2_ep(ep, i, 8, ci, acc[i][1]);
        }
        _mm256_storeu_ps(ci, acc[i][0]);
        _mm256_storeu_ps(ci + 8, acc[i][1]);
    }
}

__attribute__((target("avx2,fma")))
static void ukernel_avx2(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                         int accumulate, const tile_ep *ep)
{
    avx2_rows(AVX2_MR, kc, a, b, c, ldc, accumulate, ep);
}

#define AVX2_EDGE_CASE(R) \
    case R: avx2_rows(R, kc, a, b, c, ldc, accumulate, ep); break;

__attribute__((target("avx2,fma")))
static void edge_avx2(int rows, int64_t kc, const float *a, const float *b, float *c,
                      int64_t ldc, int accumulate, const tile_ep *ep)
{
    switch (rows) {
    AVX2_EDGE_CASE(1) AVX2_EDGE_CASE(2) AVX2_EDGE_CASE(3) AVX2_EDGE_CASE(4) AVX2_EDGE_CASE(5)
    default: break;
    }
}

/* AVX-512: 12 x 32 tile = 24 zmm accumulators; per k, 2 B loads feed 24
 * FMAs whose A operand is an embedded broadcast from memory. */
#define AVX512_MR 12
#define AVX512_NR 32
#define C_PREFETCH_MAX_KC 32
#define C_PREFETCH_FAR_MAX_KC 64
#define B_PREFETCH_FAR 64

/* relu / relu6 of v as tile_ep_value applies them (NaN stays NaN, -0 gives +0): vmaxps /
 * vminps return their second operand where either is NaN or both are zeros, so max(0, x)
 * keeps a NaN x and gives x for -0, which adding +0 turns into +0. Three plain ops where
 * compares into mask registers and masked moves took four: in MobileNetV2 (1 thread, per
 * step in the model) the 1x1 convs with relu6 of 16 -> 96 channels at 112^2 505 -> 459 us,
 * 24 -> 144 at 56^2 250 -> 233, 320 -> 1280 at 7^2 396 -> 380. */
__attribute__((target("avx512f"), always_inline))
static inline __m512 avx512_clamp(int activation, __m512 v)
{
    if (activation != LGK_ACT_NONE) {
        const __m512 zero = _mm512_setzero_ps();
        v = _mm512_max_ps(zero, v);
        if (activation == LGK_ACT_RELU6)
            v = _mm512_min_ps(_mm512_set1_ps(6.0f), v);
        v = _mm512_add_ps(v, zero);
    }
    return v;
}

/* tile_ep_value on the lanes of mask of the 16 columns [j, j + 16) of row i, whose C row
 * is ci (the others are past C's columns: neither the column bias nor C is read there). */
__attribute__((target("avx512f"), always_inline))
static inline __m512 avx512_ep_masked(const tile_ep *ep, int i, int64_t j, const float *ci,
                                      __m512 v, __mmask16 mask)
{
    if (ep->row_bias != NULL)
        v = _mm512_add_ps(v, _mm512_set1_ps(ep->row_bias[i]));
    if (ep->col_bias != NULL)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, ep->col_bias + j));
    if (ep->add_c)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, ci + j));
    return avx512_clamp(ep->activation, v);
}

/* The same on all 16 lanes (a whole tile's columns). */
__attribute__((target("avx512f"), always_inline))
static inline __m512 avx512_ep(const tile_ep *ep, int i, int64_t j, const float *ci, __m512 v)
{
    return avx512_ep_masked(ep, i, j, ci, v, (__mmask16)0xffff);
}

/* Edge tiles of M (e.g. the last 4 rows of M = 64) run with exactly their rows
 * instead of a full 12-row tile into scratch: at M = 64 that was 1/6 of the work. */
/* A[i, k] is a[i * a_rs + k * a_ks]: a packed sliver (1, MR) or, for the direct
 * kernel, A's rows in place (lda, 1). */
__attribute__((target("avx512f"), always_inline))
static inline void avx512_rows(const int rows, int64_t kc, const float *restrict a,
                               const int64_t a_rs, const int64_t a_ks,
                               const float *restrict b, const int64_t b_ks,
                               float *restrict pack, float *restrict c, int64_t ldc,
                               int accumulate, const tile_ep *ep)
{
    __m512 acc[AVX512_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < rows; ++i) {
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
    }
    /* Few multiply-adds per C element: the same rows of the next sliver (the tile after
     * this column of tiles) into L2, so that a C still in memory (a model's output
     * buffer last used long ago) arrives before its stores, which otherwise each wait on
     * a read for ownership. A 1x1 conv of 16 -> 96 channels at 112^2 with its output
     * flushed from the caches took 646 us without this, 514 with, 482 with C in cache;
     * with C in cache the prefetches cost 2-4%, so deeper K goes without, unless C is far
     * larger than the caches (tile_ep.far_c): attention's scores, 6 heads of 1500 x 1500
     * with K = 64, 19.8 -> 17.1 ms (1 thread). */
    if (kc <= C_PREFETCH_MAX_KC || (kc <= C_PREFETCH_FAR_MAX_KC && ep != NULL && ep->far_c)) {
#pragma GCC unroll 12
        for (int i = 0; i < rows; ++i) {
            _mm_prefetch((const char *)(c + i * ldc + AVX512_NR), _MM_HINT_T1);
            _mm_prefetch((const char *)(c + i * ldc + AVX512_NR + 16), _MM_HINT_T1);
        }
    }
    for (int64_t k = 0; k < kc; ++k) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        if (pack == NULL) { /* B packed (a B in place may also be NR floats wide) */
            _mm_prefetch((const char *)(b + 8 * AVX512_NR), _MM_HINT_T0);
            /* Both lines of the k step 64 on into L2: a layer's prepacked weights come from
             * memory (the model's other weights evicted them since its last run), and the
             * L1 prefetch 8 steps on is too late for memory's latency. MobileNetV2's 1x1
             * convs on 7x7 maps (pixels as rows, B = W^T streamed once): 1764 -> 1671 us
             * in the model, ResNet-50 76.4 -> 75.5 ms. */
            _mm_prefetch((const char *)(b + B_PREFETCH_FAR * AVX512_NR), _MM_HINT_T1);
            _mm_prefetch((const char *)(b + B_PREFETCH_FAR * AVX512_NR + 16), _MM_HINT_T1);
        } else { /* B in place: packed for the next tiles; the row of the sliver 4 on, into
                  * L2 (1 on into L1 left the 12-row tile waiting on 16-32 rows from L3: 32 ->
                  * 16 channels at 112^2 0.93x, 256 -> 64 at 56^2 0.80x the time with this) */
            _mm512_store_ps(pack, b0);
            _mm512_store_ps(pack + 16, b1);
            pack += AVX512_NR;
            _mm_prefetch((const char *)(b + 4 * AVX512_NR), _MM_HINT_T1);
            _mm_prefetch((const char *)(b + 4 * AVX512_NR + 16), _MM_HINT_T1);
        }
        /* A packed: the same k step of the next sliver (the next row tile's) into L2. A
         * layer's prepacked weights come from memory, a sliver per tile (1 MiB for ResNet-50's
         * 1x1 convs of 256 <-> 1024 channels), which the hardware prefetchers fetched too
         * late: those convs on 14 x 14 maps took 959-986 and 937-948 us in the model without
         * this, 931-961 and 914-926 with (1 thread). Past a panel's last sliver this is the
         * next row block's first (prepacked) or other scratch: a prefetch never faults. */
        if (a_ks == AVX512_MR)
            _mm_prefetch((const char *)(a + AVX512_MR * kc), _MM_HINT_T1);
#pragma GCC unroll 12
        for (int i = 0; i < rows; ++i) {
            __m512 ai = _mm512_set1_ps(a[i * a_rs]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
        a += a_ks;
        b += b_ks;
    }
#pragma GCC unroll 12
    for (int i = 0; i < rows; ++i) {
        float *ci = c + i * ldc;
        if (accumulate) {
            acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_loadu_ps(ci));
            acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_loadu_ps(ci + 16));
        }
        if (ep != NULL) {
            acc[i][0] = avx512_ep(ep, i, 0, ci, acc[i][0]);
            acc[i][1] = avx512_ep(ep, i, 16, ci, acc[i][1]);
        }
        _mm512_storeu_ps(ci, acc[i][0]);
        _mm512_storeu_ps(ci + 16, acc[i][1]);
    }
}

__attribute__((target("avx512f")))
static void ukernel_avx512(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                           int accumulate, const tile_ep *ep)
{
    avx512_rows(AVX512_MR, kc, a, 1, AVX512_MR, b, AVX512_NR, NULL, c, ldc, accumulate, ep);
}

#define AVX512_EDGE_CASE(R) \
    case R: avx512_rows(R, kc, a, 1, AVX512_MR, b, AVX512_NR, NULL, c, ldc, accumulate, ep); break;

__attribute__((target("avx512f")))
static void edge_avx512(int rows, int64_t kc, const float *a, const float *b, float *c,
                        int64_t ldc, int accumulate, const tile_ep *ep)
{
    switch (rows) {
    AVX512_EDGE_CASE(1) AVX512_EDGE_CASE(2) AVX512_EDGE_CASE(3) AVX512_EDGE_CASE(4)
    AVX512_EDGE_CASE(5) AVX512_EDGE_CASE(6) AVX512_EDGE_CASE(7) AVX512_EDGE_CASE(8)
    AVX512_EDGE_CASE(9) AVX512_EDGE_CASE(10) AVX512_EDGE_CASE(11)
    default: break;
    }
}

#define AVX512_DIRECT_CASE(R) \
    case R: avx512_rows(R, kc, a, lda, 1, b, AVX512_NR, NULL, c, ldc, accumulate, ep); break;

__attribute__((target("avx512f")))
static void direct_avx512(int rows, int64_t kc, const float *a, int64_t lda, const float *b,
                          float *c, int64_t ldc, int accumulate, const tile_ep *ep)
{
    switch (rows) {
    AVX512_DIRECT_CASE(1) AVX512_DIRECT_CASE(2) AVX512_DIRECT_CASE(3) AVX512_DIRECT_CASE(4)
    AVX512_DIRECT_CASE(5) AVX512_DIRECT_CASE(6) AVX512_DIRECT_CASE(7) AVX512_DIRECT_CASE(8)
    AVX512_DIRECT_CASE(9) AVX512_DIRECT_CASE(10) AVX512_DIRECT_CASE(11)
    AVX512_DIRECT_CASE(12)
    default: break;
    }
}

/* The first `nv` (1 or 2) vectors of a tile's rows, the last one's lanes limited to
 * `last`: a partial sliver (14 x 14 maps: 196 = 6 x 32 + 4 columns) ran a whole 32-wide
 * tile into scratch, 1/7 of the multiply-adds for 4 columns, and copied it out. The
 * products and sums per element are the full tile's, in the same order. */
__attribute__((target("avx512f"), always_inline))
static inline void avx512_cols(const int rows, const int nv, __mmask16 last, int64_t kc,
                               const float *restrict a, const int64_t a_rs, const int64_t a_ks,
                               const float *restrict b, float *restrict c, int64_t ldc,
                               int accumulate, const tile_ep *ep)
{
    __m512 acc[AVX512_MR][2];
    __mmask16 mask[2] = {nv == 1 ? last : (__mmask16)0xffff, last};
#pragma GCC unroll 12
    for (int i = 0; i < rows; ++i)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = nv == 2 ? _mm512_loadu_ps(b + 16) : b0;
#pragma GCC unroll 12
        for (int i = 0; i < rows; ++i) {
            __m512 ai = _mm512_set1_ps(a[i * a_rs]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            if (nv == 2)
                acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
        a += a_ks;
        b += AVX512_NR;
    }
#pragma GCC unroll 12
    for (int i = 0; i < rows; ++i) {
        float *ci = c + i * ldc;
#pragma GCC unroll 2
        for (int v = 0; v < nv; ++v) {
            if (accumulate)
                acc[i][v] = _mm512_add_ps(acc[i][v], _mm512_maskz_loadu_ps(mask[v], ci + 16 * v));
            if (ep != NULL)
                acc[i][v] = avx512_ep_masked(ep, i, 16 * v, ci, acc[i][v], mask[v]);
            _mm512_mask_storeu_ps(ci + 16 * v, mask[v], acc[i][v]);
        }
    }
}

/* At most 8 columns, A read in place: one ymm per row, of which a Zen 4 core does two
 * multiply-adds a cycle to one zmm (half a 16-wide tile's time). Same sums as
 * avx512_cols. A packed A takes lanes_cols. */
__attribute__((target("avx2,fma"), always_inline))
static inline void ymm_cols(const int rows, int cols, int64_t kc, const float *restrict a,
                            const int64_t a_rs, const int64_t a_ks, const float *restrict b,
                            float *restrict c, int64_t ldc, int accumulate, const tile_ep *ep)
{
    __m256 acc[AVX512_MR];
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(cols),
                                      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 12
    for (int i = 0; i < rows; ++i)
        acc[i] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        __m256 b0 = _mm256_loadu_ps(b);
#pragma GCC unroll 12
        for (int i = 0; i < rows; ++i)
            acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + i * a_rs), b0, acc[i]);
        a += a_ks;
        b += AVX512_NR;
    }
    __m256 zero = _mm256_setzero_ps(), six = _mm256_set1_ps(6.0f);
#pragma GCC unroll 12
    for (int i = 0; i < rows; ++i) {
        float *ci = c + i * ldc;
        __m256 v = acc[i];
        if (accumulate)
            v = _mm256_add_ps(v, _mm256_maskload_ps(ci, mask));
        if (ep != NULL) {
            if (ep->row_bias != NULL)
                v = _mm256_add_ps(v, _mm256_set1_ps(ep->row_bias[i]));
            if (ep->col_bias != NULL)
                v = _mm256_add_ps(v, _mm256_maskload_ps(ep->col_bias, mask));
            if (ep->add_c)
                v = _mm256_add_ps(v, _mm256_maskload_ps(ci, mask));
            if (ep->activation != LGK_ACT_NONE) /* x <= 0 and x >= 6 are false for NaN */
                v = _mm256_blendv_ps(v, zero, _mm256_cmp_ps(v, zero, _CMP_LE_OQ));
            if (ep->activation == LGK_ACT_RELU6)
                v = _mm256_blendv_ps(v, six, _mm256_cmp_ps(v, six, _CMP_GE_OQ));
        }
        _mm256_maskstore_ps(ci, mask, v);
    }
}

/* The transposed epilogue of lanes_cols: v holds column j of the tile's rows in its lanes
 * (rows past `rmask` are ignored), old the C values there (read only when used); the sums
 * and their order are tile_ep_value's. */
__attribute__((target("avx512f"), always_inline))
static inline __m512 lanes_ep(const tile_ep *ep, int j, __mmask16 rmask, __m512 v, __m512 old)
{
    if (ep->row_bias != NULL)
        v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(rmask, ep->row_bias));
    if (ep->col_bias != NULL)
        v = _mm512_add_ps(v, _mm512_set1_ps(ep->col_bias[j]));
    if (ep->add_c)
        v = _mm512_add_ps(v, old);
    return avx512_clamp(ep->activation, v);
}

/* At most 8 columns from a packed A sliver: the sliver's MR rows in the lanes of one zmm
 * (its k step is MR floats in a row) and one accumulator per column, each k one load of
 * A and a broadcast of B per column. ymm_cols's ymm per row spent 12 multiply-adds of
 * 8 lanes a k step on 4 columns (14 x 14 maps: 196 = 6 x 32 + 4), these spend `cols` of
 * 16 lanes (12 used). Each element is the same chain of multiply-adds, k ascending from
 * zero, then the same epilogue sums as avx512_cols; the tile goes out through a
 * transposing scratch, C past `cols` and `rows` neither read nor written. ResNet-50's 1x1
 * convs of 256 -> 1024 channels on 14 x 14 maps, alone: 946 -> 919 us, in the model
 * 1005 -> 962 (1 thread). */
__attribute__((target("avx512f"), always_inline))
static inline void lanes_cols(const int cols, int rows, int64_t kc, const float *restrict a,
                              const float *restrict b, float *restrict c, int64_t ldc,
                              int accumulate, const tile_ep *ep)
{
    const __mmask16 lanes = (__mmask16)((1u << AVX512_MR) - 1u);
    const __mmask16 rmask = (__mmask16)((1u << rows) - 1u);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < cols; ++j)
        acc[j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
        __m512 av = _mm512_maskz_loadu_ps(lanes, a);
#pragma GCC unroll 8
        for (int j = 0; j < cols; ++j)
            acc[j] = _mm512_fmadd_ps(av, _mm512_set1_ps(b[j]), acc[j]);
        a += AVX512_MR;
        b += AVX512_NR;
    }
    _Alignas(64) float t[8][16];
    int reads_c = accumulate || (ep != NULL && ep->add_c);
    if (reads_c)
        for (int i = 0; i < rows; ++i)
            for (int j = 0; j < cols; ++j)
                t[j][i] = c[i * ldc + j];
#pragma GCC unroll 8
    for (int j = 0; j < cols; ++j) {
        __m512 old = reads_c ? _mm512_maskz_load_ps(rmask, t[j]) : _mm512_setzero_ps();
        __m512 v = acc[j];
        if (accumulate)
            v = _mm512_add_ps(v, old);
        if (ep != NULL)
            v = lanes_ep(ep, j, rmask, v, old);
        _mm512_store_ps(t[j], v);
    }
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j)
            c[i * ldc + j] = t[j][i];
}

#define LANES_COLS_CASE(N) \
    case N: lanes_cols(N, rows, kc, a, b, c, ldc, accumulate, ep); break;

__attribute__((target("avx512f")))
static void lanes_cols_avx512(int rows, int cols, int64_t kc, const float *a, const float *b,
                              float *c, int64_t ldc, int accumulate, const tile_ep *ep)
{
    switch (cols) {
    LANES_COLS_CASE(1) LANES_COLS_CASE(2) LANES_COLS_CASE(3) LANES_COLS_CASE(4)
    LANES_COLS_CASE(5) LANES_COLS_CASE(6) LANES_COLS_CASE(7) LANES_COLS_CASE(8)
    default: break;
    }
}

#define AVX512_COLS_CASE(R)                                                                  \
    case R:                                                                                  \
        if (cols <= 8)                                                                       \
            ymm_cols(R, cols, kc, a, a_rs, a_ks, b, c, ldc, accumulate, ep);                 \
        else if (cols > 16)                                                                  \
            avx512_cols(R, 2, last, kc, a, a_rs, a_ks, b, c, ldc, accumulate, ep);           \
        else                                                                                 \
            avx512_cols(R, 1, last, kc, a, a_rs, a_ks, b, c, ldc, accumulate, ep);           \
        break;

__attribute__((target("avx512f,avx2,fma")))
static void cols_avx512(int rows, int cols, int64_t kc, const float *a, int64_t lda,
                        const float *b, float *c, int64_t ldc, int accumulate, const tile_ep *ep)
{
    int tail = cols > 16 ? cols - 16 : cols; /* 1 .. 16 lanes in the last vector */
    __mmask16 last = (__mmask16)((1u << tail) - 1u);
    int64_t a_rs = lda > 0 ? lda : 1, a_ks = lda > 0 ? 1 : AVX512_MR;
    if (lda == 0 && cols <= 8) { /* A packed: its k steps are the rows' lanes */
        lanes_cols_avx512(rows, cols, kc, a, b, c, ldc, accumulate, ep);
        return;
    }
    switch (rows) {
    AVX512_COLS_CASE(1) AVX512_COLS_CASE(2) AVX512_COLS_CASE(3) AVX512_COLS_CASE(4)
    AVX512_COLS_CASE(5) AVX512_COLS_CASE(6) AVX512_COLS_CASE(7) AVX512_COLS_CASE(8)
    AVX512_COLS_CASE(9) AVX512_COLS_CASE(10) AVX512_COLS_CASE(11) AVX512_COLS_CASE(12)
    default: break;
    }
}

#define AVX512_DIRECT_B_CASE(R) \
    case R: avx512_rows(R, kc, a, 1, AVX512_MR, b, ldb, pack, c, ldc, accumulate, ep); break;

__attribute__((target("avx512f")))
static void direct_b_avx512(int rows, int64_t kc, const float *a, const float *b, int64_t ldb,
                            float *pack, float *c, int64_t ldc, int accumulate,
                            const tile_ep *ep)
{
    switch (rows) {
    AVX512_DIRECT_B_CASE(1) AVX512_DIRECT_B_CASE(2) AVX512_DIRECT_B_CASE(3)
    AVX512_DIRECT_B_CASE(4) AVX512_DIRECT_B_CASE(5) AVX512_DIRECT_B_CASE(6)
    AVX512_DIRECT_B_CASE(7) AVX512_DIRECT_B_CASE(8) AVX512_DIRECT_B_CASE(9)
    AVX512_DIRECT_B_CASE(10) AVX512_DIRECT_B_CASE(11) AVX512_DIRECT_B_CASE(12)
    default: break;
    }
}

/* 13 to 16 rows of C (a 1x1 conv of that many filters, MobileNetV2's 32 -> 16 channels at
 * 112^2) from a packed A (two MR slivers: rows 0-11, then 12-15) and B read in place, 16
 * columns a tile: each B vector feeds all 16 rows' multiply-adds (16 accumulators), so B
 * is read once and never packed, where a 12-row tile and a 4-row one each paid their
 * prologue, epilogue and the B packing per 32 columns. Each element is the same chain of
 * multiply-adds, k ascending from zero, then the tiles' epilogue (tile_ep_value). That
 * conv alone: 145 -> 133 us; in MobileNetV2 (1 thread, per step) 146.5 -> 129 us. */
__attribute__((target("avx512f")))
static void few_rows_avx512(int64_t m, int64_t kc, const float *restrict a,
                            const float *restrict b, int64_t ldb, float *restrict c,
                            int64_t ldc, int64_t n0, int64_t n1, const tile_ep *ep)
{
    const float *a1 = a + AVX512_MR * kc; /* rows 12-15: the second sliver */
    /* a copy: C's stores could alias *ep, whose fields each row would then load again
     * (4% of 32 -> 16 channels at 112^2) */
    const tile_ep te = ep != NULL ? *ep : (tile_ep){NULL, NULL, LGK_ACT_NONE, 0, 0};
    for (int64_t j = n0; j < n1; j += 16) {
        __mmask16 mask = (__mmask16)(n1 - j >= 16 ? 0xffffu : (1u << (n1 - j)) - 1u);
        __m512 acc[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i)
            acc[i] = _mm512_setzero_ps();
        const float *bj = b + j;
        for (int64_t k = 0; k < kc; ++k) {
            __m512 bv = _mm512_maskz_loadu_ps(mask, bj + k * ldb);
            _mm_prefetch((const char *)(bj + k * ldb + 4 * 16), _MM_HINT_T0);
#pragma GCC unroll 12
            for (int i = 0; i < AVX512_MR; ++i)
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[k * AVX512_MR + i]), bv, acc[i]);
#pragma GCC unroll 4
            for (int i = 0; i < 16 - AVX512_MR; ++i)
                acc[AVX512_MR + i] = _mm512_fmadd_ps(_mm512_set1_ps(a1[k * AVX512_MR + i]), bv,
                                                     acc[AVX512_MR + i]);
        }
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) {
            if (i >= m)
                break;
            float *ci = c + i * ldc; /* ep's biases start at C's row and column 0 */
            __m512 v = ep != NULL ? avx512_ep_masked(&te, i, j, ci, acc[i], mask) : acc[i];
            _mm512_mask_storeu_ps(ci + j, mask, v);
        }
    }
}
#endif /* LGK_X86_KERNELS */

/* ---- kernel selection ------------------------------------------------------- */

/* Blocking {kc, mc, nc}: the mc x kc A panel (240 KiB for AVX-512) stays in a
 * 1 MiB L2, a kc x nr B sliver (32 KiB) in a 48 KiB L1. A sweep of kc 192-512,
 * mc 96-480, nc 1024-4096 on Zen (48K L1 / 1M L2) found these best or tied. */

static const gemm_impl impl_generic = {LGK_ISA_GENERIC, GEN_MR, GEN_NR, 256, 128, 2048,
                                       ukernel_generic, NULL, NULL, NULL, NULL};
#ifdef LGK_X86_KERNELS
static const gemm_impl impl_avx2 = {LGK_ISA_AVX2, AVX2_MR, AVX2_NR, 256, 144, 2048, ukernel_avx2,
                                    edge_avx2, NULL, NULL, NULL};
static const gemm_impl impl_avx512 = {LGK_ISA_AVX512, AVX512_MR, AVX512_NR, 256, 240, 2048,
                                      ukernel_avx512, edge_avx512, direct_avx512,
                                      direct_b_avx512, cols_avx512};
#endif

static int cpu_can_run(int isa)
{
#ifdef LGK_X86_KERNELS
    __builtin_cpu_init();
    if (isa == LGK_ISA_AVX512)
        return __builtin_cpu_supports("avx512f");
    if (isa == LGK_ISA_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return isa == LGK_ISA_GENERIC;
}

static const gemm_impl *impl_for(int isa)
{
#ifdef LGK_X86_KERNELS
    if (isa == LGK_ISA_AVX512)
        return &impl_avx512;
    if (isa == LGK_ISA_AVX2)
        return &impl_avx2;
#endif
    (void)isa;
    return &impl_generic;
}

/* LGK_ISA_AUTO until the first GEMM detects the CPU (concurrent first calls
 * all store the same value) or the test hook overrides it. Atomic so that
 * concurrent GEMMs from several threads are race-free. */
static _Atomic int selected_isa = LGK_ISA_AUTO;

static const gemm_impl *current_impl(void)
{
    int isa = atomic_load_explicit(&selected_isa, memory_order_relaxed);
    if (isa == LGK_ISA_AUTO) {
        isa = cpu_can_run(LGK_ISA_AVX512) ? LGK_ISA_AVX512
              : cpu_can_run(LGK_ISA_AVX2) ? LGK_ISA_AVX2
                                          : LGK_ISA_GENERIC;
        atomic_store_explicit(&selected_isa, isa, memory_order_relaxed);
    }
    return impl_for(isa);
}

int lgk_gemm_force_isa(int isa)
{
    LGK_CHECK(isa >= LGK_ISA_AUTO && isa <= LGK_ISA_AVX512, LGK_ERR_ARG);
    LGK_CHECK(isa == LGK_ISA_AUTO || cpu_can_run(isa), LGK_ERR_ARG);
    atomic_store_explicit(&selected_isa, isa, memory_order_relaxed);
    return LGK_OK;
}

int lgk_gemm_isa(void)
{
    return current_impl()->isa;
}

/* ---- packing ------------------------------------------------------------------ */

/* Rows of the micro-tile at row ir of an mc-row block: mr, except that with `retile`,
 * where that would leave a last tile of one row, the last mr + 1 rows are two tiles of
 * about half. A one-row tile is a chain of two accumulators bound by the multiply-add
 * latency (AVX-512: a sixth of a whole tile's time for a twelfth of its work); 1x1 convs
 * on 7x7 maps, 49 pixels as the rows, ran 4 x 12 + 1. Each row's sums are the same
 * whatever tile it is in. */
static int64_t tile_rows(int mr, int64_t mc, int64_t ir, int retile)
{
    int64_t left = mc - ir;
    if (retile && left == mr + 1)
        return (left + 1) / 2;
    return LGK_MIN((int64_t)mr, left);
}

/* n (<= width) contiguous floats into a sliver's row (B: a row of NR columns; A read as
 * A^T: a k step of MR rows), zeros after them. The widths in use are constants here, so
 * whole rows are inline vector moves (a memcpy of a run-time size is a libc call per
 * sliver row). */
static inline void sliver_row(int width, int64_t n, const float *restrict src,
                              float *restrict dst)
{
    /* Zeros first, then the n floats: both of constant sizes wherever the width is one in
     * use (an edge tile's rows, 7 of A's 12 at M = 49, included); a loop of n moves or
     * zeros becomes a memmove or memset call. */
    switch (width) {
    case 32: if (n < 32) memset(dst, 0, 32 * sizeof(float)); break;
    case 16: if (n < 16) memset(dst, 0, 16 * sizeof(float)); break;
    case 12: if (n < 12) memset(dst, 0, 12 * sizeof(float)); break;
    default: memset(dst + n, 0, (size_t)(width - n) * sizeof(float)); break;
    }
    switch (n) {
#define SLIVER_ROW_CASE(N) case N: memcpy(dst, src, N * sizeof(float)); break;
    SLIVER_ROW_CASE(1) SLIVER_ROW_CASE(2) SLIVER_ROW_CASE(3) SLIVER_ROW_CASE(4)
    SLIVER_ROW_CASE(5) SLIVER_ROW_CASE(6) SLIVER_ROW_CASE(7) SLIVER_ROW_CASE(8)
    SLIVER_ROW_CASE(9) SLIVER_ROW_CASE(10) SLIVER_ROW_CASE(11) SLIVER_ROW_CASE(12)
    SLIVER_ROW_CASE(16) SLIVER_ROW_CASE(32)
#undef SLIVER_ROW_CASE
    default: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    }
}

/* A[0:mc, 0:kc] (strides rs, cs) -> MR-row slivers (one per tile_rows tile), k-major
 * inside a sliver; rows past the tile's are zero so the micro-kernel never needs a row
 * mask. */
static void pack_a(int mr, int64_t mc, int64_t kc, const float *a, int64_t rs, int64_t cs,
                   int retile, float *restrict dst)
{
    for (int64_t i0 = 0, m = 0; i0 < mc; i0 += m, dst += mr * kc) {
        m = tile_rows(mr, mc, i0, retile);
        const float *rows = a + i0 * rs;
        if (rs == 1) { /* A^T in place (a 1x1 conv's pixels as rows): vector copies */
            for (int64_t k = 0; k < kc; ++k)
                sliver_row(mr, m, rows + k * cs, dst + k * mr);
            continue;
        }
        for (int64_t k = 0; k < kc; ++k) {
            float *d = dst + k * mr;
            for (int i = 0; i < m; ++i)
                d[i] = rows[i * rs + k * cs];
            for (int i = m; i < mr; ++i)
                d[i] = 0.0f;
        }
    }
}

/* pack_b of a B with contiguous rows, row by row: each row of the block is read once,
 * front to back, and dealt out to the slivers. Sliver by sliver, every sliver row came
 * from another row of B (a 1x1 conv's input channels, a plane apart): as many streams
 * as rows, which the prefetchers do not follow (pack_b was 40% of a 1x1 conv of
 * 256 -> 64 channels on 56 x 56). */
static void pack_b_by_rows(int nr, int64_t kc, int64_t nc, const float *b, int64_t rs,
                           float *restrict dst)
{
    for (int64_t k = 0; k < kc; ++k) {
        const float *row = b + k * rs;
        for (int64_t j0 = 0; j0 < nc; j0 += nr)
            sliver_row(nr, LGK_MIN((int64_t)nr, nc - j0), row + j0, dst + j0 * kc + k * nr);
    }
}

/* B[0:kc, 0:nc] -> NR-column slivers, k-major inside a sliver. */
static void pack_b(int nr, int64_t kc, int64_t nc, const float *b, int64_t rs, int64_t cs,
                   float *restrict dst)
{
    if (cs == 1) {
        pack_b_by_rows(nr, kc, nc, b, rs, dst);
        return;
    }
    for (int64_t j0 = 0; j0 < nc; j0 += nr, dst += nr * kc) {
        int n = (int)LGK_MIN((int64_t)nr, nc - j0);
        const float *cols = b + j0 * cs;
        if (rs == 1) { /* transposed B: walk each column contiguously */
            for (int j = 0; j < n; ++j)
                for (int64_t k = 0; k < kc; ++k)
                    dst[k * nr + j] = cols[j * cs + k];
            for (int64_t k = 0; k < kc; ++k)
                for (int j = n; j < nr; ++j)
                    dst[k * nr + j] = 0.0f;
        } else {
            for (int64_t k = 0; k < kc; ++k) {
                float *d = dst + k * nr;
                for (int j = 0; j < n; ++j)
                    d[j] = cols[k * rs + j * cs];
                for (int j = n; j < nr; ++j)
                    d[j] = 0.0f;
            }
        }
    }
}

/* ---- epilogue ---------------------------------------------------------------- */

typedef struct {
    const float *bias; /* already offset to the problem's row/col 0 */
    int bias_mode;
    int activation;
    int add_c; /* C holds an addend (a conv's residual, written over): C = act(A @ B + bias
                * + C), summed in that order, in the tiles' epilogue (see gemm_onto_saved) */
} epilogue;

static int epilogue_is_noop(const epilogue *ep)
{
    return ep->bias_mode == LGK_BIAS_NONE && ep->activation == LGK_ACT_NONE && !ep->add_c;
}

/* Applies bias and activation to C[row0:row0+m, col0:col0+n]. The blocked
 * driver calls it once per finished mc x nc block rather than per micro-tile:
 * rows of nc floats keep the vectorized activation loops long, where 32-wide
 * tile rows spent more in loop set-up than the cache-hot data saved (gelu
 * epilogue of 256 x 64 x 4096: 1.3 ms per tile vs 0.7 ms per block). */
static void epilogue_tile(const epilogue *ep, float *c, int64_t ldc, int64_t row0, int64_t col0,
                          int64_t m, int64_t n)
{
    for (int64_t i = 0; i < m; ++i) {
        float *ci = c + i * ldc;
        if (ep->bias_mode == LGK_BIAS_COL) {
            const float *bias = ep->bias + col0;
            for (int64_t j = 0; j < n; ++j)
                ci[j] += bias[j];
        } else if (ep->bias_mode == LGK_BIAS_ROW) {
            float bias = ep->bias[row0 + i];
            for (int64_t j = 0; j < n; ++j)
                ci[j] += bias;
        }
        if (ep->activation != LGK_ACT_NONE)
            lgk_activate(ep->activation, ci, n);
    }
}

/* ---- blocked driver -------------------------------------------------------------- */

typedef struct {
    int64_t M, N, K;
    const float *a;
    int64_t rs_a, cs_a;
    const float *b;
    int64_t rs_b, cs_b;
    float *c;
    int64_t ldc;
    epilogue ep;
    /* Prepacked B panels (past the header; see lgk_sgemm_pack_b) or NULL, in
     * which case B is read through b/rs_b/cs_b and packed block by block. */
    const float *packed_b;
    /* The same for A (see lgk_sgemm_pack_a): MR-row slivers per K block. */
    const float *packed_a;
    /* The depth of packed_b's K blocks when the call packed it itself in the blocks an
     * unpacked B would take (see lgk_sgemm_batched_softmax); 0: the prepacked depth. */
    int64_t packed_kc;
} gemm_problem;

/* Whether ep can be applied by the micro-kernels (tile_ep): bias and relu or relu6. */
static int epilogue_in_tiles(const epilogue *ep)
{
    return ep != NULL && (ep->activation == LGK_ACT_NONE || ep->activation == LGK_ACT_RELU
                          || ep->activation == LGK_ACT_RELU6);
}

/* One micro-tile of m (<= MR) rows and a whole NR sliver: A from a packed sliver, or in
 * place with row stride lda (lda > 0, the direct kernel). */
static void run_tile(const gemm_impl *g, int64_t m, int64_t kc, const float *a, int64_t lda,
                     const float *b, float *c, int64_t ldc, int accumulate, const tile_ep *ep)
{
    if (lda > 0)
        g->direct((int)m, kc, a, lda, b, c, ldc, accumulate, ep);
    else if (m == g->mr)
        g->kernel(kc, a, b, c, ldc, accumulate, ep);
    else if (g->edge != NULL)
        g->edge((int)m, kc, a, b, c, ldc, accumulate, ep);
    else /* a whole tile's FMAs; only called with c a scratch tile then */
        g->kernel(kc, a, b, c, ldc, accumulate, ep);
}

/* The arguments of macro_kernel that every one of its tiles shares. */
typedef struct {
    const gemm_impl *g;
    int64_t kc, lda, ldb, ldc, row0, col0;
    const float *pa, *pb, *b_rows;
    float *c;
    int accumulate;
    const epilogue *ep;
    int far_c; /* see tile_ep */
} macro_args;

/* ep for the tile whose first element is C[row, col]. */
static tile_ep tile_ep_at(const epilogue *ep, int64_t row, int64_t col, int far_c)
{
    tile_ep te = {ep->bias_mode == LGK_BIAS_ROW ? ep->bias + row : NULL,
                  ep->bias_mode == LGK_BIAS_COL ? ep->bias + col : NULL, ep->activation,
                  ep->add_c, far_c};
    return te;
}

/* The micro-tile of rows [ir, ir + m) (A's t-th sliver) and the n columns from jr. */
static void macro_tile(const macro_args *x, int64_t ir, int64_t m, int64_t t, int64_t jr,
                       int64_t n)
{
    const gemm_impl *g = x->g;
    const int64_t kc = x->kc, lda = x->lda, ldc = x->ldc;
    const epilogue *ep = x->ep;
    const float *b = x->pb + jr * kc;
    int in_place = x->b_rows != NULL && n == g->nr;
    float *cij = x->c + ir * ldc + jr;
    const float *a = lda > 0 ? x->pa + ir * lda : x->pa + t * g->mr * kc;
    _Alignas(64) float tile[MAX_MR * MAX_NR];
    tile_ep te = {NULL, NULL, LGK_ACT_NONE, 0, x->far_c}, *tep = x->far_c ? &te : NULL;
    if (ep != NULL) {
        te = tile_ep_at(ep, x->row0 + ir, x->col0 + jr, x->far_c);
        tep = &te;
    }
    if (in_place && ir == 0) {
        g->direct_b((int)m, kc, a, x->b_rows + jr, x->ldb, (float *)b, cij, ldc, x->accumulate,
                    tep);
    } else if (n == g->nr && (m == g->mr || g->edge != NULL || lda > 0)) {
        run_tile(g, m, kc, a, lda, b, cij, ldc, x->accumulate, tep);
    } else if (g->cols != NULL) {
        g->cols((int)m, (int)n, kc, a, lda, b, cij, ldc, x->accumulate, tep);
    } else if (ep != NULL && ep->add_c) { /* edge, C's addend read before the store */
        run_tile(g, m, kc, a, lda, b, tile, g->nr, 0, NULL);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j)
                cij[i * ldc + j] = tile_ep_value(&te, (int)i, (int)j, tile[i * g->nr + j],
                                                 cij[i * ldc + j]);
    } else { /* edge: the tile's rows into scratch, copy the valid part */
        run_tile(g, m, kc, a, lda, b, tile, g->nr, 0, NULL);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j)
                cij[i * ldc + j] = tile[i * g->nr + j] + (x->accumulate ? cij[i * ldc + j] : 0.0f);
        if (ep != NULL) /* past n, the tile's column bias would be out of bounds */
            epilogue_tile(ep, cij, ldc, x->row0 + ir, x->col0 + jr, m, n);
    }
}

/* With b_rows, a partial sliver at jr is packed before its first tile (columns past B
 * zero); whole ones are packed by their first tile (see pack_in_tiles). */
static void macro_partial_sliver(const macro_args *x, int64_t jr, int64_t n)
{
    if (x->b_rows != NULL && n < x->g->nr)
        pack_b(x->g->nr, x->kc, n, x->b_rows + jr, x->ldb, 1, (float *)(x->pb + jr * x->kc));
}

/* Blocks of at most this depth and at least three row tiles run row tile by row tile, each
 * along all of the block's slivers, rather than sliver by sliver: with so few multiply-adds
 * per C element the time goes into writing C, and a row tile's 12 rows then take
 * consecutive slivers of the same lines one after another (12 streams, each prefetched
 * one sliver ahead by the kernel, rather than all of the block's rows at once); the
 * B panel (at most 32 x nc floats) is read from L2 by each row tile. MobileNetV2's 1x1
 * convs of 16 -> 96 channels at 112^2 and 24 -> 144 at 56^2 in the model: 541 -> 504 and
 * 270 -> 259 us; with 32 of K and M = 16 (two row tiles) it was no faster. */
#define ROWS_OUTER_MAX_KC 32

/* Runs every micro-tile of one (mc x kc) x (kc x nc) block pair, B packed and A packed
 * (lda == 0) or read in place (A[i, k] = pa[i * lda + k]), whose C block starts at
 * (row0, col0) of the problem; ep (NULL: none) is applied to each finished tile (see
 * epilogue_in_tiles). With b_rows (B's rows in place, ldb apart), the first tile of each
 * sliver packs it into pb as it multiplies (see pack_in_tiles). `retile`: the row tiles
 * as tile_rows lays them out (a packed A's slivers as pack_a packed them with the same
 * flag). `far_c`: see tile_ep. */
static void macro_kernel(const gemm_impl *g, int64_t mc, int64_t nc, int64_t kc,
                         const float *pa, int64_t lda, const float *pb, const float *b_rows,
                         int64_t ldb, float *c, int64_t ldc, int accumulate,
                         const epilogue *ep, int64_t row0, int64_t col0, int retile, int far_c)
{
    const macro_args x = {g, kc, lda, ldb, ldc, row0, col0, pa, pb, b_rows, c, accumulate,
                          ep, far_c};
    if (kc <= ROWS_OUTER_MAX_KC && mc > 2 * (int64_t)g->mr) {
        for (int64_t ir = 0, m = 0, t = 0; ir < mc; ir += m, ++t) {
            m = tile_rows(g->mr, mc, ir, retile);
            for (int64_t jr = 0; jr < nc; jr += g->nr) {
                int64_t n = LGK_MIN((int64_t)g->nr, nc - jr);
                if (ir == 0)
                    macro_partial_sliver(&x, jr, n);
                macro_tile(&x, ir, m, t, jr, n);
            }
        }
        return;
    }
    for (int64_t jr = 0; jr < nc; jr += g->nr) {
        int64_t n = LGK_MIN((int64_t)g->nr, nc - jr);
        macro_partial_sliver(&x, jr, n);
        for (int64_t ir = 0, m = 0, t = 0; ir < mc; ir += m, ++t) {
            m = tile_rows(g->mr, mc, ir, retile);
            macro_tile(&x, ir, m, t, jr, n);
        }
    }
}

/* ---- few rows: no packing ---------------------------------------------------
 * With M <= SMALL_M every element of B is used at most SMALL_M times, so
 * packing B (an extra pass over all of it) costs more than the multiply
 * (measured at M = 1: 4 GFLOP/s packed vs numpy's 48). Rows of C are then
 * computed straight from B: as axpys along B's rows when they are contiguous,
 * or as dot products along B's columns when those are (nn.linear's weight.T). */
#define SMALL_M 4
#define SMALL_N_TILE 512 /* SMALL_M accumulator rows of this width stay in L1 */
#define DOT_LANES 64 /* 4 zmm / 8 ymm chains hide the FMA latency */
#define DOT_ROWS 8
#define DOT_ROW_LANES 8 /* DOT_ROWS chains of one ymm each (dot_rows) */

static int small_m_fits(const gemm_problem *p, int64_t rows)
{
    return p->packed_b == NULL && p->packed_a == NULL && rows <= SMALL_M
           && (p->cs_b == 1 || (p->rs_b == 1 && p->cs_a == 1));
}

/* ci[0:w] += sum over AXPY_K rows r of a[r * cs_a] * b[r * rs_b + 0:w]: several
 * rows of B per pass over ci, so its loads/stores do not bound the FMAs. */
#define AXPY_K 4

LGK_CLONES static void axpy_rows(int64_t w, int64_t nk, const float *a, int64_t cs_a,
                                 const float *b, int64_t rs_b, float *restrict ci)
{
    if (nk == AXPY_K) {
        float a0 = a[0], a1 = a[cs_a], a2 = a[2 * cs_a], a3 = a[3 * cs_a];
        const float *b0 = b, *b1 = b + rs_b, *b2 = b + 2 * rs_b, *b3 = b + 3 * rs_b;
        for (int64_t j = 0; j < w; ++j)
            ci[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
        return;
    }
    for (int64_t r = 0; r < nk; ++r)
        for (int64_t j = 0; j < w; ++j)
            ci[j] += a[r * cs_a] * b[r * rs_b + j];
}

/* C[i, n0:n1] = sum_k A[i, k] B[k, n0:n1], B rows contiguous. */
static void small_m_axpy(const gemm_problem *p, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    for (int64_t t0 = n0; t0 < n1; t0 += SMALL_N_TILE) {
        int64_t w = LGK_MIN((int64_t)SMALL_N_TILE, n1 - t0);
        for (int64_t i = m0; i < m1; ++i)
            memset(p->c + i * p->ldc + t0, 0, (size_t)w * sizeof(float));
        for (int64_t k = 0; k < p->K; k += AXPY_K) {
            int64_t nk = LGK_MIN((int64_t)AXPY_K, p->K - k);
            for (int64_t i = m0; i < m1; ++i)
                axpy_rows(w, nk, p->a + i * p->rs_a + k * p->cs_a, p->cs_a,
                          p->b + k * p->rs_b + t0, p->rs_b, p->c + i * p->ldc + t0);
        }
    }
}

/* DOT_LANES partial sums: vectorizes without reassociation flags. */
LGK_CLONES static float dot(const float *x, const float *y, int64_t n)
{
    float acc[DOT_LANES] = {0.0f};
    int64_t k = 0;
    for (; k + DOT_LANES <= n; k += DOT_LANES)
        for (int j = 0; j < DOT_LANES; ++j)
            acc[j] += x[k + j] * y[k + j];
    for (; k + DOT_ROW_LANES <= n; k += DOT_ROW_LANES) /* K = 32: still vectors */
        for (int j = 0; j < DOT_ROW_LANES; ++j)
            acc[j] += x[k + j] * y[k + j];
    for (; k < n; ++k)
        acc[0] += x[k] * y[k];
    /* Tree reduction: a serial sum of 64 lanes would cost more than the dot. */
    for (int half = DOT_LANES / 2; half > 0; half /= 2)
        for (int j = 0; j < half; ++j)
            acc[j] += acc[j + half];
    return acc[0];
}

/* out[r * ldo] = dot(a[r * rs_a + 0:K], x[0:K]) for DOT_ROWS rows: x is loaded once
 * for all rows, and the short lanes keep K = 32 (an expert's width) in vector loops,
 * which dot()'s 64 lanes would leave to its scalar tail, and cheapen the per-row
 * reduction (measured 32 x [64, 32] @ [32, 1]: 14.5 us with 4 rows of 16 lanes, 5.6). */
LGK_CLONES static void dot_rows(const float *a, int64_t rs_a, const float *x, int64_t K,
                                float *out, int64_t ldo)
{
    float acc[DOT_ROWS][DOT_ROW_LANES] = {{0.0f}};
    int64_t k = 0;
    for (; k + DOT_ROW_LANES <= K; k += DOT_ROW_LANES)
        for (int r = 0; r < DOT_ROWS; ++r)
            for (int j = 0; j < DOT_ROW_LANES; ++j)
                acc[r][j] += a[r * rs_a + k + j] * x[k + j];
    for (; k < K; ++k)
        for (int r = 0; r < DOT_ROWS; ++r)
            acc[r][0] += a[r * rs_a + k] * x[k];
    for (int r = 0; r < DOT_ROWS; ++r) {
        for (int half = DOT_ROW_LANES / 2; half > 0; half /= 2)
            for (int j = 0; j < half; ++j)
                acc[r][j] += acc[r][j + half];
        out[r * ldo] = acc[r][0];
    }
}

/* C[i, n] = dot(A[i, :], B[:, n]), A rows and B columns contiguous. */
static void small_m_dot(const gemm_problem *p, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    int64_t n = n0;
    for (; n + DOT_ROWS <= n1; n += DOT_ROWS) /* DOT_ROWS columns of B per pass over A[i] */
        for (int64_t i = m0; i < m1; ++i)
            dot_rows(p->b + n * p->cs_b, p->cs_b, p->a + i * p->rs_a, p->K,
                     p->c + i * p->ldc + n, 1);
    for (; n < n1; ++n)
        for (int64_t i = m0; i < m1; ++i)
            p->c[i * p->ldc + n] = dot(p->a + i * p->rs_a, p->b + n * p->cs_b, p->K);
}

static void gemm_small_m(const gemm_problem *p, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    if (p->cs_b == 1)
        small_m_axpy(p, m0, m1, n0, n1);
    else
        small_m_dot(p, m0, m1, n0, n1);
    if (!epilogue_is_noop(&p->ep))
        epilogue_tile(&p->ep, p->c + m0 * p->ldc + n0, p->ldc, m0, n0, m1 - m0, n1 - n0);
}

/* ---- few columns: no packing -------------------------------------------------
 * With N <= SMALL_N (batched mat-vecs: a mixture-of-experts layer's W_e @ x) the
 * packed path would pad every column to a whole NR sliver (32 for AVX-512, so 97%
 * of its FMAs wasted at N = 1) and copy all of A to read it once. With A's rows
 * contiguous each C element is instead one dot product streaming its row of A;
 * B's few columns are gathered contiguous first unless they already are. */
#define SMALL_N 4

static int small_n_fits(const gemm_problem *p, int64_t cols)
{
    return p->packed_b == NULL && p->packed_a == NULL && cols <= SMALL_N
           && (p->cs_a == 1 || p->K == 1);
}

static int gemm_small_n(const gemm_problem *p, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    int64_t K = p->K, cols = n1 - n0;
    const float *col[SMALL_N];
    lgk_scratch scratch = {NULL, 0};
    if (p->rs_b == 1 || K == 1) {
        for (int64_t j = 0; j < cols; ++j)
            col[j] = p->b + (n0 + j) * p->cs_b;
    } else {
        LGK_TRY(lgk_scratch_acquire(cols * K, &scratch));
        for (int64_t j = 0; j < cols; ++j) {
            float *dst = scratch.data + j * K;
            const float *src = p->b + (n0 + j) * p->cs_b;
            for (int64_t k = 0; k < K; ++k)
                dst[k] = src[k * p->rs_b];
            col[j] = dst;
        }
    }
    int64_t i = m0;
    for (; i + DOT_ROWS <= m1; i += DOT_ROWS)
        for (int64_t j = 0; j < cols; ++j)
            dot_rows(p->a + i * p->rs_a, p->rs_a, col[j], K, p->c + i * p->ldc + n0 + j, p->ldc);
    for (; i < m1; ++i)
        for (int64_t j = 0; j < cols; ++j)
            p->c[i * p->ldc + n0 + j] = dot(p->a + i * p->rs_a, col[j], K);
    lgk_scratch_release(&scratch);
    if (!epilogue_is_noop(&p->ep))
        epilogue_tile(&p->ep, p->c + m0 * p->ldc + n0, p->ldc, m0, n0, m1 - m0, cols);
    return LGK_OK;
}

/* K == 0: the product is all zeros, only the epilogue remains. */
static void gemm_empty_k(const gemm_problem *p, int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    for (int64_t i = m0; i < m1; ++i)
        memset(p->c + i * p->ldc + n0, 0, (size_t)(n1 - n0) * sizeof(float));
    if (!epilogue_is_noop(&p->ep))
        epilogue_tile(&p->ep, p->c + m0 * p->ldc + n0, p->ldc, m0, n0, m1 - m0, n1 - n0);
}

/* Depth of the K blocks: K split evenly into ceil(K / kc) blocks, so that
 * K = 784 runs as 4 x 196 rather than 3 x 256 + 16 (a thin last block pays a
 * whole C-tile load and store for little work). Written so no sum overflows. */
static int64_t split_depth(int64_t K, int64_t kc)
{
    if (K <= kc)
        return K;
    int64_t nblocks = K / kc + (K % kc != 0);
    return K / nblocks + (K % nblocks != 0);
}

static int64_t block_depth(const gemm_impl *g, int64_t K)
{
    return split_depth(K, g->kc);
}

/* Operands packed ahead of the multiply (a layer's weight by lgk_sgemm_pack_a/_b, a
 * conv's gathered panels, see lgk_gemm_panel_layout) run in deeper K blocks under
 * AVX-512: packed slivers stream from L2 whatever their depth (a 12 x 32 tile needs 176
 * bytes a k step, a fifth of what L2 gives), so kc's only cost there is the A panel
 * (240 x 768 floats fit L2), while every block boundary re-reads and re-writes the whole
 * C block. Transformer GEMMs with M = 128..1500 and K = 384..5632 on prepacked weights
 * ran 4-7% faster at 768 than at 256 (thread CPU time against onnxruntime's MatMul in
 * the same process). All packed layouts share this depth, as one GEMM may take both
 * operands packed. */
#define PACKED_KC_AVX512 768

/* Up to this depth a packed K stays one block under AVX-512 rather than two of half:
 * MobileNetV2's 1x1 convs of 960 channels on 7x7 maps (pixels as rows, M = 49, so the A
 * panel is small) re-read and re-wrote their C block at the boundary. In a model: the
 * 7x7 1x1 convs of MobileNetV2 1647 -> 1635 us, ResNet-50's 1x1 convs of 1024 channels
 * 8810 -> 8680 us. */
#define PACKED_ONE_BLOCK_AVX512 1024

static int64_t packed_depth(const gemm_impl *g, int64_t K)
{
    if (g->isa == LGK_ISA_AVX512 && K <= PACKED_ONE_BLOCK_AVX512)
        return K;
    return split_depth(K, g->isa == LGK_ISA_AVX512 ? PACKED_KC_AVX512 : g->kc);
}

/* Columns of the packed B layout: N rounded up to whole NR slivers. */
static int64_t padded_cols(const gemm_impl *g, int64_t N)
{
    return N / g->nr * g->nr + (N % g->nr != 0 ? g->nr : 0);
}

/* Rows of the packed A layout: M rounded up to whole MR slivers. */
static int64_t padded_rows(const gemm_impl *g, int64_t M)
{
    return M / g->mr * g->mr + (M % g->mr != 0 ? g->mr : 0);
}

/* The packed kc x nc panel of B at (pc, jc): a slice of the prepacked buffer
 * (K blocks of padded_cols(N) columns, each NR sliver k-major, so a panel is
 * contiguous from any sliver on), or B packed now into `scratch`. */
static const float *b_panel(const gemm_impl *g, const gemm_problem *p, int64_t pc, int64_t kc,
                            int64_t jc, int64_t nc, float *scratch)
{
    if (p->packed_b != NULL)
        return p->packed_b + pc * padded_cols(g, p->N) + jc * kc;
    pack_b(g->nr, kc, nc, p->b + pc * p->rs_b + jc * p->cs_b, p->rs_b, p->cs_b, scratch);
    return scratch;
}

/* Columns of a B panel packed by the call: at most B_PANEL_FLOATS (half a 1 MiB L2, so
 * the panel is still there when the micro-kernels read it; a 256 x 2048 panel of 2 MiB
 * went out to L3 in between: 1x1 convs at 56^2, whose B is their input, ran 6% slower),
 * whole slivers, at most the family's nc. */
#define B_PANEL_FLOATS ((int64_t)128 * 1024)

static int64_t packed_panel_cols(const gemm_impl *g, int64_t kc)
{
    int64_t cols = B_PANEL_FLOATS / LGK_MAX(kc, (int64_t)1) / g->nr * g->nr;
    return LGK_MAX((int64_t)g->nr, LGK_MIN(g->nc, cols));
}

/* Whether A is read in place rather than packed: A's rows contiguous and at most
 * DIRECT_A_MAX_N columns in C, so that each A element packed would feed few
 * multiply-adds (attention's P @ V, N = 64: packing the 1500 x 1500 P cost as much as
 * the products). Decided on the whole problem, so that every block of a thread split
 * sums alike. Without prepacked B, K is then blocked only every DIRECT_A_KC: the B
 * sliver streams from L2 (2 loads feed 24 FMAs), and a C tile reloaded every 256 of
 * K was what remained (P @ V: 22.0 -> 14.9 ms at K = 1500). */
#ifndef DIRECT_A_MAX_N
#define DIRECT_A_MAX_N 128
#endif
#define DIRECT_A_KC 2048

/* Whether B is packed by the first micro-tile of each sliver as it reads B in place, rather
 * than in a pass of its own before the tiles: B's rows contiguous, A packed (or packed now).
 * The pass read B once more than the tiles did (a 1x1 conv of 256 -> 64 channels on 56 x 56,
 * whose B is its input: 25% of its time), and its reads from L3 did not overlap the
 * multiply-adds; the first tile prefetches the rows of the sliver 4 on. */
static int pack_in_tiles(const gemm_impl *g, const gemm_problem *p)
{
    return g->direct_b != NULL && p->packed_b == NULL && p->cs_b == 1 && p->rs_b > 0;
}

/* The most rows of one micro-tile of A in place that share a set of a 64-set L1 (the
 * L1D of x86 cores of the last decade: 32 KiB 8-way or 48 KiB 12-way, 64-byte lines),
 * A's rows rs_a floats apart. */
static int rows_per_l1_set(const gemm_impl *g, int64_t rs_a)
{
    int count[64] = {0}, most = 0;
    for (int64_t i = 0; i < g->mr; ++i) {
        int set = (int)(((uint64_t)i * (uint64_t)rs_a * sizeof(float) / 64u) % 64u);
        count[set] += 1;
        most = LGK_MAX(most, count[set]);
    }
    return most;
}

/* Past DIRECT_A_MAX_N columns A is read in place too when B is prepacked, unless its rows
 * alias in L1: packing A was 5-12% of such GEMMs (it is packed once per K block and row
 * block, for all the slivers of N), and the tile's rows read in place stream from L2 as
 * well as a packed sliver does. Rows a multiple of 4 KiB apart (K = 1024, 2048, 3072)
 * put all 12 of a tile's rows in one L1 set, where they evict each other and the B
 * sliver: there A is still packed. Transformer GEMMs on prepacked weights, AVX-512, 1
 * thread, GFLOP/s before -> after (onnxruntime's MatMul in the same process): 1500 x 384
 * x 384 107 -> 113 (114), 1500 x 1536 x 384 108 -> 114 (114), 784 x 768 x 192 101 ->
 * 114 (115), 196 x 1536 x 384 107 -> 113 (115), 128 x 768 x 2304 112 -> 114 (114);
 * 128 x 2048 x 2048 (rows 8 KiB apart) 109 read in place -> 101. With B packed by the
 * call (attention's Q @ K^T, N = 1500, K = 64) reading A in place gained nothing. */
static int direct_a(const gemm_impl *g, const gemm_problem *p)
{
    if (g->direct == NULL || p->packed_a != NULL || p->cs_a != 1 || p->rs_a <= 0)
        return 0;
    if (p->N <= DIRECT_A_MAX_N)
        return 1;
    return p->packed_b != NULL && rows_per_l1_set(g, p->rs_a) <= g->mr / 2;
}

/* The depth of the blocked path's K blocks. */
static int64_t k_block_depth(const gemm_impl *g, const gemm_problem *p, int direct)
{
    if (p->packed_kc > 0)
        return p->packed_kc;
    if (p->packed_a != NULL || p->packed_b != NULL)
        return packed_depth(g, p->K);
    return direct ? LGK_MIN(p->K, (int64_t)DIRECT_A_KC) : block_depth(g, p->K);
}

/* Whether C[m0:m1, n0:n1]'s addend (ep.add_c) can wait in C for the tiles' epilogue: the
 * blocked path, K in one block (a second would add to the first's partial sums) and an
 * epilogue the tiles apply. */
static int adds_c_in_tiles(const gemm_impl *g, const gemm_problem *p, int64_t rows,
                           int64_t cols)
{
    return p->K > 0 && !small_m_fits(p, rows) && !small_n_fits(p, cols)
           && epilogue_in_tiles(&p->ep) && k_block_depth(g, p, direct_a(g, p)) >= p->K;
}

/* A C matrix of at least this many floats (4 MiB: four times L2, an eighth of L3) is
 * written to memory tile by tile: its micro-tiles prefetch the lines they store next at
 * depths up to C_PREFETCH_FAR_MAX_KC as well (see avx512_rows). ResNet-50's largest conv
 * output (64 x 112^2, 0.8 M floats) stays below: with C in cache the prefetches cost
 * 1-2% (its 1x1 convs of K = 64 at 56^2, in the model). */
#define FAR_C_FLOATS ((double)1024 * 1024)

static int gemm_block_range(const gemm_impl *g, const gemm_problem *p, int64_t m0, int64_t m1,
                            int64_t n0, int64_t n1);

/* C[m0:m1, n0:n1] with an addend in C that cannot wait there (see adds_c_in_tiles): copied
 * aside, C = A @ B + bias written over it, then the addend added and the activation
 * applied, the sums in the same order as the tiles' epilogue. */
static int gemm_onto_saved(const gemm_impl *g, const gemm_problem *p, int64_t m0, int64_t m1,
                           int64_t n0, int64_t n1)
{
    int64_t m = m1 - m0, n = n1 - n0; /* a block of C, whose size the caller checked */
    lgk_scratch saved = {NULL, 0};
    LGK_TRY(lgk_scratch_acquire(m * n, &saved));
    float *c = p->c + m0 * p->ldc + n0;
    for (int64_t i = 0; i < m; ++i)
        memcpy(saved.data + i * n, c + i * p->ldc, (size_t)n * sizeof(float));
    gemm_problem q = *p;
    q.ep.add_c = 0, q.ep.activation = LGK_ACT_NONE;
    int status = gemm_block_range(g, &q, m0, m1, n0, n1);
    for (int64_t i = 0; i < m && status == LGK_OK; ++i) {
        float *restrict ci = c + i * p->ldc;
        const float *restrict si = saved.data + i * n;
        for (int64_t j = 0; j < n; ++j)
            ci[j] += si[j];
        if (p->ep.activation != LGK_ACT_NONE)
            lgk_activate(p->ep.activation, ci, n);
    }
    lgk_scratch_release(&saved);
    return status;
}

/* Whether C[m0:m1, :] goes by few_rows_avx512: all of M's 13 to 16 rows, A prepacked in
 * one K block, B in place along its rows, an epilogue the tiles apply (no addend in C). */
static int few_rows_fit(const gemm_impl *g, const gemm_problem *p, int64_t m0, int64_t m1)
{
    return g->isa == LGK_ISA_AVX512 && m0 == 0 && m1 == p->M && p->M > g->mr && p->M <= 16
           && p->packed_a != NULL && p->packed_b == NULL && p->cs_b == 1
           && packed_depth(g, p->K) == p->K && !p->ep.add_c
           && (epilogue_is_noop(&p->ep) || epilogue_in_tiles(&p->ep));
}

/* C[m0:m1, n0:n1] on the calling thread, with private packing buffers. */
static int gemm_block_range(const gemm_impl *g, const gemm_problem *p, int64_t m0, int64_t m1,
                            int64_t n0, int64_t n1)
{
    if (m1 <= m0 || n1 <= n0)
        return LGK_OK;
    if (p->ep.add_c && !adds_c_in_tiles(g, p, m1 - m0, n1 - n0))
        return gemm_onto_saved(g, p, m0, m1, n0, n1);
    if (p->K == 0) {
        gemm_empty_k(p, m0, m1, n0, n1);
        return LGK_OK;
    }
    if (small_m_fits(p, m1 - m0)) {
        gemm_small_m(p, m0, m1, n0, n1);
        return LGK_OK;
    }
    if (small_n_fits(p, n1 - n0))
        return gemm_small_n(p, m0, m1, n0, n1);
#ifdef LGK_X86_KERNELS
    if (few_rows_fit(g, p, m0, m1)) {
        tile_ep te = tile_ep_at(&p->ep, 0, 0, 0);
        few_rows_avx512(p->M, p->K, p->packed_a, p->b, p->rs_b, p->c, p->ldc, n0, n1,
                        epilogue_is_noop(&p->ep) ? NULL : &te);
        return LGK_OK;
    }
#endif
    int direct = direct_a(g, p);
    int in_place_b = !direct && pack_in_tiles(g, p);
    int64_t kc_max = k_block_depth(g, p, direct);
    int64_t nc_step = p->packed_b != NULL ? g->nc : packed_panel_cols(g, kc_max);
    int64_t mc_max = LGK_MIN(g->mc, (m1 - m0 + g->mr - 1) / g->mr * g->mr);
    int64_t nc_max = LGK_MIN(nc_step, (n1 - n0 + g->nr - 1) / g->nr * g->nr);
    /* Rounded to 16 floats: keeps pb 64-byte aligned. */
    int64_t a_size = p->packed_a != NULL || direct ? 0 : (mc_max * kc_max + 15) / 16 * 16;
    int64_t b_size = p->packed_b != NULL ? 0 : nc_max * kc_max;
    lgk_scratch scratch = {NULL, 0};
    if (a_size + b_size > 0)
        LGK_TRY(lgk_scratch_acquire(a_size + b_size, &scratch));
    const float *pa = scratch.data;
    const epilogue *ep = epilogue_is_noop(&p->ep) ? NULL : &p->ep;
    int far_c = g->isa == LGK_ISA_AVX512 && (double)p->M * (double)p->N >= FAR_C_FLOATS;
    for (int64_t jc = n0; jc < n1; jc += nc_step) {
        int64_t nc = LGK_MIN(nc_step, n1 - jc);
        for (int64_t pc = 0; pc < p->K; pc += kc_max) {
            int64_t kc = LGK_MIN(kc_max, p->K - pc);
            int last = pc + kc == p->K;
            float *b_scratch = p->packed_b != NULL ? NULL : scratch.data + a_size;
            const float *b_rows = in_place_b ? p->b + pc * p->rs_b + jc : NULL;
            const float *pb = in_place_b ? b_scratch : b_panel(g, p, pc, kc, jc, nc, b_scratch);
            for (int64_t ic = m0; ic < m1; ic += g->mc) {
                int64_t mc = LGK_MIN(g->mc, m1 - ic);
                if (p->packed_a != NULL) /* slivers of a K block lie end to end */
                    pa = p->packed_a + pc * padded_rows(g, p->M) + ic * kc;
                else if (direct)
                    pa = p->a + ic * p->rs_a + pc;
                else
                    pack_a(g->mr, mc, kc, p->a + ic * p->rs_a + pc * p->cs_a, p->rs_a, p->cs_a,
                           1, scratch.data);
                float *c = p->c + ic * p->ldc + jc;
                int in_tiles = last && epilogue_in_tiles(ep);
                macro_kernel(g, mc, nc, kc, pa, direct ? p->rs_a : 0, pb,
                             ic == m0 ? b_rows : NULL, p->rs_b, c, p->ldc, pc > 0,
                             in_tiles ? ep : NULL, ic, jc, p->packed_a == NULL, far_c);
                if (last && ep != NULL && !in_tiles) /* whole block rows: see epilogue_tile */
                    epilogue_tile(ep, c, p->ldc, ic, jc, mc, nc);
            }
        }
    }
    lgk_scratch_release(&scratch);
    return LGK_OK;
}

/* Threads run the blocks of a grid over C (lgk_choose_grid), of every matrix of a batch,
 * each block an independent sub-GEMM with no synchronisation. Block edges fall on whole
 * micro-tiles and every element's K loop stays whole, so a split changes no sum; no
 * block is so thin that it would take the few-rows or few-columns path where the whole
 * product does not. */
typedef struct {
    const gemm_impl *g;
    const gemm_problem *p;
    const int64_t *a_off, *b_off; /* per matrix of a batch; NULL: one matrix */
    int64_t c_stride;
    lgk_grid grid;
} gemm_split;

static int gemm_split_range(void *ctx, int64_t begin, int64_t end)
{
    const gemm_split *s = ctx;
    int64_t per_matrix = s->grid.grid_m * s->grid.grid_n;
    for (int64_t b = begin; b < end; ++b) {
        int64_t item = b / per_matrix, i = b % per_matrix / s->grid.grid_n,
                j = b % s->grid.grid_n, m0, m1, n0, n1;
        gemm_problem p = *s->p;
        if (s->a_off != NULL) {
            p.a += s->a_off[item];
            p.b += s->b_off[item];
            p.c += item * s->c_stride;
        }
        lgk_grid_range(s->grid.rows, s->grid.grid_m, p.M, i, &m0, &m1);
        lgk_grid_range(s->grid.cols, s->grid.grid_n, p.N, j, &n0, &n1);
        LGK_TRY(gemm_block_range(s->g, &p, m0, m1, n0, n1));
    }
    return LGK_OK;
}

/* Below this many flops per thread an extra thread costs more than it saves: the
 * hand-off to a spinning pool worker (1-2 us), where no operand is prepacked a copy of
 * the shared operand packed by each thread, and in a model the next step reading the
 * part of the result written on the other core (on the 2-core VM ~3 us per 32 KiB).
 * Measured there (both cores free): alone, 2 threads gain 1.5x at 1 MFLOP with B
 * prepacked (65 x 128 x 64) and lose at 0.5; in segformer the 1 MFLOP GEMMs' gain was
 * lost again in the transposes after them, while swin's 2 MFLOP ones gain 1.15x. */
#ifndef GEMM_MIN_FLOPS_PER_THREAD
#define GEMM_MIN_FLOPS_PER_THREAD 1.0e6
#endif

static int threads_for_flops(double flops, double per_thread, int nthreads)
{
    double t = flops / per_thread;
    int cap = lgk_clamp_threads(nthreads);
    return t < 2.0 ? 1 : (t >= cap ? cap : (int)t);
}

static int gemm_threads_for(const gemm_problem *p, int nthreads)
{
    return threads_for_flops(2.0 * (double)p->M * (double)p->N * (double)LGK_MAX(p->K, 1),
                             GEMM_MIN_FLOPS_PER_THREAD, nthreads);
}

/* What a block's read of one element of an operand costs, in multiply-adds. Packing A
 * gathers MR rows a column at a time: at 1 thread (AVX-512, K = 768, B prepacked) blocks
 * of equal work took 230 us as 128 x 96, 200 as 64 x 192 and 189 as 32 x 384, which fits
 * 39 multiply-adds per element of A packed and 2 per element of B read (B in an idle L3;
 * 8 allows for threads sharing L3 and memory). B packed by the call is copied row by row. */
#define GEMM_PACK_A_COST 40.0
#define GEMM_PACK_B_COST 12.0
#define GEMM_READ_COST 8.0

/* The `batch` matrices of p (offsets a_off, b_off, c_stride apart; a_off NULL for one)
 * on up to nthreads threads. */
static int gemm_run_batch(const gemm_impl *g, const gemm_problem *p, int64_t batch,
                          const int64_t *a_off, const int64_t *b_off, int64_t c_stride,
                          int nthreads)
{
    lgk_grid_problem q = {batch, p->M, p->N, p->K, g->mr, g->nr,
                          p->packed_a != NULL ? GEMM_READ_COST : GEMM_PACK_A_COST,
                          p->packed_b != NULL ? GEMM_READ_COST : GEMM_PACK_B_COST,
                          p->M > SMALL_M ? SMALL_M + 1 : 1, p->N > SMALL_N ? SMALL_N + 1 : 1};
    gemm_split s = {g, p, a_off, b_off, c_stride, lgk_choose_grid(&q, nthreads)};
    unsigned mode = lgk_flush_subnormals();
    int status = lgk_parallel_slices(nthreads, batch * s.grid.grid_m * s.grid.grid_n, 1,
                                     gemm_split_range, &s);
    lgk_restore_fp_mode(mode);
    return status;
}

static int gemm_run(const gemm_impl *g, const gemm_problem *p, int nthreads)
{
    return gemm_run_batch(g, p, 1, NULL, NULL, 0, nthreads);
}

/* ---- argument validation --------------------------------------------------------- */

static int check_epilogue(int64_t M, int64_t N, const float *bias, int64_t bias_len,
                          int bias_mode, int activation)
{
    LGK_CHECK(activation >= LGK_ACT_NONE && activation <= LGK_ACT_LAST, LGK_ERR_ARG);
    LGK_CHECK(bias_mode >= LGK_BIAS_NONE && bias_mode <= LGK_BIAS_ROW, LGK_ERR_ARG);
    if (bias_mode != LGK_BIAS_NONE)
        LGK_TRY(lgk_check_buffer(bias, bias_len, bias_mode == LGK_BIAS_COL ? N : M));
    return LGK_OK;
}

/* Dims and strides of one operand; returns its extent in *extent. */
static int check_matrix(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t *extent)
{
    const int64_t dims[2] = {rows, cols}, strides[2] = {rs, cs};
    return lgk_view_extent(2, dims, strides, extent);
}

static int check_gemm(int64_t M, int64_t N, int64_t K, int64_t rs_a, int64_t cs_a,
                      int64_t rs_b, int64_t cs_b, int64_t ldc, int64_t ext[3])
{
    LGK_CHECK(M >= 0 && N >= 0 && K >= 0, LGK_ERR_SHAPE);
    LGK_CHECK(ldc >= N && ldc >= 1, LGK_ERR_SHAPE);
    LGK_TRY(check_matrix(M, K, rs_a, cs_a, &ext[0]));
    LGK_TRY(check_matrix(K, N, rs_b, cs_b, &ext[1]));
    LGK_TRY(check_matrix(M, N, ldc, 1, &ext[2]));
    int64_t count;
    const int64_t dims[3] = {M, N, K};
    return lgk_checked_count(3, dims, &count); /* flop count must be representable */
}

int lgk_sgemm(int64_t M, int64_t N, int64_t K,
              const float *a, int64_t a_len, int64_t rs_a, int64_t cs_a,
              const float *b, int64_t b_len, int64_t rs_b, int64_t cs_b,
              float *c, int64_t c_len, int64_t ldc,
              const float *bias, int64_t bias_len, int bias_mode,
              int activation, int nthreads)
{
    int64_t ext[3];
    LGK_TRY(check_gemm(M, N, K, rs_a, cs_a, rs_b, cs_b, ldc, ext));
    LGK_TRY(lgk_check_buffer(a, a_len, ext[0]));
    LGK_TRY(lgk_check_buffer(b, b_len, ext[1]));
    LGK_TRY(lgk_check_buffer(c, c_len, ext[2]));
    LGK_TRY(check_epilogue(M, N, bias, bias_len, bias_mode, activation));
    if (M == 0 || N == 0)
        return LGK_OK;
    gemm_problem p = {M, N, K, a, rs_a, cs_a, b, rs_b, cs_b, c, ldc,
                      {bias, bias_mode, activation, 0}, NULL, NULL, 0};
    return gemm_run(current_impl(), &p, gemm_threads_for(&p, nthreads));
}

/* ---- batched ------------------------------------------------------------------------ */

/* Every offset must keep its whole matrix inside the buffer. */
static int check_offsets(int64_t batch, const int64_t *off, int64_t extent, int64_t len)
{
    LGK_CHECK(off != NULL, LGK_ERR_NULL);
    for (int64_t i = 0; i < batch; ++i) {
        int64_t end;
        LGK_CHECK(off[i] >= 0, LGK_ERR_SHAPE);
        LGK_TRY(lgk_add(off[i], extent, &end));
        LGK_CHECK(end <= len, LGK_ERR_SHAPE);
    }
    return LGK_OK;
}

/* The arguments of a batched GEMM (lgk_sgemm_batched, lgk_sgemm_batched_softmax): shapes
 * and strides, every matrix's offsets inside a and b, and C's matrices apart and inside c. */
static int check_batched(int64_t batch, int64_t M, int64_t N, int64_t K, const float *a,
                         int64_t a_len, const int64_t *a_offsets, int64_t rs_a, int64_t cs_a,
                         const float *b, int64_t b_len, const int64_t *b_offsets, int64_t rs_b,
                         int64_t cs_b, const float *c, int64_t c_len, int64_t c_batch_stride,
                         int64_t ldc)
{
    int64_t ext[3], c_ext;
    LGK_CHECK(batch >= 0 && c_batch_stride >= 0, LGK_ERR_SHAPE);
    LGK_TRY(check_gemm(M, N, K, rs_a, cs_a, rs_b, cs_b, ldc, ext));
    LGK_CHECK(a != NULL && b != NULL && c != NULL, LGK_ERR_NULL);
    LGK_TRY(check_offsets(batch, a_offsets, ext[0], a_len));
    LGK_TRY(check_offsets(batch, b_offsets, ext[1], b_len));
    /* Output matrices must not overlap each other, and all must fit. */
    LGK_CHECK(batch <= 1 || c_batch_stride >= ext[2], LGK_ERR_SHAPE);
    LGK_TRY(lgk_mul(LGK_MAX(batch - 1, 0), c_batch_stride, &c_ext));
    LGK_TRY(lgk_add(c_ext, ext[2], &c_ext));
    LGK_TRY(lgk_check_buffer(c, c_len, c_ext));
    return LGK_OK;
}

/* Threads for a batched GEMM's work. */
static int batched_threads(int64_t batch, int64_t M, int64_t N, int64_t K, int nthreads)
{
    double flops = 2.0 * (double)batch * (double)M * (double)N * (double)LGK_MAX(K, 1);
    return threads_for_flops(flops, GEMM_MIN_FLOPS_PER_THREAD, nthreads);
}

int lgk_sgemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K,
                      const float *a, int64_t a_len, const int64_t *a_offsets,
                      int64_t rs_a, int64_t cs_a,
                      const float *b, int64_t b_len, const int64_t *b_offsets,
                      int64_t rs_b, int64_t cs_b,
                      float *c, int64_t c_len, int64_t c_batch_stride, int64_t ldc,
                      const float *bias, int64_t bias_len, int bias_mode,
                      int activation, int nthreads)
{
    LGK_TRY(check_batched(batch, M, N, K, a, a_len, a_offsets, rs_a, cs_a, b, b_len, b_offsets,
                          rs_b, cs_b, c, c_len, c_batch_stride, ldc));
    LGK_TRY(check_epilogue(M, N, bias, bias_len, bias_mode, activation));
    if (batch == 0 || M == 0 || N == 0)
        return LGK_OK;
    /* a, b, c point at the buffers' starts */
    gemm_problem base = {M, N, K, a, rs_a, cs_a, b, rs_b, cs_b, c, ldc,
                         {bias, bias_mode, activation, 0}, NULL, NULL, 0};
    int threads = batched_threads(batch, M, N, K, nthreads);
    return gemm_run_batch(current_impl(), &base, batch, a_offsets, b_offsets, c_batch_stride,
                          threads);
}

/* ---- softmax over C's rows -------------------------------------------------------------
 * softmax(A @ B) along C's rows (attention: the scores Q @ K^T, then their softmax over
 * the keys). Unfused, the GEMM wrote all of C to memory (6 heads of 1500 x 1500: 54 MB)
 * and the softmax read and wrote it again; here threads take strips of whole rows, each
 * computed over all N columns and its softmax applied while the strip is still in L2.
 * B is packed once per matrix (not once per strip) into the panel layout the blocked
 * driver reads, in the K blocks the unfused GEMM takes, so every element of C is the
 * same sum as there and its softmax the same row function on the same values. */

/* Floats of C per strip (about one micro-tile of rows at N = 1500): the strip's softmax
 * reads it back from L1/L2 right after the micro-kernels wrote it, with B's packed panels
 * (64 x 1500 for attention) still in L2. Measured on the 6 x 1500 x 1500 scores (Zen 4,
 * 1 thread, fused vs the GEMM then the softmax in one process): 16 Ki and 32 Ki floats
 * 0.90x, 48 Ki 0.92x, 96 Ki 0.99x, 256 Ki 0.98x. */
#ifndef SOFTMAX_STRIP_FLOATS
#define SOFTMAX_STRIP_FLOATS ((int64_t)32 * 1024)
#endif
/* At most this many floats of B packed per thread; a larger B is packed strip by strip as
 * the unfused GEMM would pack it. */
#define SOFTMAX_PACK_MAX_FLOATS ((int64_t)4 * 1024 * 1024)

typedef struct {
    const gemm_impl *g;
    const gemm_problem *p; /* with matrix 0's pointers */
    const int64_t *a_off, *b_off;
    int64_t c_stride;
    int64_t strip, strips;  /* rows per strip (the last one takes the rest), per matrix */
    int64_t packed_floats;  /* B packed per matrix, or 0: B packed by each strip's GEMM */
} softmax_split;

/* Every K block of p's B into `dst` in the prepacked panel layout, blocks p->packed_kc
 * deep. */
static void pack_b_blocks(const gemm_impl *g, const gemm_problem *p, float *dst)
{
    int64_t cols = padded_cols(g, p->N);
    for (int64_t pc = 0; pc < p->K; pc += p->packed_kc)
        pack_b(g->nr, LGK_MIN(p->packed_kc, p->K - pc), p->N, p->b + pc * p->rs_b, p->rs_b,
               p->cs_b, dst + pc * cols);
}

/* Strips [begin, end), numbered matrix-major: a thread's strips of one matrix share the B
 * it packed for the first of them. */
static int gemm_softmax_range(void *ctx, int64_t begin, int64_t end)
{
    const softmax_split *s = ctx;
    const gemm_problem *p = s->p;
    lgk_scratch packed = {NULL, 0};
    if (s->packed_floats > 0)
        LGK_TRY(lgk_scratch_acquire(s->packed_floats, &packed));
    const float *packed_from = NULL; /* the B in `packed` */
    int status = LGK_OK;
    for (int64_t u = begin; u < end && status == LGK_OK; ++u) {
        int64_t item = u / s->strips, i = u % s->strips, m0 = i * s->strip;
        int64_t m1 = i + 1 == s->strips ? p->M : m0 + s->strip;
        gemm_problem q = *p;
        q.a += s->a_off[item];
        q.b += s->b_off[item];
        q.c += item * s->c_stride;
        if (s->packed_floats > 0) {
            if (q.b != packed_from)
                pack_b_blocks(s->g, &q, packed.data);
            packed_from = q.b;
            q.packed_b = packed.data;
        }
        status = gemm_block_range(s->g, &q, m0, m1, 0, p->N);
        if (status == LGK_OK)
            lgk_softmax_rows_inplace(m1 - m0, p->N, q.c + m0 * p->ldc, p->ldc);
    }
    lgk_scratch_release(&packed);
    return status;
}

/* Rows per strip: whole micro-tiles holding about SOFTMAX_STRIP_FLOATS of C. */
static int64_t softmax_strip_rows(const gemm_impl *g, int64_t N)
{
    int64_t rows = SOFTMAX_STRIP_FLOATS / LGK_MAX(N, (int64_t)1) / g->mr * g->mr;
    return LGK_MIN(LGK_MAX(rows, (int64_t)g->mr), g->mc / g->mr * g->mr);
}

static int gemm_softmax_run(const gemm_impl *g, gemm_problem *p, int64_t batch,
                            const int64_t *a_off, const int64_t *b_off, int64_t c_stride,
                            int nthreads)
{
    /* Few rows or columns, or K = 0, take paths that read B unpacked (the unfused GEMM's
     * too): those go by strips with B as it is. Strips never have fewer rows than one
     * (all of M, or the rounded strip): a strip of <= SMALL_M rows would sum its
     * elements differently from the whole matrix. */
    int prepack = p->K > 0 && !small_m_fits(p, p->M) && !small_n_fits(p, p->N);
    int64_t packed_floats = 0;
    if (prepack && (lgk_mul(padded_cols(g, p->N), p->K, &packed_floats) != LGK_OK
                    || packed_floats > SOFTMAX_PACK_MAX_FLOATS))
        packed_floats = 0;
    /* (p->packed_kc is 0 here: the depth the unfused GEMM takes) */
    p->packed_kc = packed_floats > 0 ? k_block_depth(g, p, direct_a(g, p)) : 0;
    int64_t strip = packed_floats > 0 ? softmax_strip_rows(g, p->N) : g->mc;
    softmax_split s = {g, p, a_off, b_off, c_stride, strip, LGK_MAX(p->M / strip, (int64_t)1),
                       packed_floats};
    unsigned mode = lgk_flush_subnormals();
    int status = lgk_parallel_for(nthreads, batch * s.strips, 1, gemm_softmax_range, &s);
    lgk_restore_fp_mode(mode);
    return status;
}

int lgk_sgemm_batched_softmax(int64_t batch, int64_t M, int64_t N, int64_t K,
                              const float *a, int64_t a_len, const int64_t *a_offsets,
                              int64_t rs_a, int64_t cs_a,
                              const float *b, int64_t b_len, const int64_t *b_offsets,
                              int64_t rs_b, int64_t cs_b,
                              float *c, int64_t c_len, int64_t c_batch_stride, int64_t ldc,
                              int nthreads)
{
    LGK_TRY(check_batched(batch, M, N, K, a, a_len, a_offsets, rs_a, cs_a, b, b_len, b_offsets,
                          rs_b, cs_b, c, c_len, c_batch_stride, ldc));
    if (batch == 0 || M == 0 || N == 0)
        return LGK_OK;
    const gemm_impl *g = current_impl();
    gemm_problem p = {M, N, K, a, rs_a, cs_a, b, rs_b, cs_b, c, ldc,
                      {NULL, LGK_BIAS_NONE, LGK_ACT_NONE, 0}, NULL, NULL, 0};
    int threads = batched_threads(batch, M, N, K, nthreads);
    return gemm_softmax_run(g, &p, batch, a_offsets, b_offsets, c_batch_stride, threads);
}

/* ---- prepacked B ------------------------------------------------------------------------
 * A constant B (a model weight) is packed once into the exact panel layout the
 * blocked driver reads, so each GEMM skips the pack_b pass: an extra read and
 * write of all of B that costs 15-25% at M = 64..128. The layout depends on the
 * micro-kernel (NR) and K blocking, so a header records them and every use
 * checks them against the kernel family in use at that moment. */

#define PACKED_MAGIC 0x4b50474cu /* "LGPK" */
#define PACKED_HEADER_FLOATS LGK_PACKED_HEADER_FLOATS /* one cache line: panels stay aligned */

typedef struct {
    uint32_t magic;
    int32_t isa, nr, reserved;
    int64_t K, N, kc;
} packed_header;

_Static_assert(sizeof(packed_header) <= PACKED_HEADER_FLOATS * sizeof(float),
               "packed_header must fit its reserved cache line");

/* Floats of a packed K x N operand for kernel family g, header included. */
static int packed_size(const gemm_impl *g, int64_t K, int64_t N, int64_t *out)
{
    LGK_CHECK(K >= 0 && N >= 0, LGK_ERR_SHAPE);
    LGK_CHECK(N <= INT64_MAX - g->nr, LGK_ERR_OVERFLOW); /* padding N must not wrap */
    const int64_t dims[2] = {K, padded_cols(g, N)};
    int64_t panels;
    LGK_TRY(lgk_checked_count(2, dims, &panels));
    LGK_TRY(lgk_add(panels, PACKED_HEADER_FLOATS, out));
    return lgk_checked_count(1, out, out); /* the header too must fit a byte count */
}

static packed_header header_for(const gemm_impl *g, int64_t K, int64_t N)
{
    packed_header h = {PACKED_MAGIC, g->isa, g->nr, 0, K, N, packed_depth(g, K)};
    return h;
}

int64_t lgk_sgemm_packed_b_size(int64_t K, int64_t N)
{
    int64_t size;
    int status = packed_size(current_impl(), K, N, &size);
    return status == LGK_OK ? size : -(int64_t)status;
}

/* The buffer must be aligned for the micro-kernels' aligned loads; aligned
 * allocators (posix_memalign, numpy with an offset view) provide that. */
static int check_packed_buffer(const float *packed, int64_t packed_len, int64_t need)
{
    LGK_TRY(lgk_check_buffer(packed, packed_len, need));
    LGK_CHECK((uintptr_t)packed % 64 == 0, LGK_ERR_ARG);
    return LGK_OK;
}

int lgk_sgemm_pack_b(int64_t K, int64_t N, const float *b, int64_t b_len, int64_t rs_b,
                     int64_t cs_b, float *packed, int64_t packed_len)
{
    const gemm_impl *g = current_impl();
    int64_t need, extent;
    LGK_TRY(packed_size(g, K, N, &need));
    LGK_TRY(check_matrix(K, N, rs_b, cs_b, &extent));
    LGK_TRY(lgk_check_buffer(b, b_len, extent));
    LGK_TRY(check_packed_buffer(packed, packed_len, need));
    packed_header h = header_for(g, K, N);
    memcpy(packed, &h, sizeof h);
    float *panels = packed + PACKED_HEADER_FLOATS;
    int64_t cols = padded_cols(g, N);
    for (int64_t pc = 0; pc < K; pc += h.kc) {
        int64_t kc = LGK_MIN(h.kc, K - pc);
        pack_b(g->nr, kc, N, b + pc * rs_b, rs_b, cs_b, panels + pc * cols);
    }
    return LGK_OK;
}

/* A header that does not match (K, N) and the current family's layout means
 * the buffer was packed for other shapes or under another ISA (or never):
 * LGK_ERR_ARG, checked before the length so that the error says so. */
static int check_packed(const gemm_impl *g, int64_t K, int64_t N, const float *packed,
                        int64_t packed_len)
{
    int64_t need;
    LGK_TRY(packed_size(g, K, N, &need));
    LGK_TRY(check_packed_buffer(packed, packed_len, PACKED_HEADER_FLOATS));
    packed_header h, want = header_for(g, K, N);
    memcpy(&h, packed, sizeof h);
    LGK_CHECK(h.magic == want.magic && h.isa == want.isa && h.nr == want.nr && h.K == want.K
                  && h.N == want.N && h.kc == want.kc,
              LGK_ERR_ARG);
    LGK_CHECK(need <= packed_len, LGK_ERR_SHAPE);
    return LGK_OK;
}

int lgk_sgemm_prepacked(int64_t M, int64_t N, int64_t K,
                        const float *a, int64_t a_len, int64_t rs_a, int64_t cs_a,
                        const float *packed_b, int64_t packed_len,
                        float *c, int64_t c_len, int64_t ldc,
                        const float *bias, int64_t bias_len, int bias_mode,
                        int activation, int nthreads)
{
    const gemm_impl *g = current_impl();
    int64_t ext[3];
    /* B's strides (0, 0) only satisfy check_gemm: B is read from packed_b. */
    LGK_TRY(check_gemm(M, N, K, rs_a, cs_a, 0, 0, ldc, ext));
    LGK_TRY(lgk_check_buffer(a, a_len, ext[0]));
    LGK_TRY(check_packed(g, K, N, packed_b, packed_len));
    LGK_TRY(lgk_check_buffer(c, c_len, ext[2]));
    LGK_TRY(check_epilogue(M, N, bias, bias_len, bias_mode, activation));
    if (M == 0 || N == 0)
        return LGK_OK;
    gemm_problem p = {M, N, K, a, rs_a, cs_a, NULL, 0, 0, c, ldc,
                      {bias, bias_mode, activation, 0}, packed_b + PACKED_HEADER_FLOATS, NULL, 0};
    return gemm_run(g, &p, gemm_threads_for(&p, nthreads));
}

/* ---- prepacked A and caller-packed operands ----------------------------------------------
 * A constant left operand (a conv's weights when filters are the GEMM's rows) packs the
 * same way into MR-row slivers: per K block of depth kc, padded_rows(M) x kc floats,
 * sliver after sliver, each k-major. Its header has its own magic so neither operand's
 * buffer passes for the other's. */

#define PACKED_A_MAGIC 0x4150474cu /* "LGPA" */

static packed_header a_header_for(const gemm_impl *g, int64_t M, int64_t K)
{
    packed_header h = {PACKED_A_MAGIC, g->isa, g->mr, 0, K, M, packed_depth(g, K)};
    return h;
}

static int packed_a_size(const gemm_impl *g, int64_t M, int64_t K, int64_t *out)
{
    LGK_CHECK(M >= 0 && K >= 0, LGK_ERR_SHAPE);
    LGK_CHECK(M <= INT64_MAX - g->mr, LGK_ERR_OVERFLOW);
    const int64_t dims[2] = {K, padded_rows(g, M)};
    int64_t panels;
    LGK_TRY(lgk_checked_count(2, dims, &panels));
    LGK_TRY(lgk_add(panels, PACKED_HEADER_FLOATS, out));
    return lgk_checked_count(1, out, out);
}

int64_t lgk_sgemm_packed_a_size(int64_t M, int64_t K)
{
    int64_t size;
    int status = packed_a_size(current_impl(), M, K, &size);
    return status == LGK_OK ? size : -(int64_t)status;
}

int lgk_sgemm_pack_a(int64_t M, int64_t K, const float *a, int64_t a_len, int64_t rs_a,
                     int64_t cs_a, float *packed, int64_t packed_len)
{
    const gemm_impl *g = current_impl();
    int64_t need, extent;
    LGK_TRY(packed_a_size(g, M, K, &need));
    LGK_TRY(check_matrix(M, K, rs_a, cs_a, &extent));
    LGK_TRY(lgk_check_buffer(a, a_len, extent));
    LGK_TRY(check_packed_buffer(packed, packed_len, need));
    packed_header h = a_header_for(g, M, K);
    memcpy(packed, &h, sizeof h);
    float *panels = packed + PACKED_HEADER_FLOATS;
    for (int64_t pc = 0; pc < K; pc += h.kc)
        pack_a(g->mr, M, LGK_MIN(h.kc, K - pc), a + pc * cs_a, rs_a, cs_a, 0,
               panels + pc * padded_rows(g, M));
    return LGK_OK;
}

int lgk_sgemm_check_packed_a(int64_t M, int64_t K, const float *packed, int64_t packed_len)
{
    const gemm_impl *g = current_impl();
    int64_t need;
    LGK_TRY(packed_a_size(g, M, K, &need));
    LGK_TRY(check_packed_buffer(packed, packed_len, PACKED_HEADER_FLOATS));
    packed_header h, want = a_header_for(g, M, K);
    memcpy(&h, packed, sizeof h);
    LGK_CHECK(h.magic == want.magic && h.isa == want.isa && h.nr == want.nr && h.K == want.K
                  && h.N == want.N && h.kc == want.kc,
              LGK_ERR_ARG);
    LGK_CHECK(need <= packed_len, LGK_ERR_SHAPE);
    return LGK_OK;
}

int lgk_sgemm_check_packed_b(int64_t K, int64_t N, const float *packed, int64_t packed_len)
{
    return check_packed(current_impl(), K, N, packed, packed_len);
}

lgk_panel_layout lgk_gemm_panel_layout(int64_t K)
{
    const gemm_impl *g = current_impl();
    lgk_panel_layout l = {g->mr, g->nr, packed_depth(g, LGK_MAX(K, (int64_t)1))};
    return l;
}

/* The problem of operands a and b (each in place or packed) into c. */
static gemm_problem operands_problem(int64_t M, int64_t N, int64_t K, lgk_operand a,
                                     lgk_operand b, float *c, int64_t ldc, epilogue ep)
{
    gemm_problem p = {M, N, K, a.data, a.rs, a.cs, b.data, b.rs, b.cs, c, ldc, ep, b.panels,
                      a.panels, 0};
    return p;
}

int lgk_sgemm_operands(int64_t M, int64_t N, int64_t K, lgk_operand a, lgk_operand b,
                       float *c, int64_t ldc, const float *bias, int bias_mode, int activation,
                       int nthreads)
{
    if (M == 0 || N == 0)
        return LGK_OK;
    gemm_problem p = operands_problem(M, N, K, a, b, c, ldc,
                                      (epilogue){bias, bias_mode, activation, 0});
    return gemm_run(current_impl(), &p, gemm_threads_for(&p, nthreads));
}

int lgk_sgemm_split(int64_t M, int64_t N, int64_t K, lgk_operand a, lgk_operand b, float *c,
                    int64_t ldc, const float *bias, int bias_mode, int activation, int onto,
                    int threads)
{
    if (M == 0 || N == 0)
        return LGK_OK;
    gemm_problem p = operands_problem(M, N, K, a, b, c, ldc,
                                      (epilogue){bias, bias_mode, activation, onto != 0});
    return gemm_run(current_impl(), &p, LGK_MAX(threads, 1));
}

static int sgemm_block(int64_t M, int64_t N, int64_t K, lgk_operand a, lgk_operand b,
                       float *c, int64_t ldc, epilogue ep, int64_t m0, int64_t m1, int64_t n0,
                       int64_t n1)
{
    gemm_problem p = operands_problem(M, N, K, a, b, c, ldc, ep);
    unsigned mode = lgk_flush_subnormals();
    int status = gemm_block_range(current_impl(), &p, LGK_MAX(m0, (int64_t)0),
                                  LGK_MIN(m1, M), LGK_MAX(n0, (int64_t)0), LGK_MIN(n1, N));
    lgk_restore_fp_mode(mode);
    return status;
}

/* C[m0:m1, n0:n1] of lgk_sgemm_operands on the calling thread (n0 a multiple of NR
 * where B is packed, m0 of MR where A is): a part of a GEMM its caller splits. */
int lgk_sgemm_block(int64_t M, int64_t N, int64_t K, lgk_operand a, lgk_operand b, float *c,
                    int64_t ldc, const float *bias, int bias_mode, int activation, int64_t m0,
                    int64_t m1, int64_t n0, int64_t n1)
{
    return sgemm_block(M, N, K, a, b, c, ldc, (epilogue){bias, bias_mode, activation, 0}, m0,
                       m1, n0, n1);
}

int lgk_sgemm_block_onto(int64_t M, int64_t N, int64_t K, lgk_operand a, lgk_operand b,
                         float *c, int64_t ldc, const float *bias, int bias_mode, int activation,
                         int64_t m0, int64_t m1, int64_t n0, int64_t n1)
{
    return sgemm_block(M, N, K, a, b, c, ldc, (epilogue){bias, bias_mode, activation, 1}, m0,
                       m1, n0, n1);
}
