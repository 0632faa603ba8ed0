/*
 * movement.c - permute_dims: a dense copy of a strided view, walked by whole blocks,
 * of elements of 1, 2, 4 or 8 bytes (float32 and any other dtype of those sizes).
 *
 * After dropping unit dims and merging dims that are contiguous in the source too,
 * the two (or three) innermost dims are copied by one tight kernel and only the
 * dims outside them are counted one by one:
 *  - runs: the innermost dim is contiguous in the source: row copies (short rows
 *    take a third dim into the kernel, so [128, 4, 2, 2] -> [0, 2, 1, 3] is 128
 *    kernel calls, not 1024 lines);
 *  - transposes: another dim is contiguous in the source: it moves next to the
 *    innermost and the pair is copied in 16x16 tiles transposed in registers
 *    (NCHW <-> NHWC), for 4- and 1-byte elements; other sizes in scalar tiles;
 *  - gathers otherwise (no source dim with unit stride).
 */
#include <stdint.h>
#include <string.h>

#include "lgk_internal.h"
#include "lgk_transpose.h"

typedef struct {
    int n;
    int64_t shape[LGK_MAX_NDIM];
    int64_t ss[LGK_MAX_NDIM]; /* source strides */
    int64_t ds[LGK_MAX_NDIM]; /* destination strides (dense in the result's order) */
} pm_layout;

/* The kernels work on elements of ES bytes (1, 2, 4 or 8), each moved by a memcpy of
 * that constant size (one load and store, whatever the dtype: no aliasing of the
 * caller's type). Offsets and strides count elements. */
#define PM_AT(p, i, ES) ((p) + (i) * (int64_t)(ES))
#define PM_MOVE(dst, di, src, si, ES) memcpy(PM_AT(dst, di, ES), PM_AT(src, si, ES), ES)

/* Rows of a run: rows x len elements, row r from src + r * ss to dst + r * ds. */
#define PM_RUNS(ES)                                                                     \
    static inline void pm_runs_##ES(int64_t rows, int64_t len, const unsigned char *src,  \
                                    int64_t ss, unsigned char *dst, int64_t ds)           \
    {                                                                                   \
        if (len >= 16) {                                                                \
            for (int64_t r = 0; r < rows; ++r)                                          \
                memcpy(PM_AT(dst, r * ds, ES), PM_AT(src, r * ss, ES), (size_t)len * ES); \
            return;                                                                     \
        }                                                                               \
        for (int64_t r = 0; r < rows; ++r)                                              \
            for (int64_t i = 0; i < len; ++i)                                           \
                PM_MOVE(dst, r * ds + i, src, r * ss + i, ES);                          \
    }

#define PM_GATHER(ES)                                                                   \
    static void pm_gather_##ES(int64_t rows, int64_t cols, const unsigned char *src,     \
                               int64_t ss_r, int64_t ss_c, unsigned char *dst, int64_t ds) \
    {                                                                                   \
        for (int64_t r = 0; r < rows; ++r)                                              \
            for (int64_t c = 0; c < cols; ++c)                                          \
                PM_MOVE(dst, r * ds + c, src, r * ss_r + c * ss_c, ES);                 \
    }

/* One 16 x 16 tile: dst[k * ds + c] = src[k + c * ss] for k, c < 16; in registers for
 * floats and bytes (16 source rows, one per c, transposed), scalar otherwise. */
static inline __attribute__((always_inline)) void
pm_tile_4(const unsigned char *src, int64_t ss, unsigned char *dst, int64_t ds)
{
    lgk_v16 v[LGK_V16];
    LGK_UNROLL16
    for (int k = 0; k < LGK_V16; ++k)
        memcpy(&v[k], PM_AT(src, k * ss, 4), sizeof v[k]);
    lgk_transpose16(v);
    LGK_UNROLL16
    for (int k = 0; k < LGK_V16; ++k)
        memcpy(PM_AT(dst, k * ds, 4), &v[k], sizeof v[k]);
}

