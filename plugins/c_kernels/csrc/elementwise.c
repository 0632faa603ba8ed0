/*
 * elementwise.c - unary and broadcasting binary ops, strided copy (permute).
 *
 * Each op family is one table (X-macro) expanded into tight loops, so adding an
 * op is one line and there is no per-element dispatch. The N-d drivers first
 * coalesce dims (merge dims that are contiguous for every operand, drop size-1
 * dims) so the common cases - same shape, scalar, row broadcast - reduce to one
 * or two long inner loops with unit or zero stride.
 */
#include "lgk_internal.h"

/* Jump threading would split the loops over the math functions of lgk_internal.h into
 * one path per clamp (exp's range limits, the sign tests of sigmoid, tanh and gelu),
 * which vectorize as masked copies of the whole computation: sigmoid, silu and tanh-gelu
 * then divide three times per vector instead of once (2x the time per element). */
#pragma GCC optimize("no-thread-jumps")

/* ---- unary ------------------------------------------------------------------ */

/* The ops by legato op name; a variant of an op for one attribute value is named
 * "op:attribute=value". An op's code is its position here (lgk_unary_name), so this
 * table is the only list of unary ops: the Python wrapper builds its kernels from it. */
#define LGK_UNARY_TABLE(X)                                          \
    X(negative, "negative", -v)                                     \
    X(abs, "abs", fabsf(v))                                         \
    X(exp, "exp", lgk_expf(v))                                      \
    X(log, "log", lgk_logf(v))                                      \
    X(sqrt, "sqrt", sqrtf(v))                                       \
    X(rsqrt, "rsqrt", 1.0f / sqrtf(v))                              \
    X(tanh, "tanh", lgk_tanhf(v))                                   \
    X(sigmoid, "sigmoid", lgk_sigmoidf(v))                          \
    X(erf, "erf", lgk_erff(v))                                      \
    X(sin, "sin", sinf(v))                                          \
    X(cos, "cos", cosf(v))                                          \
    X(asin, "asin", asinf(v))                                       \
    X(acos, "acos", acosf(v))                                       \
    X(atan, "atan", atanf(v))                                       \
    X(floor, "floor", floorf(v))                                    \
    X(ceil, "ceil", ceilf(v))                                       \
    X(round, "round", rintf(v)) /* half to even, as numpy.rint */   \
    X(relu, "nn.relu", lgk_reluf(v))                                \
    X(gelu, "nn.gelu:approximate=none", lgk_geluf(v))               \
    X(gelu_tanh, "nn.gelu:approximate=tanh", lgk_gelu_tanhf(v))     \
    X(silu, "nn.silu", lgk_siluf(v))                                \
    X(relu6, "clip:min=0.0,max=6.0", lgk_relu6f(v))

#define UNARY_CODE(id, opname, expr) UNARY_##id,
enum { LGK_UNARY_TABLE(UNARY_CODE) UNARY_COUNT };

typedef void (*unary_fn)(int64_t n, const float *x, float *y);

/* No `restrict`: y == x is allowed; GCC versions the loop on an alias check. */
#define DEFINE_UNARY(id, opname, expr)                                  \
    LGK_CLONES static void unary_##id(int64_t n, const float *x, float *y) \
    {                                                                   \
        for (int64_t i = 0; i < n; ++i) {                               \
            float v = x[i];                                             \
            y[i] = (expr);                                              \
        }                                                               \
    }
LGK_UNARY_TABLE(DEFINE_UNARY)

#define UNARY_ENTRY(id, opname, expr) [UNARY_##id] = unary_##id,
static const unary_fn unary_fns[UNARY_COUNT] = {LGK_UNARY_TABLE(UNARY_ENTRY)};
#define UNARY_NAME(id, opname, expr) [UNARY_##id] = opname,
static const char *const unary_names[UNARY_COUNT] = {LGK_UNARY_TABLE(UNARY_NAME)};

int lgk_unary_count(void) { return UNARY_COUNT; }

