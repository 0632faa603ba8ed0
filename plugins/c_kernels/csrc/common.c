/* common.c - status strings, argument checks, scratch memory and threads. */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* clock_gettime under -std=c11 */
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "lgk_internal.h"
#include "lgk_parallel.h"

/* Jump threading would split the loops over the math functions of lgk_internal.h into
 * one path per clamp (exp's range limits, the sign tests of sigmoid, tanh and gelu),
 * which vectorize as masked copies of the whole computation: sigmoid, silu and tanh-gelu
 * then divide three times per vector instead of once (2x the time per element). */
#pragma GCC optimize("no-thread-jumps")

const char *lgk_strerror(int status)
{
    switch (status) {
    case LGK_OK: return "ok";
    case LGK_ERR_NULL: return "a required pointer is NULL";
    case LGK_ERR_SHAPE: return "invalid or inconsistent size, stride or buffer length";
    case LGK_ERR_OVERFLOW: return "size computation overflows";
    case LGK_ERR_ARG: return "invalid argument value";
    case LGK_ERR_NOMEM: return "out of memory";
    case LGK_ERR_THREAD: return "thread failure";
    default: return "unknown status";
    }
}

int lgk_checked_count(int n, const int64_t *dims, int64_t *out)
{
    int64_t count = 1;
    for (int i = 0; i < n; ++i) {
        LGK_CHECK(dims[i] >= 0, LGK_ERR_SHAPE);
        LGK_TRY(lgk_mul(count, dims[i], &count));
    }
    /* The byte count must fit size_t as well (matters on 32-bit targets). */
    LGK_CHECK((uint64_t)count <= (uint64_t)(SIZE_MAX / sizeof(float)), LGK_ERR_OVERFLOW);
    *out = count;
    return LGK_OK;
}

int lgk_view_extent(int n, const int64_t *dims, const int64_t *strides, int64_t *out)
{
    int64_t last = 0; /* offset of the last element */
    for (int i = 0; i < n; ++i) {
        LGK_CHECK(dims[i] >= 0 && strides[i] >= 0, LGK_ERR_SHAPE);
        if (dims[i] == 0) {
            *out = 0;
            return LGK_OK;
        }
        int64_t span;
        LGK_TRY(lgk_mul(dims[i] - 1, strides[i], &span));
        LGK_TRY(lgk_add(last, span, &last));
    }
    LGK_TRY(lgk_add(last, 1, out));
    return LGK_OK;
}

int lgk_check_buffer(const void *p, int64_t len, int64_t need)
{
    LGK_CHECK(p != NULL, LGK_ERR_NULL);
    LGK_CHECK(len >= 0 && need <= len, LGK_ERR_SHAPE);
    return LGK_OK;
}

#ifdef LGK_EXACT_SCRATCH
/* Test builds: blocks of exactly the size asked for, never reused (the pools below keep
 * nothing), so that AddressSanitizer sees a kernel reading past its scratch. */
void *lgk_aligned_alloc(int64_t nfloats)
{
    void *p = NULL;
    if (nfloats < 0 || (uint64_t)nfloats > SIZE_MAX / sizeof(float)
        || posix_memalign(&p, 64, (size_t)LGK_MAX(nfloats, (int64_t)1) * sizeof(float)) != 0)
        return NULL;
    return p;
}

void lgk_aligned_free(void *p)
{
    free(p);
}
#else
/* The offset to the aligned block is stored just before it. */
void *lgk_aligned_alloc(int64_t nfloats)
{
    const size_t align = 64;
    if (nfloats < 0 || (uint64_t)nfloats > (SIZE_MAX - 2 * align) / sizeof(float))
        return NULL;
    unsigned char *raw = malloc((size_t)nfloats * sizeof(float) + 2 * align);
    if (raw == NULL)
        return NULL;
    size_t shift = align - ((uintptr_t)raw % align);
    if (shift < sizeof(size_t))
        shift += align;
    unsigned char *p = raw + shift;
    memcpy(p - sizeof(size_t), &shift, sizeof shift);
    return p;
}

void lgk_aligned_free(void *p)
{
    if (p == NULL)
        return;
    size_t shift;
    memcpy(&shift, (unsigned char *)p - sizeof(size_t), sizeof shift);
    free((unsigned char *)p - shift);
}
#endif

/* ---- scratch pool ---------------------------------------------------------
 * A fresh malloc of a few hundred KiB is an mmap plus page faults on every
 * call (and glibc trims freed heap tops), which halved GEMM throughput at
 * n = 160..256 (measured ~50 page faults per call and 85-100 GFLOP/s, vs
 * 150-180 GFLOP/s with reuse). Freed
 * scratch of up to SCRATCH_KEEP_MAX floats is therefore kept in a small pool
 * shared by all threads. */
