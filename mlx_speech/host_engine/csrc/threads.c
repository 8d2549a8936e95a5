/* Work in pieces, shared with a helper thread. */
#include <pthread.h>

#include "internal.h"

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
HIDDEN void in_pieces(piece_fn run, const void *argument, count_t items, count_t length,
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
HIDDEN count_t piece_length(count_t items, count_t unit) {
    count_t units = (items + unit - 1) / unit;
    return (units + PIECES - 1) / PIECES * unit;
}

struct span { span_fn fn; const float *x; float *out; count_t n, width, length; };

static void run_span(const void *argument, count_t piece) {
    const struct span *s = argument;
    count_t first = piece * s->length;
    s->fn(s->x + first, s->out + first, piece_end(first, s->length, s->n) - first, s->width);
}

/* Arrays of at least least floats in pieces of whole rows of width, shared
 * with the helper thread (linger: in a frame step). */
HIDDEN void in_shares(span_fn fn, const float *x, float *out, count_t n, count_t width,
                      count_t least, int linger) {
    count_t unit = width > 1 ? width : 64; /* a lone value's pieces: whole cache lines */
    count_t length = n < least || n < 2 * unit ? n : piece_length(n, unit);
    struct span whole = {fn, x, out, n, width, length};
    in_pieces(run_span, &whole, n, length, linger);
}
