/* The GELUs of MOSS-TTS-Nano's transformers and codec, and the softmax of
 * its attention, number for number as MLX computes them on Linux's CPU
 * backend, vectorized.
 *
 * MLX's CPU backend evaluates tanh and pow one element at a time through the
 * C library, and erf and exp through its own formulas built on scalar fma
 * calls. These loops compute the same numbers: powf's cubes as glibc's x86-64
 * build computes them (or powf itself); tanhf as glibc's (fdlibm's
 * algorithm, its branches taken as selects, so the compiler can vectorize
 * it); MLX's erf and exp formulas, with fmaf where MLX
 * calls fma. Built with -ffp-contract=off, so no multiply-add is fused that
 * MLX does not fuse. The Python side checks the results against MLX's before
 * using them.
 *
 * On these, the frame step on the host (host_step.py) builds its blocks,
 * heads' draws, products in OpenBLAS's order that read each weight once
 * (for greedy requests, and the codec decoder's) and, for sampling
 * requests, products of the library's own (sections below). */
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef long count_t;

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

/* fdlibm's expm1f for the arguments tanhf gives it (|x| < 44). */
static inline float expm1_fdlibm(float x) {
    const float ln2_hi = 6.9313812256e-01f, ln2_lo = 9.0580006145e-06f;
    const float invln2 = 1.4426950216e+00f;
    const float q1 = -3.3333335072e-02f, q2 = 1.5873016091e-03f, q3 = -7.9365076090e-05f;
    const float q4 = 4.0082177293e-06f, q5 = -2.0109921195e-07f;
    uint32_t hx = bits_of(x) & 0x7fffffffu;
    int negative = x < 0.0f;
    int reduced = hx > 0x3eb17218u;
    int near = hx < 0x3f851592u;
    int32_t k_far = (int32_t)(invln2 * x + pick(negative, -0.5f, 0.5f));
    int32_t k = reduced * (near * (1 - 2 * negative) + (1 - near) * k_far);  /* selects, as arithmetic: vectorizes */
    float t = (float)k;
    float hi = pick(near, pick(negative, x + ln2_hi, x - ln2_hi), x - t * ln2_hi);
    float lo = pick(near, pick(negative, -ln2_lo, ln2_lo), t * ln2_lo);
    float r = pick(reduced, hi - lo, x);
    float c = pick(reduced, (hi - (hi - lo)) - lo, 0.0f);
    float hfx = 0.5f * r;
    float hxs = r * hfx;
    float r1 = 1.0f + hxs * (q1 + hxs * (q2 + hxs * (q3 + hxs * (q4 + hxs * q5))));
    float t3 = 3.0f - r1 * hfx;
    float e = hxs * ((r1 - t3) / (6.0f - r * t3));
    float at_k0 = r - (r * e - hxs);
    e = (r * (e - c) - c) - hxs;
    float at_minus1 = 0.5f * (r - e) - 0.5f;
    float at_1 = pick(r < -0.25f, -2.0f * (e - (r + 0.5f)), 1.0f + 2.0f * (r - e));
    uint32_t exponent = (uint32_t)k << 23;
    float far = float_of(bits_of(1.0f - (e - r)) + exponent) - 1.0f;
    int32_t shift = k < 0 ? 0 : (k > 31 ? 31 : k);
    float mid = float_of(bits_of(float_of(0x3f800000u - (0x1000000u >> shift)) - (e - r)) + exponent);
    float high = float_of(bits_of((r - (e + float_of((uint32_t)(0x7f - k) << 23))) + 1.0f) + exponent);
    float out = pick(k < 23, mid, high);
    out = pick((k <= -2) | (k > 56), far, out);
    out = pick(k == 1, at_1, out);
    out = pick(k == -1, at_minus1, out);
    out = pick(k == 0, at_k0, out);
    return pick(hx < 0x33000000u, x, out);
}

static inline float tanh_fdlibm(float x) {
    uint32_t ix = bits_of(x) & 0x7fffffffu;
    float a = fabsf(x);
    int large = ix >= 0x3f800000u; /* fdlibm's branch, taken as a select */
    float e = expm1_fdlibm(pick(large, 2.0f * a, -2.0f * a));
    float z = pick(large, 1.0f - 2.0f / (e + 2.0f), -e / (e + 2.0f));
    z = pick(ix >= 0x41b00000u, 1.0f, z);
    z = pick(ix < 0x24000000u, x * (1.0f + x), z);
    z = pick(bits_of(x) >> 31, -z, z);
    return pick(ix > 0x7f800000u, x + x, z);
}

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

/* MLX's erf (the same file) at one element. */
static inline float erf_mlx(float v) {
    float t = 1.0f / fmaf(0.3275911f, fabsf(v), 1.0f);
    float r = fmaf(1.061405429f, t, -1.453152027f);
    r = fmaf(r, t, 1.421413741f);
    r = fmaf(r, t, -0.284496736f);
    r = fmaf(r, t, 0.254829592f);
    float e = -exp_mlx(-v * v);
    float result = fmaf(e * t, r, 1.0f);
    return pick(v > 0.0f, result, -result);
}

/* powf(x, 3.0f) as glibc computes it on x86-64 CPUs with FMA and AVX2 (the
 * variant it picks there, from glibc 2.28 on): log2 |x| from a 16-entry table
 * and a polynomial, times 3, then 2 to that from a 32-entry table and a
 * polynomial, all in double, with the multiply-adds its build fuses fused
 * (read from its machine code); the tables and coefficients are its own.
 * For |x| in [2^-41, 2^41] only, where none of powf's special cases (zero,
 * denormals, infinities, NaN, results near overflow or underflow) apply.
 * Checked against all 2^32 inputs (bench/check_cubes.py). */
static const double LOG2_INVERSES[16] = {
    0x1.661ec79f8f3bep+0, 0x1.571ed4aaf883dp+0, 0x1.49539f0f010b0p+0, 0x1.3c995b0b80385p+0,
    0x1.30d190c8864a5p+0, 0x1.25e227b0b8ea0p+0, 0x1.1bb4a4a1a343fp+0, 0x1.12358f08ae5bap+0,
    0x1.0953f419900a7p+0, 0x1.0000000000000p+0, 0x1.e608cfd9a47acp-1, 0x1.ca4b31f026aa0p-1,
    0x1.b2036576afce6p-1, 0x1.9c2d163a1aa2dp-1, 0x1.886e6037841edp-1, 0x1.767dcf5534862p-1};
static const double LOG2_OF_CENTRES[16] = {
    -0x1.efec65b963019p-2, -0x1.b0b6832d4fca4p-2, -0x1.7418b0a1fb77bp-2, -0x1.39de91a6dcf7bp-2,
    -0x1.01d9bf3f2b631p-2, -0x1.97c1d1b3b7af0p-3, -0x1.2f9e393af3c9fp-3, -0x1.960cbbf788d5cp-4,
    -0x1.a6f9db6475fcep-5, 0x0.0p+0, 0x1.338ca9f24f53dp-4, 0x1.476a9543891bap-3,
    0x1.e840b4ac4e4d2p-3, 0x1.40645f0c6651cp-2, 0x1.88e9c2c1b9ff8p-2, 0x1.ce0a44eb17bccp-2};
static const uint64_t EXP2_FRACTIONS[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540};

/* Type puns the vectorizer sees through (memcpy of a double it does not). */
static inline uint64_t bits_of_double(double x) { union { double d; uint64_t u; } v = {.d = x}; return v.u; }
static inline double double_of(uint64_t u) { union { uint64_t u; double d; } v = {.u = u}; return v.d; }

static inline float cube_as_powf(float x) {
    uint32_t magnitude = bits_of(x) & 0x7fffffffu;
    uint64_t negative = bits_of(x) >> 31;
    /* log2 |x| = log2(z / c) + log2(c) + k, z / c near 1 */
    uint32_t offset = magnitude - 0x3f330000u;
    int32_t entry = (int32_t)((offset >> 19) & 15u); /* signed: the vectorizer's gathers */
    uint32_t exponent_bits = offset & 0xff800000u;
    double z = (double)float_of(magnitude - exponent_bits);
    double r = fma(z, LOG2_INVERSES[entry], -1.0);
    double base = LOG2_OF_CENTRES[entry] + (double)((int32_t)exponent_bits >> 23);
    double r2 = r * r;
    double high = fma(r, 0x1.27616c9496e0bp-2, -0x1.71969a075c67ap-2);
    double middle = fma(r, 0x1.ec70a6ca7baddp-2, -0x1.7154748bef6c8p-1);
    double low = fma(r, 0x1.71547652ab82bp+0, base);
    double log2_x = fma(high, r2 * r2, fma(r2, middle, low));
    /* 2^(3 log2 |x|) = 2^(k / 32) 2^f, |f| <= 1 / 64; the sign joins the exponent */
    double power = 3.0 * log2_x;
    double shifted = power + 0x1.8p+47;
    uint64_t k = bits_of_double(shifted);
    double f = power - (shifted - 0x1.8p+47);
    uint64_t scale = EXP2_FRACTIONS[(int32_t)(k & 31)] + ((k + (negative << 16)) << 47);
    double near_one = fma(f, 0x1.62e42ff0c52d6p-1, 1.0);
    double result = fma(fma(f, 0x1.c6af84b912394p-5, 0x1.ebfce50fac4f3p-3), f * f, near_one);
    return (float)(result * double_of(scale));
}

static inline int cube_in_port_range(float x) {
    uint32_t magnitude = bits_of(x) & 0x7fffffffu;
    return magnitude >= 0x2b000000u && magnitude <= 0x54000000u; /* 2^-41 .. 2^41 */
}

static int cubes_ported; /* set by port_cubes, after the Python side's check */

/* Whether cubes now uses the port: where asked and where glibc's powf is the
 * variant it reproduces. */
int port_cubes(int on) {
#if defined(__x86_64__) && defined(__GLIBC__)
    __builtin_cpu_init();
    cubes_ported = on && __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
#else
    (void)on;
    cubes_ported = 0;
#endif
    return cubes_ported;
}

/* out[i] = powf(x[i], 3.0f), the port's numbers where it applies. */
WIDEST_VECTORS void cubes(const float *x, float *out, count_t n) {
    if (!cubes_ported) {
        for (count_t i = 0; i < n; i++) out[i] = powf(x[i], 3.0f);
        return;
    }
    int outside = 0;
    for (count_t i = 0; i < n; i++) {
        out[i] = cube_as_powf(x[i]);
        outside |= !cube_in_port_range(x[i]);
    }
    if (outside)
        for (count_t i = 0; i < n; i++)
            if (!cube_in_port_range(x[i])) out[i] = powf(x[i], 3.0f);
}

/* GPT-2's gelu_new: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))). */
WIDEST_VECTORS static void gelu_tanh_span(const float *x, float *out, count_t n) {
    cubes(x, out, n);
    for (count_t i = 0; i < n; i++) {
        float inner = 0.7978845608028654f * (x[i] + 0.044715f * out[i]);
        out[i] = (0.5f * x[i]) * (1.0f + tanh_fdlibm(inner));
    }
}

/* The exact GELU: 0.5 * x * (1 + erf(x / sqrt(2))). */
WIDEST_VECTORS static void gelu_erf_span(const float *x, float *out, count_t n) {
    for (count_t i = 0; i < n; i++)
        out[i] = (0.5f * x[i]) * (1.0f + erf_mlx(x[i] / 1.4142135623730951f));
}

static float largest(const float *x, count_t n);

/* Rows whose sums run side by side in softmax_span: each row's sum stays in
 * order, and the rows' chains of additions overlap (one row's chain waits
 * on each addition's latency). */
enum { SOFTMAX_ROWS = 8 };

static inline __attribute__((always_inline)) void row_totals(const float *o, count_t width,
                                                             int rows, float *totals) {
    for (int r = 0; r < rows; r++) totals[r] = 0.0f;
    for (count_t j = 0; j < width; j++)
        for (int r = 0; r < rows; r++) totals[r] = totals[r] + o[r * width + j];
}

/* MLX's softmax over rows of width floats (mlx/backend/cpu/softmax.cpp, for
 * float32): the row's maximum, MLX's exp of each difference, their sum in
 * order, and each times the sum's reciprocal. */