const char *lgk_unary_name(int op)
{
    return op >= 0 && op < UNARY_COUNT ? unary_names[op] : NULL;
}

/* Slices start at multiples of LGK_STREAM_MIN_PER_THREAD, so every element takes the same
 * (vector or tail) path of a loop at any thread count. */
typedef struct {
    unary_fn fn;
    const float *x;
    float *y;
} unary_task;

static int unary_range(void *ctx, int64_t begin, int64_t end)
{
    const unary_task *t = ctx;
    t->fn(end - begin, t->x + begin, t->y + begin);
    return LGK_OK;
}

int lgk_unary(int op, int64_t n, const float *x, float *y, int nthreads)
{
    LGK_CHECK(op >= 0 && op < UNARY_COUNT, LGK_ERR_ARG);
    LGK_CHECK(n >= 0, LGK_ERR_SHAPE);
    LGK_TRY(lgk_checked_count(1, &n, &n));
    LGK_CHECK(x != NULL && y != NULL, LGK_ERR_NULL);
    unary_task t = {unary_fns[op], x, y};
    return lgk_parallel_for(nthreads, n, LGK_STREAM_MIN_PER_THREAD, unary_range, &t);
}

/* ---- N-d iteration -------------------------------------------------------------- */

#define MAX_OPERANDS 3

typedef struct {
    int ndim, nops;
    int64_t shape[LGK_MAX_NDIM];
    int64_t strides[MAX_OPERANDS][LGK_MAX_NDIM];
} nd_layout;

/* Drops size-1 dims and merges dim i into i+1 when, for every operand,
 * stride[i] == stride[i+1] * shape[i+1]. Keeps at least one dim. */
static void coalesce(nd_layout *l)
{
    int out = 0;
    for (int i = 0; i < l->ndim; ++i) {
        if (l->shape[i] == 1)
            continue;
        int merge = out > 0;
        for (int k = 0; k < l->nops && merge; ++k)
            merge = l->strides[k][out - 1] == l->strides[k][i] * l->shape[i];
        if (merge) {
            l->shape[out - 1] *= l->shape[i];
            for (int k = 0; k < l->nops; ++k)
                l->strides[k][out - 1] = l->strides[k][i];
            continue;
        }
        l->shape[out] = l->shape[i];
        for (int k = 0; k < l->nops; ++k)
            l->strides[k][out] = l->strides[k][i];
        ++out;
    }
    if (out == 0) { /* all dims were 1: a single element */
        l->shape[0] = 1;
        for (int k = 0; k < l->nops; ++k)
            l->strides[k][0] = 0;
        out = 1;
    }
    l->ndim = out;
}

/* Advances the multi-index over dims [0, ndim) (last fastest) and the operand
 * offsets with it; returns 0 once every index has been visited. */
static int nd_next(const nd_layout *l, int ndim, int64_t *idx, int64_t *off)
{
    for (int d = ndim - 1; d >= 0; --d) {
        if (++idx[d] < l->shape[d]) {
            for (int k = 0; k < l->nops; ++k)
                off[k] += l->strides[k][d];
            return 1;
        }
        idx[d] = 0;
        for (int k = 0; k < l->nops; ++k)
            off[k] -= (l->shape[d] - 1) * l->strides[k][d];
    }
    return 0;
}

/* Dense row-major strides of `shape` (operand 0 of every layout). */
static void dense_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; --d) {
        strides[d] = s;
        s *= shape[d];
    }
}

/* Validates shape/strides of the output (dense) and each input against the
 * buffer lengths, and fills a layout with operand 0 = output. */