#define SCRATCH_POOL 8
#ifdef LGK_EXACT_SCRATCH
#define SCRATCH_KEEP_MAX ((int64_t)-1)
#else
#define SCRATCH_KEEP_MAX ((int64_t)1 << 20) /* 4 MiB */
#endif

static pthread_mutex_t scratch_lock = PTHREAD_MUTEX_INITIALIZER;
static lgk_scratch scratch_pool[SCRATCH_POOL];
static int scratch_count = 0;

/* Removes and returns the smallest pooled block holding `need` floats. */
static lgk_scratch scratch_take(int64_t need)
{
    lgk_scratch found = {NULL, 0};
    int best = -1;
    pthread_mutex_lock(&scratch_lock);
    for (int i = 0; i < scratch_count; ++i)
        if (scratch_pool[i].cap >= need && (best < 0 || scratch_pool[i].cap < scratch_pool[best].cap))
            best = i;
    if (best >= 0) {
        found = scratch_pool[best];
        scratch_pool[best] = scratch_pool[--scratch_count];
    }
    pthread_mutex_unlock(&scratch_lock);
    return found;
}

/* Puts a block back into the shared pool, or frees it. */
static void scratch_put(lgk_scratch block)
{
    int kept = 0;
    if (block.cap <= SCRATCH_KEEP_MAX) {
        pthread_mutex_lock(&scratch_lock);
        if (scratch_count < SCRATCH_POOL) {
            scratch_pool[scratch_count++] = block;
            kept = 1;
        }
        pthread_mutex_unlock(&scratch_lock);
    }
    if (!kept)
        lgk_aligned_free(block.data);
}

/* Each thread also keeps the last SCRATCH_LOCAL blocks it released and takes from them
 * first: threads that split one kernel would otherwise trade blocks through the shared
 * pool from call to call, and writing a block whose lines sit in the other core's cache
 * moves every line across (on a 2-core VM that cost a 4x4-map conv more than its split
 * saved). lgk_free_scratch bumps the generation; each thread's blocks of an older one
 * are freed at its next acquire or release, and at thread exit they go to the pool. */
#define SCRATCH_LOCAL 4

typedef struct {
    lgk_scratch blocks[SCRATCH_LOCAL];
    int count;
    unsigned generation;
} scratch_cache;

static _Thread_local scratch_cache local_scratch;
static _Atomic unsigned scratch_generation;
static pthread_key_t scratch_exit_key;
static pthread_once_t scratch_key_once = PTHREAD_ONCE_INIT;

static void scratch_thread_exit(void *unused)
{
    (void)unused;
    for (int i = 0; i < local_scratch.count; ++i)
        scratch_put(local_scratch.blocks[i]);
    local_scratch.count = 0;
}

static void scratch_make_key(void)
{
    pthread_key_create(&scratch_exit_key, scratch_thread_exit);
}

/* The calling thread's cache, emptied first if lgk_free_scratch ran since its last use. */
static scratch_cache *thread_scratch(void)
{
    scratch_cache *c = &local_scratch;
    unsigned generation = atomic_load_explicit(&scratch_generation, memory_order_relaxed);
    if (c->generation != generation) {
        for (int i = 0; i < c->count; ++i)
            lgk_aligned_free(c->blocks[i].data);
        c->count = 0;
        c->generation = generation;
    }
    return c;
}

int lgk_scratch_acquire(int64_t nfloats, lgk_scratch *s)
{
    scratch_cache *c = thread_scratch();
    int best = -1;
    for (int i = 0; i < c->count; ++i)
        if (c->blocks[i].cap >= nfloats && (best < 0 || c->blocks[i].cap < c->blocks[best].cap))
            best = i;
    if (best >= 0) {
        *s = c->blocks[best];
        c->blocks[best] = c->blocks[--c->count];
        return LGK_OK;
    }
    *s = scratch_take(nfloats);
    if (s->data == NULL) {
        s->data = lgk_aligned_alloc(nfloats);
        s->cap = nfloats;
    }
    return s->data != NULL ? LGK_OK : LGK_ERR_NOMEM;
}

void lgk_scratch_release(lgk_scratch *s)
{
    if (s->data == NULL)
        return;
    scratch_cache *c = thread_scratch();
    if (s->cap <= SCRATCH_KEEP_MAX && c->count < SCRATCH_LOCAL) {
        if (c->count == 0) { /* so that the blocks go to the pool when the thread ends */
            pthread_once(&scratch_key_once, scratch_make_key);
            pthread_setspecific(scratch_exit_key, c);
        }
        c->blocks[c->count++] = *s;
    } else {
        scratch_put(*s);
    }
    s->data = NULL;
    s->cap = 0;
}

