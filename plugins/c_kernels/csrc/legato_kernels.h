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
 * softmax(A @ B) along the rows of each C matrix (attention's scores and their softmax
 * over the keys), arguments as lgk_sgemm_batched's: C's rows are finished a strip at a
 * time and their softmax applied while they are in cache, instead of C written to memory
 * and read again. Each element is the sum lgk_sgemm_batched computes and each row's
 * softmax lgk_softmax's, bit for bit.
 */
int lgk_sgemm_batched_softmax(int64_t batch, int64_t M, int64_t N, int64_t K,
                              const float *a, int64_t a_len, const int64_t *a_offsets,
                              int64_t rs_a, int64_t cs_a,
                              const float *b, int64_t b_len, const int64_t *b_offsets,
                              int64_t rs_b, int64_t cs_b,
                              float *c, int64_t c_len, int64_t c_batch_stride, int64_t ldc,
                              int nthreads);

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

/* lgk_conv2d_nchw with y channels last, (n, oh, ow, o): the conv and a permute to NHWC
 * after it in one call. Depthwise convs (groups == c) that go by channel bands write
 * their pixel-major results straight out (those bands transposed them into planes);
 * every other conv is computed into scratch and copied out transposed. */
int lgk_conv2d_nchw_to_nhwc(const lgk_conv2d_params *p,
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

/* The two above with a residual res (n, o, oh, ow) added before the activation, as a
 * fused epilogue: y = act(conv(x) + bias + res), each sum rounded as (conv + bias) + res.
 * res apart from y: added in one pass over y after the GEMM (not one per op); res == y
 * (in place, x apart from it): added as the GEMM writes its tiles over it. */
int lgk_conv2d_nchw_prepacked_residual(const lgk_conv2d_params *p, const float *x,
                                       int64_t x_len, const float *packed_w,
                                       int64_t packed_len, const float *bias, int64_t bias_len,
                                       const float *res, int64_t res_len, float *y,
                                       int64_t y_len, int activation, int nthreads);
int lgk_conv2d_nchw_packed_a_residual(const lgk_conv2d_params *p, const float *x,
                                      int64_t x_len, const float *packed_w, int64_t packed_len,
                                      const float *bias, int64_t bias_len, const float *res,
                                      int64_t res_len, float *y, int64_t y_len, int activation,
                                      int nthreads);

/* Direct conv through channel-blocked data (conv_direct.c), groups == 1, without im2col:
 * for convs with kernels larger than 1x1 on maps of more than a few pixels. Needs
 * AVX-512 (lgk_conv2d_direct_available() == 1); the weights (o, c, kh, kw) are packed once
 * by lgk_conv2d_direct_pack into a 64-byte aligned buffer of
 * lgk_conv2d_direct_packed_size(o, c, kh, kw) floats (negative: -status). */
int lgk_conv2d_direct_available(void);
int64_t lgk_conv2d_direct_packed_size(int64_t o, int64_t c, int64_t kh, int64_t kw);
int lgk_conv2d_direct_pack(int64_t o, int64_t c, int64_t kh, int64_t kw, const float *w,
                           int64_t w_len, float *packed, int64_t packed_len);
int lgk_conv2d_direct(const lgk_conv2d_params *p, const float *x, int64_t x_len,
                      const float *packed_w, int64_t packed_len, const float *bias,
                      int64_t bias_len, float *y, int64_t y_len, int activation, int nthreads);

/* 3x3 stride-1 conv (groups 1, dilation 1) by Winograd's F(2x2, 3x3) (conv_winograd.c):
 * 16 GEMMs of (o x c) @ (c x tiles), one per position of a 4x4 transform, for 16/36 of
 * the direct conv's multiply-adds; each output within about twice the direct sum's
 * rounding. The weights (o, c, 3, 3) are transformed and packed once by
 * lgk_conv2d_winograd_pack into a 64-byte aligned buffer of
 * lgk_conv2d_winograd_packed_size(o, c) floats (negative: -status), for the GEMM family
 * in use (another family's buffer is rejected with LGK_ERR_ARG: pack again). */
int64_t lgk_conv2d_winograd_packed_size(int64_t o, int64_t c);
int lgk_conv2d_winograd_pack(int64_t o, int64_t c, const float *w, int64_t w_len,
                             float *packed, int64_t packed_len);
int lgk_conv2d_winograd(const lgk_conv2d_params *p, const float *x, int64_t x_len,
                        const float *packed_w, int64_t packed_len, const float *bias,
                        int64_t bias_len, float *y, int64_t y_len, int activation, int nthreads);

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

/* y[i] = op(x[i]) for i < n, on up to nthreads threads (at least 16 Ki elements each;
 * the result the same on any count); y may equal x (in place) but not partially overlap. */
int lgk_unary(int op, int64_t n, const float *x, float *y, int nthreads);

/*
 * out[idx] = op(a[idx . a_strides], b[idx . b_strides]) over the index space
 * `shape` (ndim <= LGK_MAX_NDIM, ndim == 0 is a scalar); out is dense in
 * `shape`. Broadcast dims have stride 0. out may equal a or b when that input
 * is dense with the output's shape (in-place update). Runs on up to nthreads threads as
 * lgk_unary does.
 */
int lgk_binary(int op, int ndim, const int64_t *shape,
               const float *a, int64_t a_len, const int64_t *a_strides,
               const float *b, int64_t b_len, const int64_t *b_strides,
               float *out, int64_t out_len, int nthreads);

/* dst (dense in `shape`) = src viewed through `src_strides`; with permuted
 * strides this is permute_dims. Blocked when the innermost source stride != 1. */
int lgk_strided_copy(int ndim, const int64_t *shape,
                     const float *src, int64_t src_len, const int64_t *src_strides,
                     float *dst, int64_t dst_len);

/* ---- normalisation and reductions ---------------------------------------- */
/* x is viewed as (outer, n, inner) dense; the op runs along n for each of the
 * outer * inner lines, on up to nthreads threads (each line's result the same on
 * any count). y has the same layout and may equal x. */
int lgk_softmax(int64_t outer, int64_t n, int64_t inner, const float *x, float *y, int nthreads);
int lgk_log_softmax(int64_t outer, int64_t n, int64_t inner, const float *x, float *y,
                    int nthreads);

/* Over each of `rows` contiguous rows of n floats: y = (x - mean) / sqrt(var +
 * eps) * gamma + beta (population variance). gamma/beta have length n or are
 * NULL (1 and 0). y may equal x. Rows split over up to nthreads threads as softmax
 * lines are. */
int lgk_layer_norm(int64_t rows, int64_t n, const float *x,
                   const float *gamma, const float *beta, float epsilon, float *y, int nthreads);
/* y = x / sqrt(mean(x^2) + eps) * gamma; gamma may be NULL. */
int lgk_rms_norm(int64_t rows, int64_t n, const float *x,
                 const float *gamma, float epsilon, float *y, int nthreads);

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
/* The same for elements of elem_size bytes (1, 2, 4 or 8, else LGK_ERR_ARG): any dtype
 * (int8/uint8/bool, int16, int32, int64 ...); lengths and strides count elements. */
int lgk_permute_copy_elems(int elem_size, int ndim, const int64_t *shape,
                           const void *src, int64_t src_len, const int64_t *src_strides,
                           void *dst, int64_t dst_len);
/* The two above on up to nthreads threads (slabs of the copy's outermost dim; copies
 * under 256 KiB stay on the calling thread); the same result at any thread count. */
int lgk_permute_copy_threads(int ndim, const int64_t *shape,
                             const float *src, int64_t src_len, const int64_t *src_strides,
                             float *dst, int64_t dst_len, int nthreads);
int lgk_permute_copy_elems_threads(int elem_size, int ndim, const int64_t *shape,
                                   const void *src, int64_t src_len,
                                   const int64_t *src_strides, void *dst, int64_t dst_len,
                                   int nthreads);

/* ---- int8 GEMM and convolution (qgemm.c, qconv.c) ---------------------------------
 * Quantized operands are uint8 or int8 bytes; products accumulate in int32 on
 * zero-point-shifted values, acc = sum_k (A[m, k] - a_zp) (B[k, n] - b_zp), in
 * wrapping (mod 2^32) int32 arithmetic, as int32 accumulators and numpy's int32 matmul
 * do (no wrap can occur for K <= 33025 with zero points inside the operand's type).
 * The output is either that accumulator plus the bias (LGK_QTYPE_INT32), or
 * requantized as onnxruntime's CPU kernels do: y = saturate(round_half_even(
 * float32(acc + bias) * multiplier) + out_zero_point), the rounding that of the
 * current floating-point mode (round to nearest even unless the caller changed it);
 * relu clamps below at out_zero_point. Lengths (*_len) count elements of the
 * operand's type (bytes for uint8/int8). */
enum lgk_qtype { LGK_QTYPE_UINT8 = 0, LGK_QTYPE_INT8 = 1, LGK_QTYPE_INT32 = 2 };

/* Micro-kernel families of the int8 GEMM; LGK_QISA_AUTO picks the best the CPU has. */
enum lgk_qisa {
    LGK_QISA_AUTO = 0,
    LGK_QISA_GENERIC = 1,
    LGK_QISA_AVX2 = 2,        /* int16 products (vpmaddwd): no saturation */
    LGK_QISA_AVX512_VNNI = 3  /* vpdpbusd */
};

typedef struct {
    int a_type, b_type;          /* LGK_QTYPE_UINT8 or LGK_QTYPE_INT8 */
    const int32_t *a_zero_point; /* a_zero_point_len values: 1, or M (one per row of A) */
    int64_t a_zero_point_len;
    const int32_t *b_zero_point; /* 1, or N (one per column of B) */
    int64_t b_zero_point_len;
    int out_type;                /* an lgk_qtype */
    int per_row;                 /* multiplier and bias run along M (rows) instead of N */
    const float *multiplier;     /* 1 or M/N values; unused (may be NULL) for INT32 output */
    int64_t multiplier_len;
    int32_t out_zero_point;      /* within out_type's range; 0 for INT32 output */
    const int32_t *bias;         /* NULL, or M/N values added to the accumulator */
    int64_t bias_len;
    int relu;                    /* clamp below at out_zero_point (requantized output only) */
} lgk_qparams;

/* C (M x N, row stride ldc, of q->out_type) from A[m, k] = a[m * rs_a + k * cs_a] and
 * B[k, n] = b[k * rs_b + n * cs_b] (bytes of q->a_type, q->b_type). Zero points must lie
 * in their operand type's range. */
int lgk_qgemm(int64_t M, int64_t N, int64_t K,
              const void *a, int64_t a_len, int64_t rs_a, int64_t cs_a,
              const void *b, int64_t b_len, int64_t rs_b, int64_t cs_b,
              void *c, int64_t c_len, int64_t ldc, const lgk_qparams *q, int nthreads);
/* `batch` products as lgk_qgemm's, matrix i of a, b and c starting at element i * a_bs,
 * i * b_bs, i * c_bs (strides >= 0; 0 repeats one operand; the results must not overlap),
 * with one set of quantization parameters. */
int lgk_qgemm_batched(int64_t batch, int64_t M, int64_t N, int64_t K,
                      const void *a, int64_t a_len, int64_t a_bs, int64_t rs_a, int64_t cs_a,
                      const void *b, int64_t b_len, int64_t b_bs, int64_t rs_b, int64_t cs_b,
                      void *c, int64_t c_len, int64_t c_bs, int64_t ldc, const lgk_qparams *q,
                      int nthreads);

/* Prepacked operands (constant weights): bytes of the packed buffer (64-byte aligned,
 * header included; a negated status for bad sizes), the packing, and the GEMM with B
 * (or A) read from the packed buffer. The header records the family, the operand's
 * type, K and N (M); a buffer packed otherwise is refused with LGK_ERR_ARG. */
int64_t lgk_qgemm_packed_b_size(int64_t K, int64_t N);
int lgk_qgemm_pack_b(int64_t K, int64_t N, int b_type, const void *b, int64_t b_len,
                     int64_t rs_b, int64_t cs_b, void *packed, int64_t packed_len);
int lgk_qgemm_prepacked(int64_t M, int64_t N, int64_t K,
                        const void *a, int64_t a_len, int64_t rs_a, int64_t cs_a,
                        const void *packed_b, int64_t packed_len,
                        void *c, int64_t c_len, int64_t ldc, const lgk_qparams *q,
                        int nthreads);
int64_t lgk_qgemm_packed_a_size(int64_t M, int64_t K);
int lgk_qgemm_pack_a(int64_t M, int64_t K, int a_type, const void *a, int64_t a_len,
                     int64_t rs_a, int64_t cs_a, void *packed, int64_t packed_len);

/* Test hook: force a family (LGK_QISA_AUTO restores detection); LGK_ERR_ARG if the CPU
 * cannot run it. Not thread-safe. */
int lgk_qgemm_force_isa(int isa);
int lgk_qgemm_isa(void);

/* Quantized NCHW conv2d (ONNX QLinearConv / ConvInteger): x (n, c, h, w) of q->b_type
 * with its one zero point q->b_zero_point; w (o, c / groups, kh, kw) of q->a_type with
 * 1 or o zero points; multiplier and bias 1/o values per output channel (q->per_row is
 * ignored); y (n, o, oh, ow) of q->out_type. Padding reads as the data zero point.
 * Depthwise convs (groups == c == o) are computed directly, others as W @ im2col. */
int lgk_qconv2d_nchw(const lgk_conv2d_params *p, const void *x, int64_t x_len,
                     const void *w, int64_t w_len, void *y, int64_t y_len,
                     const lgk_qparams *q, int nthreads);
/* The same with groups == 1 and w packed by lgk_qgemm_pack_a(o, c * kh * kw, ...). */
int lgk_qconv2d_nchw_packed(const lgk_conv2d_params *p, const void *x, int64_t x_len,
                            const void *packed_w, int64_t packed_len, void *y,
                            int64_t y_len, const lgk_qparams *q, int nthreads);

/* Max pooling (as lgk_max_pool2d_nchw) of NCHW bytes of `type` (LGK_QTYPE_UINT8 or
 * LGK_QTYPE_INT8; x and y of one type), in qpool.c: padded cells count as the type's
 * lowest value. */
int lgk_qmax_pool2d_nchw(const lgk_pool2d_params *p, int type, const void *x, int64_t x_len,
                         void *y, int64_t y_len, int nthreads);

/* ---- quantized elementwise (qelementwise.c) ---------------------------------------
 * qnn.add as onnxruntime's QLinearAdd computes it, on rows x span values of `type`
 * (LGK_QTYPE_UINT8 or LGK_QTYPE_INT8; a, b and y of one type):
 *   y = saturate(round_half_even(fmaf(a, ratio_a, fmaf(b, ratio_b, addend[r])))),
 * one fused multiply-add each (one rounding), r the element's row, addend_len 1 (one
 * value for all rows: onnxruntime's `fixed` = out_zp - (ratio_a a_zp + ratio_b b_zp)) or
 * rows. With a == NULL, y = saturate(round_half_even(fmaf(b, ratio_b, addend[r]))): an
 * operand of one value per row, folded by the caller into addend[r] = fixed +
 * a[r] * ratio_a (rounded at each step). Ratios and addends must be finite. */
int lgk_qadd(int type, int64_t rows, int64_t span, const void *a, int64_t a_len,
             float ratio_a, const void *b, int64_t b_len, float ratio_b, const float *addend,
             int64_t addend_len, void *y, int64_t y_len, int nthreads);
/* The same with row strides a_rs and b_rs of span (a row per row of y) or 0 (one row read
 * for every row: an operand broadcast along the rows); y may be a or b itself (rs span). */
int lgk_qadd_strided(int type, int64_t rows, int64_t span, const void *a, int64_t a_len,
                     int64_t a_rs, float ratio_a, const void *b, int64_t b_len, int64_t b_rs,
                     float ratio_b, const float *addend, int64_t addend_len, void *y,
                     int64_t y_len, int nthreads);

/* ---- quantized rescaling kernels (qrescale.c); types LGK_QTYPE_UINT8 / INT8 ---------
 * qnn.multiply (com.microsoft QLinearMul) on rows x span values of `type` (a, b, y one type):
 *   y = saturate(round_half_even(float((a - a_zp) * (b - b_zp)) * multiplier) + y_zp),
 * element (r, j) of a at a[r * a_rs + j * a_cs], a_cs 0 (one value per row) or 1, the
 * same for b; y dense and may be a or b itself. The multiplier must be finite. */
int lgk_qmul(int type, int64_t rows, int64_t span, const void *a, int64_t a_len, int64_t a_rs,
             int64_t a_cs, int32_t a_zero_point, const void *b, int64_t b_len, int64_t b_rs,
             int64_t b_cs, int32_t b_zero_point, float multiplier, int32_t y_zero_point,
             void *y, int64_t y_len, int nthreads);
/* qnn.softmax (com.microsoft QLinearSoftmax) over the last axis of rows x count values:
 * e = table[255 + x - max(row)] (256 float32s), sum = float32(numpy's pairwise float64 sum
 * of e), y = saturate(round_half_even(e * ((1 / sum) * quotient) + y_zp)) in float32,
 * each step rounded (quotient: floor(1 / out_scale)); a NaN gives 0. */
int lgk_qsoftmax(int type, int64_t rows, int64_t count, const void *x, int64_t x_len,
                 const float *table, float quotient, int32_t y_zero_point, void *y,
                 int64_t y_len, int nthreads);

/* ONNX QuantizeLinear / DequantizeLinear on float32 x (outer, channels, inner), the
 * scale and zero point one value (params_len 1) or one per channel:
 *   quantize:   y = saturate(round_half_even(x / scale) + zero_point), of out_type
 *               (a NaN gives the low end of the range, as onnxruntime's MLAS); scales must
 *               be finite and nonzero (LGK_ERR_ARG)
 *   dequantize: y = float(x - zero_point) * scale, x of in_type
 * Types are LGK_QTYPE_UINT8 or LGK_QTYPE_INT8, zero points in the type's range. */
int lgk_quantize(int out_type, int64_t outer, int64_t channels, int64_t inner,
                 const float *x, int64_t x_len, const float *scale, const int32_t *zero_point,
                 int64_t params_len, void *y, int64_t y_len, int nthreads);
int lgk_dequantize(int in_type, int64_t outer, int64_t channels, int64_t inner,
                   const void *x, int64_t x_len, const float *scale,
                   const int32_t *zero_point, int64_t params_len, float *y, int64_t y_len,
                   int nthreads);

/* cast of float32 x (rows x inner) to out_type (LGK_QTYPE_UINT8 or LGK_QTYPE_INT8) as the
 * cast op converts floats to integers: truncation toward zero, saturation, NaN to 0. */
int lgk_cast_f32_to_byte(int out_type, int64_t rows, int64_t inner, const float *x,
                         int64_t x_len, void *y, int64_t y_len, int nthreads);

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