static int make_layout(int ndim, const int64_t *shape, int nin, const int64_t *const *in_strides,
                       const int64_t *in_len, int64_t out_len, nd_layout *l, int64_t *count)
{
    LGK_CHECK(ndim >= 0 && ndim <= LGK_MAX_NDIM, LGK_ERR_ARG);
    LGK_CHECK(ndim == 0 || shape != NULL, LGK_ERR_NULL);
    LGK_TRY(lgk_checked_count(ndim, shape, count));
    LGK_CHECK(*count <= out_len, LGK_ERR_SHAPE);
    l->ndim = ndim;
    l->nops = nin + 1;
    for (int d = 0; d < ndim; ++d)
        l->shape[d] = shape[d];
    dense_strides(ndim, shape, l->strides[0]);
    for (int k = 0; k < nin; ++k) {
        int64_t extent;
        LGK_CHECK(ndim == 0 || in_strides[k] != NULL, LGK_ERR_NULL);
        LGK_TRY(lgk_view_extent(ndim, shape, in_strides[k], &extent));
        LGK_CHECK(extent <= in_len[k], LGK_ERR_SHAPE);
        for (int d = 0; d < ndim; ++d)
            l->strides[k + 1][d] = in_strides[k][d];
    }
    return LGK_OK;
}

/* ---- binary ---------------------------------------------------------------------- */

/* By legato op name, as the unary table; broadcasting follows numpy. */
#define LGK_BINARY_TABLE(X)                          \
    X(add, "add", a + b)                             \
    X(subtract, "subtract", a - b)                   \
    X(multiply, "multiply", a * b)                   \
    X(divide, "divide", a / b)                       \
    X(maximum, "maximum", lgk_maxf(a, b))            \
    X(minimum, "minimum", lgk_minf(a, b))            \
    X(power, "power", powf(a, b))                    \
    X(fmod, "fmod", fmodf(a, b))

#define BINARY_CODE(id, opname, expr) BINARY_##id,
enum { LGK_BINARY_TABLE(BINARY_CODE) BINARY_COUNT };

typedef void (*binary_fn)(int64_t n, const float *x, int64_t sx, const float *y, int64_t sy,
                          float *out);

/* One inner line; the (1,1), (1,0) and (0,1) stride patterns get their own
 * loops so they vectorize (a hoisted scalar instead of a stride-0 load). */
#define DEFINE_BINARY(id, opname, expr)                                              \
    LGK_CLONES static void binary_##id(int64_t n, const float *x, int64_t sx,       \
                                         const float *y, int64_t sy, float *out)     \
    {                                                                                \
        if (sx == 1 && sy == 1) {                                                    \
            for (int64_t i = 0; i < n; ++i) {                                        \
                float a = x[i], b = y[i];                                            \
                out[i] = (expr);                                                     \
            }                                                                        \
        } else if (sx == 1 && sy == 0) {                                             \
            const float b = y[0];                                                    \
            for (int64_t i = 0; i < n; ++i) {                                        \
                float a = x[i];                                                      \
                out[i] = (expr);                                                     \
            }                                                                        \
        } else if (sx == 0 && sy == 1) {                                             \
            const float a = x[0];                                                    \
            for (int64_t i = 0; i < n; ++i) {                                        \
                float b = y[i];                                                      \
                out[i] = (expr);                                                     \
            }                                                                        \
        } else {                                                                     \
            for (int64_t i = 0; i < n; ++i) {                                        \
                float a = x[i * sx], b = y[i * sy];                                  \
                out[i] = (expr);                                                     \
            }                                                                        \
        }                                                                            \
    }
LGK_BINARY_TABLE(DEFINE_BINARY)

#define BINARY_ENTRY(id, opname, expr) [BINARY_##id] = binary_##id,
static const binary_fn binary_fns[BINARY_COUNT] = {LGK_BINARY_TABLE(BINARY_ENTRY)};
#define BINARY_NAME(id, opname, expr) [BINARY_##id] = opname,
static const char *const binary_names[BINARY_COUNT] = {LGK_BINARY_TABLE(BINARY_NAME)};

/* power with one exponent for a whole line (a scalar or a broadcast exponent, e.g. the
 * x ** 3 of tanh-gelu): small integers by multiplication, halves by sqrt, else powf. The
 * special values follow powf: x ** 0 is 1 (NaN included), sqrt keeps -0 and -inf apart
 * from pow (pow(-0, 0.5) = +0, pow(-inf, 0.5) = +inf, pow(-0, -0.5) = +inf). */