void lgk_free_scratch(void)
{
    atomic_fetch_add(&scratch_generation, 1);
    thread_scratch(); /* the caller's own blocks now */
    pthread_mutex_lock(&scratch_lock);
    for (int i = 0; i < scratch_count; ++i)
        lgk_aligned_free(scratch_pool[i].data);
    scratch_count = 0;
    pthread_mutex_unlock(&scratch_lock);
}

int lgk_clamp_threads(int nthreads)
{
    return nthreads < 1 ? 1 : LGK_MIN(nthreads, LGK_MAX_THREADS);
}

/* ---- persistent workers -------------------------------------------------------------
 * A model runs hundreds of parallel calls of 10-100 us each, so the hand-off must cost
 * far less than that. Creating a thread per call costs 30-100 us; a worker asleep on a
 * condition variable takes 4-5 us to wake at the median on a 2-core VM (an idle vCPU
 * halts, and the wake-up IPI goes through the hypervisor) and, with other processes on
 * the cores, now and then milliseconds; inside a model, between convs, ~20 us. Workers
 * are therefore started once and, after each task, spin for pool_spin_us (POOL_SPIN_US
 * unless lgk_set_pool_spin_us changes it) watching their task slot before they sleep.
 *
 * A task is a number of slices, split into one contiguous home range per thread (the
 * caller's first): each thread claims the slices of its own range one at a time, then
 * those left in the others'. The same thread thus gets the same part of every call of a
 * kernel (its half of a layer's weights stays in its core's cache: with slices handed
 * out first come, first served, 2-thread convs on 4x4 maps ran 1.7x slower than on one
 * thread), and a worker the scheduler has not run yet takes nothing: the caller runs
 * its slices too and withdraws the hand-off, so a call never waits for a worker that
 * never started on it. One call at a time uses the
 * workers (pool_lock); a concurrent or nested caller runs its slices itself. A forked
 * child starts with no workers. */
#ifndef POOL_SPIN_US
/* After a task: a model's next parallel call usually comes sooner, after single-thread
 * steps that can take a few hundred us. A worker asleep woke ~20 us after the signal
 * (a 64 x 8 x 8 conv split into two 16 us parts then took 39 us, 17 with the worker
 * still spinning). */
#define POOL_SPIN_US 1000
#endif
static _Atomic int64_t pool_spin_us = POOL_SPIN_US;

int lgk_set_pool_spin_us(int64_t us)
{
    if (us > 1000000)
        return LGK_ERR_ARG;
    atomic_store(&pool_spin_us, us < 0 ? (int64_t)POOL_SPIN_US : us);
    return LGK_OK;
}

#ifndef POOL_WAIT_SPIN_US
#define POOL_WAIT_SPIN_US 50 /* a caller waiting for a worker's last slice */
#endif
/* The same with more than two threads: the last of many workers often ends more than
 * 50 us after the caller (a worker woken or scheduled late, blocks of uneven size), and
 * a caller asleep then takes 20-100 us to wake on a VM, on every parallel call. Its
 * core has nothing else to do meanwhile: it waits for the call to end. */
#ifndef POOL_WAIT_SPIN_MANY_US
#define POOL_WAIT_SPIN_MANY_US 500
#endif

typedef struct {
    lgk_range_fn fn;
    void *ctx;
    int64_t n, per; /* slice s covers [s * per, min(n, (s + 1) * per)) */
    int slices, threads; /* thread r's home range: home_start(r) .. home_start(r + 1) */
    unsigned fp_mode;    /* the caller's (flush-to-zero etc.), for the workers */
    _Atomic int status;  /* the first failure (LGK_OK until one) */
    _Atomic int holders; /* workers handed the task that still hold it */
    /* the next unclaimed slice of each home range, a cache line each: a thread that
     * finished its range looks at the others' (with 16 threads, 15 counters each), and
     * counters sharing a line would move it between all the cores on every claim */
    struct {
        _Alignas(64) _Atomic int next;
    } home[LGK_MAX_THREADS];
} pool_task;

/* Cache-line sized: the caller writes one slot while another worker spins on its own. */
typedef struct {
    _Alignas(64) _Atomic(pool_task *) task; /* set by the caller, taken by the worker */
    _Atomic int sleeping;
    _Atomic int cpu; /* where it last took a task */
    pthread_mutex_t lock;
    pthread_cond_t wake;
} pool_worker;

