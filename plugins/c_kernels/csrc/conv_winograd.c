/*
 * conv_winograd.c - 3x3 stride-1 float32 conv2d (groups == 1) by Winograd's F(2x2, 3x3).
 *
 * Each 2x2 block of outputs of one filter is a sum over the input channels of a 4x4
 * input patch d (rows and columns 2 apart, overlapping by 2) against the 3x3 filter g:
 *
 *     Y = A^T [ (G g G^T) . (B^T d B) ] A                (. elementwise, 16 products)
 *
 * against the 36 multiply-adds of the direct sum. Summed over channels, the elementwise
 * product of each of the 16 positions xi is a GEMM: M[xi] (o x tiles) = U[xi] (o x c)
 * @ V[xi] (c x tiles), with U = G g G^T packed once per weight and V = B^T d B made per
 * call. So the conv costs 16/36 of the direct conv's multiply-adds, plus the transforms
 * (additions only, linear in the input and output sizes), and runs on the GEMM's
 * micro-kernels. F(2x2, 3x3) rather than the larger F(4x4, 3x3): its transforms hold
 * only 0, +-1 and 1/2, so each output is off by about twice the rounding of the direct
 * sum (measured against float64: 2.7e-7 vs 1.7e-7 of the largest output, 64 channels),
 * where F(4x4, 3x3)'s coefficients up to 8 and 1/24 grow that to 1e-5.
 *
 * The tiles go in bands of whole tile rows, small enough that a band's V and M (16
 * floats per tile and channel) stay in the caches between the three steps: the input
 * transform (threads split the channels), the 16 GEMMs (threads take whole GEMMs) and
 * the output transform with the bias and activation (threads split the filters).
 */
#include <string.h>

#include "lgk_internal.h"
#include "lgk_parallel.h"

#define WINO_MAGIC 0x5747474cu /* "LGGW" */
#define XI 16                  /* transform positions: 4x4 */
/* Bytes of V and M per band (a 64-channel conv on a 56^2 map, 784 tiles, goes in 4 bands
 * of 7 tile rows). ResNet-50 at 1 thread with bands of 1, 2, 4 and 8 MiB: 69.2-69.3,
 * 66.3-66.6, 66.0-67.6 and 67.0-68.1 ms: smaller bands make narrower GEMMs, larger ones
 * leave the caches between the steps. */
#define WINO_BAND_BYTES (2 << 20)

typedef struct {
    uint32_t magic;
    int32_t isa;
    int64_t o, c, slice; /* slice: floats from one position's packed U to the next */
} wino_header;

_Static_assert(sizeof(wino_header) <= LGK_PACKED_HEADER_FLOATS * sizeof(float),
               "wino_header must fit its reserved cache line");

/* Floats of one position's packed U (o x c as a GEMM's left operand, its own header
 * included), rounded up to keep each 64-byte aligned. */
static int slice_floats(int64_t o, int64_t c, int64_t *out)
{
    *out = 0;
    LGK_CHECK(o >= 1 && c >= 1, LGK_ERR_SHAPE);
    int64_t n = lgk_sgemm_packed_a_size(o, c);
    LGK_CHECK(n > 0, (int)-n);
    LGK_TRY(lgk_add(n, 15, &n));
    *out = n / 16 * 16;
    return LGK_OK;
}

static int packed_floats(int64_t o, int64_t c, int64_t *slice, int64_t *out)
{
    LGK_TRY(slice_floats(o, c, slice));
    const int64_t d[2] = {XI, *slice};
    int64_t n;
    LGK_TRY(lgk_checked_count(2, d, &n));
    LGK_TRY(lgk_add(n, LGK_PACKED_HEADER_FLOATS, out));
    return lgk_checked_count(1, out, out);
}

int64_t lgk_conv2d_winograd_packed_size(int64_t o, int64_t c)
{
    int64_t slice = 0, n = 0;
    int status = packed_floats(o, c, &slice, &n);
    return status == LGK_OK ? n : -(int64_t)status;
}

