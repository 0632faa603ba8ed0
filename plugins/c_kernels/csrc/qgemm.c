/*
 * qgemm.c - int8 GEMM: C = requantize(sum_k (A - a_zp) (B - b_zp) + bias).
 *
 * Structure of gemm.c: blocks of A packed into MR-row slivers and of B into NR-column
 * slivers, an MR x NR register-blocked micro-kernel over every sliver pair. Bytes are
 * packed in groups of 4 consecutive k (K padded with zeros to a multiple of 4), the
 * operand layout of vpdpbusd, which multiplies 4 unsigned bytes of A by 4 signed bytes
 * of B and adds the four products to an int32 lane. So A is packed as uint8 and B as
 * int8 whatever their types: an int8 A is flipped to uint8 (xor 0x80 adds 128), a uint8
 * B to int8 (subtracts 128), and the zero points move by the same amounts. With row
 * sums of the packed A and column sums of the packed B (taken while packing) the
 * zero-point terms come out of the raw product:
 *   sum (A - za)(B - zb) = raw - zb[n] (rowsum[m] - K za[m]) - za[m] colsum[n].
 * All of it is int32 arithmetic modulo 2^32 (exact whenever the true sum fits int32).
 *
 * Families, chosen once from CPUID: AVX-512 VNNI (vpdpbusd, 8 x 48 tile), AVX2 (bytes
 * widened to int16 and multiplied by vpmaddwd, whose pair sums cannot saturate, unlike
 * vpmaddubsw's int16 sums of u8 x s8 products), and portable C. The micro-kernel runs
 * over the whole K (an int32 accumulator tile never leaves registers), then the
 * epilogue corrects, requantizes and stores the tile (lgk_qstore).
 */
#include <stdatomic.h>

#include "lgk_parallel.h"
#include "lgk_qgemm.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define LGK_X86_KERNELS 1
#include <immintrin.h>
#endif

/* raw tile (MR x NR, row stride NR) = A sliver @ B sliver over k4 groups of 4 k */
typedef void (*lgk_qukernel)(int rows, int64_t k4, const uint8_t *a, const int8_t *b,
                             int32_t *tile);

typedef struct {
    int isa, mr, nr;
    lgk_qukernel kernel;
} qgemm_impl;

#define QMAX_MR 8
#define QMAX_NR 48

/* ---- micro-kernels ----------------------------------------------------------------- */

#define QGEN_MR 4
#define QGEN_NR 8

static void qkernel_generic(int rows, int64_t k4, const uint8_t *restrict a,
                            const int8_t *restrict b, int32_t *restrict tile)
{
    (void)rows; /* pad rows of the sliver are zeros */
    int32_t acc[QGEN_MR][QGEN_NR] = {{0}};
    for (int64_t k = 0; k < k4; ++k) {
        for (int i = 0; i < QGEN_MR; ++i)
            for (int j = 0; j < QGEN_NR; ++j)
                for (int t = 0; t < 4; ++t)
                    acc[i][j] += (int32_t)a[i * 4 + t] * (int32_t)b[j * 4 + t];
        a += 4 * QGEN_MR;
        b += 4 * QGEN_NR;
    }
    memcpy(tile, acc, sizeof acc);
}

#ifdef LGK_X86_KERNELS
/* AVX2: 6 x 8 tile. Per k group, B's 8 columns x 4 bytes are sign-extended to two
 * vectors of int16 (columns 0-3, 4-7) and A's 4 bytes of a row broadcast as int16;
 * vpmaddwd gives per column two int32 pair sums, added across at the end. */
#define QAVX2_MR 6
#define QAVX2_NR 8

__attribute__((target("avx2")))
static void qkernel_avx2(int rows, int64_t k4, const uint8_t *restrict a,
                         const int8_t *restrict b, int32_t *restrict tile)
{
    (void)rows;
    __m256i acc[QAVX2_MR][2];
    for (int i = 0; i < QAVX2_MR; ++i)
        acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    for (int64_t k = 0; k < k4; ++k) {
        __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b));
        __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 16)));
        for (int i = 0; i < QAVX2_MR; ++i) {
            int32_t word;
            memcpy(&word, a + 4 * i, 4);
            __m256i ai = _mm256_cvtepu8_epi16(_mm_set1_epi32(word));
            acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(ai, b0));
            acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(ai, b1));
        }
        a += 4 * QAVX2_MR;
        b += 4 * QAVX2_NR;
    }
    for (int i = 0; i < QAVX2_MR; ++i) {
        /* lanes: acc0 = c0 c0 c1 c1 | c2 c2 c3 c3, acc1 the same for c4..c7; hadd gives
         * c0 c1 c4 c5 | c2 c3 c6 c7 */
        __m256i s = _mm256_hadd_epi32(acc[i][0], acc[i][1]);
        s = _mm256_permute4x64_epi64(s, 0xD8); /* 64-bit lanes 0, 2, 1, 3 */
        _mm256_storeu_si256((__m256i *)(tile + i * QAVX2_NR), s);
    }
}

/* AVX-512 VNNI: 8 x 48 tile = 24 zmm accumulators; per k group 3 B loads feed 24
 * vpdpbusd whose A operand is a broadcast 32-bit group of 4 bytes. */
#define QVNNI_MR 8
#define QVNNI_NR 48

__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline))
static inline void vnni_rows(const int rows, int64_t k4, const uint8_t *restrict a,
                             const int8_t *restrict b, int32_t *restrict tile)
{
    __m512i acc[QVNNI_MR][3];
#pragma GCC unroll 8
    for (int i = 0; i < rows; ++i)
        acc[i][0] = acc[i][1] = acc[i][2] = _mm512_setzero_si512();
    for (int64_t k = 0; k < k4; ++k) {
        __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64);
        __m512i b2 = _mm512_loadu_si512(b + 128);
        _mm_prefetch((const char *)(b + 8 * 4 * QVNNI_NR), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int i = 0; i < rows; ++i) {
            int32_t word;
            memcpy(&word, a + 4 * i, 4);
            __m512i ai = _mm512_set1_epi32(word);
            acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], ai, b0);
            acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], ai, b1);
            acc[i][2] = _mm512_dpbusd_epi32(acc[i][2], ai, b2);
        }
        a += 4 * QVNNI_MR;
        b += 4 * QVNNI_NR;
    }