static void softmax_span(const float *x, float *out, count_t n, count_t width) {
    for (count_t start = 0; start < n; start += SOFTMAX_ROWS * width) {
        int rows = (n - start) / width < SOFTMAX_ROWS ? (int)((n - start) / width) : SOFTMAX_ROWS;
        float *o = out + start, totals[SOFTMAX_ROWS];
        for (int r = 0; r < rows; r++) {
            const float *row = x + start + r * width;
            float top = largest(row, width);
            for (count_t j = 0; j < width; j++) o[r * width + j] = exp_mlx(row[j] - top);
        }
        if (rows == SOFTMAX_ROWS)
            row_totals(o, width, SOFTMAX_ROWS, totals);
        else
            row_totals(o, width, rows, totals);
        for (int r = 0; r < rows; r++) {
            float reciprocal = 1.0f / totals[r];
            for (count_t j = 0; j < width; j++) o[r * width + j] = o[r * width + j] * reciprocal;
        }
    }
}

/* ---- Work shared with a helper thread ----
 *
 * Large work comes in pieces, which this thread and a helper thread (living
 * as long as the process, started on first use) take in turn from a shared
 * counter until none is left. A thread that another process holds up takes
 * fewer and the other does the rest: with fixed halves, a process using a
 * fifth of one core slowed a frame step by half, waiting for the late half.
 * The caller waits only for the pieces the helper took. After a frame step's
 * work the helper spins briefly before it sleeps: those come back to back,
 * and waking a sleeping thread costs more than most of them. After any other
 * it sleeps at once, leaving the core to MLX's threads, which run between
 * them. A forked child starts a helper of its own. */

typedef void (*piece_fn)(const void *argument, count_t piece);

/* Work is split in up to this many pieces. */
enum { PIECES = 16 };

static struct {
    pthread_mutex_t lock, call;
    pthread_cond_t posted, finished;
    piece_fn run;
    const void *argument;
    count_t pieces;
    uint32_t generation;  /* of the work posted last */
    uint64_t claims;      /* the work's generation << 32 | the next piece to take */
    count_t done;         /* pieces of the work finished */
    int running, linger;
} helper = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
            PTHREAD_COND_INITIALIZER};

#define SPINS 20000

static inline void pause_briefly(void) {
#if defined(__x86_64__)
    _mm_pause();
#endif
}

/* Runs pieces of the work of generation while any is left; whether it
 * finished the work's last piece. A piece is taken only while its work's
 * caller waits for it, so argument is valid for every piece run. */
static int take_pieces(uint32_t generation, piece_fn run, const void *argument,
                       count_t pieces) {
    uint64_t claim = __atomic_load_n(&helper.claims, __ATOMIC_ACQUIRE);
    for (;;) {
        count_t piece = (count_t)(claim & 0xffffffffu);
        if ((uint32_t)(claim >> 32) != generation || piece >= pieces) return 0;
        if (!__atomic_compare_exchange_n(&helper.claims, &claim, claim + 1, 0,
                                         __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            continue;
        run(argument, piece);
        if (__atomic_add_fetch(&helper.done, 1, __ATOMIC_ACQ_REL) == pieces) return 1;
        claim = __atomic_load_n(&helper.claims, __ATOMIC_ACQUIRE);
    }
}

static void *helper_loop(void *unused) {
    (void)unused;
    uint32_t seen = 0;
    int linger = 0;
    for (;;) {
        for (int spin = 0; linger && spin < SPINS; spin++) {
            if (__atomic_load_n(&helper.generation, __ATOMIC_ACQUIRE) != seen) break;
            pause_briefly();
        }
        pthread_mutex_lock(&helper.lock);
        while (helper.generation == seen) pthread_cond_wait(&helper.posted, &helper.lock);
        seen = helper.generation;
        piece_fn run = helper.run;
        const void *argument = helper.argument;
        count_t pieces = helper.pieces;
        linger = helper.linger;
        pthread_mutex_unlock(&helper.lock);
        if (take_pieces(seen, run, argument, pieces)) {
            pthread_mutex_lock(&helper.lock);
            pthread_cond_signal(&helper.finished);
            pthread_mutex_unlock(&helper.lock);
        }
    }
    return NULL;
}

static void forget_helper(void) {
    helper.running = 0;
    helper.generation = 0;
    helper.claims = 0;
    pthread_mutex_init(&helper.lock, NULL);
    pthread_mutex_init(&helper.call, NULL);
    pthread_cond_init(&helper.posted, NULL);
    pthread_cond_init(&helper.finished, NULL);
}

static int helper_ready(void) {
    static int watching_forks;
    if (!watching_forks) watching_forks = pthread_atfork(NULL, NULL, forget_helper) == 0;
    if (!helper.running) {
        pthread_t thread;
        if (!watching_forks || pthread_create(&thread, NULL, helper_loop, NULL) != 0) return 0;
        pthread_detach(thread);
        helper.running = 1;
    }
    return 1;
}

/* run(argument, piece) for each piece of length of items, here and on the
 * helper (all here if there is one piece or the helper cannot start);
 * linger: a frame step's work. */
static void in_pieces(piece_fn run, const void *argument, count_t items, count_t length,
                      int linger) {
    count_t pieces = length ? (items + length - 1) / length : 0;
    if (pieces == 1) {
        run(argument, 0);
        return;
    }
    pthread_mutex_lock(&helper.call);
    if (pieces == 0 || !helper_ready()) {
        pthread_mutex_unlock(&helper.call);
        for (count_t piece = 0; piece < pieces; piece++) run(argument, piece);
        return;
    }
    pthread_mutex_lock(&helper.lock);
    uint32_t generation = helper.generation + 1;
    helper.run = run;
    helper.argument = argument;
    helper.pieces = pieces;
    helper.linger = linger;
    __atomic_store_n(&helper.done, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&helper.claims, (uint64_t)generation << 32, __ATOMIC_RELEASE);
    __atomic_store_n(&helper.generation, generation, __ATOMIC_RELEASE);
    pthread_cond_signal(&helper.posted);
    pthread_mutex_unlock(&helper.lock);
    take_pieces(generation, run, argument, pieces);
    for (int spin = 0; spin < SPINS; spin++) {
        if (__atomic_load_n(&helper.done, __ATOMIC_ACQUIRE) == pieces) break;
        pause_briefly();
    }
    pthread_mutex_lock(&helper.lock);
    while (__atomic_load_n(&helper.done, __ATOMIC_ACQUIRE) != pieces)
        pthread_cond_wait(&helper.finished, &helper.lock);
    pthread_mutex_unlock(&helper.lock);
    pthread_mutex_unlock(&helper.call);
}

/* The length of each of up to PIECES pieces of items, a multiple of unit. */
static count_t piece_length(count_t items, count_t unit) {
    count_t units = (items + unit - 1) / unit;
    return (units + PIECES - 1) / PIECES * unit;
}

/* Where the piece of length starting at first ends, in items. */
static inline count_t piece_end(count_t first, count_t length, count_t items) {
    return items - first < length ? items : first + length;
}

typedef void (*span_fn)(const float *, float *, count_t, count_t);
struct span { span_fn fn; const float *x; float *out; count_t n, width, length; };

static void run_span(const void *argument, count_t piece) {
    const struct span *s = argument;
    count_t first = piece * s->length;
    s->fn(s->x + first, s->out + first, piece_end(first, s->length, s->n) - first, s->width);
}

/* Arrays of at least least floats in pieces of whole rows of width, shared
 * with the helper thread (linger: in a frame step). */
static void in_shares(span_fn fn, const float *x, float *out, count_t n, count_t width,
                      count_t least, int linger) {
    count_t unit = width > 1 ? width : 64; /* a lone value's pieces: whole cache lines */
    count_t length = n < least || n < 2 * unit ? n : piece_length(n, unit);
    struct span whole = {fn, x, out, n, width, length};
    in_pieces(run_span, &whole, n, length, linger);
}

static void gelu_tanh_rows(const float *x, float *out, count_t n, count_t width) {
    (void)width;
    gelu_tanh_span(x, out, n);
}

static void gelu_erf_rows(const float *x, float *out, count_t n, count_t width) {
    (void)width;
    gelu_erf_span(x, out, n);
}

/* The entries for MLX arrays (exact_activations.py) and a prompt's rows:
 * large ones shared with the helper thread. */
enum { LARGE = 32768 };

void gelu_tanh(const float *x, float *out, count_t n) {
    in_shares(gelu_tanh_rows, x, out, n, 1, LARGE, 0);
}
void gelu_erf(const float *x, float *out, count_t n) {
    in_shares(gelu_erf_rows, x, out, n, 1, LARGE, 0);
}
void softmax(const float *x, float *out, count_t n, count_t width) {
    in_shares(softmax_span, x, out, n, width, LARGE, 0);
}

/* ---- Rows through a GPT-2 block, outside MLX ----
 *
 * The frame step on the host runs each block in C on host buffers: the
 * products through the BLAS MLX itself calls (its sgemm's address handed
 * over by use_blas), as MLX calls it (the same numbers), or through this
 * library's own product (below); between them MLX's layer norm, rotation,
 * attention and GELU, number for number. */

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
static sgemm_fn blas_sgemm;
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

void use_blas(void *gemm) { blas_sgemm = (sgemm_fn)gemm; }

/* MLX's layer norm on the CPU (its fallback: mean as the sum times 1/n,
 * the centred values, their mean square, times 1/sqrt(var + eps), then the
 * weight and bias), for rows of width floats. */
void layer_norm(const float *x, const float *w, const float *b, float eps, float *out,
                count_t n, count_t width) {
    float inverse = (float)(1.0 / (double)width);
    for (count_t start = 0; start < n; start += width) {
        const float *row = x + start;
        float *o = out + start;
        float total = 0.0f;
        for (count_t j = 0; j < width; j++) total = total + row[j];
        float mean = total * inverse;
        float squares = 0.0f;
        for (count_t j = 0; j < width; j++) {
            o[j] = row[j] - mean;
            squares = squares + o[j] * o[j];
        }
        float scale = 1.0f / sqrtf(squares * inverse + eps);
        for (count_t j = 0; j < width; j++) o[j] = (o[j] * scale) * w[j] + b[j];
    }
}

/* One query row (heads * dim floats) over a cache of keys and values laid
 * out [heads, capacity, dim], its first length positions: MLX's attention on
 * the CPU (the queries scaled, their product with the keys, the softmax, the
 * product with the values), each product the sgemm MLX makes. scores holds
 * length floats. */
static void attend_row(const float *q, const float *keys, const float *values, count_t heads,
                count_t capacity, count_t length, count_t dim, float scale, float *scaled,
                float *scores, float *out) {
    for (count_t h = 0; h < heads; h++) {
        const float *k = keys + h * capacity * dim, *v = values + h * capacity * dim;
        for (count_t j = 0; j < dim; j++) scaled[j] = scale * q[h * dim + j];
        blas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, 1, length, dim, 1.0f, scaled, dim, k, dim, 0.0f,
                   scores, length);
        softmax_span(scores, scores, length, length);
        blas_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, 1, dim, length, 1.0f, scores, length, v, dim,
                   0.0f, out + h * dim, dim);
    }
}

/* mlx-audio's rotation of each head's dim floats: x * cos + rotate_half(x) *
 * sin, where rotate_half pairs (a, b) into (-b, a). */
static void rotate(float *x, const float *cos, const float *sin, count_t heads, count_t dim) {
    for (count_t h = 0; h < heads; h++) {
        float *p = x + h * dim;
        for (count_t j = 0; j < dim; j += 2) {
            float even = p[j], odd = p[j + 1];
            p[j] = even * cos[j] + (-odd) * sin[j];
            p[j + 1] = odd * cos[j + 1] + even * sin[j + 1];
        }
    }
}

/* A block's weights and biases; the panels (see panel_product; NULL: none)
 * of those whose products the frame step takes most often. */
struct block {
    const float *ln_1_w, *ln_1_b, *attn_w, *attn_b, *proj_w, *proj_b;
    const float *ln_2_w, *ln_2_b, *fc_in_w, *fc_in_b, *fc_out_w, *fc_out_b;
    count_t width, heads, inner;
    float eps, scale;
    const float *attn_panel, *fc_in_panel, *fc_out_panel;
};