/* u[xi * o * c + f * c + ch] = (G g G^T)[xi] for filter f, channel ch; g its 3x3 taps. */
static void transform_filters(int64_t o, int64_t c, const float *w, float *u)
{
    int64_t plane = o * c;
    for (int64_t fc = 0; fc < plane; ++fc) {
        const float *g = w + fc * 9;
        float t[4][3]; /* G g: rows of G (1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1) into g's rows */
        for (int k = 0; k < 3; ++k) {
            t[0][k] = g[k];
            t[1][k] = 0.5f * (g[k] + g[3 + k] + g[6 + k]);
            t[2][k] = 0.5f * (g[k] - g[3 + k] + g[6 + k]);
            t[3][k] = g[6 + k];
        }
        for (int i = 0; i < 4; ++i) { /* (G g) G^T */
            float *row = u + (int64_t)(i * 4) * plane + fc;
            row[0] = t[i][0];
            row[plane] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
            row[2 * plane] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
            row[3 * plane] = t[i][2];
        }
    }
}

int lgk_conv2d_winograd_pack(int64_t o, int64_t c, const float *w, int64_t w_len,
                             float *packed, int64_t packed_len)
{
    int64_t slice = 0, need = 0, nw, nu;
    LGK_TRY(packed_floats(o, c, &slice, &need));
    const int64_t wd[3] = {o, c, 9}, ud[3] = {XI, o, c};
    LGK_TRY(lgk_checked_count(3, wd, &nw));
    LGK_TRY(lgk_checked_count(3, ud, &nu));
    LGK_TRY(lgk_check_buffer(w, w_len, nw));
    LGK_TRY(lgk_check_buffer(packed, packed_len, need));
    LGK_CHECK((uintptr_t)packed % 64 == 0, LGK_ERR_ARG);
    float *u = lgk_aligned_alloc(nu);
    LGK_CHECK(u != NULL, LGK_ERR_NOMEM);
    transform_filters(o, c, w, u);
    int status = LGK_OK;
    float *dst = packed + LGK_PACKED_HEADER_FLOATS;
    for (int xi = 0; xi < XI && status == LGK_OK; ++xi, dst += slice)
        status = lgk_sgemm_pack_a(o, c, u + (int64_t)xi * o * c, o * c, c, 1, dst, slice);
    lgk_aligned_free(u);
    LGK_TRY(status);
    wino_header h = {WINO_MAGIC, lgk_gemm_isa(), o, c, slice};
    memcpy(packed, &h, sizeof h);
    return LGK_OK;
}

/* Checks a buffer of lgk_conv2d_winograd_pack for this conv; *slice: its positions'
 * spacing. */
static int check_packed(const lgk_conv2d_params *p, const float *packed, int64_t packed_len,
                        int64_t *slice_out)
{
    int64_t slice = 0, need = 0;
    LGK_TRY(packed_floats(p->o, p->c, &slice, &need));
    LGK_TRY(lgk_check_buffer(packed, packed_len, LGK_PACKED_HEADER_FLOATS));
    LGK_CHECK((uintptr_t)packed % 64 == 0, LGK_ERR_ARG);
    wino_header h;
    memcpy(&h, packed, sizeof h);
    LGK_CHECK(h.magic == WINO_MAGIC && h.o == p->o && h.c == p->c && h.slice == slice
                  && h.isa == lgk_gemm_isa(),
              LGK_ERR_ARG);
    LGK_CHECK(need <= packed_len, LGK_ERR_SHAPE);
    const float *first = packed + LGK_PACKED_HEADER_FLOATS;
    for (int xi = 0; xi < XI; ++xi)
        LGK_TRY(lgk_sgemm_check_packed_a(p->o, p->c, first + xi * slice, slice));
    *slice_out = slice;
    return LGK_OK;
}

/* ---- the job ------------------------------------------------------------------------ */