#pragma GCC unroll 8
    for (int i = 0; i < rows; ++i) {
        _mm512_storeu_si512(tile + i * QVNNI_NR, acc[i][0]);
        _mm512_storeu_si512(tile + i * QVNNI_NR + 16, acc[i][1]);
        _mm512_storeu_si512(tile + i * QVNNI_NR + 32, acc[i][2]);
    }
}

#define VNNI_CASE(R) \
    case R: vnni_rows(R, k4, a, b, tile); break;

/* `rows` valid rows of the sliver: a tile of M's edge does only their work. */
__attribute__((target("avx512f,avx512bw,avx512vnni")))
static void qkernel_vnni(int rows, int64_t k4, const uint8_t *a, const int8_t *b,
                         int32_t *tile)
{
    switch (rows) {
    VNNI_CASE(1) VNNI_CASE(2) VNNI_CASE(3) VNNI_CASE(4) VNNI_CASE(5) VNNI_CASE(6)
    VNNI_CASE(7)
    default: vnni_rows(QVNNI_MR, k4, a, b, tile); break;
    }
}
#endif /* LGK_X86_KERNELS */

/* ---- family selection ---------------------------------------------------------------- */

static const qgemm_impl qimpl_generic = {LGK_QISA_GENERIC, QGEN_MR, QGEN_NR, qkernel_generic};
#ifdef LGK_X86_KERNELS
static const qgemm_impl qimpl_avx2 = {LGK_QISA_AVX2, QAVX2_MR, QAVX2_NR, qkernel_avx2};
static const qgemm_impl qimpl_vnni = {LGK_QISA_AVX512_VNNI, QVNNI_MR, QVNNI_NR, qkernel_vnni};
#endif

static int qcpu_can_run(int isa)
{
#ifdef LGK_X86_KERNELS
    __builtin_cpu_init();
    if (isa == LGK_QISA_AVX512_VNNI)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
               && __builtin_cpu_supports("avx512vnni");
    if (isa == LGK_QISA_AVX2)
        return __builtin_cpu_supports("avx2");
#endif
    return isa == LGK_QISA_GENERIC;
}

static const qgemm_impl *qimpl_for(int isa)
{
#ifdef LGK_X86_KERNELS
    if (isa == LGK_QISA_AVX512_VNNI)
        return &qimpl_vnni;
    if (isa == LGK_QISA_AVX2)
        return &qimpl_avx2;
#endif
    (void)isa;
    return &qimpl_generic;
}

static _Atomic int qselected = LGK_QISA_AUTO;

static const qgemm_impl *qcurrent(void)
{
    int isa = atomic_load_explicit(&qselected, memory_order_relaxed);
    if (isa == LGK_QISA_AUTO) {
        isa = qcpu_can_run(LGK_QISA_AVX512_VNNI) ? LGK_QISA_AVX512_VNNI
              : qcpu_can_run(LGK_QISA_AVX2)      ? LGK_QISA_AVX2
                                                 : LGK_QISA_GENERIC;
        atomic_store_explicit(&qselected, isa, memory_order_relaxed);
    }
    return qimpl_for(isa);
}

int lgk_qgemm_force_isa(int isa)
{
    LGK_CHECK(isa >= LGK_QISA_AUTO && isa <= LGK_QISA_AVX512_VNNI, LGK_ERR_ARG);
    LGK_CHECK(isa == LGK_QISA_AUTO || qcpu_can_run(isa), LGK_ERR_ARG);
    atomic_store_explicit(&qselected, isa, memory_order_relaxed);
    return LGK_OK;
}

int lgk_qgemm_isa(void) { return qcurrent()->isa; }

void lgk_qgemm_tile(int rows, int64_t k4, const uint8_t *a, const int8_t *b, int32_t *tile)
{
    qcurrent()->kernel(rows, k4, a, b, tile);
}

/* ---- packing ------------------------------------------------------------------------- */

static int64_t groups_of_4(int64_t K) { return K / 4 + (K % 4 != 0); }

static int64_t round_up(int64_t n, int64_t unit) { return (n + unit - 1) / unit * unit; }

/* Sum of a row's n bytes xor flip, as uint8 (vectorizes). */
LGK_CLONES static uint32_t qrow_sum(const uint8_t *row, int64_t n, uint8_t flip)
{
    uint32_t sum = 0;
    for (int64_t k = 0; k < n; ++k)
        sum += (uint8_t)(row[k] ^ flip);
    return sum;
}

/* Rows [0, rows) of A (strides rs, cs) into MR-row slivers of k4 groups, each byte
 * xor flip, pad rows and pad k zero; sums[i] = the row's packed bytes as uint8. */
static void qpack_a(int mr, int64_t rows, int64_t K, const uint8_t *a, int64_t rs, int64_t cs,
                    uint8_t flip, uint8_t *restrict dst, int32_t *restrict sums)
{
    int64_t k4 = groups_of_4(K), full = cs == 1 ? K / 4 : 0;
    uint32_t flip4 = flip * 0x01010101u;
    for (int64_t i0 = 0; i0 < rows; i0 += mr, dst += 4 * mr * k4) {
        int m = (int)LGK_MIN((int64_t)mr, rows - i0);
        if (m < mr || full < k4)
            memset(dst, 0, (size_t)(4 * mr * k4));
        for (int i = 0; i < m; ++i) {
            const uint8_t *row = a + (i0 + i) * rs;
            uint32_t sum = 0;
            for (int64_t g = 0; g < full; ++g) { /* contiguous rows: 4 bytes at a time */
                uint32_t v;
                memcpy(&v, row + 4 * g, 4);
                v ^= flip4;
                memcpy(dst + g * 4 * mr + i * 4, &v, 4);
            }
            if (full > 0)
                sum = qrow_sum(row, 4 * full, flip);
            for (int64_t k = 4 * full; k < K; ++k) {
                uint8_t v = (uint8_t)(row[k * cs] ^ flip);
                dst[(k / 4) * 4 * mr + i * 4 + k % 4] = v;
                sum += v;
            }
            sums[i0 + i] = (int32_t)sum;
        }
    }
}