/* ---- A sampling head's draw, as mlx-speech's compiled draw computes it ----
 *
 * The temperature, mlx-audio's top-k and top-p filters and MLX's inverse-CDF
 * draw (sampling.py) for one row of logits, with MLX's log-softmax,
 * stable argsort and running sums. MLX keeps the top k by a partition whose
 * order among equal values is its own, so a tie at the k-th place returns
 * -1: the caller draws through MLX instead. */

/* x - max(x), then minus the log of the sum of exps, as MLX's log_softmax
 * and logsumexp compute them. */
static void log_softmax_row(const float *x, float *out, count_t n) {
    float top = largest(x, n);
    for (count_t j = 0; j < n; j++) out[j] = x[j] - top;
    float shifted_top = largest(out, n);
    float total = 0.0f;
    for (count_t j = 0; j < n; j++) total = total + exp_mlx(out[j] - shifted_top);
    float normalizer = isinf(shifted_top) ? shifted_top : logf(total) + shifted_top;
    for (count_t j = 0; j < n; j++) out[j] = out[j] - normalizer;
}

struct ranked { float value; long index; };

static int ascending(const void *a, const void *b) {
    const struct ranked *x = a, *y = b;
    if (x->value != y->value) return x->value < y->value ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The k-th and the (k+1)-th largest of x: one pass keeping the k + 1
 * largest in order (best: k + 1 floats). */
static void kth_and_next(const float *x, count_t n, count_t k, float *best, float *kth,
                         float *next) {
    count_t kept = 0;
    for (count_t j = 0; j < n; j++) {
        float v = x[j];
        if (kept == k + 1 && !(v > best[k])) continue;
        count_t at = kept < k + 1 ? kept++ : k;
        while (at > 0 && best[at - 1] < v) {
            best[at] = best[at - 1];
            at--;
        }
        best[at] = v;
    }
    *kth = best[k - 1];
    *next = best[k];
}

/* work: 2 * n + top_k + 1 floats; ranks: n entries. */
long filtered_draw(const float *logits, count_t n, float temperature, count_t top_k,
                   int top_p, float threshold, float uniform, float *work,
                   struct ranked *ranks) {
    float *scores = work, *logprobs = work + n;
    int nan = 0;
    for (count_t j = 0; j < n; j++) nan |= isnan(logits[j]);
    if (nan) return -1;
    for (count_t j = 0; j < n; j++) scores[j] = logits[j] / temperature;
    if (top_k) {
        log_softmax_row(scores, logprobs, n);
        float kth, next;
        kth_and_next(logprobs, n, top_k, work + 2 * n, &kth, &next);
        if (next == kth) return -1;
        for (count_t j = 0; j < n; j++) scores[j] = logprobs[j] >= kth ? scores[j] : -INFINITY;
    }
    if (top_p) {
        /* MLX sorts every token (stably) and adds up their probabilities from
         * the least likely; those at minus infinity come first and add 0. */
        log_softmax_row(scores, logprobs, n);
        count_t finite = 0;
        for (count_t j = 0; j < n; j++)
            if (logprobs[j] != -INFINITY) ranks[finite++] = (struct ranked){logprobs[j], j};
        qsort(ranks, finite, sizeof *ranks, ascending);
        float running = 0.0f;
        for (count_t j = 0; j < finite; j++) {
            long token = ranks[j].index;
            running = running + exp_mlx(logprobs[token]);
            if (!(running > threshold)) scores[token] = -INFINITY;
        }
    }
    float top = largest(scores, n);
    for (count_t j = 0; j < n; j++) /* each weight, then the running sum */
        logprobs[j] = isinf(top) ? (float)(scores[j] == top) : exp_mlx(scores[j] - top);
    float total = 0.0f;
    for (count_t j = 0; j < n; j++) {
        total = total + logprobs[j];
        logprobs[j] = total;
    }
    float bound = uniform * total;
    long below = 0;
    for (count_t j = 0; j < n; j++) below += logprobs[j] < bound;
    return below;
}

/* ---- A prompt's rows through a block, outside MLX ----
 *
 * The rows of one request's prompt at positions start.. (its cache holds
 * the positions before), as MLX computes them: each product sgemm's numbers
 * over all rows (rows_product; the bias first copied to every row, as MLX's
 * addmm does), each row attending over the cache up to its own position,
 * the others masked with float32's lowest value as mlx-audio's causal mask
 * does. */

/* out = x @ w.T (+ bias) for rows rows of x: one sgemm, as MLX computes a
 * product of stacked rows (NULL bias: beta 0, as MLX's matmul). */
void sgemm_product(const float *x, count_t rows, const float *w, const float *bias,
                   float *out, count_t outs, count_t ins) {
    if (bias)
        for (count_t r = 0; r < rows; r++) memcpy(out + r * outs, bias, outs * sizeof(float));
    blas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, rows, outs, ins, 1.0f, x, ins, w, ins,
               bias ? 1.0f : 0.0f, out, outs);
}

/* sgemm's numbers for x @ w.T (+ bias), by the fastest way known to give them
 * (below, with the library's own products). */
void rows_product(const float *x, count_t rows, const float *w, const float *bias,
                  float *out, count_t outs, count_t ins);

/* out = x @ w^T for x given by its columns (ins runs of rows floats: MLX's
 * transposed view of an [ins, rows] array), one sgemm as MLX calls it for
 * such a view. */
void columns_product(const float *x, count_t rows, const float *w, float *out, count_t outs,
                     count_t ins) {
    blas_sgemm(ROW_MAJOR, TRANS, TRANS, rows, outs, ins, 1.0f, x, rows, w, ins, 0.0f, out, outs);
}

/* rows queries (heads * dim floats each) over the cache's first start + rows
 * positions, query r at position start + r seeing the positions up to its
 * own and, with a context (0: none), fewer than context before it; scaled:
 * rows * dim floats, scores: rows * (start + rows). */
static void attend_rows(const float *q, count_t rows, const float *keys, const float *values,
                        count_t heads, count_t capacity, count_t start, count_t context,
                        count_t dim, float scale, float *scaled, float *scores, float *out,
                        float *gathered) {
    count_t length = start + rows, width = heads * dim;
    for (count_t h = 0; h < heads; h++) {
        const float *k = keys + h * capacity * dim, *v = values + h * capacity * dim;
        for (count_t r = 0; r < rows; r++)
            for (count_t j = 0; j < dim; j++) scaled[r * dim + j] = scale * q[r * width + h * dim + j];
        blas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, rows, length, dim, 1.0f, scaled, dim, k, dim, 0.0f,
                   scores, length);
        for (count_t r = 0; r < rows; r++) {
            float *row = scores + r * length;
            for (count_t j = start + r + 1; j < length; j++) row[j] = row[j] + -FLT_MAX;
            for (count_t j = 0; context && j + context <= start + r; j++) row[j] = row[j] + -FLT_MAX;
        }
        softmax(scores, scores, rows * length, length); /* two threads when large */
        blas_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, rows, dim, length, 1.0f, scores, length, v, dim,
                   0.0f, gathered, dim);
        for (count_t r = 0; r < rows; r++)
            memcpy(out + r * width + h * dim, gathered + r * dim, dim * sizeof(float));
    }
}

typedef void (*product_fn)(const float *, count_t, const float *, const float *, float *,
                           count_t, count_t);

/* product's numbers for x @ w.T (+ bias), from w's panel where given and
 * product would chain them (below, with the library's own products). */
static void weighed(product_fn product, const float *panel, const float *x, count_t rows,
                    const float *w, const float *bias, float *out, count_t outs, count_t ins);

/* One row's queries and keys (the first two thirds of its qkv) rotated
 * (cos, sin: its dim floats each; NULL: no rotation), and its keys and
 * values written into a cache laid out [heads, capacity, dim] at position. */
static void place_row(count_t width, count_t heads, float *qkv, const float *cos,
                      const float *sin, float *keys, float *values, count_t capacity,
                      count_t position) {
    count_t dim = width / heads;
    float *q = qkv, *k = qkv + width, *v = qkv + 2 * width;
    if (cos) {
        rotate(q, cos, sin, heads, dim);
        rotate(k, cos, sin, heads, dim);
    }
    for (count_t h = 0; h < heads; h++) {
        count_t at = (h * capacity + position) * dim;
        memcpy(keys + at, k + h * dim, dim * sizeof(float));
        memcpy(values + at, v + h * dim, dim * sizeof(float));
    }
}

/* The block after attention, on rows rows in place: c_proj and its
 * residual, ln_2, the MLP (its GELU shared from least values; linger: in
 * a frame step) and its residual. normed and projected: rows * width
 * floats; inner and activated: rows * inner. */
static void after_attention(const struct block *b, count_t rows, float *x,
                            const float *attended, product_fn product, float *normed,
                            float *projected, float *inner, float *activated, count_t least,
                            int linger) {
    count_t width = b->width, inner_width = b->inner;
    product(attended, rows, b->proj_w, b->proj_b, projected, width, width);
    for (count_t j = 0; j < rows * width; j++) x[j] = x[j] + projected[j];
    layer_norm(x, b->ln_2_w, b->ln_2_b, b->eps, normed, rows * width, width);
    weighed(product, b->fc_in_panel, normed, rows, b->fc_in_w, b->fc_in_b, inner, inner_width,
            width);
    in_shares(gelu_tanh_rows, inner, activated, rows * inner_width, 1, least, linger);
    weighed(product, b->fc_out_panel, activated, rows, b->fc_out_w, b->fc_out_b, projected,
            width, inner_width);
    for (count_t j = 0; j < rows * width; j++) x[j] = x[j] + projected[j];
}

/* Several prompts' rows through the block, in place: x holds prompt p's
 * rows[p] rows (width floats each) after prompt p - 1's. Each product runs
 * once over all of them (rows_product: the Python side lets prompts share
 * it only where that gives each row its own prompt's numbers); prompt p's
 * rows sit at positions starts[p].. and attend over its own cache (keys[p],
 * values[p], capacities[p]). cos and sin: dim floats for every row, in x's
 * order (NULL: no rotation). work: total * (6 * width + 2 * inner) + most *
 * (2 * dim + longest) floats, with total the rows of all prompts, most the
 * rows of the longest and longest the largest starts[p] + rows[p]. */
void block_prompts(const struct block *b, count_t count, const count_t *rows, float *x,
                   float *const *keys, float *const *values, const count_t *capacities,
                   const count_t *starts, const float *cos, const float *sin, float *work) {
    count_t width = b->width, dim = width / b->heads, inner_width = b->inner;
    count_t total = 0, most = 0;
    for (count_t p = 0; p < count; p++) {
        total += rows[p];
        most = rows[p] > most ? rows[p] : most;
    }
    float *normed = work, *qkv = normed + total * width, *attended = qkv + 3 * total * width;
    float *inner = attended + total * width, *activated = inner + total * inner_width;
    float *projected = activated + total * inner_width, *scaled = projected + total * width;
    float *gathered = scaled + most * dim, *scores = gathered + most * dim;
    layer_norm(x, b->ln_1_w, b->ln_1_b, b->eps, normed, total * width, width);
    weighed(rows_product, b->attn_panel, normed, total, b->attn_w, b->attn_b, qkv, 3 * width,
            width);
    for (count_t p = 0, first = 0; p < count; first += rows[p], p++) {
        for (count_t r = first; r < first + rows[p]; r++) {
            float *row = qkv + r * 3 * width;
            place_row(width, b->heads, row, cos ? cos + r * dim : NULL, cos ? sin + r * dim : NULL,
                      keys[p], values[p], capacities[p], starts[p] + r - first);
            memcpy(normed + r * width, row, width * sizeof(float)); /* the queries, packed */
        }
        attend_rows(normed + first * width, rows[p], keys[p], values[p], b->heads, capacities[p],
                    starts[p], 0, dim, b->scale, scaled, scores, attended + first * width,
                    gathered);
    }
    after_attention(b, total, x, attended, rows_product, normed, projected, inner, activated,
                    LARGE, 0);
}

/* One code per row of logits (rows * n floats, changed in place), a row a
 * piece shared with the helper thread: each row first takes its request's
 * repetition penalty over the tokens it has seen (seen[r]: n flags; penalty
 * 1: none; a seen logit below 0 times the penalty, else divided by it), then
 * its pick: with temperature 0 the first largest (the first NaN if any, as
 * numpy's argmax), else filtered_draw with the row's uniform, -1 where that
 * leaves the draw to MLX. Row r's work: work_row floats at work + r *
 * work_row, its ranks n entries at ranks + r * n, each as filtered_draw's
 * for the largest top_k. */
