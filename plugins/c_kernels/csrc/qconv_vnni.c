/*
 * qconv_vnni.c - the GEMM of a quantized conv on AVX-512 VNNI with its epilogue in
 * registers: y (filters x pixels, NCHW) = requantize(W @ B + bias).
 *
 * W is the conv's weight packed by lgk_qgemm_pack_a for the VNNI family (8-filter
 * slivers of 4-tap groups, stored as uint8: an int8 weight + 128); B is a 1x1 conv's input
 * read in place or an im2col block (taps x pixels, rows of bytes). B is packed here into
 * 48-pixel slivers of 4-tap groups as int8 (a uint8 input - 128), each pixel's sum taken
 * on the way (one vpdpbusd against ones per 16 pixels and 4 taps). The GEMM's micro-kernel
 * makes an 8 x 48 tile of raw sums in L1; from there each sum gains its filter's constant
 * part of the zero-point correction,
 *     bias - zb (rowsum[m] - K za[m])        (za, zb: the packed operands' zero points)
 * loses za[m] colsum[n] (one multiply per 16 pixels shared by the tile's filters when they
 * have the same za, as symmetric int8 weights do) and is requantized and stored as a byte
 * from the registers with lgk_qstore's arithmetic: no int32 row of corrected sums and no
 * call per row, which cost more than the products in a 16-channel 1x1 conv. The sums wrap
 * modulo 2^32, as the GEMM's do (exact whenever the true sum fits int32).
 */
#include "lgk_qconv.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
#define QCV_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define QCV_MR 8 /* the VNNI micro-kernel's tile */
#define QCV_NR 48
/* pixels of B packed at a time: the panel (K x pixels bytes) stays near 256 KiB, in L2
 * from packing to its last tile */
#define QCV_PANEL_BYTES (256 * 1024)

/* ---- plan ------------------------------------------------------------------------------------ */

int lgk_qcv_prepare(int64_t M, int64_t K, const uint8_t *panels, const int32_t *sums,
                    const lgk_qparams *q, lgk_qcv *c)
{
    memset(c, 0, sizeof *c);
    lgk_qparams rows = *q;
    rows.per_row = 1;
    LGK_TRY(lgk_qparams_expand(&rows, M, 1, &c->ex));
    int64_t dims[1] = {2 * M + 16}, floats;
    int status = lgk_checked_count(1, dims, &floats);
    if (status == LGK_OK)
        status = lgk_scratch_acquire(floats, &c->rowc_scratch);
    if (status != LGK_OK) {
        lgk_scratch_release(&c->ex.scratch);
        return status;
    }
    const lgk_qepilogue *ep = &c->ex.ep;
    int32_t *rowc = (int32_t *)c->rowc_scratch.data;
    uint32_t zb = (uint32_t)ep->zb[0];
    c->za_uniform = 1;
    for (int64_t m = 0; m < M; ++m) {
        uint32_t term = (uint32_t)sums[m] - (uint32_t)K * (uint32_t)ep->za[m];
        uint32_t bias = ep->bias == NULL ? 0u : (uint32_t)ep->bias[m];
        rowc[m] = (int32_t)(bias - zb * term);
        c->za_uniform &= ep->za[m] == ep->za[0];
    }
    c->M = M;
    c->K = K;
    c->k4 = (K + 3) / 4;
    c->panels = panels;
    c->rowc = rowc;
    c->esize = ep->out_type == LGK_QTYPE_INT32 ? 4 : 1;
    int32_t type_lo = ep->out_type == LGK_QTYPE_UINT8 ? 0 : -128;
    int32_t type_hi = ep->out_type == LGK_QTYPE_UINT8 ? 255 : 127;
    c->lo = (float)((ep->relu ? LGK_MAX(type_lo, ep->out_zp) : type_lo) - ep->out_zp);
    c->hi = (float)(type_hi - ep->out_zp);
    return LGK_OK;
}

void lgk_qcv_release(lgk_qcv *c)
{
    lgk_scratch_release(&c->rowc_scratch);
    lgk_scratch_release(&c->ex.scratch);
}

/* ---- packing B ------------------------------------------------------------------------------- */

/* 16 bytes of a row from column j (bytes past n read as 0 after the flip: they stay out of
 * the sums), xor flip. */
QCV_TARGET static inline __m128i qcv_row16(const uint8_t *row, int64_t j, int64_t n,
                                           __m128i flip)
{
    if (row == NULL || j >= n)
        return _mm_setzero_si128();
    if (n - j >= 16)
        return _mm_xor_si128(_mm_loadu_si128((const __m128i *)(row + j)), flip);
    uint8_t tmp[16] = {0};
    for (int64_t i = 0; i < n - j; ++i)
        tmp[i] = (uint8_t)(row[j + i] ^ (uint8_t)_mm_cvtsi128_si32(flip));
    return _mm_loadu_si128((const __m128i *)tmp);
}

/* Pixels [0, n) of B (K rows of bytes, row stride rs) as 48-pixel slivers of 4-tap groups
 * of int8 ([sliver][k4][48][4]), zero past n and past K; colsum[j] = pixel j's sum. */
