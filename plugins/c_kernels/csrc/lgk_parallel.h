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

/* C[m0:m1, n0:n1] of lgk_sgemm_operands(M, N, K, ...) on the calling thread, for callers
 * that split a GEMM themselves: n0 must be a multiple of the layout's nr where B is
 * packed, m0 of mr where A is. */
int lgk_sgemm_block(int64_t M, int64_t N, int64_t K, lgk_operand a, lgk_operand b, float *c,
                    int64_t ldc, const float *bias, int bias_mode, int activation, int64_t m0,
                    int64_t m1, int64_t n0, int64_t n1);

#endif /* LGK_PARALLEL_H */