struct row_picks {
    float *logits;
    count_t n, work_row;
    const unsigned char *const *seen;
    const float *penalties, *temperatures, *thresholds, *uniforms;
    const count_t *top_ks;
    const int *top_ps;
    float *work;
    struct ranked *ranks;
    long *codes;
};

static void pick_row(const void *argument, count_t r) {
    const struct row_picks *p = argument;
    count_t n = p->n;
    float *row = p->logits + r * n, penalty = p->penalties[r];
    if (penalty != 1.0f)
        for (count_t j = 0; j < n; j++)
            if (p->seen[r][j]) row[j] = row[j] < 0 ? row[j] * penalty : row[j] / penalty;
    if (p->temperatures[r] != 0.0f) {
        p->codes[r] = filtered_draw(row, n, p->temperatures[r], p->top_ks[r], p->top_ps[r],
                                    p->thresholds[r], p->uniforms[r], p->work + r * p->work_row,
                                    p->ranks + r * n);
        return;
    }
    long best = 0;
    for (count_t j = 0; j < n; j++) {
        if (isnan(row[j])) {
            best = j;
            break;
        }
        if (row[j] > row[best]) best = j;
    }
    p->codes[r] = best;
}

void pick_rows(float *logits, count_t rows, count_t n, const unsigned char *const *seen,
               const float *penalties, const float *temperatures, const count_t *top_ks,
               const int *top_ps, const float *thresholds, const float *uniforms,
               float *work, count_t work_row, struct ranked *ranks, long *codes) {
    struct row_picks picks = {logits, n, work_row, seen, penalties, temperatures, thresholds,
                              uniforms, top_ks, top_ps, work, ranks, codes};
    in_pieces(pick_row, &picks, rows, 1, 1);
}

/* ---- The draws' uniforms, as MLX's random keys give them ----
 *
 * An MLX key is two words, used as the key of a Threefry-2x32 hash (20
 * rounds). split(key) hashes the counter pairs (0, 2) and (1, 3) under it:
 * the next key is the two hashes' first words, the subkey their second
 * words. uniform(shape=(1,), key) is the first word of the hash of (0, 0)
 * as a float32, times 2^-32, at most the float below 1. */

static inline uint32_t rotated(uint32_t x, int by) { return (x << by) | (x >> (32 - by)); }

static void threefry(const uint32_t key[2], uint32_t a, uint32_t b, uint32_t out[2]) {
    static const int turns[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
    const uint32_t schedule[3] = {key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDAu};
    a += schedule[0];
    b += schedule[1];
    for (int group = 0; group < 5; group++) {
        for (int turn = 0; turn < 4; turn++) {
            a += b;
            b = rotated(b, turns[group % 2][turn]) ^ a;
        }
        a += schedule[(group + 1) % 3];
        b += schedule[(group + 2) % 3] + (uint32_t)group + 1;
    }
    out[0] = a;
    out[1] = b;
}

/* For each of sequences keys (two words each, advanced in place), the
 * uniforms of its next count subkeys: out[i * sequences + s]. */
void draw_uniforms(uint32_t *keys, count_t sequences, count_t count, float *out) {
    const float below_one = 0x1.fffffep-1f;
    for (count_t s = 0; s < sequences; s++) {
        uint32_t *key = keys + 2 * s;
        for (count_t i = 0; i < count; i++) {
            uint32_t first[2], second[2], bits[2];
            threefry(key, 0, 2, first);
            threefry(key, 1, 3, second);
            const uint32_t subkey[2] = {first[1], second[1]};
            key[0] = first[0];
            key[1] = second[0];
            threefry(subkey, 0, 0, bits);
            float value = (float)bits[0] * 0x1p-32f;
            out[i * sequences + s] = value < below_one ? value : below_one;
        }
    }
}

/* ---- Products of our own, for sampling requests ----
 *
 * out[r][o] = x[r] . w[o] (+ bias[o]) in an order fixed per row and output:
 * sixteen running sums, sum l taking the terms k = l, l + 16, ... by fused
 * multiply-adds, then added pairwise (8 + 8, 4 + 4, 2 + 2, 1 + 1), then the
 * bias. That order does not depend on how many rows share the call, so a
 * row's numbers are the same alone or beside others; and every weight is
 * read from memory once for all rows (OpenBLAS's sgemm first copies the
 * weights, its sgemv reads them once per row). Its outputs are shared, in
 * pieces, with the helper thread. */

typedef float lanes __attribute__((vector_size(64), aligned(64)));
enum { LANES = 16, OUT_TILE = 4, ROW_TILE = 4, LONE_OUT_TILE = 8 };

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

/* The first largest of x (skipping NaN; minus infinity if none), as a loop
 * keeping x[j] where x[j] > the largest so far finds it: in the lanes, then
 * across them, which finds the same value unless it is zero (then, as +0 and
 * -0 compare equal, which sign comes first decides: the loop's own). */
static float largest(const float *x, count_t n) {
    lanes most = {0};
    for (int l = 0; l < LANES; l++) most[l] = -INFINITY;
    count_t whole = n / LANES * LANES;
    typedef int32_t flags __attribute__((vector_size(64)));
    for (count_t j = 0; j < whole; j += LANES) {
        lanes v = load_lanes(x + j);
        flags greater = v > most; /* all ones where greater, else zero */
        most = (lanes)(((flags)v & greater) | ((flags)most & ~greater));
    }
    float top = -INFINITY;
    for (int l = 0; l < LANES; l++) top = most[l] > top ? most[l] : top;
    for (count_t j = whole; j < n; j++) top = x[j] > top ? x[j] : top;
    if (top == 0.0f) {
        top = -INFINITY;
        for (count_t j = 0; j < n; j++) top = x[j] > top ? x[j] : top;
    }
    return top;
}

/* Keeps a loaded value in a register: otherwise the compiler folds the load
 * into every multiply-add that uses it, and the loads, not the arithmetic,
 * set the pace. */
static inline __attribute__((always_inline)) void in_register(lanes *v) {
#if defined(__AVX512F__)
    __asm__("" : "+v"(*v));
#else
    (void)v;
#endif
}

static inline float lanes_total(lanes sums) {
    float v[LANES];
    memcpy(v, &sums, sizeof v);
    for (int width = LANES / 2; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) v[l] = v[l] + v[l + width];
    return v[0];
}

/* The sums added as OpenBLAS's small-matrix kernel adds them up for an output
 * among the first of a multiple of four: within each quarter (a + b) + (c +
 * d), then the quarters the same way. */
static inline float quarters_total(lanes sums) {
    float v[LANES], quarters[4];
    memcpy(v, &sums, sizeof v);
    for (int q = 0; q < 4; q++)
        quarters[q] = (v[4 * q] + v[4 * q + 1]) + (v[4 * q + 2] + v[4 * q + 3]);
    return (quarters[0] + quarters[1]) + (quarters[2] + quarters[3]);
}

#if defined(__AVX512F__)
/* lanes_total of sixteen sums at once: each step adds, for every sum, the
 * same pairs of partial sums as lanes_total (8 + 8, 4 + 4, 2 + 2, 1 + 1),
 * two sums' halves gathered into one vector, so the numbers are the same.
 * At a step of width w, lane l of the result adds the (l % w)-th lanes of
 * the two halves of part l / w, parts laid end to end over a then b. */
static void lanes_totals(const lanes *sums, float *totals) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 level[16];
    for (int v = 0; v < 16; v++) level[v] = (__m512)sums[v];
    for (int shift = 3, count = 16; shift >= 0; shift--, count /= 2) {
        __m512i width = _mm512_set1_epi32(1 << shift);
        __m512i part = _mm512_srlv_epi32(lane, _mm512_set1_epi32(shift));
        __m512i first = _mm512_add_epi32(
            _mm512_sllv_epi32(part, _mm512_set1_epi32(shift + 1)),
            _mm512_and_si512(lane, _mm512_sub_epi32(width, _mm512_set1_epi32(1))));
        __m512i second = _mm512_add_epi32(first, width);
        for (int v = 0; v < count / 2; v++) {
            __m512 a = level[2 * v], b = level[2 * v + 1];
            level[v] = _mm512_add_ps(_mm512_permutex2var_ps(a, first, b),
                                     _mm512_permutex2var_ps(a, second, b));
        }
    }
    _mm512_storeu_ps(totals, level[0]);
}
#endif

/* Asks for the cache line floats on from p into the second-level cache. The
 * address is computed as an integer: past the last weights it points
 * nowhere, which a prefetch may (it never faults). */
static inline void ask_for(const float *p, count_t floats) {
    __builtin_prefetch((const void *)((uintptr_t)p + (uintptr_t)floats * sizeof(float)), 0, 2);
}

/* A tile (of the first rows) asks for the weights OWN_AHEAD outputs on into
 * the second-level cache as it goes: from memory (the heads' tables, the
 * global c_proj), eight rows went from 17 to 21 GB/s, one from 26 to 29. */
enum { OWN_AHEAD = 8 };

/* outputs o.. o + outs_here of rows r.. r + rows_here: one tile, its sums
 * in registers (both counts are constants where it is inlined); outputs
 * before quartered totalled by quarters_total, the others pairwise. */
static inline __attribute__((always_inline)) void own_tile(
    const float *x, const float *w, const float *bias, float *out, count_t ins, count_t outs,
    count_t quartered, count_t r, count_t o, int rows_here, int outs_here) {
    lanes sums[LONE_OUT_TILE][ROW_TILE];
    for (int j = 0; j < outs_here; j++)
        for (int i = 0; i < rows_here; i++) sums[j][i] = (lanes){0};
    count_t whole = ins / LANES * LANES;
    for (count_t k = 0; k < whole; k += LANES) {
        lanes xs[ROW_TILE];
        for (int i = 0; i < rows_here; i++) {
            xs[i] = load_lanes(x + (r + i) * ins + k);
            in_register(&xs[i]);
        }
        for (int j = 0; j < outs_here; j++) {
            lanes ws = load_lanes(w + (o + j) * ins + k);
            in_register(&ws);
            for (int i = 0; i < rows_here; i++) sums[j][i] = fused(ws, xs[i], sums[j][i]);
        }
        if (r == 0 && o + OWN_AHEAD + outs_here <= outs)
            for (int j = 0; j < outs_here; j++)
                ask_for(w, (o + OWN_AHEAD + j) * ins + k);
    }
    if (whole < ins) { /* the last terms in the first lanes, zeros in the others */
        for (int j = 0; j < outs_here; j++)
            for (int i = 0; i < rows_here; i++) {
                lanes ws = {0}, xs = {0};
                memcpy(&ws, w + (o + j) * ins + whole, (ins - whole) * sizeof(float));
                memcpy(&xs, x + (r + i) * ins + whole, (ins - whole) * sizeof(float));
                sums[j][i] = fused(ws, xs, sums[j][i]);
            }
    }
#if defined(__AVX512F__)
    if (outs_here * rows_here == 16 && o >= quartered) {
        lanes gathered[16];
        float totals[16];
        for (int j = 0; j < outs_here; j++)
            for (int i = 0; i < rows_here; i++) gathered[j * rows_here + i] = sums[j][i];
        lanes_totals(gathered, totals);
        for (int j = 0; j < outs_here; j++)
            for (int i = 0; i < rows_here; i++) {
                float total = totals[j * rows_here + i];
                out[(r + i) * outs + o + j] = bias ? total + bias[o + j] : total;
            }
        return;
    }
#endif
    for (int j = 0; j < outs_here; j++)
        for (int i = 0; i < rows_here; i++) {
            lanes row = sums[j][i];
            float total = o + j < quartered ? quarters_total(row) : lanes_total(row);
            out[(r + i) * outs + o + j] = bias ? total + bias[o + j] : total;
        }
}

#define OWN_TILES(outs_here)                                                            \
    for (count_t r = 0; r < rows; r += ROW_TILE) {                                      \
        switch (rows - r < ROW_TILE ? rows - r : ROW_TILE) {                            \
        case 1: own_tile(x, w, bias, out, ins, outs, quartered, r, o, 1, outs_here); break; \
        case 2: own_tile(x, w, bias, out, ins, outs, quartered, r, o, 2, outs_here); break; \
        case 3: own_tile(x, w, bias, out, ins, outs, quartered, r, o, 3, outs_here); break; \
        default: own_tile(x, w, bias, out, ins, outs, quartered, r, o, 4, outs_here); break; \
        }                                                                               \
    }

