/*
 * qdwconv.c - quantized depthwise NCHW conv2d (one filter per channel: groups == c == o)
 * with the requantizing epilogue fused.
 *
 * Each plane of the input, shifted by the data zero point (integers within +-255, so
 * int16), is laid out as "pair rows": entry (R, col) is one int32 whose low half is the
 * zero-padded input's row R and whose high half is its row R + dilation_h, at column col.
 * A filter column's weights go in pairs the same way (rows 2i and 2i + 1; an odd last row
 * pairs with 0). One vpdpwssd (AVX-512 VNNI) or vpmaddwd + vpaddd (AVX2) then adds two
 * taps' products to every int32 lane (pair sums are at most 2 * 255 * 255: no
 * saturation): a 3x3 filter is 6 instructions per vector of outputs. Columns are split
 * by the horizontal stride into phases (phase f holds padded columns f, f + sw, ...), so
 * output ox's tap column kj reads phase (kj dw) % sw at index ox + (kj dw) / sw: every
 * tap is a contiguous load whatever the stride. Pair rows no output reads (every other
 * one at vertical stride 2) are not built.
 *
 * Sums stay in registers through the taps, start at the bias and wrap modulo 2^32 (exact
 * whenever the true sum fits int32), and are requantized in registers with lgk_qstore's
 * arithmetic: float32(acc) * multiplier, clamped to the output range less its zero point,
 * rounded half to even (the default mode), plus the zero point. Families follow the int8
 * GEMM's (lgk_qgemm_isa): AVX-512 VNNI (16 lanes), AVX2 (8 lanes), portable C.
 */
#include "lgk_qconv.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define QDW_X86 1
#include <immintrin.h>
#endif

#define QDW_GROUP 6      /* vectors of outputs per pass over the taps (AVX-512) */
#define QDW_GROUP_AVX2 4 /* (AVX2: 16 registers) */
#define QDW_FIXED_TAPS 6 /* a 3x3 filter's weight pairs: unrolled, held in registers */

typedef struct {
    const lgk_conv2d_params *p;
    const lgk_qparams *q;
    const uint8_t *x, *w;
    void *y;
    int64_t oh, ow, plane_in, plane_out;
    int64_t rows;     /* pair rows from row 0 to the last one read */
    int64_t prows, pwidth; /* the zero-padded byte plane */
    int64_t len;      /* int32 entries of one phase of a pair row (a multiple of 16) */
    int64_t row_step; /* int32 entries between the pair rows of consecutive output rows */
    int64_t pairs;    /* weight pairs of a filter column: ceil(kh / 2) */
    int64_t ntaps;    /* pairs * kw */
    /* scratch layout, in floats */
    int64_t padded_at, wp_at, toff_at, read_at, acc_at, floats;
    int isa;
    size_t esize;
    float lo, hi; /* the output range less the zero point */
} qdw_job;

/* ---- pair rows --------------------------------------------------------------------------- */

/* The plane zero-padded in bytes: `prows` rows of `pwidth` bytes, the input at (pad_top,
 * pad_left), the data zero point everywhere else (filled once per thread: each plane
 * only copies its rows in). Rows go up to the last one a pair row reads and are at least
 * sw * len wide, so the pair rows are built in whole vectors without bounds tests. */
static void qdw_copy_plane(const qdw_job *j, const uint8_t *x, uint8_t *padded)
{
    const lgk_conv2d_params *p = j->p;
    int64_t h = LGK_MIN(p->h, j->prows - p->pad_top);
    for (int64_t iy = 0; iy < h; ++iy)
        memcpy(padded + (iy + p->pad_top) * j->pwidth + p->pad_left, x + iy * p->w,
               (size_t)p->w);
}

static uint32_t qdw_pair(int32_t lo, int32_t hi)
{
    return (uint32_t)(uint16_t)lo | (uint32_t)hi << 16;
}