typedef struct {
    const lgk_conv2d_params *p;
    int64_t oh, ow, tw;      /* output size, tiles across */
    int64_t ty0, nty, nt;    /* the band: tile rows [ty0, ty0 + nty), nt = nty * tw tiles */
    int64_t rowlen;          /* floats of a padded patch row: 2 * tw + 2, rounded up */
    const float *x;          /* the current image */
    float *y;                /* the current image's output */
    float *v, *m;            /* V (16 x c x nt), M (16 x o x nt) of the band */
    const float *u;          /* the first position's packed U (its header included) */
    int64_t slice;
    const float *bias;
    int activation;
} wino_job;

/* Input row iy, columns -pad_left .. 2 * tw + 1 - pad_left of the input, with zeros
 * outside it. */
static void patch_row(const wino_job *j, const float *plane, int64_t iy, float *dst)
{
    const lgk_conv2d_params *p = j->p;
    int64_t n = 2 * j->tw + 2;
    if (iy < 0 || iy >= p->h) {
        memset(dst, 0, (size_t)n * sizeof(float));
        return;
    }
    const float *src = plane + iy * p->w;
    int64_t k0 = LGK_MIN(p->pad_left, n), k1 = LGK_MAX(k0, LGK_MIN(n, p->w + p->pad_left));
    memset(dst, 0, (size_t)k0 * sizeof(float));
    memcpy(dst + k0, src + (k0 - p->pad_left), (size_t)(k1 - k0) * sizeof(float));
    memset(dst + k1, 0, (size_t)(n - k1) * sizeof(float));
}

/* B^T d B of the tiles along one tile row: c0..c3 are the patch's rows already combined
 * down the columns (B^T d); here along the rows, two columns a tile, into positions
 * 4i .. 4i + 3 of V (`stride` floats apart). */
LGK_CLONES static void input_columns(int64_t tw, const float *restrict ci, float *restrict v,
                                     int64_t stride)
{
    float *restrict v0 = v, *restrict v1 = v + stride, *restrict v2 = v + 2 * stride,
                    *restrict v3 = v + 3 * stride;
    for (int64_t t = 0; t < tw; ++t) {
        float d0 = ci[2 * t], d1 = ci[2 * t + 1], d2 = ci[2 * t + 2], d3 = ci[2 * t + 3];
        v0[t] = d0 - d2;
        v1[t] = d1 + d2;
        v2[t] = d2 - d1;
        v3[t] = d1 - d3;
    }
}

LGK_CLONES static void input_rows(int64_t n, const float *restrict r0, const float *restrict r1,
                                  const float *restrict r2, const float *restrict r3,
                                  float *restrict c0, float *restrict c1, float *restrict c2,
                                  float *restrict c3)
{
    for (int64_t k = 0; k < n; ++k) {
        c0[k] = r0[k] - r2[k];
        c1[k] = r1[k] + r2[k];
        c2[k] = r2[k] - r1[k];
        c3[k] = r1[k] - r3[k];
    }
}

/* V of channels [ch0, ch1) for the band's tiles: the band's 2 * nty + 2 input rows are
 * copied once, zero-padded, then combined down the columns and along the rows a tile row
 * at a time. */
static int input_units(void *ctx, int64_t ch0, int64_t ch1)
{
    const wino_job *j = ctx;
    const lgk_conv2d_params *p = j->p;
    int64_t nrows = 2 * j->nty + 2, len = j->rowlen;
    lgk_scratch s = {NULL, 0};
    LGK_TRY(lgk_scratch_acquire((nrows + 4) * len, &s));
    float *cols = s.data + nrows * len;
    int64_t stride = p->c * j->nt, n = 2 * j->tw + 2;
    for (int64_t ch = ch0; ch < ch1; ++ch) {
        const float *plane = j->x + ch * p->h * p->w;
        for (int64_t r = 0; r < nrows; ++r)
            patch_row(j, plane, 2 * j->ty0 - p->pad_top + r, s.data + r * len);
        for (int64_t ty = 0; ty < j->nty; ++ty) {
            const float *rows = s.data + 2 * ty * len;
            input_rows(n, rows, rows + len, rows + 2 * len, rows + 3 * len, cols, cols + len,
                       cols + 2 * len, cols + 3 * len);
            float *v = j->v + ch * j->nt + ty * j->tw;
            for (int i = 0; i < 4; ++i)
                input_columns(j->tw, cols + i * len, v + 4 * i * stride, stride);
        }
    }
    lgk_scratch_release(&s);
    return LGK_OK;
}