QCV_TARGET static void qcv_pack_b(const lgk_qcv *c, const uint8_t *b, int64_t rs, int64_t n,
                                  uint8_t flip, int8_t *dst, int32_t *colsum)
{
    int64_t span = (n + QCV_NR - 1) / QCV_NR * QCV_NR;
    __m128i f = _mm_set1_epi8((char)flip);
    __m512i ones = _mm512_set1_epi8(1);
    memset(colsum, 0, (size_t)span * sizeof *colsum);
    for (int64_t g = 0; g < c->k4; ++g) {
        const uint8_t *r[4];
        for (int t = 0; t < 4; ++t)
            r[t] = 4 * g + t < c->K ? b + (4 * g + t) * rs : NULL;
        for (int64_t j = 0; j < span; j += 16) {
            __m128i r0 = qcv_row16(r[0], j, n, f), r1 = qcv_row16(r[1], j, n, f);
            __m128i r2 = qcv_row16(r[2], j, n, f), r3 = qcv_row16(r[3], j, n, f);
            __m128i t0 = _mm_unpacklo_epi8(r0, r1), t1 = _mm_unpackhi_epi8(r0, r1);
            __m128i t2 = _mm_unpacklo_epi8(r2, r3), t3 = _mm_unpackhi_epi8(r2, r3);
            __m512i v = _mm512_castsi128_si512(_mm_unpacklo_epi16(t0, t2));
            v = _mm512_inserti32x4(v, _mm_unpackhi_epi16(t0, t2), 1);
            v = _mm512_inserti32x4(v, _mm_unpacklo_epi16(t1, t3), 2);
            v = _mm512_inserti32x4(v, _mm_unpackhi_epi16(t1, t3), 3);
            int8_t *d = dst + ((j / QCV_NR) * c->k4 + g) * (4 * QCV_NR) + (j % QCV_NR) * 4;
            _mm512_storeu_si512(d, v);
            __m512i s = _mm512_loadu_si512(colsum + j);
            _mm512_storeu_si512(colsum + j, _mm512_dpbusd_epi32(s, ones, v));
        }
    }
}

/* ---- tiles ----------------------------------------------------------------------------------- */

QCV_TARGET static inline __mmask16 qcv_mask(int64_t count)
{
    return (__mmask16)(count >= 16 ? 0xFFFFu : count <= 0 ? 0u : (1u << count) - 1u);
}

/* Row i of a tile: the za term off, requantized, stored (cols outputs). */
QCV_TARGET __attribute__((always_inline)) static inline void
qcv_store_row(const lgk_qcv *c, int64_t m, const __m512i *acc, const __m512i *zc,
              const __m512i *colsum, char *y, int cols)
{
    const lgk_qepilogue *ep = &c->ex.ep;
    __m512i v[3], rowc = _mm512_set1_epi32(c->rowc[m]);
    for (int u = 0; u < 3; ++u)
        v[u] = _mm512_sub_epi32(_mm512_add_epi32(acc[u], rowc), c->za_uniform
                                            ? zc[u]
                                            : _mm512_mullo_epi32(colsum[u], _mm512_set1_epi32(ep->za[m])));
    if (c->esize == 4) {
        for (int u = 0; u < 3; ++u)
            _mm512_mask_storeu_epi32(y + 64 * u, qcv_mask(cols - 16 * u), v[u]);
        return;
    }
    __m512 mult = _mm512_set1_ps(ep->mult[m]), lo = _mm512_set1_ps(c->lo), hi = _mm512_set1_ps(c->hi);
    __m512i zp = _mm512_set1_epi32(ep->out_zp);
    for (int u = 0; u < 3; ++u) {
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v[u]), mult);
        f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
        _mm512_mask_cvtepi32_storeu_epi8(y + 16 * u, qcv_mask(cols - 16 * u),
                                         _mm512_add_epi32(_mm512_cvtps_epi32(f), zp));
    }
}

/* rows filters from m0 x cols (<= 48) pixels of y (row stride ldc) from a W sliver and a
 * B sliver (colsum: its pixels' sums). */
QCV_TARGET static void qcv_tile(const lgk_qcv *c, int rows, int64_t m0, const uint8_t *a,
                                const int8_t *b, const int32_t *colsum, char *y, int64_t ldc,
                                int cols)
{
    _Alignas(64) int32_t tile[QCV_MR * QCV_NR];
    lgk_qgemm_tile(rows, c->k4, a, b, tile); /* the GEMM's VNNI micro-kernel */
    __m512i cs[3], zc[3];
    for (int u = 0; u < 3; ++u) {
        cs[u] = _mm512_loadu_si512(colsum + 16 * u);
        zc[u] = _mm512_mullo_epi32(cs[u], _mm512_set1_epi32(c->ex.ep.za[m0]));
    }
    for (int i = 0; i < rows; ++i) {
        __m512i acc[3];
        for (int u = 0; u < 3; ++u)
            acc[u] = _mm512_load_si512(tile + i * QCV_NR + 16 * u);
        qcv_store_row(c, m0 + i, acc, zc, cs, y + (size_t)(i * ldc) * c->esize, cols);
    }
}