/* Entry i of phase f = the pair (a[f + sw i] - zp, b[f + sw i] - zp), from padded rows. */
static void qdw_pair_row_c(const qdw_job *j, const uint8_t *a, const uint8_t *b,
                           uint32_t *dst)
{
    int64_t s = j->p->stride_w;
    int is_signed = j->q->b_type == LGK_QTYPE_INT8;
    int32_t zp = j->q->b_zero_point[0];
    for (int64_t f = 0; f < s; ++f)
        for (int64_t i = 0; i < j->len; ++i) {
            uint8_t va = a[f + s * i], vb = b[f + s * i];
            dst[f * j->len + i] = is_signed ? qdw_pair((int8_t)va - zp, (int8_t)vb - zp)
                                            : qdw_pair(va - zp, vb - zp);
        }
}

#ifdef QDW_X86
#define QDW_AVX512 __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define QDW_AVX2 __attribute__((target("avx2")))

/* 16 shifted bytes as int32, and 32 as int16 */
QDW_AVX512 static inline __m512i qdw_widen16(const uint8_t *p, int is_signed, __m512i zp)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    return _mm512_sub_epi32(is_signed ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v), zp);
}

QDW_AVX512 static inline __m512i qdw_widen32(const uint8_t *p, int is_signed, __m512i zp)
{
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    return _mm512_sub_epi16(is_signed ? _mm512_cvtepi8_epi16(v) : _mm512_cvtepu8_epi16(v), zp);
}

QDW_AVX512 static void qdw_pair_row_avx512(const qdw_job *j, const uint8_t *a, const uint8_t *b,
                                           uint32_t *dst)
{
    int is_signed = j->q->b_type == LGK_QTYPE_INT8;
    int32_t zp = j->q->b_zero_point[0];
    const __mmask32 odd = 0xAAAAAAAAu; /* the high halves of int32 lanes */
    if (j->p->stride_w == 1) {
        __m512i z = _mm512_set1_epi32(zp), low = _mm512_set1_epi32(0xFFFF);
        for (int64_t i = 0; i < j->len; i += 16) {
            __m512i va = qdw_widen16(a + i, is_signed, z), vb = qdw_widen16(b + i, is_signed, z);
            _mm512_storeu_si512(dst + i, _mm512_or_si512(_mm512_and_si512(va, low),
                                                         _mm512_slli_epi32(vb, 16)));
        }
    } else if (j->p->stride_w == 2) { /* lane k of a widened run: columns 2k (low), 2k + 1 */
        __m512i z = _mm512_set1_epi16((int16_t)zp);
        for (int64_t i = 0; i < j->len; i += 16) {
            __m512i va = qdw_widen32(a + 2 * i, is_signed, z);
            __m512i vb = qdw_widen32(b + 2 * i, is_signed, z);
            _mm512_storeu_si512(dst + i, _mm512_mask_blend_epi16(odd, va, _mm512_slli_epi32(vb, 16)));
            _mm512_storeu_si512(dst + j->len + i,
                                _mm512_mask_blend_epi16(odd, _mm512_srli_epi32(va, 16), vb));
        }
    } else {
        qdw_pair_row_c(j, a, b, dst);
    }
}

QDW_AVX2 static inline __m256i qdw_widen8(const uint8_t *p, int is_signed, __m256i zp)
{
    __m128i v = _mm_loadl_epi64((const __m128i *)p);
    return _mm256_sub_epi32(is_signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v), zp);
}

