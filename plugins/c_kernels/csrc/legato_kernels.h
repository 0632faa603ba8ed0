/*
 * legato_kernels.h - float32 CPU kernels of the legato `c_kernels` backend.
 *
 * Conventions shared by every function:
 *   - The return value is an lgk_status: LGK_OK (0) or one of the error codes
 *     below. Every size, stride and buffer length is checked before any memory
 *     is touched, so a bad call fails cleanly instead of corrupting memory.
 *   - Sizes, strides and offsets are int64_t counted in ELEMENTS (not bytes).
 *     Strides must be >= 0; a stride of 0 broadcasts an input along that dim.
 *   - Kernels that take strided or offset views (GEMM, conv, pool, binary,
 *     strided copy) also take the number of floats the caller owns (`*_len`)
 *     and refuse to read or write past it. Kernels on dense arrays take only
 *     the dims; their buffers must hold the product of the dims.
 *   - Outputs are dense row-major (C order) unless a leading dimension is given.
 *     Outputs must not overlap inputs, except where a function says otherwise.
 *   - Functions are reentrant and thread-safe: the only shared state is the
 *     one-time CPU feature detection of the GEMM, the lgk_gemm_force_isa()
 *     test hook, a mutex-protected pool of reusable scratch buffers and the
 *     persistent worker threads that calls with nthreads > 1 share (one call
 *     at a time; a concurrent call runs on its caller's thread alone).
 */
#ifndef LEGATO_KERNELS_H
#define LEGATO_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes ------------------------------------------------------ */
enum lgk_status {
    LGK_OK = 0,
    LGK_ERR_NULL = 1,     /* a required pointer is NULL */
    LGK_ERR_SHAPE = 2,    /* a size/stride is negative, zero where not allowed,
                             inconsistent, or exceeds a buffer length */
    LGK_ERR_OVERFLOW = 3, /* a size product overflows int64/size_t */
    LGK_ERR_ARG = 4,      /* an enum/attribute value is out of range */
    LGK_ERR_NOMEM = 5,    /* scratch allocation failed */
    LGK_ERR_THREAD = 6    /* reserved: thread failures fall back to the caller */
};

/* Static English description of a status code (never NULL). */
const char *lgk_strerror(int status);

/* Highest rank accepted by the strided (broadcasting / permuting) kernels. */
#define LGK_MAX_NDIM 8
/* Highest thread count accepted; larger requests are clamped. */
#define LGK_MAX_THREADS 64

/* ---- GEMM ---------------------------------------------------------------- */
enum lgk_activation {
    LGK_ACT_NONE = 0,
    LGK_ACT_RELU = 1,
    LGK_ACT_GELU = 2,      /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
    LGK_ACT_GELU_TANH = 3, /* tanh approximation */
    LGK_ACT_SILU = 4,
    LGK_ACT_RELU6 = 5,     /* clip(x, 0, 6) */
    LGK_ACT_LAST = LGK_ACT_RELU6
};
/* The legato op (or "op:attribute=value" variant, as for lgk_unary_name) an
 * activation code applies; NULL for LGK_ACT_NONE and codes out of range. */
const char *lgk_activation_name(int activation);

enum lgk_bias_mode {
    LGK_BIAS_NONE = 0,
    LGK_BIAS_COL = 1, /* bias[n] added to column n (nn.linear); length N */
    LGK_BIAS_ROW = 2  /* bias[m] added to row m (conv output channels); length M */
};

/* Micro-kernel families; LGK_ISA_AUTO picks the best the CPU supports. */
enum lgk_isa { LGK_ISA_AUTO = 0, LGK_ISA_GENERIC = 1, LGK_ISA_AVX2 = 2, LGK_ISA_AVX512 = 3 };

/*
 * C[m, n] = act(sum_k A[m, k] * B[k, n] + bias)   for m < M, n < N.
 * A[m, k] is a[m * rs_a + k * cs_a], B[k, n] is b[k * rs_b + n * cs_b]: any
 * stride pair works, so a transposed operand (e.g. nn.linear's weight.T) is
 * read in place. C[m, n] is c[m * ldc + n], ldc >= N. M, N, K may be 0 (K == 0
 * gives act(bias)). nthreads >= 1; small problems run on one thread.
 */