static pool_worker pool[LGK_MAX_THREADS];
static int pool_started; /* workers 1..pool_started-1 are running (under pool_lock) */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
/* A caller asleep until its workers let go of its task. */
static _Atomic int caller_sleeping;
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__SSE2__)
    _mm_pause();
#endif
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* The CPU a thread runs on (-1 where unknown). */
static int current_cpu(void)
{
#if defined(__linux__)
    return sched_getcpu();
#else
    return -1;
#endif
}

/* Where the caller of the running task and each worker last ran. */
static _Atomic int caller_cpu = -1;

/* Spins until done(arg) or `us` microseconds have passed; returns done(arg). About every
 * microsecond (SPIN_CHECK pauses) it looks at the clock and whether the thread it waits
 * for last ran on this CPU (the scheduler may put the caller and a worker on one core
 * while the other is busy with other processes): then it yields, as a plain spin would
 * keep that thread off the core until the spin ends. With peer_cpu NULL (waiting for any
 * of many threads) it yields at every look, which costs a system call where no other
 * thread waits for the CPU. */
#define SPIN_CHECK 16
static int spin_until(int (*done)(void *), void *arg, double us, const _Atomic int *peer_cpu)
{
    double deadline = -1.0;
    for (int i = 1;; ++i) {
        if (done(arg))
            return 1;
        cpu_relax();
        if (i % SPIN_CHECK == 0) {
            double t = now_us();
            if (deadline < 0.0)
                deadline = t + us;
            else if (t >= deadline)
                return done(arg);
            if (peer_cpu == NULL) {
                sched_yield();
                continue;
            }
            int me = current_cpu();
            if (me >= 0 && me == atomic_load_explicit(peer_cpu, memory_order_relaxed))
                sched_yield();
        }
    }
}

static int home_start(const pool_task *t, int r)
{
    return (int)((int64_t)r * t->slices / t->threads);
}

/* Thread r claims and runs the slices of its home range, then those left in the
 * others', until none is left. */
static void task_run_slices(pool_task *t, int r)
{
    for (int q = 0; q < t->threads; ++q) {
        int owner = (r + q) % t->threads, end = home_start(t, owner + 1);
        _Atomic int *next = &t->home[owner].next;
        /* a plain read first: a range already claimed is left without a write */
        while (atomic_load_explicit(next, memory_order_relaxed) < end) {
            int s = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
            if (s >= end)
                break;
            int64_t b = (int64_t)s * t->per, e = LGK_MIN(t->n, b + t->per);
            int status = t->fn(t->ctx, b, e);
            int ok = LGK_OK;
            if (status != LGK_OK)
                atomic_compare_exchange_strong(&t->status, &ok, status);
        }
    }
}

static int slot_filled(void *w)
{
    return atomic_load_explicit(&((pool_worker *)w)->task, memory_order_relaxed) != NULL;
}

/* The worker's next task: spinning first, then asleep until the caller wakes it. The
 * sleeping flag and the slot form a Dekker pair with the caller's store-then-check. */
static pool_task *worker_next_task(pool_worker *w)
{
    if (spin_until(slot_filled, w, (double)atomic_load_explicit(&pool_spin_us, memory_order_relaxed),
                   &caller_cpu)) {
        pool_task *t = atomic_exchange(&w->task, NULL);
        if (t != NULL)
            return t;
    }
    pool_task *t;
    pthread_mutex_lock(&w->lock);
    atomic_store(&w->sleeping, 1);
    while ((t = atomic_exchange(&w->task, NULL)) == NULL)
        pthread_cond_wait(&w->wake, &w->lock);
    atomic_store(&w->sleeping, 0);
    pthread_mutex_unlock(&w->lock);
    return t;
}

static void *pool_worker_main(void *arg)
{
    pool_worker *w = arg;
    for (;;) {
        pool_task *t = worker_next_task(w);
        atomic_store_explicit(&w->cpu, current_cpu(), memory_order_relaxed);
        unsigned mode = lgk_fp_mode();
        lgk_restore_fp_mode(t->fp_mode);
        task_run_slices(t, (int)(w - pool));
        lgk_restore_fp_mode(mode);
        atomic_fetch_sub(&t->holders, 1); /* t may be gone from here on */
        if (atomic_load(&caller_sleeping)) {
            pthread_mutex_lock(&done_lock);
            pthread_cond_broadcast(&done_cond);
            pthread_mutex_unlock(&done_lock);
        }
    }
    return NULL;
}

static void pool_init_workers(void)
{
    for (int i = 0; i < LGK_MAX_THREADS; ++i) {
        pthread_mutex_init(&pool[i].lock, NULL);
        pthread_cond_init(&pool[i].wake, NULL);
        atomic_init(&pool[i].task, NULL);
        atomic_init(&pool[i].sleeping, 0);
        atomic_init(&pool[i].cpu, -1);
    }
}