QDW_AVX2 static void qdw_pair_row_avx2(const qdw_job *j, const uint8_t *a, const uint8_t *b,
                                       uint32_t *dst)
{
    int is_signed = j->q->b_type == LGK_QTYPE_INT8;
    int32_t zp = j->q->b_zero_point[0];
    if (j->p->stride_w == 1) {
        __m256i z = _mm256_set1_epi32(zp), low = _mm256_set1_epi32(0xFFFF);
        for (int64_t i = 0; i < j->len; i += 8) {
            __m256i va = qdw_widen8(a + i, is_signed, z), vb = qdw_widen8(b + i, is_signed, z);
            _mm256_storeu_si256((__m256i *)(dst + i),
                                _mm256_or_si256(_mm256_and_si256(va, low), _mm256_slli_epi32(vb, 16)));
        }
    } else if (j->p->stride_w == 2) {
        __m256i z = _mm256_set1_epi16((int16_t)zp);
        for (int64_t i = 0; i < j->len; i += 8) {
            __m128i ra = _mm_loadu_si128((const __m128i *)(a + 2 * i));
            __m128i rb = _mm_loadu_si128((const __m128i *)(b + 2 * i));
            __m256i va = _mm256_sub_epi16(is_signed ? _mm256_cvtepi8_epi16(ra) : _mm256_cvtepu8_epi16(ra), z);
            __m256i vb = _mm256_sub_epi16(is_signed ? _mm256_cvtepi8_epi16(rb) : _mm256_cvtepu8_epi16(rb), z);
            _mm256_storeu_si256((__m256i *)(dst + i),
                                _mm256_blend_epi16(va, _mm256_slli_epi32(vb, 16), 0xAA));
            _mm256_storeu_si256((__m256i *)(dst + j->len + i),
                                _mm256_blend_epi16(_mm256_srli_epi32(va, 16), vb, 0xAA));
        }
    } else {
        qdw_pair_row_c(j, a, b, dst);
    }
}
#endif /* QDW_X86 */

/* read[r]: whether an output row reads pair row r. */
static void qdw_rows_read(const qdw_job *j, uint8_t *read)
{
    const lgk_conv2d_params *p = j->p;
    memset(read, 0, (size_t)j->rows);
    for (int64_t oy = 0; oy < j->oh; ++oy)
        for (int64_t i = 0; i < j->pairs; ++i)
            read[oy * p->stride_h + 2 * i * p->dilation_h] = 1;
}

/* The pair rows that output rows read, from the padded plane. */
static void qdw_pair_plane(const qdw_job *j, const uint8_t *read, const uint8_t *padded,
                           uint32_t *pairs)
{
    int64_t phases = j->p->stride_w * j->len, dh = j->p->dilation_h;
    for (int64_t r = 0; r < j->rows; ++r) {
        if (!read[r])
            continue;
        const uint8_t *a = padded + r * j->pwidth, *b = padded + (r + dh) * j->pwidth;
#ifdef QDW_X86
        if (j->isa == LGK_QISA_AVX512_VNNI) {
            qdw_pair_row_avx512(j, a, b, pairs + r * phases);
            continue;
        }
        if (j->isa == LGK_QISA_AVX2) {
            qdw_pair_row_avx2(j, a, b, pairs + r * phases);
            continue;
        }
#endif
        qdw_pair_row_c(j, a, b, pairs + r * phases);
    }
}

/* Channel c's weight pairs, shifted by its zero point, in the order of the tap offsets. */
static void qdw_weight_pairs(const qdw_job *j, int64_t c, uint32_t *wp)
{
    const lgk_conv2d_params *p = j->p;
    const lgk_qparams *q = j->q;
    int32_t zp = q->a_zero_point[q->a_zero_point_len == 1 ? 0 : c];
    const uint8_t *w = j->w + c * p->kh * p->kw;
    for (int64_t i = 0; i < j->pairs; ++i)
        for (int64_t kj = 0; kj < p->kw; ++kj) {
            int64_t k0 = 2 * i * p->kw + kj, k1 = k0 + p->kw;
            int32_t w0 = (q->a_type == LGK_QTYPE_INT8 ? (int8_t)w[k0] : w[k0]) - zp;
            int32_t w1 = 2 * i + 1 >= p->kh ? 0
                         : (q->a_type == LGK_QTYPE_INT8 ? (int8_t)w[k1] : w[k1]) - zp;
            wp[i * p->kw + kj] = (uint32_t)(uint16_t)w0 | (uint32_t)w1 << 16;
        }
}

