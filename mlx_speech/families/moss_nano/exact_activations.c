/* The GELUs of MOSS-TTS-Nano's transformers and codec, and the softmax of
 * its attention, number for number as MLX computes them on Linux's CPU
 * backend, vectorized.
 *
 * MLX's CPU backend evaluates tanh and pow one element at a time through the
 * C library, and erf and exp through its own formulas built on scalar fma
 * calls. These loops compute the same numbers: powf itself; tanhf as glibc's (fdlibm's
 * algorithm, every branch computed and the right one selected, so the
 * compiler can vectorize it); MLX's erf and exp formulas, with fmaf where MLX
 * calls fma. Built with -ffp-contract=off, so no multiply-add is fused that
 * MLX does not fuse. The Python side checks the results against MLX's before
 * using them. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

typedef long count_t;

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
    float grown = expm1_fdlibm(2.0f * a);
    float shrunk = expm1_fdlibm(-2.0f * a);
    float z = pick(ix >= 0x3f800000u, 1.0f - 2.0f / (grown + 2.0f), -shrunk / (shrunk + 2.0f));
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

/* GPT-2's gelu_new: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))). */
static void gelu_tanh_span(const float *x, float *out, count_t n) {
    for (count_t i = 0; i < n; i++) out[i] = powf(x[i], 3.0f);
    for (count_t i = 0; i < n; i++) {
        float inner = 0.7978845608028654f * (x[i] + 0.044715f * out[i]);
        out[i] = (0.5f * x[i]) * (1.0f + tanh_fdlibm(inner));
    }
}

/* The exact GELU: 0.5 * x * (1 + erf(x / sqrt(2))). */
static void gelu_erf_span(const float *x, float *out, count_t n) {
    for (count_t i = 0; i < n; i++)
        out[i] = (0.5f * x[i]) * (1.0f + erf_mlx(x[i] / 1.4142135623730951f));
}

/* MLX's softmax over rows of width floats (mlx/backend/cpu/softmax.cpp, for
 * float32): the row's maximum, MLX's exp of each difference, their sum in
 * order, and each times the sum's reciprocal. */
static void softmax_span(const float *x, float *out, count_t n, count_t width) {
    for (count_t start = 0; start < n; start += width) {
        const float *row = x + start;
        float *o = out + start;
        float top = -INFINITY;
        for (count_t j = 0; j < width; j++) top = row[j] > top ? row[j] : top;
        for (count_t j = 0; j < width; j++) o[j] = exp_mlx(row[j] - top);
        float total = 0.0f;
        for (count_t j = 0; j < width; j++) total = total + o[j];
        float reciprocal = 1.0f / total;
        for (count_t j = 0; j < width; j++) o[j] = o[j] * reciprocal;
    }
}

typedef void (*span_fn)(const float *, float *, count_t, count_t);
struct span { span_fn fn; const float *x; float *out; count_t n, width; };

static void *run_span(void *argument) {
    struct span *s = argument;
    s->fn(s->x, s->out, s->n, s->width);
    return NULL;
}

/* Large arrays in two halves (whole rows of width), the second on a thread
 * of its own. */
static void in_halves(span_fn fn, const float *x, float *out, count_t n, count_t width) {
    pthread_t thread;
    count_t half = n / width / 2 * width;
    struct span second = {fn, x + half, out + half, n - half, width};
    if (n < 32768 || half == 0 || pthread_create(&thread, NULL, run_span, &second) != 0) {
        fn(x, out, n, width);
        return;
    }
    fn(x, out, half, width);
    pthread_join(thread, NULL);
}

static void gelu_tanh_rows(const float *x, float *out, count_t n, count_t width) {
    (void)width;
    gelu_tanh_span(x, out, n);
}

static void gelu_erf_rows(const float *x, float *out, count_t n, count_t width) {
    (void)width;
    gelu_erf_span(x, out, n);
}

void gelu_tanh(const float *x, float *out, count_t n) { in_halves(gelu_tanh_rows, x, out, n, 1); }
void gelu_erf(const float *x, float *out, count_t n) { in_halves(gelu_erf_rows, x, out, n, 1); }
void softmax(const float *x, float *out, count_t n, count_t width) {
    in_halves(softmax_span, x, out, n, width);
}