static inline __attribute__((always_inline)) void
pm_tile_1(const unsigned char *src, int64_t ss, unsigned char *dst, int64_t ds)
{
    lgk_b16 v[LGK_V16];
    LGK_UNROLL16
    for (int k = 0; k < LGK_V16; ++k)
        memcpy(&v[k], src + k * ss, sizeof v[k]);
    lgk_transpose16_bytes(v);
    LGK_UNROLL16
    for (int k = 0; k < LGK_V16; ++k)
        memcpy(dst + k * ds, &v[k], sizeof v[k]);
}

#define PM_TILE_SCALAR(ES)                                                              \
    static inline void pm_tile_##ES(const unsigned char *src, int64_t ss,               \
                                    unsigned char *dst, int64_t ds)                     \
    {                                                                                   \
        for (int64_t k = 0; k < LGK_V16; ++k)                                           \
            for (int64_t c = 0; c < LGK_V16; ++c)                                       \
                PM_MOVE(dst, k * ds + c, src, k + c * ss, ES);                          \
    }

/* dst[r * ds + c] = src[r + c * ss] for r < rows, c < cols: 16 x 16 tiles, scalar edges. */
#define PM_TRANSPOSE(ES, ATTRS)                                                         \
    ATTRS static void pm_transpose_##ES(int64_t rows, int64_t cols,                     \
                                        const unsigned char *src, int64_t ss,           \
                                        unsigned char *dst, int64_t ds)                 \
    {                                                                                   \
        int64_t r0 = 0;                                                                 \
        for (; r0 + LGK_V16 <= rows; r0 += LGK_V16) {                                   \
            int64_t c0 = 0;                                                             \
            for (; c0 + LGK_V16 <= cols; c0 += LGK_V16)                                 \
                pm_tile_##ES(PM_AT(src, r0 + c0 * ss, ES), ss,                          \
                             PM_AT(dst, r0 * ds + c0, ES), ds);                         \
            for (int64_t r = r0; r < r0 + LGK_V16; ++r)                                 \
                for (int64_t c = c0; c < cols; ++c)                                     \
                    PM_MOVE(dst, r * ds + c, src, r + c * ss, ES);                      \
        }                                                                               \
        for (int64_t r = r0; r < rows; ++r)                                             \
            for (int64_t c = 0; c < cols; ++c)                                          \
                PM_MOVE(dst, r * ds + c, src, r + c * ss, ES);                          \
    }

PM_RUNS(1)
PM_RUNS(2)
PM_RUNS(4)
PM_RUNS(8)
PM_GATHER(1)
PM_GATHER(2)
PM_GATHER(4)
PM_GATHER(8)
PM_TILE_SCALAR(2)
PM_TILE_SCALAR(8)
PM_TRANSPOSE(1, LGK_CLONES)
PM_TRANSPOSE(2, )
PM_TRANSPOSE(4, LGK_CLONES)
PM_TRANSPOSE(8, )

enum { PM_RUNS, PM_TRANSPOSE, PM_GATHER };

/* pm_inner_ES: the kernel over dims [first, n) of l from src to dst (the last dim dense
 * in dst), one function per element size so that the walk of short blocks pays no
 * dispatch on the size. */
typedef void pm_inner_fn(const pm_layout *l, int kind, int first, const unsigned char *src,
                         unsigned char *dst);

#define PM_INNER(ES)                                                                    \
    static void pm_inner_##ES(const pm_layout *l, int kind, int first,                  \
                              const unsigned char *src, unsigned char *dst)             \
    {                                                                                   \
        int last = l->n - 1;                                                            \
        if (first < last - 1) { /* three dims: the outermost looped here */             \
            for (int64_t a = 0; a < l->shape[first]; ++a)                               \
                pm_inner_##ES(l, kind, first + 1, PM_AT(src, a * l->ss[first], ES),     \
                              PM_AT(dst, a * l->ds[first], ES));                        \
            return;                                                                     \
        }                                                                               \
        int64_t rows = first < last ? l->shape[first] : 1;                              \
        int64_t ss_r = first < last ? l->ss[first] : 0;                                 \
        int64_t ds_r = first < last ? l->ds[first] : 0;                                 \
        if (kind == PM_RUNS)                                                            \
            pm_runs_##ES(rows, l->shape[last], src, ss_r, dst, ds_r);                   \
        else if (kind == PM_TRANSPOSE)                                                  \
            pm_transpose_##ES(rows, l->shape[last], src, l->ss[last], dst, ds_r);       \
        else                                                                            \
            pm_gather_##ES(rows, l->shape[last], src, ss_r, l->ss[last], dst, ds_r);    \
    }