/* sums[j] = sum over k of column j of B as packed (bytes xor flip, as int8): row by row
 * where rows are contiguous, so that the loop vectorizes. */
LGK_CLONES static void qcol_sums(int64_t cols, int64_t K, const uint8_t *b, int64_t rs,
                                 int64_t cs, uint8_t flip, int32_t *restrict sums)
{
    for (int64_t j = 0; j < cols; ++j)
        sums[j] = 0;
    if (cs == 1) {
        for (int64_t k = 0; k < K; ++k) {
            const uint8_t *r = b + k * rs;
            for (int64_t j = 0; j < cols; ++j)
                sums[j] += (int8_t)(r[j] ^ flip);
        }
        return;
    }
    for (int64_t j = 0; j < cols; ++j) {
        int32_t s = 0;
        for (int64_t k = 0; k < K; ++k)
            s += (int8_t)(b[j * cs + k * rs] ^ flip);
        sums[j] = s;
    }
}

/* Columns [0, cols) of B into NR-column slivers of k4 groups (bytes xor flip, as int8),
 * pad columns and pad k zero; sums[j] = the column's packed bytes as int8. Rows of
 * contiguous columns are interleaved 16 columns at a time (SSE2). */
static void qpack_b(int nr, int64_t cols, int64_t K, const uint8_t *b, int64_t rs, int64_t cs,
                    uint8_t flip, uint8_t *restrict dst, int32_t *restrict sums)
{
    int64_t k4 = groups_of_4(K);
    if (cs != 1) /* strided (a transposed weight, packed once): sums apart */
        qcol_sums(cols, K, b, rs, cs, flip, sums);
    else
        memset(sums, 0, (size_t)cols * sizeof(int32_t));
    for (int64_t j0 = 0; j0 < cols; j0 += nr, dst += 4 * nr * k4) {
        int n = (int)LGK_MIN((int64_t)nr, cols - j0);
        if (n < nr || K % 4 != 0 || cs != 1)
            memset(dst, 0, (size_t)(4 * nr * k4));
        for (int64_t g = 0; g < k4; ++g) {
            uint8_t *d = dst + g * 4 * nr;
            int j = 0;
#ifdef LGK_X86_KERNELS
            if (cs == 1 && 4 * g + 3 < K) {
                const uint8_t *r = b + 4 * g * rs + j0;
                __m128i x = _mm_set1_epi8((char)flip);
                for (; j + 16 <= n; j += 16) {
                    __m128i r0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(r + j)), x);
                    __m128i r1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(r + rs + j)), x);
                    __m128i r2 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(r + 2 * rs + j)), x);
                    __m128i r3 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(r + 3 * rs + j)), x);
                    __m128i lo01 = _mm_unpacklo_epi8(r0, r1), hi01 = _mm_unpackhi_epi8(r0, r1);
                    __m128i lo23 = _mm_unpacklo_epi8(r2, r3), hi23 = _mm_unpackhi_epi8(r2, r3);
                    __m128i *o = (__m128i *)(d + 4 * j);
                    _mm_storeu_si128(o, _mm_unpacklo_epi16(lo01, lo23));
                    _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(lo01, lo23));
                    _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(hi01, hi23));
                    _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(hi01, hi23));
                    /* column sums while the rows are in registers: int8 -> int16 (the
                     * high byte of each 16-bit lane, shifted down with its sign) */
                    __m128i s_lo = _mm_add_epi16(
                        _mm_add_epi16(_mm_srai_epi16(_mm_unpacklo_epi8(r0, r0), 8),
                                      _mm_srai_epi16(_mm_unpacklo_epi8(r1, r1), 8)),
                        _mm_add_epi16(_mm_srai_epi16(_mm_unpacklo_epi8(r2, r2), 8),
                                      _mm_srai_epi16(_mm_unpacklo_epi8(r3, r3), 8)));
                    __m128i s_hi = _mm_add_epi16(
                        _mm_add_epi16(_mm_srai_epi16(_mm_unpackhi_epi8(r0, r0), 8),
                                      _mm_srai_epi16(_mm_unpackhi_epi8(r1, r1), 8)),
                        _mm_add_epi16(_mm_srai_epi16(_mm_unpackhi_epi8(r2, r2), 8),
                                      _mm_srai_epi16(_mm_unpackhi_epi8(r3, r3), 8)));
                    __m128i parts[4] = {_mm_srai_epi32(_mm_unpacklo_epi16(s_lo, s_lo), 16),
                                        _mm_srai_epi32(_mm_unpackhi_epi16(s_lo, s_lo), 16),
                                        _mm_srai_epi32(_mm_unpacklo_epi16(s_hi, s_hi), 16),
                                        _mm_srai_epi32(_mm_unpackhi_epi16(s_hi, s_hi), 16)};
                    for (int q = 0; q < 4; ++q) {
                        __m128i *sp = (__m128i *)(sums + j0 + j + 4 * q);
                        _mm_storeu_si128(sp, _mm_add_epi32(_mm_loadu_si128(sp), parts[q]));
                    }
                }
            }
#endif
            for (int t = 0; t < 4 && 4 * g + t < K; ++t) {
                const uint8_t *r = b + (4 * g + t) * rs + j0 * cs;
                for (int jj = j; jj < n; ++jj) {
                    uint8_t v = (uint8_t)(r[jj * cs] ^ flip);
                    d[jj * 4 + t] = v;
                    if (cs == 1)
                        sums[j0 + jj] += (int8_t)v;
                }
            }
        }
    }
}

/* ---- epilogue --------------------------------------------------------------------------- */

static float qlo(const lgk_qepilogue *ep)
{
    int32_t lo = ep->out_type == LGK_QTYPE_UINT8 ? 0 : -128;
    if (ep->relu)
        lo = LGK_MAX(lo, ep->out_zp);
    return (float)(lo - ep->out_zp);
}