/* Where each weight pair's run starts, from an output row's first pair row. */
static void qdw_tap_offsets(const qdw_job *j, int64_t *toff)
{
    const lgk_conv2d_params *p = j->p;
    int64_t s = p->stride_w;
    for (int64_t i = 0; i < j->pairs; ++i)
        for (int64_t kj = 0; kj < p->kw; ++kj) {
            int64_t d = kj * p->dilation_w;
            toff[i * p->kw + kj] = (2 * i * p->dilation_h * s + d % s) * j->len + d / s;
        }
}

/* ---- kernels ------------------------------------------------------------------------------ */

/* Portable C: the sums of a row, then lgk_qstore. */
static void qdw_plane_c(const qdw_job *j, const int32_t *pairs, const uint32_t *wp,
                        const int64_t *toff, int32_t bias, const float *mult, char *y,
                        int32_t *acc)
{
    const lgk_qparams *q = j->q;
    lgk_qepilogue ep = {NULL, NULL, NULL, NULL, 1, q->out_type, q->relu, q->out_zero_point};
    for (int64_t oy = 0; oy < j->oh; ++oy) {
        const int32_t *src = pairs + oy * j->row_step;
        for (int64_t ox = 0; ox < j->ow; ++ox) {
            uint32_t sum = (uint32_t)bias;
            for (int64_t t = 0; t < j->ntaps; ++t) {
                uint32_t v = (uint32_t)src[toff[t] + ox];
                int32_t lo = (int16_t)(v & 0xFFFFu) * (int16_t)(wp[t] & 0xFFFFu);
                int32_t hi = (int16_t)(v >> 16) * (int16_t)(wp[t] >> 16);
                sum += (uint32_t)lo + (uint32_t)hi;
            }
            acc[ox] = (int32_t)sum;
        }
        lgk_qstore(&ep, acc, j->ow, mult, 0, y + (size_t)(oy * j->ow) * j->esize);
    }
}

#ifdef QDW_X86
/* Output vectors are taken in groups across rows (a 7-wide map is one vector a row):
 * a group's sums are independent chains of multiply-adds, QDW_GROUP of them in flight. */
typedef struct {
    const int32_t *src[QDW_GROUP]; /* the first pair row's entry of the vector's first output */
    char *dst[QDW_GROUP];
    int64_t count[QDW_GROUP]; /* outputs stored, <= the lanes */
    int n;
    int64_t oy, ox; /* the next vector */
} qdw_group;

/* The next group of up to `most` vectors of `lanes` outputs. */
static inline void qdw_next(const qdw_job *j, const int32_t *pairs, char *y, int lanes,
                            int most, qdw_group *g)
{
    for (g->n = 0; g->n < most && g->oy < j->oh; ++g->n) {
        g->src[g->n] = pairs + g->oy * j->row_step + g->ox;
        g->dst[g->n] = y + (size_t)(g->oy * j->ow + g->ox) * j->esize;
        g->count[g->n] = LGK_MIN(j->ow - g->ox, (int64_t)lanes);
        g->ox += lanes;
        if (g->ox >= j->ow) {
            g->ox = 0;
            g->oy += 1;
        }
    }
}

/* count (<= 16) outputs of one vector of sums, requantized. */
QDW_AVX512 static inline void qdw_put16(const qdw_job *j, __m512i acc, __m512 m, char *dst,
                                        int64_t count)
{
    __mmask16 k = (__mmask16)(count >= 16 ? 0xFFFFu : (1u << count) - 1u);
    if (j->esize == 4) {
        _mm512_mask_storeu_epi32(dst, k, acc);
        return;
    }
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), m);
    f = _mm512_min_ps(_mm512_max_ps(f, _mm512_set1_ps(j->lo)), _mm512_set1_ps(j->hi));
    __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(f), _mm512_set1_epi32(j->q->out_zero_point));
    _mm512_mask_cvtepi32_storeu_epi8(dst, k, v);
}

/* nv vectors of a group; nt: a constant tap count (weights and offsets in registers) or
 * 0 (j->ntaps, read per tap). */
