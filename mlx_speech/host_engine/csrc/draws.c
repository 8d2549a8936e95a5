/* A sampling head's draws: the filters and MLX's draw for a row of logits,
 * the picks of a frame's rows, and the uniforms MLX's keys give. */
#include "internal.h"

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