static float qhi(const lgk_qepilogue *ep)
{
    return (float)((ep->out_type == LGK_QTYPE_UINT8 ? 255 : 127) - ep->out_zp);
}

/* onnxruntime's requantization of one value: clamped in float to the output range
 * shifted by the zero point (so that the rounding never overflows), rounded under the
 * current mode (lrintf: cvtss2si, as cvtps2dq in the vector paths), shifted back. */
static int32_t qround(int32_t acc, float mult, float lo, float hi, int32_t zp)
{
    float f = (float)acc * mult;
    f = fmaxf(f, lo);
    f = fminf(f, hi);
    return (int32_t)lrintf(f) + zp;
}

static void qstore_scalar(const lgk_qepilogue *ep, const int32_t *acc, int64_t n,
                          const float *mult, int64_t mult_step, void *dst, int64_t from)
{
    float lo = qlo(ep), hi = qhi(ep);
    for (int64_t j = from; j < n; ++j) {
        int32_t v = qround(acc[j], mult[j * mult_step], lo, hi, ep->out_zp);
        if (ep->out_type == LGK_QTYPE_UINT8)
            ((uint8_t *)dst)[j] = (uint8_t)v;
        else
            ((int8_t *)dst)[j] = (int8_t)v;
    }
}

#ifdef LGK_X86_KERNELS
__attribute__((target("avx512f,avx512bw")))
static void qstore_avx512(const lgk_qepilogue *ep, const int32_t *acc, int64_t n,
                          const float *mult, int64_t mult_step, void *dst)
{
    __m512 lo = _mm512_set1_ps(qlo(ep)), hi = _mm512_set1_ps(qhi(ep));
    __m512i zp = _mm512_set1_epi32(ep->out_zp);
    __m512 m1 = _mm512_set1_ps(mult[0]);
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 k = (__mmask16)(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1u);
        __m512 f = _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(k, acc + j));
        __m512 m = mult_step ? _mm512_maskz_loadu_ps(k, mult + j) : m1;
        f = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(f, m), lo), hi);
        __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(f), zp);
        _mm512_mask_cvtepi32_storeu_epi8((uint8_t *)dst + j, k, v);
    }
}

__attribute__((target("avx2")))
static void qstore_avx2(const lgk_qepilogue *ep, const int32_t *acc, int64_t n,
                        const float *mult, int64_t mult_step, void *dst)
{
    __m256 lo = _mm256_set1_ps(qlo(ep)), hi = _mm256_set1_ps(qhi(ep));
    __m256i zp = _mm256_set1_epi32(ep->out_zp);
    __m256 m1 = _mm256_set1_ps(mult[0]);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 f = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(acc + j)));
        __m256 m = mult_step ? _mm256_loadu_ps(mult + j) : m1;
        f = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(f, m), lo), hi);
        __m256i v = _mm256_add_epi32(_mm256_cvtps_epi32(f), zp);
        /* values are in the byte range: pack to 16 then 8 bits keeps them */
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        __m128i bytes = ep->out_type == LGK_QTYPE_UINT8 ? _mm_packus_epi16(w, w)
                                                        : _mm_packs_epi16(w, w);
        _mm_storel_epi64((__m128i *)((uint8_t *)dst + j), bytes);
    }
    qstore_scalar(ep, acc, n, mult, mult_step, dst, j);
}
#endif

void lgk_qstore(const lgk_qepilogue *ep, const int32_t *acc, int64_t n, const float *mult,
                int64_t mult_step, void *dst)
{
    if (ep->out_type == LGK_QTYPE_INT32) {
        memcpy(dst, acc, (size_t)n * sizeof(int32_t));
        return;
    }
#ifdef LGK_X86_KERNELS
    int isa = qcurrent()->isa;
    if (isa == LGK_QISA_AVX512_VNNI) {
        qstore_avx512(ep, acc, n, mult, mult_step, dst);
        return;
    }
    if (isa == LGK_QISA_AVX2) {
        qstore_avx2(ep, acc, n, mult, mult_step, dst);
        return;
    }
#endif
    qstore_scalar(ep, acc, n, mult, mult_step, dst, 0);
}

/* Zero-point correction and bias of one tile row (uint32: wraps, never overflows). */
LGK_CLONES static void qcorrect_row(int64_t n, const int32_t *raw, uint32_t zb_term,
                                    const int32_t *zb, uint32_t za, const int32_t *colsum,
                                    const int32_t *bias, uint32_t row_bias, int32_t *out)
{
    for (int64_t j = 0; j < n; ++j) {
        uint32_t v = (uint32_t)raw[j] - (uint32_t)zb[j] * zb_term - za * (uint32_t)colsum[j]
                     + (bias != NULL ? (uint32_t)bias[j] : row_bias);
        out[j] = (int32_t)v;
    }
}

/* Stores rows [m0, m0 + rows) x columns [n0, n0 + cols) of C from a raw tile. */
static void qepilogue_tile(const lgk_qproblem *p, const int32_t *tile, int nr,
                           const int32_t *rowsum, const int32_t *colsum, int64_t m0,
                           int64_t n0, int rows, int cols)
{
    const lgk_qepilogue *ep = &p->ep;
    int32_t v[QMAX_NR];
    size_t esize = ep->out_type == LGK_QTYPE_INT32 ? 4 : 1;
    for (int i = 0; i < rows; ++i) {
        int64_t m = m0 + i;
        uint32_t za = (uint32_t)ep->za[m];
        uint32_t zb_term = (uint32_t)rowsum[i] - (uint32_t)p->K * za;
        const int32_t *bias = ep->bias != NULL && !ep->per_row ? ep->bias + n0 : NULL;
        uint32_t row_bias = ep->bias != NULL && ep->per_row ? (uint32_t)ep->bias[m] : 0u;
        qcorrect_row(cols, tile + i * nr, zb_term, ep->zb + n0, za, colsum, bias, row_bias, v);
        const float *mult = ep->mult == NULL ? NULL : ep->per_row ? ep->mult + m : ep->mult + n0;
        char *dst = (char *)p->c + (size_t)(m * p->ldc + n0) * esize;
        lgk_qstore(ep, v, cols, mult, ep->per_row ? 0 : 1, dst);
    }
}