QDW_AVX512 __attribute__((always_inline)) static inline void
qdw_group16(const qdw_job *j, const int nv, const int nt, const qdw_group *g,
            const __m512i *wv, const int64_t *off, const uint32_t *wp, const int64_t *toff,
            __m512i bias, __m512 m)
{
    __m512i acc[QDW_GROUP];
    for (int u = 0; u < nv; ++u)
        acc[u] = bias;
    int64_t taps = nt ? nt : j->ntaps;
    for (int64_t t = 0; t < taps; ++t) {
        __m512i w = nt ? wv[t] : _mm512_set1_epi32((int32_t)wp[t]);
        int64_t o = nt ? off[t] : toff[t];
        for (int u = 0; u < nv; ++u)
            acc[u] = _mm512_dpwssd_epi32(acc[u], _mm512_loadu_si512(g->src[u] + o), w);
    }
    for (int u = 0; u < nv; ++u)
        qdw_put16(j, acc[u], m, g->dst[u], g->count[u]);
}

QDW_AVX512 __attribute__((always_inline)) static inline void
qdw_vectors16(const qdw_job *j, const int nt, const int32_t *pairs, const uint32_t *wp,
              const int64_t *toff, int32_t bias, const float *mult, char *y)
{
    __m512i wv[QDW_FIXED_TAPS], b = _mm512_set1_epi32(bias);
    __m512 m = _mm512_set1_ps(mult != NULL ? *mult : 0.0f);
    int64_t off[QDW_FIXED_TAPS];
    for (int t = 0; t < nt; ++t) {
        wv[t] = _mm512_set1_epi32((int32_t)wp[t]);
        off[t] = toff[t];
    }
    qdw_group g = {.oy = 0, .ox = 0};
    for (qdw_next(j, pairs, y, 16, QDW_GROUP, &g); g.n > 0;
         qdw_next(j, pairs, y, 16, QDW_GROUP, &g)) {
        switch (g.n) { /* a constant count in each: the sums stay in registers */
        case QDW_GROUP: qdw_group16(j, QDW_GROUP, nt, &g, wv, off, wp, toff, b, m); break;
        case 5: qdw_group16(j, 5, nt, &g, wv, off, wp, toff, b, m); break;
        case 4: qdw_group16(j, 4, nt, &g, wv, off, wp, toff, b, m); break;
        case 3: qdw_group16(j, 3, nt, &g, wv, off, wp, toff, b, m); break;
        case 2: qdw_group16(j, 2, nt, &g, wv, off, wp, toff, b, m); break;
        default: qdw_group16(j, 1, nt, &g, wv, off, wp, toff, b, m); break;
        }
    }
}

QDW_AVX512 static void qdw_plane_avx512(const qdw_job *j, const int32_t *pairs,
                                        const uint32_t *wp, const int64_t *toff, int32_t bias,
                                        const float *mult, char *y)
{
    if (j->ntaps == QDW_FIXED_TAPS)
        qdw_vectors16(j, QDW_FIXED_TAPS, pairs, wp, toff, bias, mult, y);
    else
        qdw_vectors16(j, 0, pairs, wp, toff, bias, mult, y);
}

QDW_AVX2 static inline void qdw_put8(const qdw_job *j, __m256i acc, __m256 m, char *dst,
                                     int64_t count)
{
    size_t n = (size_t)count;
    if (j->esize == 4) {
        memcpy(dst, &acc, n * 4);
        return;
    }
    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), m);
    f = _mm256_min_ps(_mm256_max_ps(f, _mm256_set1_ps(j->lo)), _mm256_set1_ps(j->hi));
    __m256i v = _mm256_add_epi32(_mm256_cvtps_epi32(f), _mm256_set1_epi32(j->q->out_zero_point));
    /* in range after the clamp: the saturating packs only narrow */
    __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    __m128i bytes = j->q->out_type == LGK_QTYPE_UINT8 ? _mm_packus_epi16(h, h) : _mm_packs_epi16(h, h);
    if (n == 8)
        _mm_storel_epi64((__m128i *)dst, bytes);
    else
        memcpy(dst, &bytes, n);
}

