/* lgk_qgemm.h - the int8 GEMM's internal interface (qgemm.c), shared with the quantized
 * convolutions (qconv.c): a problem with its quantization parameters expanded to one
 * value per row / column, and the requantizing store of one accumulator row. */
#ifndef LGK_QGEMM_H
#define LGK_QGEMM_H

#include "lgk_internal.h"

/* The epilogue of a quantized product, every parameter expanded: za[m] and zb[n] are
 * the zero points of the packed operands (A packed as uint8, B as int8: an int8 A's
 * zero point + 128, a uint8 B's - 128), mult and bias one value per row (per_row) or
 * per column (bias may be NULL; mult is unused for INT32 output). */
typedef struct {
    const int32_t *za, *zb;
    const float *mult;
    const int32_t *bias;
    int per_row, out_type, relu;
    int32_t out_zp;
} lgk_qepilogue;

typedef struct {
    int64_t M, N, K;
    const uint8_t *a; /* A[m, k] = a[m * rs_a + k * cs_a] unless packed_a */
    int64_t rs_a, cs_a;
    const uint8_t *b;
    int64_t rs_b, cs_b;
    uint8_t a_flip, b_flip; /* xor applied to the bytes when packing: 0x80 or 0 */
    const uint8_t *packed_a; /* MR-row slivers (past the header) or NULL */
    const int32_t *a_sums;   /* row sums of the packed A, with packed_a */
    const uint8_t *packed_b;
    const int32_t *b_sums;
    lgk_qepilogue ep;
    void *c; /* of ep.out_type */
    int64_t ldc;
} lgk_qproblem;

/* Runs a checked problem on up to nthreads threads. */
int lgk_qgemm_run(const lgk_qproblem *p, int nthreads);

/* Expanded parameters of lgk_qparams for an M x N product: one scratch block holding
 * za[M], zb[N], mult and bias; release with lgk_scratch_release(&e->scratch). */
typedef struct {
    lgk_qepilogue ep;
    uint8_t a_flip, b_flip;
    lgk_scratch scratch;
} lgk_qexpanded;

/* Checks q for an M x N product (zero points 1 or M / 1 or N values, multiplier and
 * bias 1 or R, R = M if q->per_row else N, within their ranges) without expanding. */
int lgk_qparams_check(const lgk_qparams *q, int64_t M, int64_t N);
int lgk_qparams_expand(const lgk_qparams *q, int64_t M, int64_t N, lgk_qexpanded *e);

/* dst[0:n] = the requantized (or, for INT32 output, plain) values of acc[0:n], whose
 * multipliers are mult[j * mult_step] (mult_step 0: one for all); dst of ep->out_type. */
void lgk_qstore(const lgk_qepilogue *ep, const int32_t *acc, int64_t n, const float *mult,
                int64_t mult_step, void *dst);

/* The selected family's micro-kernel: the raw sums (no zero points) of `rows` rows of an
 * A sliver times a B sliver, k4 groups of 4 k, as packed (lgk_qgemm_pack_a / _b); tile
 * holds MR x NR int32, row stride NR (8 x 48 for AVX-512 VNNI). */
void lgk_qgemm_tile(int rows, int64_t k4, const uint8_t *a, const int8_t *b, int32_t *tile);

/* The packed-A check of lgk_qconv2d_nchw_packed: header of (M, K, a_type) under the
 * family in use; returns the panels and row sums. */
int lgk_qgemm_packed_a_view(int64_t M, int64_t K, int a_type, const void *packed,
                            int64_t packed_len, const uint8_t **panels, const int32_t **sums);

#endif /* LGK_QGEMM_H */