/* ---- blocked driver ----------------------------------------------------------------------- */

/* A block of A: mc x (4 k4) bytes kept near 256 KiB, a panel of B as well: B packed by
 * the call is then still in L2 when its slivers are multiplied. */
#define QA_BLOCK_BYTES (256 * 1024)
#define QB_BLOCK_BYTES (256 * 1024)

static int qblock_range(const qgemm_impl *g, const lgk_qproblem *p, int64_t m0, int64_t m1,
                        int64_t n0, int64_t n1)
{
    if (m1 <= m0 || n1 <= n0)
        return LGK_OK;
    int64_t k4 = groups_of_4(p->K), kb = 4 * k4;
    int64_t mc_max = LGK_MAX((int64_t)g->mr, QA_BLOCK_BYTES / LGK_MAX(kb, (int64_t)1) / g->mr * g->mr);
    int64_t nc_max = LGK_MAX((int64_t)g->nr, QB_BLOCK_BYTES / LGK_MAX(kb, (int64_t)1) / g->nr * g->nr);
    mc_max = LGK_MIN(mc_max, round_up(m1 - m0, g->mr));
    /* a prepacked B needs no blocks: A is then packed once per row block */
    nc_max = p->packed_b != NULL ? round_up(n1 - n0, g->nr) : LGK_MIN(nc_max, round_up(n1 - n0, g->nr));
    /* bytes, in floats rounded to cache lines: A panel, B panel, row sums, column sums */
    int64_t a_bytes = p->packed_a != NULL ? 0 : round_up(mc_max * kb + 4 * mc_max, 64);
    int64_t b_bytes = p->packed_b != NULL ? 0 : round_up(nc_max * kb + 4 * nc_max, 64);
    lgk_scratch scratch = {NULL, 0};
    if (a_bytes + b_bytes > 0)
        LGK_TRY(lgk_scratch_acquire((a_bytes + b_bytes) / 4, &scratch));
    uint8_t *a_buf = (uint8_t *)scratch.data, *b_buf = a_buf + a_bytes;
    _Alignas(64) int32_t tile[QMAX_MR * QMAX_NR];
    for (int64_t jc = n0; jc < n1; jc += nc_max) {
        int64_t nc = LGK_MIN(nc_max, n1 - jc);
        const uint8_t *pb;
        const int32_t *cs;
        if (p->packed_b != NULL) { /* jc is a multiple of nr */
            pb = p->packed_b + jc * kb;
            cs = p->b_sums + jc;
        } else {
            int32_t *sums = (int32_t *)(b_buf + nc_max * kb);
            qpack_b(g->nr, nc, p->K, p->b + jc * p->cs_b, p->rs_b, p->cs_b, p->b_flip, b_buf,
                    sums);
            pb = b_buf;
            cs = sums;
        }
        for (int64_t ic = m0; ic < m1; ic += mc_max) {
            int64_t mc = LGK_MIN(mc_max, m1 - ic);
            const uint8_t *pa;
            const int32_t *rs;
            if (p->packed_a != NULL) {
                pa = p->packed_a + ic * kb;
                rs = p->a_sums + ic;
            } else {
                int32_t *sums = (int32_t *)(a_buf + mc_max * kb);
                qpack_a(g->mr, mc, p->K, p->a + ic * p->rs_a, p->rs_a, p->cs_a, p->a_flip,
                        a_buf, sums);
                pa = a_buf;
                rs = sums;
            }
            for (int64_t jr = 0; jr < nc; jr += g->nr) {
                int cols = (int)LGK_MIN((int64_t)g->nr, nc - jr);
                for (int64_t ir = 0; ir < mc; ir += g->mr) {
                    int rows = (int)LGK_MIN((int64_t)g->mr, mc - ir);
                    g->kernel(rows, k4, pa + ir * kb, (const int8_t *)(pb + jr * kb), tile);
                    qepilogue_tile(p, tile, g->nr, rs + ir, cs + jr, ic + ir, jc + jr, rows,
                                   cols);
                }
            }
        }
    }
    lgk_scratch_release(&scratch);
    return LGK_OK;
}

/* Threads run the blocks of a grid over C (lgk_choose_grid, as gemm.c does), block
 * edges on whole micro-tiles. Integer sums: any split gives the same result. */
typedef struct {
    const qgemm_impl *g;
    const lgk_qproblem *p;
    lgk_grid grid;
} qsplit;

static int qsplit_range(void *ctx, int64_t begin, int64_t end)
{
    const qsplit *s = ctx;
    for (int64_t b = begin; b < end; ++b) {
        int64_t m0, m1, n0, n1;
        lgk_grid_range(s->grid.rows, s->grid.grid_m, s->p->M, b / s->grid.grid_n, &m0, &m1);
        lgk_grid_range(s->grid.cols, s->grid.grid_n, s->p->N, b % s->grid.grid_n, &n0, &n1);
        LGK_TRY(qblock_range(s->g, s->p, m0, m1, n0, n1));
    }
    return LGK_OK;
}

/* Below this many multiply-adds per thread a second thread costs more than it saves
 * (the float GEMM's threshold of 0.5 M multiply-adds, at about twice its speed). */
#define QGEMM_MIN_MACS_PER_THREAD 1.0e6
/* A block's read of one element, in multiply-adds: prepacked (a weight), or packed by
 * the block; gemm.c's measured float figures (a byte here, at four times a float's
 * multiply-adds a cycle, so if anything packing weighs more). */
#define QGEMM_READ_COST 8.0
#define QGEMM_PACK_A_COST 40.0
#define QGEMM_PACK_B_COST 12.0