static void pool_after_fork_child(void)
{
    pthread_mutex_init(&pool_lock, NULL);
    pthread_mutex_init(&done_lock, NULL);
    pthread_cond_init(&done_cond, NULL);
    atomic_init(&caller_sleeping, 0);
    atomic_init(&caller_cpu, -1);
    pool_init_workers();
    pool_started = 1;
}

static void pool_setup(void)
{
    pool_init_workers();
    pool_started = 1;
    pthread_atfork(NULL, NULL, pool_after_fork_child);
}

/* Starts workers up to t - 1 (under pool_lock); returns 1 + how many are running. */
static int pool_grow(int t)
{
    while (pool_started < t) {
        pthread_t tid;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int ok = pthread_create(&tid, &attr, pool_worker_main, &pool[pool_started]) == 0;
        pthread_attr_destroy(&attr);
        if (!ok)
            break;
        ++pool_started;
    }
    return pool_started;
}

static int task_released(void *t)
{
    return atomic_load(&((pool_task *)t)->holders) == 0;
}

/* Hands t to workers 1..threads-1 (as many as run), runs slices here too, withdraws the
 * hand-offs no worker took and waits for the workers that did (under pool_lock). */
static void pool_run(pool_task *t, int threads)
{
    int helpers = LGK_MIN(pool_grow(threads), threads) - 1;
    atomic_store(&t->holders, helpers);
    atomic_store_explicit(&caller_cpu, current_cpu(), memory_order_relaxed);
    for (int i = 1; i <= helpers; ++i) {
        atomic_store(&pool[i].task, t);
        if (atomic_load(&pool[i].sleeping)) {
            pthread_mutex_lock(&pool[i].lock);
            pthread_cond_signal(&pool[i].wake);
            pthread_mutex_unlock(&pool[i].lock);
        }
    }
    task_run_slices(t, 0);
    for (int i = 1; i <= helpers; ++i) {
        pool_task *expected = t;
        if (atomic_compare_exchange_strong(&pool[i].task, &expected, NULL))
            atomic_fetch_sub(&t->holders, 1); /* never taken: every slice is done */
    }
    /* (two threads: only the first worker's CPU is watched) */
    if (threads > 2 ? spin_until(task_released, t, POOL_WAIT_SPIN_MANY_US, NULL)
                    : spin_until(task_released, t, POOL_WAIT_SPIN_US, &pool[1].cpu))
        return;
    pthread_mutex_lock(&done_lock);
    atomic_store(&caller_sleeping, 1);
    while (!task_released(t))
        pthread_cond_wait(&done_cond, &done_lock);
    atomic_store(&caller_sleeping, 0);
    pthread_mutex_unlock(&done_lock);
}

int lgk_parallel_slices(int nthreads, int64_t n, int64_t per, lgk_range_fn fn, void *ctx)
{
    if (n <= 0)
        return LGK_OK;
    per = LGK_MAX(per, (int64_t)1);
    int64_t slices = n / per + (n % per != 0);
    int threads = (int)LGK_MIN((int64_t)lgk_clamp_threads(nthreads), slices);
    if (threads <= 1 || slices > INT32_MAX)
        return threads <= 1 ? fn(ctx, 0, n) : LGK_ERR_SHAPE;
    pool_task t = {fn, ctx, n, per, (int)slices, threads, lgk_fp_mode(), LGK_OK, 0, {{0}}};
    for (int r = 0; r < threads; ++r)
        atomic_init(&t.home[r].next, home_start(&t, r));
    pthread_once(&pool_once, pool_setup);
    if (pthread_mutex_trylock(&pool_lock) == 0) {
        pool_run(&t, threads);
        pthread_mutex_unlock(&pool_lock);
    } else {
        task_run_slices(&t, 0); /* the workers are busy with another call */
    }
    return atomic_load(&t.status);
}

int lgk_parallel_for(int nthreads, int64_t n, int64_t grain, lgk_range_fn fn, void *ctx)
{
    if (n <= 0)
        return LGK_OK;
    grain = grain < 1 ? 1 : grain;
    int64_t max_slices = (n + grain - 1) / grain;
    int t = (int)LGK_MIN((int64_t)lgk_clamp_threads(nthreads), max_slices);
    if (t <= 1)
        return fn(ctx, 0, n);
    /* Slice bounds are multiples of `grain` so callers can keep blocks whole. */
    return lgk_parallel_slices(t, n, (max_slices + t - 1) / t * grain, fn, ctx);
}

