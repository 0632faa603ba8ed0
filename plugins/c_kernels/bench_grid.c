/* bench_grid.c - a dry run of the GEMM thread splits: for the GEMMs of BERT-base (seq 128)
 * and ResNet-50's classifier, per thread count, the blocks of the 1-D split the GEMM used
 * before (whichever of M and N, in micro-tiles) and of lgk_choose_grid's 2-D grid, the
 * threads that get work, and what the busiest thread computes and reads (KiB of A and B).
 * Nothing runs: the numbers are counted. AVX-512 micro-tiles (12 x 32).
 *
 *   cc -O2 -pthread -Icsrc bench_grid.c $(ls csrc/[a-z]*.c | grep -v test_) -lm -o /tmp/bench_grid
 */
#include <stdio.h>

#include "lgk_parallel.h"

typedef struct {
    const char *name;
    int64_t batch, M, N, K;
    int a_prepacked, b_prepacked;
} shape;

static const shape SHAPES[] = {
    {"bert q/k/v/out 128x768x768", 1, 128, 768, 768, 0, 1},
    {"bert ffn1 128x3072x768", 1, 128, 3072, 768, 0, 1},
    {"bert ffn2 128x768x3072", 1, 128, 768, 3072, 0, 1},
    {"bert q@k^T 12x128x128x64", 12, 128, 128, 64, 0, 0},
    {"bert p@v 12x128x64x128", 12, 128, 64, 128, 0, 0},
    {"resnet50 fc 1x1000x2048", 1, 1, 1000, 2048, 0, 1},
};

enum { MR = 12, NR = 32 };

static int64_t up(int64_t x, int64_t u) { return (x + u - 1) / u * u; }

/* The split before the grid: one dimension, micro-tile grain, one slice per thread; a
 * batch of small GEMMs (under 1 MFLOP per thread each) across matrices, else each
 * matrix on its own threads. */
static void old_split(const shape *s, int threads, int64_t *busy, int64_t *rows,
                      int64_t *cols)
{
    double flops = 2.0 * (double)s->M * (double)s->N * (double)s->K;
    int per_gemm = flops / 1e6 < 2.0 ? 1 : (flops / 1e6 >= threads ? threads : (int)(flops / 1e6));
    int split_n = s->a_prepacked != s->b_prepacked ? (s->b_prepacked ? s->M < 2 * MR * per_gemm : 1)
                                                   : s->N >= s->M;
    int64_t extent = split_n ? s->N : s->M, grain = split_n ? NR : MR;
    int64_t units = (extent + grain - 1) / grain;
    int64_t t = per_gemm < units ? per_gemm : units;
    int64_t per = (units + t - 1) / t * grain;
    *busy = (extent + per - 1) / per;
    *rows = split_n ? s->M : per;
    *cols = split_n ? per : s->N;
    if (per_gemm == 1 && s->batch > 1) { /* across matrices */
        *busy = s->batch < threads ? s->batch : threads;
        *rows = s->M, *cols = s->N;
    }
}

static void row(const char *kind, const shape *s, int64_t busy, int64_t blocks_per_thread,
                int64_t r, int64_t c)
{
    double macs = (double)blocks_per_thread * (double)up(r, MR) * (double)up(c, NR) * (double)s->K;
    double kib = (double)blocks_per_thread * (double)(r * s->K + s->K * c) * 4.0 / 1024.0;
    printf("    %-4s busy %2lld  blocks/thread %2lld  block %4lld x %4lld  "
           "max MMACs %6.2f  max KiB read %7.0f\n",
           kind, (long long)busy, (long long)blocks_per_thread, (long long)r, (long long)c,
           macs / 1e6, kib);
}

int main(void)
{
    const int counts[] = {1, 2, 4, 8, 16};
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; ++i) {
        const shape *s = &SHAPES[i];
        printf("%s\n", s->name);
        for (size_t t = 0; t < sizeof counts / sizeof counts[0]; ++t) {
            int threads = counts[t];
            double flops = 2.0 * (double)s->batch * (double)s->M * (double)s->N * (double)s->K;
            double t1 = flops / 1e6; /* threads_for_flops: 1 MFLOP a thread */
            int used = t1 < 2.0 ? 1 : (t1 >= threads ? threads : (int)t1);
            printf("  %d threads\n", threads);
            int64_t busy, r, c;
            old_split(s, used, &busy, &r, &c);
            int64_t old_blocks = s->batch > 1 && busy == (s->batch < used ? s->batch : used)
                                     && r == s->M && c == s->N
                                 ? (s->batch + busy - 1) / busy
                                 : s->batch; /* each matrix in turn */
            row("old", s, busy, old_blocks, r, c);
            lgk_grid_problem q = {s->batch, s->M, s->N, s->K, MR, NR, s->a_prepacked ? 8.0 : 40.0,
                                  s->b_prepacked ? 8.0 : 12.0, s->M > 4 ? 5 : 1,
                                  s->N > 4 ? 5 : 1};
            lgk_grid g = lgk_choose_grid(&q, used);
            int64_t blocks = s->batch * g.grid_m * g.grid_n;
            int64_t nb = blocks < used ? blocks : used;
            printf("    grid %lld x %lld\n", (long long)g.grid_m, (long long)g.grid_n);
            row("new", s, nb, (blocks + used - 1) / used, g.grid_m == 1 ? s->M : g.rows,
                g.grid_n == 1 ? s->N : g.cols);
        }
    }
    return 0;
}