int lgk_qgemm_run(const lgk_qproblem *p, int nthreads)
{
    if (p->M == 0 || p->N == 0)
        return LGK_OK;
    const qgemm_impl *g = qcurrent();
    double macs = (double)p->M * (double)p->N * (double)LGK_MAX(p->K, 1);
    double t = macs / QGEMM_MIN_MACS_PER_THREAD;
    int cap = lgk_clamp_threads(nthreads);
    int threads = t < 2.0 ? 1 : (t >= cap ? cap : (int)t);
    lgk_grid_problem q = {1, p->M, p->N, p->K, g->mr, g->nr,
                          p->packed_a != NULL ? QGEMM_READ_COST : QGEMM_PACK_A_COST,
                          p->packed_b != NULL ? QGEMM_READ_COST : QGEMM_PACK_B_COST, 1, 1};
    qsplit s = {g, p, lgk_choose_grid(&q, threads)};
    return lgk_parallel_slices(threads, s.grid.grid_m * s.grid.grid_n, 1, qsplit_range, &s);
}

/* ---- parameters ----------------------------------------------------------------------------- */

static int qtype_ok(int t) { return t == LGK_QTYPE_UINT8 || t == LGK_QTYPE_INT8; }

static int zero_points_ok(int type, const int32_t *zp, int64_t len, int64_t count)
{
    LGK_CHECK(zp != NULL, LGK_ERR_NULL);
    LGK_CHECK(len == 1 || len == count, LGK_ERR_SHAPE);
    int32_t lo = type == LGK_QTYPE_UINT8 ? 0 : -128, hi = type == LGK_QTYPE_UINT8 ? 255 : 127;
    for (int64_t i = 0; i < len; ++i)
        LGK_CHECK(zp[i] >= lo && zp[i] <= hi, LGK_ERR_ARG);
    return LGK_OK;
}

int lgk_qparams_check(const lgk_qparams *q, int64_t M, int64_t N)
{
    LGK_CHECK(q != NULL, LGK_ERR_NULL);
    LGK_CHECK(qtype_ok(q->a_type) && qtype_ok(q->b_type), LGK_ERR_ARG);
    LGK_CHECK(qtype_ok(q->out_type) || q->out_type == LGK_QTYPE_INT32, LGK_ERR_ARG);
    LGK_CHECK(q->relu == 0 || q->relu == 1, LGK_ERR_ARG);
    LGK_TRY(zero_points_ok(q->a_type, q->a_zero_point, q->a_zero_point_len, M));
    LGK_TRY(zero_points_ok(q->b_type, q->b_zero_point, q->b_zero_point_len, N));
    int64_t r = q->per_row ? M : N;
    if (q->bias != NULL)
        LGK_CHECK(q->bias_len == r, LGK_ERR_SHAPE);
    if (q->out_type == LGK_QTYPE_INT32) {
        LGK_CHECK(q->out_zero_point == 0 && q->relu == 0, LGK_ERR_ARG);
        return LGK_OK;
    }
    LGK_CHECK(q->multiplier != NULL, LGK_ERR_NULL);
    LGK_CHECK(q->multiplier_len == 1 || q->multiplier_len == r, LGK_ERR_SHAPE);
    int32_t zp = q->out_zero_point;
    LGK_CHECK(q->out_type == LGK_QTYPE_UINT8 ? (zp >= 0 && zp <= 255) : (zp >= -128 && zp <= 127),
              LGK_ERR_ARG);
    return LGK_OK;
}

/* values[i] = src[len == 1 ? 0 : i] + shift for i < count (uint32: no overflow). */
static void expand_i32(int32_t *dst, const int32_t *src, int64_t len, int64_t count, int32_t shift)
{
    for (int64_t i = 0; i < count; ++i)
        dst[i] = (int32_t)((uint32_t)src[len == 1 ? 0 : i] + (uint32_t)shift);
}

int lgk_qparams_expand(const lgk_qparams *q, int64_t M, int64_t N, lgk_qexpanded *e)
{
    int64_t r = q->per_row ? M : N, need;
    int64_t dims[1];
    LGK_TRY(lgk_add(M, N, &need));
    LGK_TRY(lgk_add(need, r, &need));
    LGK_TRY(lgk_add(need, 16, &need));
    dims[0] = need;
    LGK_TRY(lgk_checked_count(1, dims, &need));
    e->scratch.data = NULL;
    e->scratch.cap = 0;
    LGK_TRY(lgk_scratch_acquire(need, &e->scratch));
    int32_t *za = (int32_t *)e->scratch.data, *zb = za + M;
    float *mult = (float *)(zb + N);
    /* A is packed as uint8 (int8 + 128), B as int8 (uint8 - 128) */
    int a_shift = q->a_type == LGK_QTYPE_INT8 ? 128 : 0;
    int b_shift = q->b_type == LGK_QTYPE_UINT8 ? -128 : 0;
    expand_i32(za, q->a_zero_point, q->a_zero_point_len, M, a_shift);
    expand_i32(zb, q->b_zero_point, q->b_zero_point_len, N, b_shift);
    if (q->out_type != LGK_QTYPE_INT32)
        for (int64_t i = 0; i < r; ++i)
            mult[i] = q->multiplier[q->multiplier_len == 1 ? 0 : i];
    lgk_qepilogue ep = {za, zb, q->out_type == LGK_QTYPE_INT32 ? NULL : mult, q->bias,
                        q->per_row, q->out_type, q->relu, q->out_zero_point};
    e->ep = ep;
    e->a_flip = a_shift ? 0x80 : 0;
    e->b_flip = b_shift ? 0x80 : 0;
    return LGK_OK;
}

static int check_view(int64_t rows, int64_t cols, int64_t rs, int64_t cs, const void *p,
                      int64_t len)
{
    const int64_t dims[2] = {rows, cols}, strides[2] = {rs, cs};
    int64_t extent;
    LGK_TRY(lgk_view_extent(2, dims, strides, &extent));
    return lgk_check_buffer(p, len, extent);
}