/* outputs [first, last) of every row (a lone row takes twice the outputs
 * per tile, to keep as many loads in flight). */
static void own_outputs(const float *x, count_t rows, const float *w, const float *bias,
                        float *out, count_t outs, count_t ins, count_t quartered, count_t first,
                        count_t last) {
    count_t o = first;
    if (rows == 1)
        for (; o + LONE_OUT_TILE <= last; o += LONE_OUT_TILE)
            own_tile(x, w, bias, out, ins, outs, quartered, 0, o, 1, LONE_OUT_TILE);
    for (; o + OUT_TILE <= last; o += OUT_TILE) OWN_TILES(OUT_TILE)
    for (; o < last; o++) OWN_TILES(1)
}

/* Products under this many weights stay on one thread. */
#define OWN_SPLIT_WEIGHTS 65536

/* Pieces of outputs take whole tiles, a lone row's and the chained ones'. */
enum { OUTS_UNIT = 16 };

/* The outputs each piece of a product of outs * ins weights takes, a
 * multiple of unit. */
static count_t outputs_piece_length(count_t outs, count_t ins, count_t unit) {
    if (outs * ins < OWN_SPLIT_WEIGHTS || outs < 2 * unit) return outs;
    return piece_length(outs, unit);
}

struct own_work {
    const float *x, *w, *bias;
    float *out;
    count_t rows, outs, ins, quartered, length;
};

static void run_own(const void *argument, count_t piece) {
    const struct own_work *p = argument;
    count_t first = piece * p->length;
    own_outputs(p->x, p->rows, p->w, p->bias, p->out, p->outs, p->ins, p->quartered, first,
                piece_end(first, p->length, p->outs));
}

static void sixteen_sums_product(const float *x, count_t rows, const float *w, const float *bias,
                                 float *out, count_t outs, count_t ins, count_t quartered) {
    struct own_work whole = {x, w, bias, out, rows, outs, ins, quartered,
                             outputs_piece_length(outs, ins, OUTS_UNIT)};
    in_pieces(run_own, &whole, outs, whole.length, 1);
}

void own_product(const float *x, count_t rows, const float *w, const float *bias, float *out,
                 count_t outs, count_t ins) {
    sixteen_sums_product(x, rows, w, bias, out, outs, ins, 0);
}

/* Each row as OpenBLAS's small-matrix kernel adds up a lone row's outputs:
 * the own product's sixteen running sums, totalled by quarters for the
 * first outs / 4 * 4 outputs and pairwise for the others. */
void small_order_product(const float *x, count_t rows, const float *w, const float *bias,
                         float *out, count_t outs, count_t ins) {
    sixteen_sums_product(x, rows, w, bias, out, outs, ins, outs / 4 * 4);
}

/* ---- The BLAS's numbers, each weight read once ----
 *
 * For stacked rows, OpenBLAS's sgemm first copies the weights into panels,
 * which for a few rows costs more than the arithmetic. Its numbers come
 * from a plain order, though: each output is a chain of fused multiply-adds
 * over the terms in turn, restarted at every block of terms (chain_length,
 * the last two blocks of a run evened out, the first taking the odd term),
 * each chain's result added in turn to the bias or to zero. chained_product
 * follows that order, its lanes eight rows of one output (or, for a lone
 * row, eight outputs), reading each weight once for all rows. It is used
 * only for the shapes a load check trusts: by rows_product where sgemm
 * would chain too (not where OpenBLAS takes its small-matrix kernel, which
 * adds in another order), and by lone_product (below). */

enum { CHAIN_LANES = 8, CHAIN_OUTS = 8 };

/* Rows come in wide groups of WIDE_LANES where there are that many, tiles
 * of WIDE_OUTS outputs, and the rest in groups of CHAIN_LANES: a wide
 * group's multiply-add does two narrow ones' work, and each weight read
 * serves twice the rows (the 12 global layers' products, Intel Xeon, best
 * of five: 16 rows 21.9 -> 15.8 ms, 38 rows 49.0 -> 35.9, 64 rows 72.6 ->
 * 47.8-49.1). */
enum { WIDE_LANES = 16, WIDE_OUTS = 16 };

/* The block differs from machine to machine (OpenBLAS 0.3.21: 320 terms on
 * an AMD EPYC Zen 4, 448 on an Intel Xeon with AVX-512), so it is found at
 * load against the BLAS's sgemm (host_kernels.py) and set here. */
static count_t chain_length = 320;

void use_chain_length(count_t length) { chain_length = length; }

typedef float eight __attribute__((vector_size(32), aligned(32)));

/* a * b + c for each lane, rounded once. */
static inline __attribute__((always_inline)) eight fused_by(eight a, float b, eight c) {
#if defined(__FMA__)
    return (eight)_mm256_fmadd_ps((__m256)a, _mm256_set1_ps(b), (__m256)c);
#else
    eight out;
    for (int l = 0; l < CHAIN_LANES; l++) out[l] = fmaf(a[l], b, c[l]);
    return out;
#endif
}

/* fused_by over sixteen lanes: a wide group's (below). */
static inline __attribute__((always_inline)) lanes fused_by_wide(lanes a, float b, lanes c) {
    return fused(a, every_lane(b), c);
}

/* the length of the block of terms starting with left terms to go. */
static count_t chain_block(count_t left) {
    if (left >= 2 * chain_length) return chain_length;
    if (left > chain_length) return (left + 1) / 2;
    return left;
}

/* A tile from a weight asks for the rows CHAIN_AHEAD outputs on, a cache
 * line each every CHAIN_AHEAD_EVERY terms: the hardware alone keeps too few
 * reads in flight while the arithmetic runs (eight rows of the global
 * layers, weights from memory: 14.4 -> 12.0 ms for 340 MB). */
enum { CHAIN_AHEAD = 16, CHAIN_AHEAD_EVERY = 16 };

/* outputs o.. o + outs_here of the rows in lanes (xt: a row group's ins
 * columns of as many floats as the group has lanes), into totals. ahead:
 * the first row group over the tile, which asks for the weights ahead (the
 * others find the tile's in cache). chain_tile for a narrow group, wide_tile
 * for a wide one. An output's weights are addressed from one of four
 * pointers (every fourth output's) and one of four offsets: with a pointer
 * per output, sixteen outputs' did not fit in the registers, and reloading
 * them from the stack held up the multiply-adds (the 12 global
 * layers for 64 rows, 49.8 -> 47.8-49.2 ms; a step of eight requests,
 * 37.4-38.7 -> 36.1-36.6). */
#define CHAIN_TILE(name, vector, fuse, most)                                                      \
    static inline __attribute__((always_inline)) void name(                                   \
        const float *xt, const float *w, const float *bias, count_t ins, count_t o,           \
        int outs_here, int ahead, vector *totals) {                                           \
        for (int j = 0; j < outs_here; j++)                                                   \
            totals[j] = (vector){0} + (bias ? bias[o + j] : 0.0f);                            \
        for (count_t start = 0; start < ins;) {                                               \
            count_t length = chain_block(ins - start);                                        \
            vector chains[most];                                                              \
            for (int j = 0; j < outs_here; j++) chains[j] = (vector){0};                      \
            const float *wk = w + o * ins + start, *fours[most / 4];                          \
            for (int f = 0; f < most / 4; f++) fours[f] = wk + 4 * f * ins;                   \
            const vector *column = (const vector *)xt + start;                                \
            for (count_t k = 0; k < length; k++) {                                            \
                if (ahead && k % CHAIN_AHEAD_EVERY == 0)                                      \
                    for (int j = 0; j < most; j++)                                            \
                        ask_for(wk, (CHAIN_AHEAD + j) * ins + k);                             \
                vector xs = column[k];                                                        \
                count_t at[4] = {k, k + ins, k + 2 * ins, k + 3 * ins};                       \
                for (int j = 0; j < outs_here; j++)                                           \
                    chains[j] = fuse(xs, fours[j / 4][at[j % 4]], chains[j]);                 \
            }                                                                                 \
            for (int j = 0; j < outs_here; j++) totals[j] = totals[j] + chains[j];            \
            start += length;                                                                  \
        }                                                                                     \
    }
CHAIN_TILE(chain_tile, eight, fused_by, CHAIN_OUTS)
CHAIN_TILE(wide_tile, lanes, fused_by_wide, WIDE_OUTS)
#undef CHAIN_TILE

#if defined(__AVX2__) && defined(__FMA__)
/* the 8 x 8 block at w + k (row j, output j, at w + j * ins) turned so that
 * to[i] holds term k + i of the 8 outputs. */
