/*
 * movement.c - permute_dims: a dense copy of a strided view, walked by whole blocks.
 *
 * After dropping unit dims and merging dims that are contiguous in the source too,
 * the two (or three) innermost dims are copied by one tight kernel and only the
 * dims outside them are counted one by one:
 *  - runs: the innermost dim is contiguous in the source: row copies (short rows
 *    take a third dim into the kernel, so [128, 4, 2, 2] -> [0, 2, 1, 3] is 128
 *    kernel calls, not 1024 lines);
 *  - transposes: another dim is contiguous in the source: it moves next to the
 *    innermost and the pair is copied in 16x16 tiles transposed in registers
 *    (NCHW <-> NHWC);
 *  - gathers otherwise (no source dim with unit stride).
 */
#include <string.h>

#include "lgk_internal.h"
#include "lgk_transpose.h"

typedef struct {
    int n;
    int64_t shape[LGK_MAX_NDIM];
    int64_t ss[LGK_MAX_NDIM]; /* source strides */
    int64_t ds[LGK_MAX_NDIM]; /* destination strides (dense in the result's order) */
} pm_layout;

/* Rows of a run: rows x len floats, row r from src + r * ss to dst + r * ds. */
static inline void pm_runs(int64_t rows, int64_t len, const float *src, int64_t ss, float *dst,
                           int64_t ds)
{
    if (len >= 16) {
        for (int64_t r = 0; r < rows; ++r)
            memcpy(dst + r * ds, src + r * ss, (size_t)len * sizeof(float));
        return;
    }
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < len; ++i)
            dst[r * ds + i] = src[r * ss + i];
}

/* dst[r * ds + c] = src[r + c * ss] for r < rows, c < cols: 16 x 16 tiles, each
 * 16 source rows (one per c) transposed in registers, scalar edges. */
LGK_CLONES static void pm_transpose(int64_t rows, int64_t cols, const float *src, int64_t ss,
                                    float *dst, int64_t ds)
{
    int64_t r0 = 0;
    for (; r0 + LGK_V16 <= rows; r0 += LGK_V16) {
        int64_t c0 = 0;
        for (; c0 + LGK_V16 <= cols; c0 += LGK_V16) {
            lgk_v16 v[LGK_V16];
            LGK_UNROLL16
            for (int k = 0; k < LGK_V16; ++k)
                memcpy(&v[k], src + r0 + (c0 + k) * ss, sizeof v[k]);
            lgk_transpose16(v);
            LGK_UNROLL16
            for (int k = 0; k < LGK_V16; ++k)
                memcpy(dst + (r0 + k) * ds + c0, &v[k], sizeof v[k]);
        }
        for (int64_t r = r0; r < r0 + LGK_V16; ++r)
            for (int64_t c = c0; c < cols; ++c)
                dst[r * ds + c] = src[r + c * ss];
    }
    for (int64_t r = r0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            dst[r * ds + c] = src[r + c * ss];
}

static void pm_gather(int64_t rows, int64_t cols, const float *src, int64_t ss_r, int64_t ss_c,
                      float *dst, int64_t ds)
{
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            dst[r * ds + c] = src[r * ss_r + c * ss_c];
}

enum { PM_RUNS, PM_TRANSPOSE, PM_GATHER };

/* The kernel over dims [first, n) of l from src to dst (the last dim dense in dst). */
static void pm_inner(const pm_layout *l, int kind, int first, const float *src, float *dst)
{
    int last = l->n - 1;
    if (first < last - 1) { /* three dims: the outermost looped here */
        for (int64_t a = 0; a < l->shape[first]; ++a)
            pm_inner(l, kind, first + 1, src + a * l->ss[first], dst + a * l->ds[first]);
        return;
    }
    int64_t rows = first < last ? l->shape[first] : 1;
    int64_t ss_r = first < last ? l->ss[first] : 0, ds_r = first < last ? l->ds[first] : 0;
    if (kind == PM_RUNS)
        pm_runs(rows, l->shape[last], src, ss_r, dst, ds_r);
    else if (kind == PM_TRANSPOSE)
        pm_transpose(rows, l->shape[last], src, l->ss[last], dst, ds_r);
    else
        pm_gather(rows, l->shape[last], src, ss_r, l->ss[last], dst, ds_r);
}

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

int lgk_permute_copy(int ndim, const int64_t *shape, const float *src, int64_t src_len,
                     const int64_t *src_strides, float *dst, int64_t dst_len)
{
    int64_t count, extent;
    LGK_CHECK(ndim >= 0 && ndim <= LGK_MAX_NDIM, LGK_ERR_ARG);
    LGK_CHECK(ndim == 0 || (shape != NULL && src_strides != NULL), LGK_ERR_NULL);
    LGK_TRY(lgk_checked_count(ndim, shape, &count));
    LGK_CHECK(count <= dst_len, LGK_ERR_SHAPE);
    if (count == 0)
        return LGK_OK;
    LGK_TRY(lgk_view_extent(ndim, shape, src_strides, &extent));
    LGK_CHECK(extent <= src_len, LGK_ERR_SHAPE);
    LGK_CHECK(src != NULL && dst != NULL, LGK_ERR_NULL);
    pm_layout l;
    pm_simplify(ndim, shape, src_strides, &l);
    if (l.n == 0) {
        dst[0] = src[0];
        return LGK_OK;
    }
    int last = l.n - 1, kind = PM_RUNS, p = -1;
    if (l.ss[last] != 1) {
        for (int d = 0; d < last; ++d)
            if (l.ss[d] == 1)
                p = d;
        kind = p >= 0 ? PM_TRANSPOSE : PM_GATHER;
        if (p >= 0)
            pm_move_before_last(&l, p);
    }
    /* the kernel takes the last two dims, three where the rows are short */
    int inner = LGK_MIN(l.n, kind == PM_RUNS && l.shape[last] < 64 ? 3 : 2);
    int outer = l.n - inner;
    int64_t idx[LGK_MAX_NDIM] = {0}, so = 0, dof = 0;
    for (;;) {
        pm_inner(&l, kind, outer, src + so, dst + dof);
        int d = outer - 1;
        for (; d >= 0; --d) { /* odometer over the outer dims */
            so += l.ss[d], dof += l.ds[d];
            if (++idx[d] < l.shape[d])
                break;
            so -= l.ss[d] * l.shape[d], dof -= l.ds[d] * l.shape[d];
            idx[d] = 0;
        }
        if (d < 0)
            return LGK_OK;
    }
}
