/* Rows through a GPT-2 block: MLX's layer norm, rotation and attention,
 * number for number, and the blocks over a prompt's rows or one row per
 * request. */
#include "internal.h"

/* ---- Rows through a GPT-2 block, outside MLX ----
 *
 * The frame step on the host runs each block in C on host buffers: the
 * products through the BLAS MLX itself calls (its sgemm's address handed
 * over by use_blas), as MLX calls it (the same numbers), or through this
 * library's own product (products.c); between them MLX's layer norm,
 * rotation, attention and GELU, number for number. */

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

/* ---- A prompt's rows through a block, outside MLX ----
 *
 * The rows of one request's prompt at positions start.. (its cache holds
 * the positions before), as MLX computes them: each product sgemm's numbers
 * over all rows (rows_product; the bias first copied to every row, as MLX's
 * addmm does), each row attending over the cache up to its own position,
 * the others masked with float32's lowest value as mlx-audio's causal mask
 * does. */

/* rows queries (heads * dim floats each) over the cache's first start + rows
 * positions, query r at position start + r seeing the positions up to its
 * own and, with a context (0: none), fewer than context before it; scaled:
 * rows * dim floats, scores: rows * (start + rows). */
HIDDEN void attend_rows(const float *q, count_t rows, const float *keys, const float *values,
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

/* One row's queries and keys (the first two thirds of its qkv) rotated
 * (cos, sin: its dim floats each; NULL: no rotation), and its keys and
 * values written into a cache laid out [heads, capacity, dim] at position. */
HIDDEN void place_row(count_t width, count_t heads, float *qkv, const float *cos,
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