static int check_qgemm(int64_t M, int64_t N, int64_t K, const void *a, int64_t a_len,
                       int64_t rs_a, int64_t cs_a, const void *c, int64_t c_len, int64_t ldc,
                       const lgk_qparams *q)
{
    LGK_CHECK(M >= 0 && N >= 0 && K >= 0, LGK_ERR_SHAPE);
    LGK_CHECK(ldc >= N && ldc >= 1, LGK_ERR_SHAPE);
    LGK_CHECK(K <= INT64_MAX / 8, LGK_ERR_OVERFLOW);
    LGK_TRY(lgk_qparams_check(q, M, N));
    LGK_TRY(check_view(M, K, rs_a, cs_a, a, a_len));
    LGK_TRY(check_view(M, N, ldc, 1, c, c_len));
    int64_t count;
    const int64_t dims[3] = {M, N, LGK_MAX(K, (int64_t)1)};
    LGK_TRY(lgk_checked_count(3, dims, &count));
    return LGK_OK;
}

static int qgemm_with(const lgk_qparams *q, lgk_qproblem *p, int nthreads)
{
    lgk_qexpanded e;
    LGK_TRY(lgk_qparams_expand(q, p->M, p->N, &e));
    p->ep = e.ep;
    p->a_flip = e.a_flip;
    p->b_flip = e.b_flip;
    int status = lgk_qgemm_run(p, nthreads);
    lgk_scratch_release(&e.scratch);
    return status;
}

int lgk_qgemm(int64_t M, int64_t N, int64_t K,
              const void *a, int64_t a_len, int64_t rs_a, int64_t cs_a,
              const void *b, int64_t b_len, int64_t rs_b, int64_t cs_b,
              void *c, int64_t c_len, int64_t ldc, const lgk_qparams *q, int nthreads)
{
    LGK_TRY(check_qgemm(M, N, K, a, a_len, rs_a, cs_a, c, c_len, ldc, q));
    LGK_TRY(check_view(K, N, rs_b, cs_b, b, b_len));
    if (M == 0 || N == 0)
        return LGK_OK;
    lgk_qproblem p = {M, N, K, a, rs_a, cs_a, b, rs_b, cs_b, 0, 0, NULL, NULL, NULL, NULL,
                      {0}, c, ldc};
    return qgemm_with(q, &p, nthreads);
}

/* The part of an operand from the start of matrix i (batch stride bs) on: its pointer
 * and the elements left, or LGK_ERR_SHAPE where matrix i starts past the end. */
static int qbatch_part(const void *p, int64_t len, int64_t i, int64_t bs, size_t esize,
                       const void **part, int64_t *left)
{
    int64_t offset;
    LGK_TRY(lgk_mul(i, bs, &offset));
    LGK_CHECK(offset <= len, LGK_ERR_SHAPE);
    *part = (const char *)p + (size_t)offset * esize;
    *left = len - offset;
    return LGK_OK;
}

int lgk_qgemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K,
                      const void *a, int64_t a_len, int64_t a_bs, int64_t rs_a, int64_t cs_a,
                      const void *b, int64_t b_len, int64_t b_bs, int64_t rs_b, int64_t cs_b,
                      void *c, int64_t c_len, int64_t c_bs, int64_t ldc, const lgk_qparams *q,
                      int nthreads)
{
    LGK_CHECK(batch >= 0 && a_bs >= 0 && b_bs >= 0 && c_bs >= 0, LGK_ERR_SHAPE);
    LGK_CHECK(q != NULL, LGK_ERR_NULL);
    /* results of distinct matrices must not overlap: C is written, not accumulated */
    LGK_CHECK(batch <= 1 || M == 0 || N == 0 || c_bs >= (M - 1) * ldc + N, LGK_ERR_SHAPE);
    size_t c_size = q->out_type == LGK_QTYPE_INT32 ? 4 : 1;
    const void *ai, *bi, *ci;
    int64_t a_left, b_left, c_left;
    for (int64_t i = 0; i < batch; ++i) { /* every matrix checked before any is computed */
        LGK_TRY(qbatch_part(a, a_len, i, a_bs, 1, &ai, &a_left));
        LGK_TRY(qbatch_part(b, b_len, i, b_bs, 1, &bi, &b_left));
        LGK_TRY(qbatch_part(c, c_len, i, c_bs, c_size, &ci, &c_left));
        LGK_TRY(check_qgemm(M, N, K, ai, a_left, rs_a, cs_a, ci, c_left, ldc, q));
        LGK_TRY(check_view(K, N, rs_b, cs_b, bi, b_left));
    }
    if (batch == 0 || M == 0 || N == 0)
        return LGK_OK;
    lgk_qexpanded e;
    LGK_TRY(lgk_qparams_expand(q, M, N, &e));
    int status = LGK_OK;
    for (int64_t i = 0; i < batch && status == LGK_OK; ++i) {
        const char *pa = (const char *)a + (size_t)(i * a_bs);
        const char *pb = (const char *)b + (size_t)(i * b_bs);
        char *pc = (char *)c + (size_t)(i * c_bs) * c_size;
        lgk_qproblem p = {M, N, K, (const uint8_t *)pa, rs_a, cs_a, (const uint8_t *)pb, rs_b,
                          cs_b, e.a_flip, e.b_flip, NULL, NULL, NULL, NULL, e.ep, pc, ldc};
        status = lgk_qgemm_run(&p, nthreads);
    }
    lgk_scratch_release(&e.scratch);
    return status;
}

/* ---- prepacked operands ----------------------------------------------------------------------
 * Header (64 bytes), sums (int32, rounded up to 64 bytes), then the slivers. */

#define QPACK_MAGIC_B 0x42514c47u /* "GLQB" */
#define QPACK_MAGIC_A 0x41514c47u /* "GLQA" */
#define QPACK_HEADER 64

typedef struct {
    uint32_t magic;
    int32_t isa, unit, type;
    int64_t K, count;
} qpack_header;

_Static_assert(sizeof(qpack_header) <= QPACK_HEADER, "header must fit its cache line");

