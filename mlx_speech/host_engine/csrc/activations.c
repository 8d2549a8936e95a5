/* The activations: tanh as glibc's tanhf, MLX's exp and erf formulas, the
 * cubes of GPT-2's GELU (a port of glibc's powf), the two GELUs and the
 * softmax, number for number as MLX computes them on Linux's CPU backend,
 * vectorized (nano_kernels.h tells how). */
#include "internal.h"

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

/* The first largest of x (skipping NaN; minus infinity if none), as a loop
 * keeping x[j] where x[j] > the largest so far finds it: in the lanes, then
 * across them, which finds the same value unless it is zero (then, as +0 and
 * -0 compare equal, which sign comes first decides: the loop's own). */
HIDDEN float largest(const float *x, count_t n) {
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
HIDDEN void softmax_span(const float *x, float *out, count_t n, count_t width) {
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

HIDDEN void gelu_tanh_rows(const float *x, float *out, count_t n, count_t width) {
    (void)width;
    gelu_tanh_span(x, out, n);
}

HIDDEN void gelu_erf_rows(const float *x, float *out, count_t n, count_t width) {
    (void)width;
    gelu_erf_span(x, out, n);
}

/* The entries for MLX arrays (exact_activations.py) and a prompt's rows:
 * large ones (LARGE, internal.h) shared with the helper thread. */
void gelu_tanh(const float *x, float *out, count_t n) {
    in_shares(gelu_tanh_rows, x, out, n, 1, LARGE, 0);
}
void gelu_erf(const float *x, float *out, count_t n) {
    in_shares(gelu_erf_rows, x, out, n, 1, LARGE, 0);
}
void softmax(const float *x, float *out, count_t n, count_t width) {
    in_shares(softmax_span, x, out, n, width, LARGE, 0);
}
