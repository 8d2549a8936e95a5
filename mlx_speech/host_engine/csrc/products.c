/* Products: the BLAS's sgemm as MLX calls it, the library's own products,
 * the BLAS's numbers with each weight read once (chained, from panels), and
 * the shapes load checks trust for them. */
#include "internal.h"

/* The sgemm MLX itself calls: its address handed over by use_blas. */
HIDDEN sgemm_fn blas_sgemm;

void use_blas(void *gemm) { blas_sgemm = (sgemm_fn)gemm; }

/* out = x @ w.T (+ bias) for rows rows of x: one sgemm, as MLX computes a
 * product of stacked rows (NULL bias: beta 0, as MLX's matmul). */
void sgemm_product(const float *x, count_t rows, const float *w, const float *bias,
                   float *out, count_t outs, count_t ins) {
    if (bias)
        for (count_t r = 0; r < rows; r++) memcpy(out + r * outs, bias, outs * sizeof(float));
    blas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, rows, outs, ins, 1.0f, x, ins, w, ins,
               bias ? 1.0f : 0.0f, out, outs);
}

/* out = x @ w^T for x given by its columns (ins runs of rows floats: MLX's
 * transposed view of an [ins, rows] array), one sgemm as MLX calls it for
 * such a view. */
void columns_product(const float *x, count_t rows, const float *w, float *out, count_t outs,
                     count_t ins) {
    blas_sgemm(ROW_MAJOR, TRANS, TRANS, rows, outs, ins, 1.0f, x, rows, w, ins, 0.0f, out, outs);
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

enum { OUT_TILE = 4, ROW_TILE = 4, LONE_OUT_TILE = 8 };

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

/* sgemm's numbers for x @ w.T (+ bias), by the fastest way known to give them
 * (the library's own products where trusted). */
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

/* product's numbers for x @ w.T (+ bias), from w's panel where given and
 * product would chain them. */
HIDDEN void weighed(product_fn product, const float *panel, const float *x, count_t rows,
                    const float *w, const float *bias, float *out, count_t outs, count_t ins) {
    product_fn chosen = resolved(product, rows, outs, ins);
    if (panel && chosen == chained_product)
        panel_product(x, rows, panel, bias, out, outs, ins);
    else
        chosen(x, rows, w, bias, out, outs, ins);
}