static int qpacked_size(int unit, int64_t count, int64_t K, int64_t *out)
{
    LGK_CHECK(K >= 0 && count >= 0, LGK_ERR_SHAPE);
    LGK_CHECK(count <= INT64_MAX / 2 && K <= INT64_MAX / 8, LGK_ERR_OVERFLOW);
    int64_t padded = round_up(count, unit), panels, sums;
    LGK_TRY(lgk_mul(padded, 4 * groups_of_4(K), &panels));
    LGK_TRY(lgk_mul(padded, 4, &sums));
    sums = round_up(sums, 64);
    LGK_TRY(lgk_add(panels, sums, out));
    LGK_TRY(lgk_add(*out, QPACK_HEADER, out));
    int64_t floats = *out / 4;
    return lgk_checked_count(1, &floats, &floats);
}

static int64_t qpacked_size_or_status(int unit, int64_t count, int64_t K)
{
    int64_t size;
    int status = qpacked_size(unit, count, K, &size);
    return status == LGK_OK ? size : -(int64_t)status;
}

int64_t lgk_qgemm_packed_b_size(int64_t K, int64_t N)
{
    return qpacked_size_or_status(qcurrent()->nr, N, K);
}

int64_t lgk_qgemm_packed_a_size(int64_t M, int64_t K)
{
    return qpacked_size_or_status(qcurrent()->mr, M, K);
}

static int qpack(int is_a, int64_t count, int64_t K, int type, const void *src, int64_t len,
                 int64_t rs, int64_t cs, void *packed, int64_t packed_len)
{
    const qgemm_impl *g = qcurrent();
    int unit = is_a ? g->mr : g->nr;
    int64_t need;
    LGK_CHECK(qtype_ok(type), LGK_ERR_ARG);
    LGK_TRY(qpacked_size(unit, count, K, &need));
    if (is_a)
        LGK_TRY(check_view(count, K, rs, cs, src, len));
    else
        LGK_TRY(check_view(K, count, rs, cs, src, len));
    LGK_TRY(lgk_check_buffer(packed, packed_len, need));
    LGK_CHECK((uintptr_t)packed % 64 == 0, LGK_ERR_ARG);
    qpack_header h = {is_a ? QPACK_MAGIC_A : QPACK_MAGIC_B, g->isa, unit, type, K, count};
    memset(packed, 0, QPACK_HEADER);
    memcpy(packed, &h, sizeof h);
    int64_t padded = round_up(count, unit);
    int32_t *sums = (int32_t *)((uint8_t *)packed + QPACK_HEADER);
    uint8_t *panels = (uint8_t *)sums + round_up(4 * padded, 64);
    memset(sums, 0, (size_t)(4 * padded));
    if (count == 0)
        return LGK_OK;
    /* A is stored as uint8, B as int8: flip the other type */
    uint8_t flip = (uint8_t)((is_a ? type == LGK_QTYPE_INT8 : type == LGK_QTYPE_UINT8) ? 0x80 : 0);
    if (is_a)
        qpack_a(unit, count, K, src, rs, cs, flip, panels, sums);
    else
        qpack_b(unit, count, K, src, rs, cs, flip, panels, sums);
    return LGK_OK;
}

int lgk_qgemm_pack_b(int64_t K, int64_t N, int b_type, const void *b, int64_t b_len,
                     int64_t rs_b, int64_t cs_b, void *packed, int64_t packed_len)
{
    return qpack(0, N, K, b_type, b, b_len, rs_b, cs_b, packed, packed_len);
}

int lgk_qgemm_pack_a(int64_t M, int64_t K, int a_type, const void *a, int64_t a_len,
                     int64_t rs_a, int64_t cs_a, void *packed, int64_t packed_len)
{
    return qpack(1, M, K, a_type, a, a_len, rs_a, cs_a, packed, packed_len);
}

/* The panels and sums of a packed operand after checking its header against what the
 * call expects: LGK_ERR_ARG when packed for other sizes, type or family. */
static int qpacked_view(int is_a, int64_t count, int64_t K, int type, const void *packed,
                        int64_t packed_len, const uint8_t **panels, const int32_t **sums)
{
    const qgemm_impl *g = qcurrent();
    int unit = is_a ? g->mr : g->nr;
    int64_t need;
    LGK_TRY(qpacked_size(unit, count, K, &need));
    LGK_TRY(lgk_check_buffer(packed, packed_len, QPACK_HEADER));
    LGK_CHECK((uintptr_t)packed % 64 == 0, LGK_ERR_ARG);
    qpack_header h;
    memcpy(&h, packed, sizeof h);
    LGK_CHECK(h.magic == (is_a ? QPACK_MAGIC_A : QPACK_MAGIC_B) && h.isa == g->isa
                  && h.unit == unit && h.type == type && h.K == K && h.count == count,
              LGK_ERR_ARG);
    LGK_CHECK(need <= packed_len, LGK_ERR_SHAPE);
    *sums = (const int32_t *)((const uint8_t *)packed + QPACK_HEADER);
    *panels = (const uint8_t *)*sums + round_up(4 * round_up(count, unit), 64);
    return LGK_OK;
}

int lgk_qgemm_packed_a_view(int64_t M, int64_t K, int a_type, const void *packed,
                            int64_t packed_len, const uint8_t **panels, const int32_t **sums)
{
    return qpacked_view(1, M, K, a_type, packed, packed_len, panels, sums);
}

int lgk_qgemm_prepacked(int64_t M, int64_t N, int64_t K,
                        const void *a, int64_t a_len, int64_t rs_a, int64_t cs_a,
                        const void *packed_b, int64_t packed_len,
                        void *c, int64_t c_len, int64_t ldc, const lgk_qparams *q,
                        int nthreads)
{
    LGK_TRY(check_qgemm(M, N, K, a, a_len, rs_a, cs_a, c, c_len, ldc, q));
    const uint8_t *panels;
    const int32_t *sums;
    LGK_TRY(qpacked_view(0, N, K, q->b_type, packed_b, packed_len, &panels, &sums));
    if (M == 0 || N == 0)
        return LGK_OK;
    lgk_qproblem p = {M, N, K, a, rs_a, cs_a, NULL, 0, 0, 0, 0, NULL, NULL, panels, sums,
                      {0}, c, ldc};
    return qgemm_with(q, &p, nthreads);
}