/* M[xi] = U[xi] @ V[xi] for positions [xi0, xi1). */
static int gemm_units(void *ctx, int64_t xi0, int64_t xi1)
{
    const wino_job *j = ctx;
    const lgk_conv2d_params *p = j->p;
    for (int64_t xi = xi0; xi < xi1; ++xi) {
        lgk_operand a = {NULL, 0, 0, j->u + xi * j->slice + LGK_PACKED_HEADER_FLOATS};
        lgk_operand b = {j->v + xi * p->c * j->nt, j->nt, 1, NULL};
        LGK_TRY(lgk_sgemm_block(p->o, j->nt, p->c, a, b, j->m + xi * p->o * j->nt, j->nt,
                                NULL, LGK_BIAS_NONE, LGK_ACT_NONE, 0, p->o, 0, j->nt));
    }
    return LGK_OK;
}

/* Column k of A^T M for tile t: M's four rows combined (s0[k], s1[k]). m: position xi's
 * row at m[xi * stride]. */
static inline void rows_combined(const float *restrict m, int64_t stride, int64_t t, int k,
                                 float *s0, float *s1)
{
    float m0 = m[k * stride + t], m1 = m[(4 + k) * stride + t], m2 = m[(8 + k) * stride + t],
          m3 = m[(12 + k) * stride + t];
    s0[k] = m0 + m1 + m2;
    s1[k] = m1 - m2 - m3;
}

/* A^T M A + bias of the first `whole` tiles of one tile row of one filter, both of whose
 * output columns are in the map, into output rows y0 and y1 (y1 may be scratch where the
 * second row is past the map). m: position xi's row at m[xi * stride]. */
LGK_CLONES static void output_tiles(int64_t whole, const float *restrict m, int64_t stride,
                                    float bias, float *restrict y0, float *restrict y1)
{
    for (int64_t t = 0; t < whole; ++t) {
        float s0[4], s1[4];
        for (int k = 0; k < 4; ++k)
            rows_combined(m, stride, t, k, s0, s1);
        y0[2 * t] = s0[0] + s0[1] + s0[2] + bias;
        y0[2 * t + 1] = s0[1] - s0[2] - s0[3] + bias;
        y1[2 * t] = s1[0] + s1[1] + s1[2] + bias;
        y1[2 * t + 1] = s1[1] - s1[2] - s1[3] + bias;
    }
}

/* The same for tile t alone, its second column past the map (an odd width). */
static void output_last_column(int64_t t, const float *m, int64_t stride, float bias,
                               float *y0, float *y1)
{
    float s0[3], s1[3];
    for (int k = 0; k < 3; ++k)
        rows_combined(m, stride, t, k, s0, s1);
    y0[2 * t] = s0[0] + s0[1] + s0[2] + bias;
    y1[2 * t] = s1[0] + s1[1] + s1[2] + bias;
}

/* Outputs of filters [f0, f1) for the band's tile rows, then their activation. */
static int output_units(void *ctx, int64_t f0, int64_t f1)
{
    const wino_job *j = ctx;
    const lgk_conv2d_params *p = j->p;
    lgk_scratch s = {NULL, 0};
    LGK_TRY(lgk_scratch_acquire(j->rowlen, &s)); /* the row past an odd height */
    int64_t stride = p->o * j->nt, whole = j->ow / 2;
    int64_t oy0 = 2 * j->ty0, rows = LGK_MIN(2 * j->nty, j->oh - oy0);
    for (int64_t f = f0; f < f1; ++f) {
        float b = j->bias != NULL ? j->bias[f] : 0.0f;
        float *out = j->y + f * j->oh * j->ow + oy0 * j->ow;
        for (int64_t ty = 0; ty < j->nty; ++ty) {
            const float *m = j->m + f * j->nt + ty * j->tw;
            float *y0 = out + 2 * ty * j->ow;
            float *y1 = 2 * ty + 1 < rows ? y0 + j->ow : s.data;
            output_tiles(whole, m, stride, b, y0, y1);
            if (j->ow % 2)
                output_last_column(whole, m, stride, b, y0, y1);
        }
        if (j->activation != LGK_ACT_NONE)
            lgk_activate(j->activation, out, rows * j->ow);
    }
    lgk_scratch_release(&s);
    return LGK_OK;
}