/* ---- grids ----------------------------------------------------------------------------
 * A GEMM split along one dimension stops scaling where the other is shared: M split,
 * every thread streams all of B (with 16 threads on M = 128, a linear layer's 2-9 MiB
 * weight for 12 rows of A each); N split, every thread packs all of A, and N = 768 in
 * slivers of 32 keeps only 12 of 16 threads busy. Blocks cut along both keep what a
 * thread reads near the square root of its work. */

/* Blocks per thread count before a thread's part is weighed: more blocks than threads
 * balance uneven ones (a batch of 12 attention heads on 16 threads). */
#define GRID_BLOCKS_PER_THREAD 4
/* The fixed cost of a block, in multiply-adds (claiming it, its scratch, its epilogue
 * pass): splits that tie otherwise keep fewer, larger blocks. */
#define GRID_BLOCK_COST 20000.0

/* Blocks of `step` over `extent`, the last one made longer rather than shorter than
 * `min` (at most `min` - 1 extra rows or columns). */
static int64_t grid_count(int64_t step, int64_t extent, int64_t min)
{
    int64_t count = extent / step + (extent % step != 0);
    if (count > 1 && extent - (count - 1) * step < min)
        --count;
    return count;
}

void lgk_grid_range(int64_t step, int64_t count, int64_t extent, int64_t i, int64_t *begin,
                    int64_t *end)
{
    *begin = i * step;
    *end = i + 1 >= count ? extent : (i + 1) * step;
}

/* The largest block of a dimension cut into `count` blocks, in whole units. */
static double grid_block(int64_t step, int64_t count, int64_t extent, int unit)
{
    int64_t most = count == 1 ? extent : LGK_MAX(step, extent - (count - 1) * step);
    return (double)((most + unit - 1) / unit * unit);
}

/* The steps worth trying along one dimension: `units` micro-tiles cut into 1, 2, ...
 * blocks, each step once. Returns the step of `blocks` blocks, 0 where it repeats the
 * step of blocks - 1 or leaves a block shorter than `min`. */
static int64_t grid_step(int64_t units, int unit, int64_t extent, int64_t min, int64_t blocks)
{
    int64_t per = (units + blocks - 1) / blocks;
    if (blocks > 1 && per == (units + blocks - 2) / (blocks - 1))
        return 0;
    int64_t step = per * unit;
    return blocks > 1 && step < LGK_MIN(min, extent) ? 0 : step;
}

lgk_grid lgk_choose_grid(const lgk_grid_problem *q, int threads)
{
    lgk_grid best = {q->M, q->N, 1, 1};
    threads = lgk_clamp_threads(threads);
    if (threads <= 1 || q->M <= 0 || q->N <= 0)
        return best;
    int64_t um = q->M / q->mr + (q->M % q->mr != 0), un = q->N / q->nr + (q->N % q->nr != 0);
    int64_t most = (int64_t)GRID_BLOCKS_PER_THREAD * threads;
    double K = (double)LGK_MAX(q->K, (int64_t)1), best_cost = -1.0;
    for (int64_t gm = 1; gm <= LGK_MIN(um, most); ++gm) {
        int64_t rows = grid_step(um, q->mr, q->M, q->min_rows, gm);
        if (rows == 0)
            continue;
        int64_t count_m = grid_count(rows, q->M, q->min_rows);
        double r = grid_block(rows, count_m, q->M, q->mr);
        for (int64_t gn = 1; gn <= un && q->batch * count_m * gn <= most; ++gn) {
            int64_t cols = grid_step(un, q->nr, q->N, q->min_cols, gn);
            if (cols == 0)
                continue;
            int64_t count_n = grid_count(cols, q->N, q->min_cols);
            double c = grid_block(cols, count_n, q->N, q->nr);
            int64_t blocks = q->batch * count_m * count_n;
            double per_thread = (double)((blocks + threads - 1) / threads);
            double cost = per_thread * (r * c * K + q->a_cost * r * K + q->b_cost * K * c
                                        + GRID_BLOCK_COST);
            if (best_cost < 0.0 || cost < best_cost) {
                best_cost = cost;
                best = (lgk_grid){rows, cols, count_m, count_n};
            }
        }
    }
    return best;
}