static inline __attribute__((always_inline)) void turned(const float *w, count_t ins, count_t k,
                                                         __m256 *to) {
    __m256 r[8], pairs[8], quads[8];
    for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_ps(w + j * ins + k);
    for (int j = 0; j < 8; j += 2) {
        pairs[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
        pairs[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int j = 0; j < 8; j += 4)
        for (int h = 0; h < 2; h++) {
            quads[j + 2 * h] = _mm256_shuffle_ps(pairs[j + h], pairs[j + h + 2], 0x44);
            quads[j + 2 * h + 1] = _mm256_shuffle_ps(pairs[j + h], pairs[j + h + 2], 0xee);
        }
    /* quads[c] (c < 4): column c of rows 0-3 in its low half, column c + 4
     * in its high half; quads[c + 4] the same of rows 4-7 */
    for (int c = 0; c < 4; c++) {
        to[c] = _mm256_permute2f128_ps(quads[c], quads[c + 4], 0x20);
        to[c + 4] = _mm256_permute2f128_ps(quads[c], quads[c + 4], 0x31);
    }
}

/* How many terms a lone row's second chain runs behind the first where the
 * rows alias (lone_chains): mlp.fc_out's product for one row, 36 weights
 * from memory, 13.7 -> 8.8 ms; one weight in cache, 0.33 -> 0.16 ms. */
enum { SKEW = 64 };

/* terms k.. k + 8 of a lone row's chain over the 8 outputs at w (their
 * weights turned), into chain. */
static inline __attribute__((always_inline)) __m256 eight_terms(const float *x, const float *w,
                                                               count_t ins, count_t k,
                                                               __m256 chain) {
    __m256 columns[8];
    turned(w, ins, k, columns);
    for (int i = 0; i < 8; i++)
        chain = _mm256_fmadd_ps(columns[i], _mm256_set1_ps(x[k + i]), chain);
    return chain;
}

/* A lone row's outputs o.. o + 16, in the lanes of two chains: each
 * output's weights turned eight terms at a time (measured: twice the rate
 * of the row in the lanes; more outputs at once are slower). Where the rows
 * lie a multiple of 4 KB apart (mlp.fc_out's), all 16 at a term fall in one
 * set of the first-level cache and evict each other: there the second
 * chain runs SKEW terms behind the first, on other sets (each chain's terms
 * in the same order). */
static void lone_chains(const float *x, const float *w, const float *bias, float *out,
                        count_t ins, count_t o) {
    const float *first = w + o * ins, *second = first + 8 * ins;
    /* the next 16 outputs' rows, asked for into the second-level cache as
     * the chains go (from memory, 36 weights of a shape: attn.c_attn's 7.4-9.2
     * -> 6.4-8.1 ms, mlp.fc_in's 11.0-11.6 -> 8.1), unless the rows alias:
     * there it made a lone row slower */
    int aliased = ins % 1024 == 0;
    __m256 totals[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    if (bias) {
        totals[0] = _mm256_loadu_ps(bias + o);
        totals[1] = _mm256_loadu_ps(bias + o + 8);
    }
    for (count_t start = 0; start < ins;) {
        count_t end = start + chain_block(ins - start), k = start;
        count_t length = end - start;
        count_t skew = aliased && length % 8 == 0 && length >= 2 * SKEW ? SKEW : 0;
        __m256 chains[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (; k < start + skew; k += 8) chains[0] = eight_terms(x, first, ins, k, chains[0]);
        for (; k + 8 <= end; k += 8) {
            __m256 columns[2][8];
            if (!aliased && k % 16 == 0)
                for (int j = 0; j < 16; j++) ask_for(first, (16 + j) * ins + k);
            turned(first, ins, k, columns[0]);
            turned(second, ins, k - skew, columns[1]);
            for (int i = 0; i < 8; i++) {
                chains[0] = _mm256_fmadd_ps(columns[0][i], _mm256_set1_ps(x[k + i]), chains[0]);
                chains[1] =
                    _mm256_fmadd_ps(columns[1][i], _mm256_set1_ps(x[k - skew + i]), chains[1]);
            }
        }
        for (count_t behind = k - skew; behind < k; behind += 8)
            chains[1] = eight_terms(x, second, ins, behind, chains[1]);
        for (; k < end; k++) {
            float column[16];
            for (int j = 0; j < 16; j++) column[j] = first[j * ins + k];
            __m256 term = _mm256_set1_ps(x[k]);
            chains[0] = _mm256_fmadd_ps(_mm256_loadu_ps(column), term, chains[0]);
            chains[1] = _mm256_fmadd_ps(_mm256_loadu_ps(column + 8), term, chains[1]);
        }
        totals[0] = _mm256_add_ps(totals[0], chains[0]);
        totals[1] = _mm256_add_ps(totals[1], chains[1]);
        start = end;
    }
    _mm256_storeu_ps(out + o, totals[0]);
    _mm256_storeu_ps(out + o + 8, totals[1]);
}
#endif

/* ---- Weights in panels ----
 *
 * A weight's rows read side by side: the terms of one output lie ins floats
 * apart, and where that is a multiple of the cache's way size (Nano's
 * mlp.fc_out's 3072 inputs: 12 KB) every output of a tile maps to the same
 * set, and the tile's reads evict each other (one row's fc_out 0.38 against
 * fc_in's 0.18 ms). A panel holds PANEL outputs' weights term by term,
 * panel[(o / PANEL) * ins * PANEL + k * PANEL + o % PANEL]: a tile reads one
 * stream and, for a lone row, needs no transposition. The numbers are the
 * chained ones (each output's chain of terms in the same order). */
enum { PANEL = 16, LONE_PANELS = 4 };
_Static_assert((int)PANEL == (int)LANES, "a panel fills the lanes");

/* A panel's reads ask for the line PANEL_AHEAD terms on: the local
 * transformer's panels (26 MB) do not all stay in the Zen 4 machine's share
 * of the last-level cache, and its three chained products for eight rows in
 * turn took 0.68-0.83 ms without, 0.61-0.65 with. */
enum { PANEL_AHEAD = 128 };

/* A lone row's outputs o.. o + PANEL * tiles (tiles at most LONE_PANELS)
 * from their panels, a chain per tile in the lanes. */
static inline __attribute__((always_inline)) void lone_panel_tiles(
    const float *x, const float *panel, const float *bias, float *out, count_t ins, count_t o,
    int tiles) {
    const float *first = panel + o * ins;
    lanes totals[LONE_PANELS];
    for (int t = 0; t < tiles; t++)
        totals[t] = bias ? load_lanes(bias + o + t * PANEL) : (lanes){0};
    for (count_t start = 0; start < ins;) {
        count_t end = start + chain_block(ins - start);
        lanes chains[LONE_PANELS];
        for (int t = 0; t < tiles; t++) chains[t] = (lanes){0};
        for (count_t k = start; k < end; k++) {
            lanes term = every_lane(x[k]);
            for (int t = 0; t < tiles; t++)
                chains[t] = fused(load_lanes(first + (t * ins + k) * PANEL), term, chains[t]);
        }
        for (int t = 0; t < tiles; t++) totals[t] = totals[t] + chains[t];
        start = end;
    }
    for (int t = 0; t < tiles; t++) memcpy(out + o + t * PANEL, &totals[t], sizeof totals[t]);
}

/* Stacked rows' outputs o.. o + PANEL * tiles (tiles at most PANEL_TILES) from their
 * panels, rows_here rows (at most PANEL_ROWS) at x: per row a chain per tile
 * in the lanes, the row's term in every lane, so each panel line read serves
 * every row and a row costs its own arithmetic only (rows in the lanes
 * instead, chain_tile's way, cost eight rows' for any count). The totals go
 * through out, as chain_tile's through its registers. ahead: the first rows
 * over the tiles, which ask for their lines ahead. */
enum { PANEL_ROWS = 8, PANEL_TILES = 2 };
static inline __attribute__((always_inline)) void rows_panel_tiles(
    const float *x, int rows_here, const float *panel, const float *bias, float *out,
    count_t outs, count_t ins, count_t o, int tiles, int ahead) {
    const float *first = panel + o * ins;
    for (int r = 0; r < rows_here; r++)
        for (int t = 0; t < tiles; t++) {
            lanes total = (lanes){0} + (bias ? load_lanes(bias + o + t * PANEL) : (lanes){0});
            memcpy(out + r * outs + o + t * PANEL, &total, sizeof total);
        }
    for (count_t start = 0; start < ins;) {
        count_t end = start + chain_block(ins - start);
        lanes chains[PANEL_ROWS][PANEL_TILES];
        for (int r = 0; r < rows_here; r++)
            for (int t = 0; t < tiles; t++) chains[r][t] = (lanes){0};
        for (count_t k = start; k < end; k++) {
            lanes line[PANEL_TILES];
            for (int t = 0; t < tiles; t++) {
                if (ahead) ask_for(first, (t * ins + k + PANEL_AHEAD) * PANEL);
                line[t] = load_lanes(first + (t * ins + k) * PANEL);
            }
            for (int r = 0; r < rows_here; r++) {
                lanes term = every_lane(x[r * ins + k]);
                for (int t = 0; t < tiles; t++) chains[r][t] = fused(line[t], term, chains[r][t]);
            }
        }
        for (int r = 0; r < rows_here; r++)
            for (int t = 0; t < tiles; t++) {
                float *at = out + r * outs + o + t * PANEL;
                lanes total = load_lanes(at) + chains[r][t];
                memcpy(at, &total, sizeof total);
            }
        start = end;
    }
}

/* rows_panel_tiles with rows_here and tiles as constants. */
#define ROWS_PANEL_CASE(n, t)                                                               \
    case n: rows_panel_tiles(x, n, panel, bias, out, outs, ins, o, t, ahead); break;
#define ROWS_PANEL_CASES(t)                                                                 \
    switch (rows_here) {                                                                    \
        ROWS_PANEL_CASE(1, t) ROWS_PANEL_CASE(2, t) ROWS_PANEL_CASE(3, t)                   \
        ROWS_PANEL_CASE(4, t) ROWS_PANEL_CASE(5, t) ROWS_PANEL_CASE(6, t)                   \
        ROWS_PANEL_CASE(7, t) ROWS_PANEL_CASE(8, t)                                         \
    }
static void rows_panel_group(const float *x, int rows_here, const float *panel,
                             const float *bias, float *out, count_t outs, count_t ins, count_t o,
                             int tiles, int ahead) {
    _Static_assert(PANEL_ROWS == 8 && PANEL_TILES == 2, "a case for each count");
    if (tiles == PANEL_TILES)
        ROWS_PANEL_CASES(PANEL_TILES)
    else
        ROWS_PANEL_CASES(1)
}
#undef ROWS_PANEL_CASES
#undef ROWS_PANEL_CASE

struct chain_work {
    const float *xt, *x, *lone, *w, *panel, *bias; /* xt: the rows in lanes (not for panels),
                                                     the wide groups first; lone: a lone
                                                     row's x, else NULL */
    float *out;
    count_t rows, outs, ins, length, wide; /* wide: the wide groups */
};

/* The totals of a group of rows (its lanes: the group's width, from row
 * first on) for outputs o.. o + outs_here, into out. */
static void put_group(const struct chain_work *p, count_t first, int width, count_t o,
                      int outs_here, const float *totals) {
    count_t rows_here = p->rows - first < (count_t)width ? p->rows - first : (count_t)width;
    for (int j = 0; j < outs_here; j++)
        for (count_t r = 0; r < rows_here; r++)
            p->out[(first + r) * p->outs + o + j] = totals[j * width + r];
}

/* A piece's outputs from their panels (its first and last: multiples of
 * PANEL). */
static void panel_chains(const struct chain_work *p, count_t o, count_t last) {
    if (p->lone) {
        for (; o + LONE_PANELS * PANEL <= last; o += LONE_PANELS * PANEL)
            lone_panel_tiles(p->lone, p->panel, p->bias, p->out, p->ins, o, LONE_PANELS);
        switch ((last - o) / PANEL) { /* the tiles left, fewer than LONE_PANELS */
        case 3: lone_panel_tiles(p->lone, p->panel, p->bias, p->out, p->ins, o, 3); break;
        case 2: lone_panel_tiles(p->lone, p->panel, p->bias, p->out, p->ins, o, 2); break;
        case 1: lone_panel_tiles(p->lone, p->panel, p->bias, p->out, p->ins, o, 1); break;
        }
        return;
    }
    for (; o < last; o += PANEL_TILES * PANEL) {
        int tiles = last - o >= PANEL_TILES * PANEL ? PANEL_TILES : 1;
        for (count_t r = 0; r < p->rows; r += PANEL_ROWS) {
            int rows_here = p->rows - r < PANEL_ROWS ? (int)(p->rows - r) : PANEL_ROWS;
            rows_panel_group(p->x + r * p->ins, rows_here, p->panel, p->bias,
                             p->out + r * p->outs, p->outs, p->ins, o, tiles, r == 0);
        }
    }
}

static void run_chains(const void *argument, count_t piece) {
    const struct chain_work *p = argument;
    count_t narrowed = p->wide * WIDE_LANES, o = piece * p->length;
    count_t narrow = (p->rows - narrowed + CHAIN_LANES - 1) / CHAIN_LANES;
    count_t last = piece_end(o, p->length, p->outs);
    if (p->panel) {
        panel_chains(p, o, last);
        return;
    }
#if defined(__AVX2__) && defined(__FMA__)
    if (p->lone)
        for (; o + 16 <= last; o += 16) lone_chains(p->lone, p->w, p->bias, p->out, p->ins, o);
#endif
    for (count_t start = o; p->wide && start < last; start += WIDE_OUTS) {
        int outs_here = last - start < WIDE_OUTS ? (int)(last - start) : WIDE_OUTS;
        for (count_t g = 0; g < p->wide; g++) {
            lanes totals[WIDE_OUTS];
            const float *xt = p->xt + g * p->ins * WIDE_LANES;
            if (outs_here == WIDE_OUTS)
                wide_tile(xt, p->w, p->bias, p->ins, start, WIDE_OUTS, g == 0, totals);
            else
                wide_tile(xt, p->w, p->bias, p->ins, start, outs_here, g == 0, totals);
            put_group(p, g * WIDE_LANES, WIDE_LANES, start, outs_here, (const float *)totals);
        }
    }
    for (; narrow && o < last; o += CHAIN_OUTS) {
        int outs_here = last - o < CHAIN_OUTS ? (int)(last - o) : CHAIN_OUTS;
        for (count_t g = 0; g < narrow; g++) {
            eight totals[CHAIN_OUTS];
            const float *xt = p->xt + (narrowed + g * CHAIN_LANES) * p->ins;
            int ahead = p->wide == 0 && g == 0;
            if (outs_here == CHAIN_OUTS)
                chain_tile(xt, p->w, p->bias, p->ins, o, CHAIN_OUTS, ahead, totals);
            else
                chain_tile(xt, p->w, p->bias, p->ins, o, outs_here, ahead, totals);
            put_group(p, narrowed + g * CHAIN_LANES, CHAIN_LANES, o, outs_here,
                      (const float *)totals);
        }
    }
}

/* The group of width rows of x (rows of ins floats) from row first, term by
 * term in the lanes of xt: zeros for the lanes past the last row. */
static void in_lanes(const float *x, count_t rows, count_t ins, count_t first, count_t width,
                     float *xt) {
    for (count_t k = 0; k < ins; k++)
        for (count_t l = 0; l < width; l++)
            xt[k * width + l] = first + l < rows ? x[(first + l) * ins + k] : 0.0f;
}

/* The chained numbers of x @ w.T (+ bias), from w or, where given, its
 * panel (outs a multiple of PANEL). */
static void chain(const float *x, count_t rows, const float *w, const float *panel,
                  const float *bias, float *out, count_t outs, count_t ins) {
    const float *lone = rows == 1 ? x : NULL;
    count_t wide = panel ? 0 : rows / WIDE_LANES, narrowed = wide * WIDE_LANES;
    count_t narrow = panel ? 0 : (rows - narrowed + CHAIN_LANES - 1) / CHAIN_LANES;
    count_t floats = (narrowed + narrow * CHAIN_LANES) * ins;
    float *xt = floats ? aligned_alloc(64, floats * sizeof(float)) : NULL;
    if (floats && !xt) { /* the same numbers without the rows in lanes */
        sgemm_product(x, rows, w, bias, out, outs, ins);
        return;
    }
    for (count_t g = 0; g < wide; g++)
        in_lanes(x, rows, ins, g * WIDE_LANES, WIDE_LANES, xt + g * WIDE_LANES * ins);
    for (count_t g = 0; g < narrow; g++) {
        count_t first = narrowed + g * CHAIN_LANES;
        in_lanes(x, rows, ins, first, CHAIN_LANES, xt + first * ins);
    }
    count_t unit = !panel ? OUTS_UNIT : lone ? LONE_PANELS * PANEL : PANEL_TILES * PANEL;
    struct chain_work whole = {xt, x, lone, w, panel, bias, out, rows, outs, ins,
                               outputs_piece_length(outs, ins, unit), wide};
    in_pieces(run_chains, &whole, outs, whole.length, 1);
    free(xt);
}

void chained_product(const float *x, count_t rows, const float *w, const float *bias,
                     float *out, count_t outs, count_t ins) {
    chain(x, rows, w, NULL, bias, out, outs, ins);
}

/* chained_product's numbers from w's panel (outs a multiple of PANEL). */
void panel_product(const float *x, count_t rows, const float *panel, const float *bias,
                   float *out, count_t outs, count_t ins) {
    chain(x, rows, NULL, panel, bias, out, outs, ins);
}

/* Weight shapes (outs, ins) a load check found (AS_SGEMM) chained products
 * of up to CHAINED_ROWS rows giving sgemm's numbers, where chained_applies
 * (past it, sgemm's copies cost little beside its arithmetic: for the 12
 * global layers, 38 rows 57.7 -> 42.7 ms chained, 64 rows 71.5 -> 66.1),
 * or (LONE) lone_product giving sgemm's numbers for one row. Only the
 * worker thread adds shapes. */
enum { CHAINED_ROWS = 64, TRUSTED_SHAPES = 64, AS_SGEMM = 1, LONE = 2 };
static struct {
    count_t outs, ins;
    int ways;
} trusted_shapes[TRUSTED_SHAPES];
static int trusted_count;

static int trusted(count_t outs, count_t ins, int way) {
    int count = __atomic_load_n(&trusted_count, __ATOMIC_ACQUIRE);
    for (int i = 0; i < count; i++)
        if (trusted_shapes[i].outs == outs && trusted_shapes[i].ins == ins)
            return (__atomic_load_n(&trusted_shapes[i].ways, __ATOMIC_ACQUIRE) & way) != 0;
    return 0;
}

/* → whether the shape is now trusted (not once the table is full). */
static count_t trust(count_t outs, count_t ins, int way) {
    int count = __atomic_load_n(&trusted_count, __ATOMIC_ACQUIRE);
    for (int i = 0; i < count; i++)
        if (trusted_shapes[i].outs == outs && trusted_shapes[i].ins == ins) {
            __atomic_or_fetch(&trusted_shapes[i].ways, way, __ATOMIC_RELEASE);
            return 1;
        }
    if (count == TRUSTED_SHAPES) return 0;
    trusted_shapes[count].outs = outs;
    trusted_shapes[count].ins = ins;
    trusted_shapes[count].ways = way;
    __atomic_store_n(&trusted_count, count + 1, __ATOMIC_RELEASE);
    return 1;
}

count_t trust_chained(count_t outs, count_t ins) { return trust(outs, ins, AS_SGEMM); }
count_t trust_lone(count_t outs, count_t ins) { return trust(outs, ins, LONE); }

/* Where OpenBLAS takes its small-matrix kernel for this call's transposes:
 * few enough multiply-adds and outputs. */
count_t small_kernel_takes(count_t rows, count_t outs, count_t ins) {
    return (double)rows * outs * ins <= 1e6 && rows * outs <= 1200 && ins >= 32;
}

/* Whether a product of this size would be chained once its shape is
 * trusted AS_SGEMM. */
count_t chained_applies(count_t rows, count_t outs, count_t ins) {
    return rows <= CHAINED_ROWS && !small_kernel_takes(rows, outs, ins);
}

void lone_order_product(const float *x, count_t rows, const float *w, const float *bias,
                        float *out, count_t outs, count_t ins);
void lone_product(const float *x, count_t rows, const float *w, const float *bias, float *out,
                  count_t outs, count_t ins);

/* The product that computes product's numbers for this call: rows_product,
 * lone_order_product and lone_product choose among the others. */
static product_fn resolved(product_fn product, count_t rows, count_t outs, count_t ins) {
    if (product == lone_product)
        product = trusted(outs, ins, LONE) ? lone_order_product : rows_product;
    if (product == lone_order_product)
        return small_kernel_takes(1, outs, ins) ? small_order_product : chained_product;
    if (product == rows_product)
        return chained_applies(rows, outs, ins) && trusted(outs, ins, AS_SGEMM) ? chained_product
                                                                                : sgemm_product;
    return product;
}

void rows_product(const float *x, count_t rows, const float *w, const float *bias,
                  float *out, count_t outs, count_t ins) {
    resolved(rows_product, rows, outs, ins)(x, rows, w, bias, out, outs, ins);
}

/* Each row's numbers in the order OpenBLAS takes for one row alone, the
 * small-matrix kernel's or the chains, whatever rows share the call. */
void lone_order_product(const float *x, count_t rows, const float *w, const float *bias,
                        float *out, count_t outs, count_t ins) {
    resolved(lone_order_product, rows, outs, ins)(x, rows, w, bias, out, outs, ins);
}

/* Each row's numbers as sgemm computes them for that row alone (as
 * mlx-audio computes a lone request's frame) where the shape is trusted
 * LONE; rows_product otherwise. */
void lone_product(const float *x, count_t rows, const float *w, const float *bias, float *out,
                  count_t outs, count_t ins) {
    resolved(lone_product, rows, outs, ins)(x, rows, w, bias, out, outs, ins);
}

static void weighed(product_fn product, const float *panel, const float *x, count_t rows,
                    const float *w, const float *bias, float *out, count_t outs, count_t ins) {
    product_fn chosen = resolved(product, rows, outs, ins);
    if (panel && chosen == chained_product)
        panel_product(x, rows, panel, bias, out, outs, ins);
    else
        chosen(x, rows, w, bias, out, outs, ins);
}

/* x . y over n floats in the own product's order. */
static float own_dot(const float *x, const float *y, count_t n) {
    lanes sums = {0};
    count_t whole = n / LANES * LANES;
    for (count_t k = 0; k < whole; k += LANES)
        sums = fused(load_lanes(x + k), load_lanes(y + k), sums);
    if (whole < n) {
        lanes xs = {0}, ys = {0};
        memcpy(&xs, x + whole, (n - whole) * sizeof(float));
        memcpy(&ys, y + whole, (n - whole) * sizeof(float));
        sums = fused(xs, ys, sums);
    }
    return lanes_total(sums);
}

/* attend_row's attention in an order of our own, for rows whose products are
 * the library's own: each score an own_dot, MLX's softmax, then the values
 * added up position by position with fused multiply-adds. No call into the
 * BLAS: for a query row, a product's call costs more than its arithmetic. */
static void attend_row_own(const float *q, const float *keys, const float *values,
                           count_t heads, count_t capacity, count_t length, count_t dim,
                           float scale, float *scaled, float *scores, float *out) {
    for (count_t h = 0; h < heads; h++) {
        const float *k = keys + h * capacity * dim, *v = values + h * capacity * dim;
        float *o = out + h * dim;
        for (count_t j = 0; j < dim; j++) scaled[j] = scale * q[h * dim + j];
        for (count_t p = 0; p < length; p++) scores[p] = own_dot(scaled, k + p * dim, dim);
        softmax_span(scores, scores, length, length);
        for (count_t j = 0; j < dim; j++) o[j] = 0.0f;
        for (count_t p = 0; p < length; p++)
            for (count_t j = 0; j < dim; j++) o[j] = fmaf(scores[p], v[p * dim + j], o[j]);
    }
}

/* ---- Several requests' rows through a block, outside MLX ----
 *
 * One row per request, as a frame step stacks them: each product over all
 * rows at once, each row's numbers MLX's for that row alone (lone_product)
 * or, with own, this library's own product (and attention); row r attending
 * over its own cache (keys[r], values[r], capacities[r]) up to and
 * including positions[r], where its keys and values are written. cos and
 * sin: rows * dim floats (NULL: no rotation). work: rows * (5 * width + 2 *
 * inner + dim + the longest position + 1) floats. */
/* A frame's GELU is shared from this many values: two rows' at Nano's size
 * (one row's gained nothing, measured). */
enum { ROWS_GELU_SPLIT = 4096 };

/* The rows' attention, a row a piece (each its own scratch: scratch_row
 * floats), shared with the helper thread. */
struct rows_attention {
    const struct block *b;
    float *qkv, *attended, *scratch;
    float *const *keys, *const *values;
    const count_t *capacities, *positions;
    const float *cos, *sin;
    count_t scratch_row;
    int own;
};

static void attend_piece(const void *argument, count_t r) {
    const struct rows_attention *a = argument;
    count_t width = a->b->width, heads = a->b->heads, dim = width / heads;
    float *row = a->qkv + r * 3 * width, *scaled = a->scratch + r * a->scratch_row;
    place_row(width, heads, row, a->cos ? a->cos + r * dim : NULL,
              a->cos ? a->sin + r * dim : NULL, a->keys[r], a->values[r], a->capacities[r],
              a->positions[r]);
    (a->own ? attend_row_own : attend_row)(row, a->keys[r], a->values[r], heads,
                                           a->capacities[r], a->positions[r] + 1, dim,
                                           a->b->scale, scaled, scaled + dim,
                                           a->attended + r * width);
}

void block_rows(const struct block *b, count_t rows, float *x, float *const *keys,
                float *const *values, const count_t *capacities, const count_t *positions,
                const float *cos, const float *sin, int own, float *work) {
    product_fn product = own ? own_product : lone_product;
    count_t width = b->width, dim = width / b->heads, inner_width = b->inner;
    float *normed = work, *qkv = normed + rows * width, *attended = qkv + 3 * rows * width;
    float *inner = attended + rows * width, *activated = inner + rows * inner_width;
    float *scratch = activated + rows * inner_width;
    layer_norm(x, b->ln_1_w, b->ln_1_b, b->eps, normed, rows * width, width);
    weighed(product, b->attn_panel, normed, rows, b->attn_w, b->attn_b, qkv, 3 * width, width);
    count_t longest = 0;
    for (count_t r = 0; r < rows; r++) longest = positions[r] > longest ? positions[r] : longest;
    struct rows_attention attention = {b, qkv, attended, scratch, keys, values, capacities,
                                       positions, cos, sin, dim + longest + 1, own};
    in_pieces(attend_piece, &attention, rows, 1, 1);
    float *projected = normed + rows * width; /* qkv's space, no longer needed */
    after_attention(b, rows, x, attended, product, normed, projected, inner, activated,
                    ROWS_GELU_SPLIT, 1);
}

/* ---- The codec decoder's transformer layers, outside MLX ----
 *
 * A layer of the codec's streaming decoder (mlx-audio's TransformerLayer.step)
 * over several requests' new steps laid end to end: the products over all
 * of them at once, each with the numbers of the sgemm MLX runs for it
 * (rows_product; no biases), and each request's steps attending over its
 * own history, causally, within the layer's context; MLX's layer norms,
 * rotation, attention, exact GELU and layer scales, number for number. */

struct codec_layer {
    const float *norm1_w, *norm1_b, *in_w, *out_w, *scale1;
    const float *norm2_w, *norm2_b, *ffn_in_w, *ffn_out_w, *scale2;
    count_t width, heads, inner, context; /* context 0: unbounded */
    float eps, scale;
};

/* x += scale * y for rows rows of width floats (scale: one per column), the
 * product rounded before the sum, as MLX's two operations round. */
static void add_scaled(float *x, const float *scale, const float *y, count_t rows,
                       count_t width) {
    for (count_t r = 0; r < rows; r++) {
        float *xr = x + r * width;
        const float *yr = y + r * width;
        for (count_t c = 0; c < width; c++) xr[c] = xr[c] + scale[c] * yr[c];
    }
}

/* ---- The codec's attention in the fast mode ----
 *
 * Each query row over the keys it sees, on both threads (a request's head a
 * piece), in an order of its own. Rows go FAST_ROWS at a time, one in each
 * lane: each key's scores for all of them (a chain of multiply-adds over
 * the head's dimensions, in order), the keys a row does not see at minus
 * infinity; each row's largest; MLX's exp of each score less it (an unseen
 * key's is 0); their sum, key after key; the values weighted by the exps,
 * key after key, and divided by that sum at the end. Keys a row does not
 * see add zeros, which change no sum, so a row's numbers depend on its
 * query and the keys and values it sees and on nothing else: not on the
 * rows, requests or chunking around it. MLX computes every score of the
 * chunk and OpenBLAS adds them up in another order, so the audio differs
 * from the exact mode's in the last bits (docs/speech.md states the
 * measured bound). */

/* Heads of FAST_DIM dimensions (Nano's codec's) take it: with the count a
 * constant, the compiler keeps each row's sums in registers. */
enum { FAST_DIM = 64, FAST_VECTORS = FAST_DIM / LANES, FAST_ROWS = LANES, FAST_KEYS = 8 };

/* MLX's exp of each of count keys' scores (the rows in the lanes) less the
 * row's largest, in place. */
WIDEST_VECTORS static void row_exps(float *scores, count_t count, const float *top) {
    for (count_t j = 0; j < count; j++)
        for (int l = 0; l < LANES; l++)
            scores[j * LANES + l] = exp_mlx(scores[j * LANES + l] - top[l]);
}

/* keys keys' scores (each key's dim floats in turn from key) for the rows
 * whose scaled queries are turned (dim columns of LANES rows): in order
 * over the dimensions, a chain of multiply-adds each. */
static inline __attribute__((always_inline)) void key_scores(const float *turned,
                                                              const float *key, count_t dim,
                                                              const int keys, lanes *sums) {
    lanes column = load_lanes(turned);
    for (int e = 0; e < keys; e++) sums[e] = column * every_lane(key[e * dim]);
    for (count_t d = 1; d < dim; d++) {
        column = load_lanes(turned + d * LANES);
        for (int e = 0; e < keys; e++)
            sums[e] = fused(column, every_lane(key[e * dim + d]), sums[e]);
    }
}

/* Rows whose weighted values are summed together, in registers. */
enum { VALUE_ROWS = 4 };

/* rows rows' outputs (at out, stride apart): each its count values (FAST_DIM
 * floats each, from v) weighted by its exps (weights[j * LANES] for value j,
 * the next row's in the next lane), in order, and divided by its total
 * (lane first's of totals on). */
static inline __attribute__((always_inline)) void weighted_values(
    const float *weights, count_t count, const float *v, const int rows, lanes totals,
    int first, float *out, count_t stride) {
    lanes sums[VALUE_ROWS * FAST_VECTORS];
    for (int s = 0; s < rows * FAST_VECTORS; s++) sums[s] = (lanes){0};
    for (count_t j = 0; j < count; j++) {
        const float *value = v + j * FAST_DIM, *weight = weights + j * LANES;
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < FAST_VECTORS; c++)
                sums[r * FAST_VECTORS + c] = fused(every_lane(weight[r]),
                                                   load_lanes(value + c * LANES),
                                                   sums[r * FAST_VECTORS + c]);
    }
    for (int r = 0; r < rows; r++) {
        lanes reciprocal = every_lane(1.0f / totals[first + r]);
        for (int c = 0; c < FAST_VECTORS; c++) {
            lanes row = sums[r * FAST_VECTORS + c] * reciprocal;
            memcpy(out + r * stride + c * LANES, &row, sizeof row);
        }
    }
}

/* rows rows (at most FAST_ROWS) of one head: row r's query at q + r *
 * stride, seeing keys and values lo[r].. end[r] (both never decreasing from
 * row to row), its output at out + r * stride. scores: LANES floats for each
 * key from lo[0] to end[rows - 1]; turned: FAST_DIM * LANES floats. */
static void fast_attention_rows(const float *q, count_t stride, int rows, const count_t *lo,
                                const count_t *end, const float *k, const float *v,
                                float scale, float *scores, float *turned, float *out) {
    const count_t dim = FAST_DIM;
    count_t from = lo[0], count = end[rows - 1] - from;
    typedef int32_t flags __attribute__((vector_size(64)));
    flags first = {0}, past = {0}; /* per lane, its row's keys, from from */
    for (int r = 0; r < rows; r++) {
        first[r] = (int32_t)(lo[r] - from);
        past[r] = (int32_t)(end[r] - from);
    }
    for (count_t d = 0; d < dim; d++) {
        lanes column = {0};
        for (int r = 0; r < rows; r++) column[r] = scale * q[r * stride + d];
        memcpy(turned + d * LANES, &column, sizeof column);
    }
    lanes unseen = every_lane(-INFINITY), top = unseen;
    count_t j = 0;
    while (j < count) {
        lanes sums[FAST_KEYS];
        const float *key = k + (from + j) * dim;
        int keys = count - j >= FAST_KEYS ? FAST_KEYS : 1;
        if (keys == FAST_KEYS)
            key_scores(turned, key, dim, FAST_KEYS, sums);
        else
            key_scores(turned, key, dim, 1, sums);
        for (int e = 0; e < keys; e++, j++) {
            flags at = (flags){0} + (int32_t)j;
            flags seen = (at >= first) & (at < past);
            lanes score = (lanes)(((flags)sums[e] & seen) | ((flags)unseen & ~seen));
            top = (lanes)(((flags)score & (score > top)) | ((flags)top & ~(score > top)));
            memcpy(scores + j * LANES, &score, sizeof score);
        }
    }
    float tops[LANES];
    memcpy(tops, &top, sizeof tops);
    row_exps(scores, count, tops);
    lanes totals = {0};
    for (j = 0; j < count; j++) totals = totals + load_lanes(scores + j * LANES);
    for (int r = 0; r < rows; r += VALUE_ROWS) {
        float *row_out = out + r * stride;
        if (rows - r >= VALUE_ROWS)
            weighted_values(scores + r, count, v + from * dim, VALUE_ROWS, totals, r, row_out,
                            stride);
        else
            for (int each = r; each < rows; each++, row_out += stride)
                weighted_values(scores + each, count, v + from * dim, 1, totals, each, row_out,
                                stride);
    }
}

struct fast_attention {
    const float *queries; /* the steps' queries, width floats a step */
    float *out, *scores;  /* scores: (span + FAST_DIM) * LANES floats a piece */
    float *const *keys, *const *values;
    const count_t *steps, *capacities, *kept;
    count_t heads, dim, context, span;
    float scale;
};

static void fast_attention_piece(const void *argument, count_t piece) {
    const struct fast_attention *a = argument;
    count_t i = piece / a->heads, h = piece % a->heads, dim = a->dim, width = a->heads * dim;
    count_t first = 0;
    for (count_t before = 0; before < i; before++) first += a->steps[before];
    const float *k = a->keys[i] + h * a->capacities[i] * dim;
    const float *v = a->values[i] + h * a->capacities[i] * dim;
    float *scores = a->scores + piece * (a->span + dim) * LANES;
    float *turned = scores + a->span * LANES;
    for (count_t r0 = 0; r0 < a->steps[i]; r0 += FAST_ROWS) {
        int rows = a->steps[i] - r0 < FAST_ROWS ? (int)(a->steps[i] - r0) : FAST_ROWS;
        count_t lo[FAST_ROWS], end[FAST_ROWS];
        for (int r = 0; r < rows; r++) {
            end[r] = a->kept[i] + r0 + r + 1;
            lo[r] = a->context && end[r] > a->context ? end[r] - a->context : 0;
        }
        count_t offset = (first + r0) * width + h * dim;
        fast_attention_rows(a->queries + offset, width, rows, lo, end, k, v, a->scale, scores,
                            turned, a->out + offset);
    }
}

/* x: the steps of requests requests, steps[i] each, end to end (width
 * floats a step), in place. Request i's history: keys[i] and values[i],
 * laid out [heads, capacities[i], dim], their first kept[i] positions, with
 * room for its steps after them; on return kept[i] counts the positions its
 * next steps can see (its last context - 1). cos and sin: dim floats a step.
 * fast: the fast mode's attention (above), where the heads fit it. work:
 * total * (6 * width + 2 * inner) + longest * 2 * dim + the larger of longest
 * times the longest span and requests * heads * (longest span + dim) *
 * LANES floats, with total the steps of all requests, longest the most
 * steps of one, and longest span the most kept + steps of one. */
void codec_layer(const struct codec_layer *l, count_t requests, const count_t *steps, float *x,
                 float *const *keys, float *const *values, const count_t *capacities,
                 count_t *kept, const float *cos, const float *sin, float *work, int fast) {
    count_t width = l->width, dim = width / l->heads, total = 0, longest = 0, span = 0;
    for (count_t i = 0; i < requests; i++) {
        total += steps[i];
        longest = steps[i] > longest ? steps[i] : longest;
        span = kept[i] + steps[i] > span ? kept[i] + steps[i] : span;
    }
    float *normed = work, *qkv = normed + total * width, *attended = qkv + 3 * total * width;
    float *inner = attended + total * width, *activated = inner + total * l->inner;
    float *projected = activated + total * l->inner, *scaled = projected + total * width;
    float *gathered = scaled + longest * dim, *scores = gathered + longest * dim;
    layer_norm(x, l->norm1_w, l->norm1_b, l->eps, normed, total * width, width);
    rows_product(normed, total, l->in_w, NULL, qkv, 3 * width, width);
    for (count_t i = 0, first = 0; i < requests; first += steps[i], i++)
        for (count_t r = 0; r < steps[i]; r++) {
            float *row = qkv + (first + r) * 3 * width;
            place_row(width, l->heads, row, cos + (first + r) * dim, sin + (first + r) * dim,
                      keys[i], values[i], capacities[i], kept[i] + r);
            memcpy(normed + (first + r) * width, row, width * sizeof(float));
        }
    if (fast && dim == FAST_DIM) {
        struct fast_attention attention = {normed, attended, scores, keys, values, steps,
                                           capacities, kept, l->heads, dim, l->context, span,
                                           l->scale};
        in_pieces(fast_attention_piece, &attention, requests * l->heads, 1, 0);
    } else {
        for (count_t i = 0, first = 0; i < requests; first += steps[i], i++)
            attend_rows(normed + first * width, steps[i], keys[i], values[i], l->heads,
                        capacities[i], kept[i], l->context, dim, l->scale, scaled, scores,
                        attended + first * width, gathered);
    }
    for (count_t i = 0; i < requests; i++) {
        count_t seen = kept[i] + steps[i], keep = l->context ? l->context - 1 : seen;
        if (seen > keep) {
            for (count_t h = 0; h < l->heads; h++) {
                float *k = keys[i] + h * capacities[i] * dim, *v = values[i] + h * capacities[i] * dim;
                memmove(k, k + (seen - keep) * dim, keep * dim * sizeof(float));
                memmove(v, v + (seen - keep) * dim, keep * dim * sizeof(float));
            }
            seen = keep;
        }
        kept[i] = seen;
    }
    rows_product(attended, total, l->out_w, NULL, projected, width, width);
    add_scaled(x, l->scale1, projected, total, width);
    layer_norm(x, l->norm2_w, l->norm2_b, l->eps, normed, total * width, width);
    rows_product(normed, total, l->ffn_in_w, NULL, inner, l->inner, width);
    in_shares(gelu_erf_rows, inner, activated, total * l->inner, 1, LARGE, 0);
    rows_product(activated, total, l->ffn_out_w, NULL, projected, width, l->inner);
    add_scaled(x, l->scale2, projected, total, width);
}
