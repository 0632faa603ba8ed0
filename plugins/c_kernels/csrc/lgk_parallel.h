/* lgk_parallel.h - the thread pool beyond lgk_parallel_for (common.c) and a GEMM part
 * for callers that split GEMMs themselves (gemm.c). */
#ifndef LGK_PARALLEL_H
#define LGK_PARALLEL_H

#include "lgk_internal.h"

/* fn(ctx, begin, end) over the slices [s * per, min(n, (s + 1) * per)) of [0, n), each
 * claimed by whichever of up to `nthreads` threads (the caller one of them) is free
 * first: more slices than threads balance uneven work and threads the scheduler runs
 * late. Returns the first failure's status. */
int lgk_parallel_slices(int nthreads, int64_t n, int64_t per, lgk_range_fn fn, void *ctx);

/* A split of an M x N output (of `batch` matrices), each element a K-long sum, into a
 * grid of blocks that threads run whole: rows in steps of `rows` (a multiple of mr), the
 * last block of a column taking the rest of M; columns the same in steps of `cols`. */
typedef struct {
    int64_t rows, cols, grid_m, grid_n;
} lgk_grid;

typedef struct {
    int64_t batch, M, N, K;
    int mr, nr; /* block edges fall on multiples of these (micro-tiles, packed slivers) */
    /* what reading one element of A (B) for a block costs, in multiply-adds: more where
     * each block packs its part than where the operand is prepacked */
    double a_cost, b_cost;
    /* no block has fewer rows (columns) than this unless M (N) itself has */
    int64_t min_rows, min_cols;
} lgk_grid_problem;

/* The grid for `threads` threads whose busiest thread does the least work: the blocks'
 * multiply-adds (padded to whole micro-tiles) plus what each block reads, times the
 * blocks per thread. A block's rows and columns are both cut, as the bytes a thread
 * reads for its block grow with the block's perimeter and its work with its area. */
lgk_grid lgk_choose_grid(const lgk_grid_problem *q, int threads);
/* The range of block i of a grid over `extent` (grid_m blocks of `step`, the last to the
 * end). */
void lgk_grid_range(int64_t step, int64_t count, int64_t extent, int64_t i, int64_t *begin,
                    int64_t *end);

/* C[m0:m1, n0:n1] of lgk_sgemm_operands(M, N, K, ...) on the calling thread, for callers
 * that split a GEMM themselves: n0 must be a multiple of the layout's nr where B is
 * packed, m0 of mr where A is. */
int lgk_sgemm_block(int64_t M, int64_t N, int64_t K, lgk_operand a, lgk_operand b, float *c,
                    int64_t ldc, const float *bias, int bias_mode, int activation, int64_t m0,
                    int64_t m1, int64_t n0, int64_t n1);
/* The same onto the addend C holds: C = act(A @ B + bias + C), summed in that order. */
int lgk_sgemm_block_onto(int64_t M, int64_t N, int64_t K, lgk_operand a, lgk_operand b,
                         float *c, int64_t ldc, const float *bias, int bias_mode, int activation,
                         int64_t m0, int64_t m1, int64_t n0, int64_t n1);
/* All of lgk_sgemm_operands(M, N, K, ...) (onto: onto C's addend, as lgk_sgemm_block_onto)
 * on `threads` threads, the caller's count, split as the GEMM splits itself
 * (lgk_choose_grid). */
int lgk_sgemm_split(int64_t M, int64_t N, int64_t K, lgk_operand a, lgk_operand b, float *c,
                    int64_t ldc, const float *bias, int bias_mode, int activation, int onto,
                    int threads);

#endif /* LGK_PARALLEL_H */