LGK_CLONES void lgk_activate(int activation, float *x, int64_t n)
{
    switch (activation) {
    case LGK_ACT_RELU:
        for (int64_t i = 0; i < n; ++i) x[i] = lgk_reluf(x[i]);
        break;
    case LGK_ACT_GELU:
        for (int64_t i = 0; i < n; ++i) x[i] = lgk_geluf(x[i]);
        break;
    case LGK_ACT_GELU_TANH:
        for (int64_t i = 0; i < n; ++i) x[i] = lgk_gelu_tanhf(x[i]);
        break;
    case LGK_ACT_SILU:
        for (int64_t i = 0; i < n; ++i) x[i] = lgk_siluf(x[i]);
        break;
    case LGK_ACT_RELU6:
        for (int64_t i = 0; i < n; ++i) x[i] = lgk_relu6f(x[i]);
        break;
    default:
        break;
    }
}

const char *lgk_activation_name(int activation)
{
    switch (activation) {
    case LGK_ACT_RELU: return "nn.relu";
    case LGK_ACT_GELU: return "nn.gelu:approximate=none";
    case LGK_ACT_GELU_TANH: return "nn.gelu:approximate=tanh";
    case LGK_ACT_SILU: return "nn.silu";
    case LGK_ACT_RELU6: return "clip:min=0.0,max=6.0";
    default: return NULL;
    }
}

/* ---- programs ------------------------------------------------------------------------
 * One Python -> C call costs a few hundred ns, more than the work of many steps of a
 * small model (a 16 x 64 add, a layer_norm of 16 rows); a program runs a stretch of a
 * plan in one call. The table is the only list of callable functions, each with its
 * signature, one letter per argument word (i: an integer, p: a pointer, f: a float, read
 * with F32): the Python side checks it against the function's prototype. */
#define W(i) (w[i])
#define PTR(i) ((void *)(intptr_t)w[i])
#define F32(i) lgk_u2f((uint32_t)(uint64_t)w[i])

#define LGK_PROGRAM_CALLS(X)                                                              \
    X(lgk_binary, "iippippippii",                                                         \
      lgk_binary(W(0), W(1), PTR(2), PTR(3), W(4), PTR(5), PTR(6), W(7), PTR(8), PTR(9),  \
                 W(10), W(11)))                                                           \
    X(lgk_unary, "iippi", lgk_unary(W(0), W(1), PTR(2), PTR(3), W(4)))                    \
    X(lgk_softmax, "iiippi", lgk_softmax(W(0), W(1), W(2), PTR(3), PTR(4), W(5)))          \
    X(lgk_log_softmax, "iiippi", lgk_log_softmax(W(0), W(1), W(2), PTR(3), PTR(4), W(5)))  \
    X(lgk_layer_norm, "iipppfpi",                                                         \
      lgk_layer_norm(W(0), W(1), PTR(2), PTR(3), PTR(4), F32(5), PTR(6), W(7)))           \
    X(lgk_rms_norm, "iippfpi",                                                            \
      lgk_rms_norm(W(0), W(1), PTR(2), PTR(3), F32(4), PTR(5), W(6)))                     \
    X(lgk_reduce, "iiiipp", lgk_reduce(W(0), W(1), W(2), W(3), PTR(4), PTR(5)))            \
    X(lgk_permute_copy, "ippippi",                                                        \
      lgk_permute_copy(W(0), PTR(1), PTR(2), W(3), PTR(4), PTR(5), W(6)))                 \
    X(lgk_permute_copy_elems, "iippippi",                                                 \
      lgk_permute_copy_elems(W(0), W(1), PTR(2), PTR(3), W(4), PTR(5), PTR(6), W(7)))     \
    X(lgk_permute_copy_threads, "ippippii",                                               \
      lgk_permute_copy_threads(W(0), PTR(1), PTR(2), W(3), PTR(4), PTR(5), W(6), W(7)))   \
    X(lgk_permute_copy_elems_threads, "iippippii",                                        \
      lgk_permute_copy_elems_threads(W(0), W(1), PTR(2), PTR(3), W(4), PTR(5), PTR(6),     \
                                     W(7), W(8)))                                          \
    X(lgk_sgemm, "iiipiiipiiipiipiiii",                                                   \
      lgk_sgemm(W(0), W(1), W(2), PTR(3), W(4), W(5), W(6), PTR(7), W(8), W(9), W(10),    \
                PTR(11), W(12), W(13), PTR(14), W(15), W(16), W(17), W(18)))              \
    X(lgk_sgemm_prepacked, "iiipiiipipiipiiii",                                           \
      lgk_sgemm_prepacked(W(0), W(1), W(2), PTR(3), W(4), W(5), W(6), PTR(7), W(8),       \
                          PTR(9), W(10), W(11), PTR(12), W(13), W(14), W(15), W(16)))     \
    X(lgk_sgemm_batched, "iiiipipiipipiipiiipiiii",                                       \
      lgk_sgemm_batched(W(0), W(1), W(2), W(3), PTR(4), W(5), PTR(6), W(7), W(8), PTR(9), \
                        W(10), PTR(11), W(12), W(13), PTR(14), W(15), W(16), W(17),       \
                        PTR(18), W(19), W(20), W(21), W(22)))                             \
    X(lgk_sgemm_batched_softmax, "iiiipipiipipiipiiii",                                 \
      lgk_sgemm_batched_softmax(W(0), W(1), W(2), W(3), PTR(4), W(5), PTR(6), W(7), W(8), \
                                PTR(9), W(10), PTR(11), W(12), W(13), PTR(14), W(15),     \
                                W(16), W(17), W(18)))                                     \
    X(lgk_conv2d_nchw, "ppipipipiii",                                                     \
      lgk_conv2d_nchw(PTR(0), PTR(1), W(2), PTR(3), W(4), PTR(5), W(6), PTR(7), W(8),     \
                      W(9), W(10)))                                                       \
    X(lgk_conv2d_nchw_prepacked, "ppipipipiii",                                           \
      lgk_conv2d_nchw_prepacked(PTR(0), PTR(1), W(2), PTR(3), W(4), PTR(5), W(6), PTR(7), \
                                W(8), W(9), W(10)))                                       \
    X(lgk_conv2d_nchw_packed_a, "ppipipipiii",                                            \
      lgk_conv2d_nchw_packed_a(PTR(0), PTR(1), W(2), PTR(3), W(4), PTR(5), W(6), PTR(7),  \
                               W(8), W(9), W(10)))                                        \
    X(lgk_max_pool2d_nchw, "ppipii",                                                       \
      lgk_max_pool2d_nchw(PTR(0), PTR(1), W(2), PTR(3), W(4), W(5)))                        \
    X(lgk_avg_pool2d_nchw, "ppipii",                                                       \
      lgk_avg_pool2d_nchw(PTR(0), PTR(1), W(2), PTR(3), W(4), W(5)))

