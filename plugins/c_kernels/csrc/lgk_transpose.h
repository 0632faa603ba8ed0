/*
 * lgk_transpose.h - 16x16 transposes in vector registers (GCC/Clang vector
 * extensions: two-source shuffles, vpermt2ps on AVX-512) of floats, and of bytes
 * (int8/uint8 data), for kernels that move data between channel-major and
 * pixel-major order.
 */
#ifndef LGK_TRANSPOSE_H
#define LGK_TRANSPOSE_H

#define LGK_V16 16

typedef float lgk_v16 __attribute__((vector_size(LGK_V16 * sizeof(float))));
typedef int lgk_v16_mask __attribute__((vector_size(LGK_V16 * sizeof(int))));
typedef unsigned char lgk_b16 __attribute__((vector_size(LGK_V16)));
typedef unsigned char lgk_b16_mask __attribute__((vector_size(LGK_V16)));

/* GCC's shuffle takes its indices as a vector of the data's element width (M) */
#if defined(__clang__)
#define LGK_SHUFFLE_AS(M, a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#define LGK_UNROLL16 _Pragma("clang loop unroll(full)")
#else
#define LGK_SHUFFLE_AS(M, a, b, ...) __builtin_shuffle(a, b, (M){__VA_ARGS__})
#define LGK_UNROLL16 _Pragma("GCC unroll 16")
#endif
#define LGK_V16_SHUFFLE(a, b, ...) LGK_SHUFFLE_AS(lgk_v16_mask, a, b, __VA_ARGS__)

/* One step on 16 vectors of type T (indices of type M): for each pair of rows s
 * apart, swap the off-diagonal s x s blocks. */
#define LGK_V16_STEP_AS(T, M, v, s, ...)                                \
    LGK_UNROLL16                                                        \
    for (int i_ = 0; i_ < LGK_V16; ++i_)                                \
        if (!(i_ & (s))) {                                              \
            T a_ = (v)[i_], b_ = (v)[i_ + (s)];                         \
            (v)[i_] = LGK_SHUFFLE_AS(M, a_, b_, __VA_ARGS__);           \
            (v)[i_ + (s)] = LGK_SHUFFLE_AS(M, a_, b_, LGK_V16_HI_##s);  \
        }
#define LGK_V16_STEP(v, s, ...) LGK_V16_STEP_AS(lgk_v16, lgk_v16_mask, v, s, __VA_ARGS__)
#define LGK_B16_STEP(v, s, ...) LGK_V16_STEP_AS(lgk_b16, lgk_b16_mask, v, s, __VA_ARGS__)
#define LGK_V16_HI_8 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define LGK_V16_HI_4 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define LGK_V16_HI_2 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define LGK_V16_HI_1 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31

/* v[0..15] as rows in, as columns out: afterwards v[i][k] is the old v[k][i]. Always
 * inlined, so v stays in registers where the caller's loops are unrolled. */
static inline __attribute__((always_inline)) void lgk_transpose16(lgk_v16 *v)
{
    LGK_V16_STEP(v, 8, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
    LGK_V16_STEP(v, 4, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27)
    LGK_V16_STEP(v, 2, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29)
    LGK_V16_STEP(v, 1, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30)
}

/* The same on 16 rows of 16 bytes. */
static inline __attribute__((always_inline)) void lgk_transpose16_bytes(lgk_b16 *v)
{
    LGK_B16_STEP(v, 8, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
    LGK_B16_STEP(v, 4, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27)
    LGK_B16_STEP(v, 2, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29)
    LGK_B16_STEP(v, 1, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30)
}

#endif /* LGK_TRANSPOSE_H */