static inline __attribute__((always_inline)) void power_line(int64_t n, const float *x,
                                                              int64_t sx, float b, float *out)
{
#define POWER_LOOP(expr)                                                      \
    do {                                                                      \
        for (int64_t i = 0; i < n; ++i) {                                     \
            float a = x[i * sx];                                              \
            out[i] = (expr);                                                  \
        }                                                                     \
    } while (0)
    if (b == 1.0f)
        POWER_LOOP(a);
    else if (b == 2.0f)
        POWER_LOOP(a * a);
    else if (b == 3.0f)
        POWER_LOOP(a * a * a);
    else if (b == 4.0f)
        POWER_LOOP((a * a) * (a * a));
    else if (b == 0.0f)
        POWER_LOOP(((void)a, 1.0f));
    else if (b == -1.0f)
        POWER_LOOP(1.0f / a);
    else if (b == -2.0f)
        POWER_LOOP(1.0f / (a * a));
    else if (b == 0.5f)
        POWER_LOOP(a == -INFINITY ? INFINITY : sqrtf(a) + 0.0f);
    else if (b == -0.5f)
        POWER_LOOP(a == 0.0f ? INFINITY : a == -INFINITY ? 0.0f : 1.0f / sqrtf(a));
    else
        POWER_LOOP(powf(a, b));
#undef POWER_LOOP
}

/* The unit-stride line gets its own copy, so that it vectorizes. */
LGK_CLONES static void power_by_scalar(int64_t n, const float *x, int64_t sx, float b,
                                       float *out)
{
    if (sx == 1)
        power_line(n, x, 1, b, out);
    else
        power_line(n, x, sx, b, out);
}

int lgk_binary_count(void) { return BINARY_COUNT; }

const char *lgk_binary_name(int op)
{
    return op >= 0 && op < BINARY_COUNT ? binary_names[op] : NULL;
}

typedef struct {
    nd_layout l;
    binary_fn fn;
    int power_by_line; /* power with one exponent per line */
    const float *a, *b;
    float *out;
} binary_task;

/* Output elements [begin, end) in row-major order: the lines they cover, the first and
 * last possibly in part. Each element's result depends on its operands alone. */
static int binary_range(void *ctx, int64_t begin, int64_t end)
{
    const binary_task *t = ctx;
    const nd_layout *l = &t->l;
    int last = l->ndim - 1;
    int64_t len = l->shape[last], sa = l->strides[1][last], sb = l->strides[2][last];
    int64_t idx[LGK_MAX_NDIM] = {0}, off[MAX_OPERANDS] = {0};
    int64_t line = begin / len, pos = begin % len;
    for (int d = last - 1; d >= 0; --d) {
        idx[d] = line % l->shape[d];
        line /= l->shape[d];
        for (int k = 0; k < l->nops; ++k)
            off[k] += idx[d] * l->strides[k][d];
    }
    for (int64_t at = begin; at < end; pos = 0) {
        int64_t m = LGK_MIN(len - pos, end - at);
        const float *a = t->a + off[1] + pos * sa, *b = t->b + off[2] + pos * sb;
        if (t->power_by_line)
            power_by_scalar(m, a, sa, *b, t->out + off[0] + pos);
        else
            t->fn(m, a, sa, b, sb, t->out + off[0] + pos);
        at += m;
        if (at < end)
            nd_next(l, last, idx, off);
    }
    return LGK_OK;
}