#define PROGRAM_CODE(fn, signature, call) PROGRAM_##fn,
enum { LGK_PROGRAM_CALLS(PROGRAM_CODE) PROGRAM_COUNT };
#define PROGRAM_NAME(fn, signature, call) [PROGRAM_##fn] = #fn,
static const char *const program_names[PROGRAM_COUNT] = {LGK_PROGRAM_CALLS(PROGRAM_NAME)};
#define PROGRAM_SIGNATURE(fn, signature, call) [PROGRAM_##fn] = signature,
static const char *const program_signatures[PROGRAM_COUNT] = {
    LGK_PROGRAM_CALLS(PROGRAM_SIGNATURE)};

int lgk_program_call_count(void) { return PROGRAM_COUNT; }

const char *lgk_program_call_name(int code)
{
    return code >= 0 && code < PROGRAM_COUNT ? program_names[code] : NULL;
}

const char *lgk_program_call_signature(int code)
{
    return code >= 0 && code < PROGRAM_COUNT ? program_signatures[code] : NULL;
}

int lgk_run_program(int64_t count, const int64_t *program, int64_t program_len,
                    int64_t *failed)
{
    LGK_CHECK(failed != NULL && (count == 0 || program != NULL), LGK_ERR_NULL);
    LGK_CHECK(count >= 0 && program_len >= 0, LGK_ERR_SHAPE);
    const int64_t *end = program + program_len;
    for (int64_t k = 0; k < count; ++k) {
        *failed = k;
        LGK_CHECK(end - program >= 1, LGK_ERR_SHAPE);
        int64_t code = program[0];
        LGK_CHECK(code >= 0 && code < PROGRAM_COUNT, LGK_ERR_ARG);
        int64_t arity = (int64_t)strlen(program_signatures[code]);
        LGK_CHECK(end - program - 1 >= arity, LGK_ERR_SHAPE);
        const int64_t *w = program + 1;
        int status = LGK_ERR_ARG;
        switch (code) {
#define PROGRAM_CASE(fn, signature, call) \
        case PROGRAM_##fn:            \
            status = call;            \
            break;
            LGK_PROGRAM_CALLS(PROGRAM_CASE)
        default:
            break;
        }
        if (status != LGK_OK)
            return status;
        program = w + arity;
    }
    *failed = -1;
    return LGK_OK;
}
#undef W
#undef PTR
#undef F32

static _Atomic int cpu_avx512bw = -1; /* -1: not looked up yet */

int lgk_cpu_avx512bw(void)
{
    int v = cpu_avx512bw;
    if (v < 0) {
        v = 0;
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
            && __builtin_cpu_supports("avx512vl");
#endif
        cpu_avx512bw = v;
    }
    return v;
}