int lgk_sgemm(int64_t M, int64_t N, int64_t K,
              const float *a, int64_t a_len, int64_t rs_a, int64_t cs_a,
              const float *b, int64_t b_len, int64_t rs_b, int64_t cs_b,
              float *c, int64_t c_len, int64_t ldc,
              const float *bias, int64_t bias_len, int bias_mode,
              int activation, int nthreads);

/*
 * `batch` independent GEMMs of the same shape: matrix i of A starts at
 * a + a_offsets[i], of B at b + b_offsets[i] (offsets let the caller express
 * any numpy batch broadcasting), of C at c + i * c_batch_stride. The epilogue
 * (bias, activation) is shared by all batches.
 */
int lgk_sgemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K,
                      const float *a, int64_t a_len, const int64_t *a_offsets,
                      int64_t rs_a, int64_t cs_a,
                      const float *b, int64_t b_len, const int64_t *b_offsets,
                      int64_t rs_b, int64_t cs_b,
                      float *c, int64_t c_len, int64_t c_batch_stride, int64_t ldc,
                      const float *bias, int64_t bias_len, int bias_mode,
                      int activation, int nthreads);

/*
 * Prepacked B, for a right operand reused by many GEMMs (a model weight):
 * lgk_sgemm_pack_b stores B (K x N, B[k, n] = b[k * rs_b + n * cs_b], so both a
 * (K, N) row-major matrix and a transposed (N, K) nn.linear weight work) in the
 * panel layout of the micro-kernel family in use, and lgk_sgemm_prepacked then
 * computes what lgk_sgemm would without repacking B on every call.
 *
 * The packed buffer starts with a 64-byte header recording the family, its
 * blocking and K, N; it must be 64-byte aligned (LGK_ERR_ARG otherwise).
 * A buffer packed for other K, N or under another family (lgk_gemm_force_isa)
 * is rejected with LGK_ERR_ARG; repack it then. The layout is private and may
 * change between library versions: never store packed buffers.
 */
/* Floats a packed K x N operand needs under the current family, header
 * included; a negated status (< 0) for negative or overflowing sizes. */
int64_t lgk_sgemm_packed_b_size(int64_t K, int64_t N);

int lgk_sgemm_pack_b(int64_t K, int64_t N, const float *b, int64_t b_len,
                     int64_t rs_b, int64_t cs_b, float *packed, int64_t packed_len);

/* lgk_sgemm with B read from a buffer filled by lgk_sgemm_pack_b(K, N, ...). */
int lgk_sgemm_prepacked(int64_t M, int64_t N, int64_t K,
                        const float *a, int64_t a_len, int64_t rs_a, int64_t cs_a,
                        const float *packed_b, int64_t packed_len,
                        float *c, int64_t c_len, int64_t ldc,
                        const float *bias, int64_t bias_len, int bias_mode,
                        int activation, int nthreads);

/* Prepacked A (M x K, A[m, k] = a[m * rs_a + k * cs_a]): a constant left operand,
 * e.g. conv weights (o, c * kh * kw) for lgk_conv2d_nchw_packed_a. Same header and
 * alignment rules as packed B; a packed B buffer is not a packed A one. */
int64_t lgk_sgemm_packed_a_size(int64_t M, int64_t K);
int lgk_sgemm_pack_a(int64_t M, int64_t K, const float *a, int64_t a_len,
                     int64_t rs_a, int64_t cs_a, float *packed, int64_t packed_len);

/* Frees the scratch buffers kept for reuse between calls (at most 8 shared
 * blocks and 4 per thread, each <= 4 MiB; GEMM packing uses ~2.3 MiB per
 * thread): the shared ones and the caller's now, another thread's when it next
 * runs a kernel. Optional: call it only while no kernel is running, e.g. to
 * release memory when idle. */
void lgk_free_scratch(void);

/* How long a pool worker keeps polling for its next task after finishing one, in
 * microseconds, before it sleeps (default 1000; 0 sleeps at once). Polling saves the
 * ~20 us a sleeping worker takes to wake inside a model, at the cost of that much idle
 * CPU after every parallel call. A negative value restores the default; LGK_ERR_ARG
 * above 1000000. */
int lgk_set_pool_spin_us(int64_t us);