QDW_AVX2 __attribute__((always_inline)) static inline void
qdw_group8(const qdw_job *j, const int nv, const qdw_group *g, const uint32_t *wp,
           const int64_t *toff, __m256i bias, __m256 m)
{
    __m256i acc[QDW_GROUP];
    for (int u = 0; u < nv; ++u)
        acc[u] = bias;
    for (int64_t t = 0; t < j->ntaps; ++t) {
        __m256i w = _mm256_set1_epi32((int32_t)wp[t]);
        for (int u = 0; u < nv; ++u) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(g->src[u] + toff[t]));
            acc[u] = _mm256_add_epi32(acc[u], _mm256_madd_epi16(v, w));
        }
    }
    for (int u = 0; u < nv; ++u)
        qdw_put8(j, acc[u], m, g->dst[u], g->count[u]);
}

QDW_AVX2 static void qdw_plane_avx2(const qdw_job *j, const int32_t *pairs, const uint32_t *wp,
                                    const int64_t *toff, int32_t bias, const float *mult,
                                    char *y)
{
    __m256i b = _mm256_set1_epi32(bias);
    __m256 m = _mm256_set1_ps(mult != NULL ? *mult : 0.0f);
    qdw_group g = {.oy = 0, .ox = 0};
    for (qdw_next(j, pairs, y, 8, QDW_GROUP_AVX2, &g); g.n > 0;
         qdw_next(j, pairs, y, 8, QDW_GROUP_AVX2, &g)) {
        switch (g.n) {
        case QDW_GROUP_AVX2: qdw_group8(j, QDW_GROUP_AVX2, &g, wp, toff, b, m); break;
        case 3: qdw_group8(j, 3, &g, wp, toff, b, m); break;
        case 2: qdw_group8(j, 2, &g, wp, toff, b, m); break;
        default: qdw_group8(j, 1, &g, wp, toff, b, m); break;
        }
    }
}
#endif /* QDW_X86 */

/* ---- driver ------------------------------------------------------------------------------- */

static int qdw_planes(void *ctx, int64_t begin, int64_t end)
{
    const qdw_job *j = ctx;
    const lgk_conv2d_params *p = j->p;
    const lgk_qparams *q = j->q;
    lgk_scratch s = {NULL, 0};
    LGK_TRY(lgk_scratch_acquire(j->floats, &s));
    uint32_t *pairs = (uint32_t *)s.data, *wp = (uint32_t *)(s.data + j->wp_at);
    uint8_t *padded = (uint8_t *)(s.data + j->padded_at);
    int64_t *toff = (int64_t *)(void *)(s.data + j->toff_at);
    uint8_t *read = (uint8_t *)(s.data + j->read_at);
    memset(padded, (uint8_t)q->b_zero_point[0], (size_t)(j->prows * j->pwidth));
    qdw_tap_offsets(j, toff);
    qdw_rows_read(j, read);
    for (int64_t plane = begin; plane < end; ++plane) {
        int64_t c = plane % p->c;
        qdw_weight_pairs(j, c, wp);
        qdw_copy_plane(j, j->x + plane * j->plane_in, padded);
        qdw_pair_plane(j, read, padded, pairs);
        int32_t bias = q->bias == NULL ? 0 : q->bias[c];
        const float *mult = q->out_type == LGK_QTYPE_INT32 ? NULL
                            : q->multiplier + (q->multiplier_len == 1 ? 0 : c);
        char *y = (char *)j->y + (size_t)(plane * j->plane_out) * j->esize;
        const int32_t *rows = (const int32_t *)pairs;
#ifdef QDW_X86
        if (j->isa == LGK_QISA_AVX512_VNNI) {
            qdw_plane_avx512(j, rows, wp, toff, bias, mult, y);
            continue;
        }
        if (j->isa == LGK_QISA_AVX2) {
            qdw_plane_avx2(j, rows, wp, toff, bias, mult, y);
            continue;
        }
#endif
        qdw_plane_c(j, rows, wp, toff, bias, mult, y, (int32_t *)(s.data + j->acc_at));
    }
    lgk_scratch_release(&s);
    return LGK_OK;
}