PM_INNER(1)
PM_INNER(2)
PM_INNER(4)
PM_INNER(8)

/* Unit dims dropped, dims contiguous in the source merged with the next inner one. */
static void pm_simplify(int ndim, const int64_t *shape, const int64_t *src_strides,
                        pm_layout *l)
{
    l->n = 0;
    for (int d = 0; d < ndim; ++d) {
        if (shape[d] == 1)
            continue;
        if (l->n > 0 && l->ss[l->n - 1] == src_strides[d] * shape[d]) {
            l->shape[l->n - 1] *= shape[d];
            l->ss[l->n - 1] = src_strides[d];
            continue;
        }
        l->shape[l->n] = shape[d];
        l->ss[l->n++] = src_strides[d];
    }
    int64_t dense = 1;
    for (int d = l->n - 1; d >= 0; --d) {
        l->ds[d] = dense;
        dense *= l->shape[d];
    }
}

/* Moves dim p to position n - 2, the others keeping their order. */
static void pm_move_before_last(pm_layout *l, int p)
{
    int64_t shape = l->shape[p], ss = l->ss[p], ds = l->ds[p];
    for (int d = p; d < l->n - 2; ++d) {
        l->shape[d] = l->shape[d + 1];
        l->ss[d] = l->ss[d + 1];
        l->ds[d] = l->ds[d + 1];
    }
    l->shape[l->n - 2] = shape, l->ss[l->n - 2] = ss, l->ds[l->n - 2] = ds;
}

/* A planned copy: the layout, its kernel and how many of its dims that kernel takes. */
typedef struct {
    pm_layout l;
    int kind, outer, elem_size;
    pm_inner_fn *block;
    const unsigned char *from;
    unsigned char *to;
} pm_plan;