/* Test hook: force a micro-kernel family (LGK_ISA_AUTO restores detection).
 * Returns LGK_ERR_ARG if the CPU cannot run it. Not thread-safe. */
int lgk_gemm_force_isa(int isa);
/* The family currently in use (an lgk_isa value other than AUTO). */
int lgk_gemm_isa(void);

/* ---- convolution and pooling (NCHW) -------------------------------------- */
typedef struct {
    int64_t n, c, h, w;      /* input N, C, H, W */
    int64_t o, kh, kw;       /* weight is (o, c / groups, kh, kw) */
    int64_t stride_h, stride_w;
    int64_t pad_top, pad_left, pad_bottom, pad_right;
    int64_t dilation_h, dilation_w;
    int64_t groups;
} lgk_conv2d_params;

/* Validates p and computes the output height/width (both >= 1). n, c and o may
 * be 0, and h or w too where padding leaves room for a window. */
int lgk_conv2d_out_shape(const lgk_conv2d_params *p, int64_t *oh, int64_t *ow);

/* y (n, o, oh, ow) = conv(x, w) + bias[o] (bias may be NULL, else length o),
 * followed by `activation`. Lowered to im2col + lgk_sgemm, depthwise convs
 * (groups == c) computed directly. With c == 0 every
 * output is activation(bias) (a sum over no taps). */
int lgk_conv2d_nchw(const lgk_conv2d_params *p,
                    const float *x, int64_t x_len,
                    const float *w, int64_t w_len,
                    const float *bias, int64_t bias_len,
                    float *y, int64_t y_len, int activation, int nthreads);

/* lgk_conv2d_nchw with groups == 1 and the weights (o, c, kh, kw) prepacked as
 * the GEMM right operand W^T (K = c * kh * kw, N = o): lgk_sgemm_pack_b(K, o,
 * w, len, 1, K, ...). Computed as im2col^T @ W^T (pixels x filters), so the
 * GEMM stays wide on small maps and the weights are streamed once. */
int lgk_conv2d_nchw_prepacked(const lgk_conv2d_params *p,
                              const float *x, int64_t x_len,
                              const float *packed_w, int64_t packed_len,
                              const float *bias, int64_t bias_len,
                              float *y, int64_t y_len, int activation, int nthreads);

/* lgk_conv2d_nchw_prepacked with the weights prepacked as the GEMM left operand
 * W (M = o, K = c * kh * kw): lgk_sgemm_pack_a(o, K, w, len, K, 1, ...). Computed
 * as W @ im2col (filters x pixels) straight into NCHW: the layout for maps with
 * more output pixels than a micro-kernel's width. */
int lgk_conv2d_nchw_packed_a(const lgk_conv2d_params *p,
                             const float *x, int64_t x_len,
                             const float *packed_w, int64_t packed_len,
                             const float *bias, int64_t bias_len,
                             float *y, int64_t y_len, int activation, int nthreads);

typedef struct {
    int64_t n, c, h, w;
    int64_t kh, kw;
    int64_t stride_h, stride_w;
    int64_t pad_top, pad_left, pad_bottom, pad_right;
    int64_t dilation_h, dilation_w;
    int ceil_mode;         /* round the output size up (the last window must
                              still start inside the input or left padding) */
    int count_include_pad; /* avg only: divide by the taps inside the padded
                              extent instead of the taps inside the input */
} lgk_pool2d_params;

int lgk_pool2d_out_shape(const lgk_pool2d_params *p, int64_t *oh, int64_t *ow);
/* Padded cells count as -inf; a window with no input cell gives -inf. Planes are
 * split over up to nthreads threads where there is enough work. */
int lgk_max_pool2d_nchw(const lgk_pool2d_params *p, const float *x, int64_t x_len,
                        float *y, int64_t y_len, int nthreads);
/* A window with a zero divisor gives NaN (ONNX reference behaviour). */
int lgk_avg_pool2d_nchw(const lgk_pool2d_params *p, const float *x, int64_t x_len,
                        float *y, int64_t y_len, int nthreads);

/* ---- elementwise ----------------------------------------------------------- */
/*
 * The unary and binary ops are listed by name: lgk_unary_name(op) for op in
 * [0, lgk_unary_count()) is the legato op the code computes ("exp", "nn.relu"),
 * or "op:attribute=value" for the variant of an op with that attribute value
 * ("nn.gelu:approximate=tanh"). Codes are positions in that list and may change
 * between library versions: look them up by name, never hard-wire them.
 * The *_name functions return NULL for a code out of range.
 */