/* A tile of at most 16 pixels (the last of a 49-pixel map, the 4 of a 196-pixel one): one
 * vector of sums per filter instead of the micro-kernel's three, a third of the work. */
QCV_TARGET static void qcv_narrow_tile(const lgk_qcv *c, int rows, int64_t m0, const uint8_t *a,
                                       const int8_t *b, const int32_t *colsum, char *y,
                                       int64_t ldc, int cols)
{
    __m512i acc[QCV_MR];
    for (int i = 0; i < QCV_MR; ++i) /* rows past M are zeros in the packed weights */
        acc[i] = _mm512_setzero_si512();
    for (int64_t k = 0; k < c->k4; ++k) {
        __m512i b0 = _mm512_loadu_si512(b);
        for (int i = 0; i < QCV_MR; ++i) {
            int32_t word;
            memcpy(&word, a + 4 * i, 4);
            acc[i] = _mm512_dpbusd_epi32(acc[i], _mm512_set1_epi32(word), b0);
        }
        a += 4 * QCV_MR;
        b += 4 * QCV_NR;
    }
    __m512i cs[3] = {_mm512_loadu_si512(colsum), _mm512_setzero_si512(), _mm512_setzero_si512()};
    __m512i zc[3] = {_mm512_mullo_epi32(cs[0], _mm512_set1_epi32(c->ex.ep.za[m0])), cs[1], cs[2]};
    for (int i = 0; i < rows; ++i) {
        __m512i v[3] = {acc[i], cs[1], cs[2]}; /* lanes past 16: no pixels, not stored */
        qcv_store_row(c, m0 + i, v, zc, cs, y + (size_t)(i * ldc) * c->esize, cols);
    }
}

/* ---- driver ---------------------------------------------------------------------------------- */

int lgk_qcv_run(const lgk_qcv *c, const uint8_t *b, int64_t rs_b, int64_t n, void *y,
                int64_t ldc)
{
    int64_t kb = 4 * c->k4;
    int64_t nc_max = LGK_MAX((int64_t)QCV_NR,
                             QCV_PANEL_BYTES / LGK_MAX(kb, (int64_t)1) / QCV_NR * QCV_NR);
    nc_max = LGK_MIN(nc_max, (n + QCV_NR - 1) / QCV_NR * QCV_NR);
    int64_t dims[2] = {nc_max, kb + 4}, floats; /* the panel, then its pixel sums */
    LGK_TRY(lgk_checked_count(2, dims, &floats));
    lgk_scratch s = {NULL, 0};
    LGK_TRY(lgk_scratch_acquire(floats / 4 + 16, &s));
    int8_t *panel = (int8_t *)s.data;
    int32_t *colsum = (int32_t *)(panel + nc_max * kb);
    uint8_t flip = c->ex.b_flip;
    for (int64_t n0 = 0; n0 < n; n0 += nc_max) {
        int64_t nc = LGK_MIN(nc_max, n - n0);
        qcv_pack_b(c, b + n0, rs_b, nc, flip, panel, colsum);
        /* a B sliver that fits L1 serves every filter sliver in turn; a deeper one (K over
         * 680: ResNet-50's 3x3 convs past 64 channels) is read from L2 anyway, and the
         * weights are then read once per panel instead of once per sliver (512->512 3x3
         * at 7^2: 2.4 MB of weights, twice) */
        int filters_outer = kb * QCV_NR > 32 * 1024;
        int64_t outer = filters_outer ? c->M : nc, inner = filters_outer ? nc : c->M;
        int64_t ostep = filters_outer ? QCV_MR : QCV_NR, istep = filters_outer ? QCV_NR : QCV_MR;
        for (int64_t o = 0; o < outer; o += ostep)
            for (int64_t i = 0; i < inner; i += istep) {
                int64_t m0 = filters_outer ? o : i, jr = filters_outer ? i : o;
                int cols = (int)LGK_MIN((int64_t)QCV_NR, nc - jr);
                char *yt = (char *)y + (size_t)(m0 * ldc + n0 + jr) * c->esize;
                (cols <= 16 ? qcv_narrow_tile : qcv_tile)(
                    c, (int)LGK_MIN((int64_t)QCV_MR, c->M - m0), m0, c->panels + m0 * kb,
                    panel + jr * kb, colsum + jr, yt, ldc, cols);
            }
    }
    lgk_scratch_release(&s);
    return LGK_OK;
}

#else /* no x86: the VNNI family is never selected */

int lgk_qcv_prepare(int64_t M, int64_t K, const uint8_t *panels, const int32_t *sums,
                    const lgk_qparams *q, lgk_qcv *c)
{
    (void)M, (void)K, (void)panels, (void)sums, (void)q;
    memset(c, 0, sizeof *c);
    return LGK_ERR_ARG;
}

void lgk_qcv_release(lgk_qcv *c) { (void)c; }

int lgk_qcv_run(const lgk_qcv *c, const uint8_t *b, int64_t rs_b, int64_t n, void *y,
                int64_t ldc)
{
    (void)c, (void)b, (void)rs_b, (void)n, (void)y, (void)ldc;
    return LGK_ERR_ARG;
}
#endif