/* Every block of l (dims [0, outer) counted one by one, the kernel on the rest). */
static void pm_walk(const pm_plan *p, const pm_layout *l, const unsigned char *from,
                    unsigned char *to)
{
    int64_t idx[LGK_MAX_NDIM] = {0}, so = 0, dof = 0;
    int es = p->elem_size;
    for (;;) {
        p->block(l, p->kind, p->outer, PM_AT(from, so, es), PM_AT(to, dof, es));
        int d = p->outer - 1;
        for (; d >= 0; --d) { /* odometer over the outer dims */
            so += l->ss[d], dof += l->ds[d];
            if (++idx[d] < l->shape[d])
                break;
            so -= l->ss[d] * l->shape[d], dof -= l->ds[d] * l->shape[d];
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* Indices [b, e) of the layout's first dim: the same walk over that slab. */
static int pm_slab(void *ctx, int64_t b, int64_t e)
{
    const pm_plan *p = ctx;
    pm_layout l = p->l;
    l.shape[0] = e - b;
    pm_walk(p, &l, PM_AT(p->from, b * p->l.ss[0], p->elem_size),
            PM_AT(p->to, b * p->l.ds[0], p->elem_size));
    return LGK_OK;
}

/* Copies below this many bytes stay on the calling thread (a 256 KiB transpose takes
 * ~20 us: a hand-off to a worker costs 1-2). */
#define PM_PARALLEL_BYTES ((int64_t)256 * 1024)

int lgk_permute_copy_elems_threads(int elem_size, int ndim, const int64_t *shape,
                                   const void *src, int64_t src_len,
                                   const int64_t *src_strides, void *dst, int64_t dst_len,
                                   int nthreads)
{
    int64_t count, extent, bytes;
    LGK_CHECK(elem_size == 1 || elem_size == 2 || elem_size == 4 || elem_size == 8,
              LGK_ERR_ARG);
    LGK_CHECK(ndim >= 0 && ndim <= LGK_MAX_NDIM, LGK_ERR_ARG);
    LGK_CHECK(ndim == 0 || (shape != NULL && src_strides != NULL), LGK_ERR_NULL);
    LGK_TRY(lgk_checked_count(ndim, shape, &count));
    LGK_CHECK(count <= dst_len, LGK_ERR_SHAPE);
    if (count == 0)
        return LGK_OK;
    LGK_TRY(lgk_view_extent(ndim, shape, src_strides, &extent));
    LGK_CHECK(extent <= src_len, LGK_ERR_SHAPE);
    /* byte offsets of both buffers fit int64 and size_t */
    LGK_TRY(lgk_mul(LGK_MAX(src_len, dst_len), elem_size, &bytes));
    LGK_CHECK((uint64_t)bytes <= SIZE_MAX, LGK_ERR_OVERFLOW);
    LGK_CHECK(src != NULL && dst != NULL, LGK_ERR_NULL);
    pm_plan p = {.elem_size = elem_size, .from = src, .to = dst};
    pm_layout *l = &p.l;
    pm_simplify(ndim, shape, src_strides, l);
    if (l->n == 0) {
        memcpy(p.to, p.from, (size_t)elem_size);
        return LGK_OK;
    }
    int last = l->n - 1, pos = -1;
    p.kind = PM_RUNS;
    if (l->ss[last] != 1) {
        for (int d = 0; d < last; ++d)
            if (l->ss[d] == 1)
                pos = d;
        p.kind = pos >= 0 ? PM_TRANSPOSE : PM_GATHER;
        if (pos >= 0)
            pm_move_before_last(l, pos);
    }
    /* the kernel takes the last two dims, three where the rows are short */
    int inner = LGK_MIN(l->n, p.kind == PM_RUNS && l->shape[last] < 64 ? 3 : 2);
    p.outer = l->n - inner;
    p.block = elem_size == 1 ? pm_inner_1 : elem_size == 2 ? pm_inner_2
            : elem_size == 4 ? pm_inner_4 : pm_inner_8;
    /* threads take slabs of the first dim; where that is a transpose's rows, whole tiles */
    int threads = count * elem_size >= PM_PARALLEL_BYTES ? lgk_clamp_threads(nthreads) : 1;
    int64_t grain = p.kind == PM_TRANSPOSE && l->n == 2 ? LGK_V16 : 1;
    if (threads > 1 && l->shape[0] >= 2 * grain)
        return lgk_parallel_for(threads, l->shape[0], grain, pm_slab, &p);
    pm_walk(&p, l, p.from, p.to);
    return LGK_OK;
}

int lgk_permute_copy_elems(int elem_size, int ndim, const int64_t *shape, const void *src,
                           int64_t src_len, const int64_t *src_strides, void *dst,
                           int64_t dst_len)
{
    return lgk_permute_copy_elems_threads(elem_size, ndim, shape, src, src_len, src_strides,
                                          dst, dst_len, 1);
}

int lgk_permute_copy_threads(int ndim, const int64_t *shape, const float *src, int64_t src_len,
                             const int64_t *src_strides, float *dst, int64_t dst_len,
                             int nthreads)
{
    return lgk_permute_copy_elems_threads((int)sizeof(float), ndim, shape, src, src_len,
                                          src_strides, dst, dst_len, nthreads);
}

int lgk_permute_copy(int ndim, const int64_t *shape, const float *src, int64_t src_len,
                     const int64_t *src_strides, float *dst, int64_t dst_len)
{
    return lgk_permute_copy_elems((int)sizeof(float), ndim, shape, src, src_len, src_strides,
                                  dst, dst_len);
}