static int run_band(wino_job *j, int threads)
{
    const lgk_conv2d_params *p = j->p;
    LGK_TRY(lgk_parallel_for(threads, p->c, 1, input_units, j));
    LGK_TRY(lgk_parallel_for(LGK_MIN(threads, XI), XI, 1, gemm_units, j));
    return lgk_parallel_for(threads, p->o, 1, output_units, j);
}

int lgk_conv2d_winograd(const lgk_conv2d_params *p, const float *x, int64_t x_len,
                        const float *packed_w, int64_t packed_len, const float *bias,
                        int64_t bias_len, float *y, int64_t y_len, int activation, int nthreads)
{
    int64_t oh, ow, slice = 0;
    LGK_CHECK(p != NULL, LGK_ERR_NULL);
    LGK_TRY(lgk_conv2d_out_shape(p, &oh, &ow));
    LGK_CHECK(p->groups == 1 && p->kh == 3 && p->kw == 3 && p->stride_h == 1
                  && p->stride_w == 1 && p->dilation_h == 1 && p->dilation_w == 1,
              LGK_ERR_ARG);
    LGK_CHECK(activation >= LGK_ACT_NONE && activation <= LGK_ACT_LAST, LGK_ERR_ARG);
    LGK_TRY(check_packed(p, packed_w, packed_len, &slice));
    LGK_TRY(lgk_conv2d_check_buffers(p, oh, ow, 0, x_len, -1, y_len, bias, bias_len, x, NULL,
                                     y));
    if (p->n == 0 || p->o == 0)
        return LGK_OK;
    int64_t th = (oh + 1) / 2, tw = (ow + 1) / 2, per_tile, rows_per_band, vm;
    /* floats of V and M per tile row: 16 * (c + o) * tw */
    const int64_t td[3] = {XI, p->c + p->o, tw};
    LGK_TRY(lgk_checked_count(3, td, &per_tile));
    rows_per_band = LGK_MAX((int64_t)1, (int64_t)(WINO_BAND_BYTES / 4) / per_tile);
    int64_t bands = (th + rows_per_band - 1) / rows_per_band;
    rows_per_band = (th + bands - 1) / bands;
    const int64_t vd[2] = {per_tile, rows_per_band};
    LGK_TRY(lgk_checked_count(2, vd, &vm));
    lgk_scratch s = {NULL, 0};
    LGK_TRY(lgk_scratch_acquire(vm, &s));
    wino_job j = {p, oh, ow, tw, 0, 0, 0, (2 * tw + 2 + 15) / 16 * 16, NULL, NULL, s.data,
                  NULL, packed_w + LGK_PACKED_HEADER_FLOATS, slice, bias, activation};
    double flops = 2.0 * XI * (double)p->o * (double)p->c * (double)(th * tw);
    int threads = lgk_conv_threads_for(flops, lgk_clamp_threads(nthreads));
    unsigned mode = lgk_flush_subnormals();
    int status = LGK_OK;
    for (int64_t img = 0; img < p->n && status == LGK_OK; ++img) {
        j.x = x + img * p->c * p->h * p->w;
        j.y = y + img * p->o * oh * ow;
        for (j.ty0 = 0; j.ty0 < th && status == LGK_OK; j.ty0 += rows_per_band) {
            j.nty = LGK_MIN(rows_per_band, th - j.ty0);
            j.nt = j.nty * tw;
            j.m = j.v + XI * p->c * j.nt;
            status = run_band(&j, threads);
        }
    }
    lgk_restore_fp_mode(mode);
    lgk_scratch_release(&s);
    return status;
}