static int64_t qdw_round16(int64_t n) { return (n + 15) / 16 * 16; }

/* Sizes of the pair rows and the scratch layout, all checked. */
static int qdw_setup(qdw_job *j)
{
    const lgk_conv2d_params *p = j->p;
    int lanes = j->isa == LGK_QISA_AVX512_VNNI ? 16 : j->isa == LGK_QISA_AVX2 ? 8 : 1;
    int64_t span, reach, last;
    j->pairs = (p->kh + 1) / 2;
    LGK_TRY(lgk_mul(p->kw - 1, p->dilation_w, &span));
    /* the last vector of a row reads up to its rounded-up width, plus the taps' reach */
    LGK_TRY(lgk_add((j->ow + lanes - 1) / lanes * lanes, span / p->stride_w, &reach));
    j->len = qdw_round16(reach);
    LGK_TRY(lgk_mul(j->oh - 1, p->stride_h, &last));
    LGK_TRY(lgk_mul(2 * (j->pairs - 1), p->dilation_h, &span));
    LGK_TRY(lgk_add(last, span + 1, &j->rows));
    LGK_TRY(lgk_mul(p->stride_w, j->len, &j->row_step));
    LGK_TRY(lgk_mul(p->stride_h, j->row_step, &j->row_step));
    LGK_TRY(lgk_mul(j->pairs, p->kw, &j->ntaps));
    int64_t dims[3] = {j->rows, p->stride_w, j->len}, plane, bytes;
    LGK_TRY(lgk_checked_count(3, dims, &plane));
    LGK_TRY(lgk_add(j->rows, p->dilation_h, &j->prows));
    LGK_TRY(lgk_add(p->pad_left, p->w, &bytes));
    j->pwidth = (LGK_MAX(bytes, p->stride_w * j->len) + 63) / 64 * 64;
    const int64_t pd[2] = {j->prows, j->pwidth / 4};
    LGK_TRY(lgk_checked_count(2, pd, &bytes));
    j->padded_at = qdw_round16(plane);
    j->wp_at = j->padded_at + qdw_round16(bytes);
    j->toff_at = j->wp_at + qdw_round16(j->ntaps);
    j->read_at = j->toff_at + qdw_round16(2 * j->ntaps);
    j->acc_at = j->read_at + qdw_round16((j->rows + 3) / 4);
    j->floats = j->acc_at + qdw_round16(j->ow);
    return lgk_checked_count(1, &j->floats, &plane);
}

int lgk_qdwconv_nchw(const lgk_conv2d_params *p, int64_t oh, int64_t ow, const uint8_t *x,
                     const uint8_t *w, void *y, const lgk_qparams *q, int nthreads)
{
    qdw_job j = {0};
    j.p = p, j.q = q, j.x = x, j.w = w, j.y = y, j.oh = oh, j.ow = ow;
    j.plane_in = p->h * p->w; /* checked with the buffers */
    j.plane_out = oh * ow;
    j.isa = lgk_qgemm_isa();
    j.esize = q->out_type == LGK_QTYPE_INT32 ? 4 : 1;
    int32_t type_lo = q->out_type == LGK_QTYPE_UINT8 ? 0 : -128;
    int32_t type_hi = q->out_type == LGK_QTYPE_UINT8 ? 255 : 127;
    j.lo = (float)((q->relu ? LGK_MAX(type_lo, q->out_zero_point) : type_lo) - q->out_zero_point);
    j.hi = (float)(type_hi - q->out_zero_point);
    LGK_TRY(qdw_setup(&j));
    double macs = (double)p->n * (double)p->c * (double)j.plane_out * (double)(p->kh * p->kw);
    int threads = macs < 4.0e5 ? 1 : nthreads;
    return lgk_parallel_for(threads, p->n * p->c, 1, qdw_planes, &j);
}