int lgk_unary_count(void);
const char *lgk_unary_name(int op);
int lgk_binary_count(void);
const char *lgk_binary_name(int op);

/* y[i] = op(x[i]) for i < n; y may equal x (in place) but not partially overlap. */
int lgk_unary(int op, int64_t n, const float *x, float *y);

/*
 * out[idx] = op(a[idx . a_strides], b[idx . b_strides]) over the index space
 * `shape` (ndim <= LGK_MAX_NDIM, ndim == 0 is a scalar); out is dense in
 * `shape`. Broadcast dims have stride 0. out may equal a or b when that input
 * is dense with the output's shape (in-place update).
 */
int lgk_binary(int op, int ndim, const int64_t *shape,
               const float *a, int64_t a_len, const int64_t *a_strides,
               const float *b, int64_t b_len, const int64_t *b_strides,
               float *out, int64_t out_len);

/* dst (dense in `shape`) = src viewed through `src_strides`; with permuted
 * strides this is permute_dims. Blocked when the innermost source stride != 1. */
int lgk_strided_copy(int ndim, const int64_t *shape,
                     const float *src, int64_t src_len, const int64_t *src_strides,
                     float *dst, int64_t dst_len);

/* ---- normalisation and reductions ---------------------------------------- */
/* x is viewed as (outer, n, inner) dense; the op runs along n for each of the
 * outer * inner lines. y has the same layout and may equal x. */
int lgk_softmax(int64_t outer, int64_t n, int64_t inner, const float *x, float *y);
int lgk_log_softmax(int64_t outer, int64_t n, int64_t inner, const float *x, float *y);

/* Over each of `rows` contiguous rows of n floats: y = (x - mean) / sqrt(var +
 * eps) * gamma + beta (population variance). gamma/beta have length n or are
 * NULL (1 and 0). y may equal x. */
int lgk_layer_norm(int64_t rows, int64_t n, const float *x,
                   const float *gamma, const float *beta, float epsilon, float *y);
/* y = x / sqrt(mean(x^2) + eps) * gamma; gamma may be NULL. */
int lgk_rms_norm(int64_t rows, int64_t n, const float *x,
                 const float *gamma, float epsilon, float *y);

enum lgk_reduce_op { LGK_REDUCE_SUM = 0, LGK_REDUCE_MEAN, LGK_REDUCE_MAX, LGK_REDUCE_MIN };

/* x dense (outer, r, inner) -> y dense (outer, inner), reducing over r.
 * max/min need r >= 1 (like numpy); mean over r == 0 gives NaN. */
int lgk_reduce(int op, int64_t outer, int64_t r, int64_t inner, const float *x, float *y);

/* ---- permute ---------------------------------------------------------------- */
/* lgk_strided_copy's contract (dst dense in `shape` = src viewed through
 * src_strides), walked by blocks: the innermost dims as whole runs, 16x16 tiles
 * transposed in registers where another dim is the source's contiguous one. */
int lgk_permute_copy(int ndim, const int64_t *shape,
                     const float *src, int64_t src_len, const int64_t *src_strides,
                     float *dst, int64_t dst_len);

/* ---- programs --------------------------------------------------------------- */
/*
 * A program is a sequence of calls of the functions above, run by one call: each
 * call is its code (a position in lgk_program_call_name's list) followed by its
 * arguments as 64-bit words in the order of the function's prototype (integers as
 * they are, pointers as addresses, a float as its bits in the low 32). Runs the calls
 * in order and stops at the first non-zero status, which it returns, storing the
 * failing call's index in *failed. lgk_program_call_name(code) is the function's name
 * ("lgk_binary"), lgk_program_call_signature(code) its argument words, one letter each
 * (i: integer, p: pointer, f: float); both give NULL for codes out of range.
 */
int lgk_program_call_count(void);
const char *lgk_program_call_name(int code);
const char *lgk_program_call_signature(int code);
int lgk_run_program(int64_t count, const int64_t *program, int64_t program_len,
                    int64_t *failed);

#ifdef __cplusplus
}
#endif
#endif /* LEGATO_KERNELS_H */
