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
 * On these, the host engine's frame step (frame_step.py) builds its blocks,
 * heads' draws, products in OpenBLAS's order that read each weight once
 * (for greedy requests, and the codec decoder's) and, for sampling
 * requests, products of the library's own (the files below).
 *
 * The library's files, by subject: activations.c (tanh, exp, erf, the cubes,
 * the GELUs, the softmax), threads.c (work in pieces shared with a helper
 * thread), products.c (the BLAS's sgemm, the library's own and chained
 * products, panels, the trusted shapes), blocks.c (layer norm, rotation,
 * attention, a block over rows), draws.c (a head's draw, the draws'
 * uniforms) and codec_layer.c (a codec decoder layer).
 *
 * This header is the library's public interface: every exported entry, as
 * plain C declarations that cffi's cdef reads once the lines starting with
 * '#' are dropped (no macros, attributes or bodies here). What the files
 * share and do not export is in internal.h. */
#ifndef NANO_KERNELS_H
#define NANO_KERNELS_H
#include <stdint.h>

typedef long count_t;

/* A block's weights and biases; the panels (see panel_product; NULL: none)
 * of those whose products the frame step takes most often. */
struct block {
    const float *ln_1_w, *ln_1_b, *attn_w, *attn_b, *proj_w, *proj_b;
    const float *ln_2_w, *ln_2_b, *fc_in_w, *fc_in_b, *fc_out_w, *fc_out_b;
    count_t width, heads, inner;
    float eps, scale;
    const float *attn_panel, *fc_in_panel, *fc_out_panel;
};

/* A codec decoder layer's weights (no biases), layer scales and shape. */
struct codec_layer {
    const float *norm1_w, *norm1_b, *in_w, *out_w, *scale1;
    const float *norm2_w, *norm2_b, *ffn_in_w, *ffn_out_w, *scale2;
    count_t width, heads, inner, context; /* context 0: unbounded */
    float eps, scale;
};

/* One token's entry in filtered_draw's and pick_rows's ranks. */
struct ranked { float value; long index; };

/* activations.c */

/* Whether cubes now uses the port of glibc's powf (on: where asked). */
int port_cubes(int on);
/* out[i] = powf(x[i], 3.0f), the port's numbers where it applies. */
void cubes(const float *x, float *out, count_t n);
/* GPT-2's gelu_new of n floats, as MLX computes it. */
void gelu_tanh(const float *x, float *out, count_t n);
/* The exact GELU (with erf) of n floats, as MLX computes it. */
void gelu_erf(const float *x, float *out, count_t n);
/* MLX's precise softmax over rows of width floats, n floats in all. */
void softmax(const float *x, float *out, count_t n, count_t width);

/* products.c */

/* Hands over the address of the BLAS's cblas_sgemm, the one MLX calls. */
void use_blas(void *gemm);
/* out = x @ w.T (+ bias): one sgemm, as MLX computes a product of stacked rows. */
void sgemm_product(const float *x, count_t rows, const float *w, const float *bias,
                   float *out, count_t outs, count_t ins);
/* sgemm's numbers for x @ w.T (+ bias), by the fastest way known to give them. */
void rows_product(const float *x, count_t rows, const float *w, const float *bias,
                  float *out, count_t outs, count_t ins);
/* out = x @ w^T for x given by its columns, one sgemm as MLX calls it. */
void columns_product(const float *x, count_t rows, const float *w, float *out, count_t outs,
                     count_t ins);
/* x @ w.T (+ bias) in the library's own order (sixteen running sums). */
void own_product(const float *x, count_t rows, const float *w, const float *bias, float *out,
                 count_t outs, count_t ins);
/* Each row as OpenBLAS's small-matrix kernel adds up a lone row's outputs. */
void small_order_product(const float *x, count_t rows, const float *w, const float *bias,
                         float *out, count_t outs, count_t ins);
/* Sets the block of terms after which the BLAS restarts its chains. */
void use_chain_length(count_t length);
/* x @ w.T (+ bias) in the BLAS's chained order, each weight read once. */
void chained_product(const float *x, count_t rows, const float *w, const float *bias,
                     float *out, count_t outs, count_t ins);
/* chained_product's numbers from w's panel (outs a multiple of 16). */
void panel_product(const float *x, count_t rows, const float *panel, const float *bias,
                   float *out, count_t outs, count_t ins);
/* Trusts chained products of this weight shape to give sgemm's numbers. */
count_t trust_chained(count_t outs, count_t ins);
/* Trusts lone_product of this weight shape to give sgemm's numbers for one row. */
count_t trust_lone(count_t outs, count_t ins);
/* Whether OpenBLAS takes its small-matrix kernel for this product. */
count_t small_kernel_takes(count_t rows, count_t outs, count_t ins);
/* Whether a product of this size is chained once its shape is trusted. */
count_t chained_applies(count_t rows, count_t outs, count_t ins);
/* Each row's numbers in the order OpenBLAS takes for one row alone. */
void lone_order_product(const float *x, count_t rows, const float *w, const float *bias,
                        float *out, count_t outs, count_t ins);
/* Each row's numbers as sgemm computes them for that row alone, where trusted. */
void lone_product(const float *x, count_t rows, const float *w, const float *bias, float *out,
                  count_t outs, count_t ins);

/* blocks.c */

/* MLX's layer norm of rows of width floats, n floats in all. */
void layer_norm(const float *x, const float *w, const float *b, float eps, float *out,
                count_t n, count_t width);
/* Several prompts' rows through a GPT-2 block, in place. */
void block_prompts(const struct block *b, count_t count, const count_t *rows, float *x,
                   float *const *keys, float *const *values, const count_t *capacities,
                   const count_t *starts, const float *cos, const float *sin, float *work);
/* One row per request through a GPT-2 block, in place. */
void block_rows(const struct block *b, count_t rows, float *x, float *const *keys,
                float *const *values, const count_t *capacities, const count_t *positions,
                const float *cos, const float *sin, int own, float *work);

/* draws.c */

/* One row's draw after temperature, top-k and top-p; -1: left to MLX. */
long filtered_draw(const float *logits, count_t n, float temperature, count_t top_k,
                   int top_p, float threshold, float uniform, float *work,
                   struct ranked *ranks);
/* One code per row of logits: penalties, then greedy picks or draws. */
void pick_rows(float *logits, count_t rows, count_t n, const unsigned char *const *seen,
               const float *penalties, const float *temperatures, const count_t *top_ks,
               const int *top_ps, const float *thresholds, const float *uniforms,
               float *work, count_t work_row, struct ranked *ranks, long *codes);
/* Each key's next count uniforms, as MLX's split and uniform give them. */
void draw_uniforms(uint32_t *keys, count_t sequences, count_t count, float *out);

/* codec_layer.c */

/* A codec decoder layer over several requests' new steps, in place. */
void codec_layer(const struct codec_layer *l, count_t requests, const count_t *steps, float *x,
                 float *const *keys, float *const *values, const count_t *capacities,
                 count_t *kept, const float *cos, const float *sin, float *work, int fast);

#endif
