/* What the library's files share and do not export: helpers inlined where
 * they are used (static inline), shared types and constants, and the
 * entries one file defines and others call, hidden (not exported: the
 * library's exported symbols are nano_kernels.h's). */
#ifndef NANO_KERNELS_INTERNAL_H
#define NANO_KERNELS_INTERNAL_H
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nano_kernels.h"

/* An entry of one file that the others call, kept out of the exports. */
#define HIDDEN __attribute__((visibility("hidden")))

/* For loops that do one element's arithmetic at a time: vectors as wide as
 * the CPU has (GCC otherwise keeps to 256 bits on AVX-512 CPUs; at 512 the
 * tanh GELU takes 2.0 ns an element instead of 2.8 on the test machine).
 * The arithmetic of each element is the same at any width. */
#if defined(__GNUC__) && !defined(__clang__)
#define WIDEST_VECTORS __attribute__((target("prefer-vector-width=512"), noinline))
#else
#define WIDEST_VECTORS
#endif

static inline uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float float_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static inline float pick(int condition, float yes, float no) { return condition ? yes : no; }

/* MLX's exp (mlx/backend/cpu/simd/math.h) at one element. */
static inline float exp_mlx(float x_init) {
    float x = x_init * 1.442695f;
    float ipart = (float)floor((double)x + 0.5);
    float fpart = x - ipart;
    x = 1.535336188319500e-4f;
    x = fmaf(x, fpart, 1.339887440266574e-3f);
    x = fmaf(x, fpart, 9.618437357674640e-3f);
    x = fmaf(x, fpart, 5.550332471162809e-2f);
    x = fmaf(x, fpart, 2.402264791363012e-1f);
    x = fmaf(x, fpart, 6.931472028550421e-1f);
    x = fmaf(x, fpart, 1.000000000000000f);
    float scale = float_of((uint32_t)((int32_t)ipart + 127) << 23);
    float result = pick(isnan(x_init), x_init, scale * x);
    result = pick(x_init > 88.0f, INFINITY, result);
    return pick(x_init < -88.0f, 0.0f, result);
}

/* Arrays from this many floats are shared with the helper thread (the
 * entries for MLX arrays and a prompt's rows). */
enum { LARGE = 32768 };

/* threads.c: work in pieces, shared with a helper thread */

typedef void (*piece_fn)(const void *argument, count_t piece);

/* run(argument, piece) for each piece of length of items, here and on the
 * helper; linger: a frame step's work. */
HIDDEN void in_pieces(piece_fn run, const void *argument, count_t items, count_t length,
                      int linger);

/* The length of each of up to PIECES pieces of items, a multiple of unit. */
HIDDEN count_t piece_length(count_t items, count_t unit);

/* Where the piece of length starting at first ends, in items. */
static inline count_t piece_end(count_t first, count_t length, count_t items) {
    return items - first < length ? items : first + length;
}

typedef void (*span_fn)(const float *, float *, count_t, count_t);

/* Arrays of at least least floats in pieces of whole rows of width, shared
 * with the helper thread (linger: in a frame step). */
HIDDEN void in_shares(span_fn fn, const float *x, float *out, count_t n, count_t width,
                      count_t least, int linger);

/* activations.c */

/* The first largest of x (skipping NaN; minus infinity if none). */
HIDDEN float largest(const float *x, count_t n);
/* MLX's softmax over rows of width floats, n floats in all, on this thread. */
HIDDEN void softmax_span(const float *x, float *out, count_t n, count_t width);
/* The GELUs as span_fn, for in_shares. */
HIDDEN void gelu_tanh_rows(const float *x, float *out, count_t n, count_t width);
HIDDEN void gelu_erf_rows(const float *x, float *out, count_t n, count_t width);

/* products.c */

/* The BLAS's cblas_sgemm (set by use_blas) and its arguments' codes. */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
extern HIDDEN sgemm_fn blas_sgemm;
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

typedef void (*product_fn)(const float *, count_t, const float *, const float *, float *,
                           count_t, count_t);

/* product's numbers for x @ w.T (+ bias), from w's panel where given and
 * product would chain them. */
HIDDEN void weighed(product_fn product, const float *panel, const float *x, count_t rows,
                    const float *w, const float *bias, float *out, count_t outs, count_t ins);

/* The own products' lanes (products.c) and the codec's fast attention's. */
typedef float lanes __attribute__((vector_size(64), aligned(64)));
enum { LANES = 16 };

/* a * b + c, each lane rounded once. */
static inline __attribute__((always_inline)) lanes fused(lanes a, lanes b, lanes c) {
#if defined(__AVX512F__)
    return (lanes)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__)
    union { lanes whole; __m256 half[2]; } p = {a}, q = {b}, s = {c};
    s.half[0] = _mm256_fmadd_ps(p.half[0], q.half[0], s.half[0]);
    s.half[1] = _mm256_fmadd_ps(p.half[1], q.half[1], s.half[1]);
    return s.whole;
#else
    lanes out;
    for (int l = 0; l < LANES; l++) out[l] = fmaf(a[l], b[l], c[l]);
    return out;
#endif
}

static inline lanes load_lanes(const float *p) {
    lanes v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline lanes every_lane(float v) {
#if defined(__AVX512F__)
    return (lanes)_mm512_set1_ps(v);
#else
    lanes out;
    for (int l = 0; l < LANES; l++) out[l] = v;
    return out;
#endif
}

static inline float lanes_total(lanes sums) {
    float v[LANES];
    memcpy(v, &sums, sizeof v);
    for (int width = LANES / 2; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) v[l] = v[l] + v[l + width];
    return v[0];
}

/* blocks.c */

/* One row's queries and keys rotated and its keys and values written into
 * a cache laid out [heads, capacity, dim] at position. */
HIDDEN void place_row(count_t width, count_t heads, float *qkv, const float *cos,
                      const float *sin, float *keys, float *values, count_t capacity,
                      count_t position);
/* rows queries over the cache's first start + rows positions, causally,
 * within a context (0: none), as MLX computes them. */
HIDDEN void attend_rows(const float *q, count_t rows, const float *keys, const float *values,
                        count_t heads, count_t capacity, count_t start, count_t context,
                        count_t dim, float scale, float *scaled, float *scores, float *out,
                        float *gathered);

#endif