int lgk_binary(int op, int ndim, const int64_t *shape,
               const float *a, int64_t a_len, const int64_t *a_strides,
               const float *b, int64_t b_len, const int64_t *b_strides,
               float *out, int64_t out_len, int nthreads)
{
    LGK_CHECK(op >= 0 && op < BINARY_COUNT, LGK_ERR_ARG);
    binary_task t = {.fn = binary_fns[op], .a = a, .b = b, .out = out};
    int64_t count;
    const int64_t *strides[2] = {a_strides, b_strides};
    const int64_t lens[2] = {a_len, b_len};
    LGK_TRY(make_layout(ndim, shape, 2, strides, lens, out_len, &t.l, &count));
    LGK_CHECK(a != NULL && b != NULL && out != NULL, LGK_ERR_NULL);
    if (count == 0)
        return LGK_OK;
    coalesce(&t.l);
    t.power_by_line = op == BINARY_power && t.l.strides[2][t.l.ndim - 1] == 0;
    return lgk_parallel_for(nthreads, count, LGK_STREAM_MIN_PER_THREAD, binary_range, &t);
}

/* ---- strided copy / permute ------------------------------------------------------ */

#define TRANSPOSE_BLOCK 32

/* dst[i * dsi + j] = src[i + j * ssj] over a rows x cols block: the source is
 * contiguous along i and the destination along j, so walk both in tiles that
 * fit L1 instead of striding through memory on one side. */
static void transpose_2d(int64_t rows, int64_t cols, const float *src, int64_t ssj, float *dst,
                         int64_t dsi)
{
    for (int64_t i0 = 0; i0 < rows; i0 += TRANSPOSE_BLOCK) {
        int64_t i1 = LGK_MIN(rows, i0 + TRANSPOSE_BLOCK);
        for (int64_t j0 = 0; j0 < cols; j0 += TRANSPOSE_BLOCK) {
            int64_t j1 = LGK_MIN(cols, j0 + TRANSPOSE_BLOCK);
            for (int64_t i = i0; i < i1; ++i)
                for (int64_t j = j0; j < j1; ++j)
                    dst[i * dsi + j] = src[i + j * ssj];
        }
    }
}

static void copy_line(int64_t n, const float *src, int64_t ss, float *dst)
{
    if (ss == 1) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; ++i)
        dst[i] = src[i * ss];
}

/* Moves dim p to position ndim-2 (keeping the others' order) so the blocked
 * transpose runs over the two innermost dims. */
static void move_dim_before_last(nd_layout *l, int p)
{
    int last = l->ndim - 1;
    for (int d = p; d < last - 1; ++d) {
        int64_t t = l->shape[d];
        l->shape[d] = l->shape[d + 1];
        l->shape[d + 1] = t;
        for (int k = 0; k < l->nops; ++k) {
            t = l->strides[k][d];
            l->strides[k][d] = l->strides[k][d + 1];
            l->strides[k][d + 1] = t;
        }
    }
}

int lgk_strided_copy(int ndim, const int64_t *shape,
                     const float *src, int64_t src_len, const int64_t *src_strides,
                     float *dst, int64_t dst_len)
{
    nd_layout l;
    int64_t count;
    const int64_t *strides[1] = {src_strides};
    const int64_t lens[1] = {src_len};
    LGK_TRY(make_layout(ndim, shape, 1, strides, lens, dst_len, &l, &count));
    LGK_CHECK(src != NULL && dst != NULL, LGK_ERR_NULL);
    if (count == 0)
        return LGK_OK;
    coalesce(&l);
    int last = l.ndim - 1, p = -1;
    for (int d = 0; d < last && l.strides[1][last] != 1; ++d)
        if (l.strides[1][d] == 1)
            p = d;
    int64_t idx[LGK_MAX_NDIM] = {0}, off[MAX_OPERANDS] = {0};
    if (p < 0) { /* source already contiguous along the last dim, or no unit stride */
        do {
            copy_line(l.shape[last], src + off[1], l.strides[1][last], dst + off[0]);
        } while (nd_next(&l, last, idx, off));
        return LGK_OK;
    }
    move_dim_before_last(&l, p);
    do {
        transpose_2d(l.shape[last - 1], l.shape[last], src + off[1], l.strides[1][last],
                     dst + off[0], l.strides[0][last - 1]);
    } while (nd_next(&l, last - 1, idx, off));
    return LGK_OK;
}
