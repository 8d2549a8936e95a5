/* A codec decoder layer over several requests' steps, and its attention in
 * the fast mode. */
#include "internal.h"

/* ---- The codec decoder's transformer layers, outside MLX ----
 *
 * A layer of the codec's streaming decoder (mlx-audio's TransformerLayer.step)
 * over several requests' new steps laid end to end: the products over all
 * of them at once, each with the numbers of the sgemm MLX runs for it
 * (rows_product; no biases), and each request's steps attending over its
 * own history, causally, within the layer's context; MLX's layer norms,
 * rotation, attention, exact GELU and layer scales, number for number. */

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
