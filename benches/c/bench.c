/*
 * C local benchmark: acquire+release pairs on one key, from one thread
 * (uncontended) and from several threads (contended: the harness runs 2
 * and 8), for dokebi-lock's C API
 * and for a baseline written the way a C program would without it: one
 * pthread_mutex over a chained hash map of held keys, waiters blocking on a
 * per-key condition variable.
 *
 * Usage: bench <baseline|dokebi-lock> <threads> <seconds>
 *        bench <baseline|dokebi-lock> <threads> --pairs <n>
 * Prints one JSON object: pairs, seconds, and the per-pair p50/p99 over
 * batches of BATCH pairs (timing one pair would cost as much as the pair).
 * With --pairs, each thread runs exactly n pairs (no warm-up, nothing
 * timed but the whole run), so an instruction counter (valgrind
 * --tool=callgrind) gives the cost of a pair as the difference between
 * two runs with different n, divided by the difference of their n.
 * Built with -DWITH_DOKEBI against include/lock.h and liblock when the C
 * surface is built; without it only the baseline exists.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef WITH_DOKEBI
#include "lock.h"
#endif

enum { BATCH = 1000, MAX_BATCHES = 1 << 20, BUCKETS = 1 << 16 };

static const char KEY[] = "k";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    fprintf(stderr, "bench: %s\n", what);
    exit(1);
}

/* ---- baseline: pthread_mutex + hash map of held keys ------------------- */

struct entry {
    struct entry *next;
    pthread_cond_t released;
    unsigned waiters;
    int held;
    char *key;
};

static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *buckets[BUCKETS];

static uint64_t fnv1a(const char *key, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
    return h;
}

/* An entry exists while its key is held; waiters keep it alive. */
static struct entry **find(const char *key, size_t len) {
    struct entry **at = &buckets[fnv1a(key, len) & (BUCKETS - 1)];
    while (*at && (strncmp((*at)->key, key, len) != 0 || (*at)->key[len] != '\0')) at = &(*at)->next;
    return at;
}

static void baseline_acquire(const char *key, size_t len) {
    pthread_mutex_lock(&map_lock);
    struct entry **at = find(key, len);
    if (*at) {
        struct entry *e = *at;
        e->waiters++;
        /* Held: wait until a release hands it on (the entry stays). */
        while (e->held) pthread_cond_wait(&e->released, &map_lock);
        e->held = 1;
        e->waiters--;
    } else {
        struct entry *e = malloc(sizeof *e);
        if (!e || !(e->key = malloc(len + 1))) die("out of memory");
        memcpy(e->key, key, len);
        e->key[len] = '\0';
        e->held = 1;
        e->waiters = 0;
        pthread_cond_init(&e->released, NULL);
        e->next = NULL;
        *at = e;
    }
    pthread_mutex_unlock(&map_lock);
}

static void baseline_release(const char *key, size_t len) {
    pthread_mutex_lock(&map_lock);
    struct entry **at = find(key, len);
    struct entry *e = *at;
    if (e->waiters) {
        e->held = 0;
        pthread_cond_signal(&e->released);
    } else {
        *at = e->next;
        pthread_cond_destroy(&e->released);
        free(e->key);
        free(e);
    }
    pthread_mutex_unlock(&map_lock);
}

static void baseline_pairs(void *unused, int n) {
    (void)unused;
    for (int i = 0; i < n; i++) {
        baseline_acquire(KEY, sizeof KEY - 1);
        baseline_release(KEY, sizeof KEY - 1);
    }
}

/* ---- dokebi-lock ------------------------------------------------------- */

#ifdef WITH_DOKEBI
static void check(dokebi_lock_status status, dokebi_lock_error *error, const char *what) {
    if (status == DOKEBI_LOCK_OK) return;
    fprintf(stderr, "bench: %s: %s\n", what, error ? dokebi_lock_error_message(error) : dokebi_lock_status_name(status));
    exit(1);
}

static void dokebi_pairs(void *backend, int n) {
    for (int i = 0; i < n; i++) {
        dokebi_lock_lease *lease = NULL;
        dokebi_lock_error *error = NULL;
        check(dokebi_lock_acquire(backend, KEY, sizeof KEY - 1, DOKEBI_LOCK_WAIT_DEFAULT, &lease, &error), error, "acquire");
        bool released = false;
        check(dokebi_lock_lease_release(lease, &released, &error), error, "release");
        dokebi_lock_lease_free(lease);
    }
}
#endif

/* ---- timing ------------------------------------------------------------ */

struct worker {
    void (*pairs)(void *, int);
    void *state;
    double end;
    long exact_pairs; /* --pairs: run exactly this many, untimed */
    double measured_from, measured_to;
    long pairs_done;
    double *per_pair_ns;
    long batches;
};

static void *run_worker(void *arg) {
    struct worker *w = arg;
    if (w->exact_pairs > 0) {
        w->measured_from = now_s();
        for (long left = w->exact_pairs; left > 0; left -= BATCH) w->pairs(w->state, left < BATCH ? (int)left : BATCH);
        w->measured_to = now_s();
        w->pairs_done = w->exact_pairs;
        return NULL;
    }
    double warm_end = now_s() + 0.2 * (w->end - now_s());
    while (now_s() < warm_end) w->pairs(w->state, BATCH);
    w->measured_from = w->measured_to = now_s();
    for (double t = w->measured_from; t < w->end && w->batches < MAX_BATCHES;) {
        w->pairs(w->state, BATCH);
        double t2 = now_s();
        w->per_pair_ns[w->batches++] = (t2 - t) * 1e9 / BATCH;
        w->pairs_done += BATCH;
        w->measured_to = t = t2;
    }
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(double *sorted, long n, double q) {
    if (n == 0) return 0;
    long i = (long)(q * (double)n + 0.999999) - 1;
    return sorted[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

int main(int argc, char **argv) {
    static const char usage[] = "usage: bench <baseline|dokebi-lock> <threads> <seconds | --pairs n>";
    if (argc != 4 && !(argc == 5 && strcmp(argv[3], "--pairs") == 0)) die(usage);
    const char *subject = argv[1];
    int threads = atoi(argv[2]);
    long exact_pairs = argc == 5 ? atol(argv[4]) : 0;
    double seconds = argc == 5 ? 1 : atof(argv[3]);
    if (threads < 1 || threads > 64 || !(seconds > 0) || (argc == 5 && exact_pairs < 1)) die("bad arguments");

    void (*pairs)(void *, int) = baseline_pairs;
    void *state = NULL;
#ifdef WITH_DOKEBI
    dokebi_lock_provider *provider = NULL;
    dokebi_lock_backend *backend = NULL;
    if (strcmp(subject, "dokebi-lock") == 0) {
        static const char yaml[] = "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      bench: {}\n";
        dokebi_lock_error *error = NULL;
        check(dokebi_lock_provider_open(yaml, sizeof yaml - 1, &provider, &error), error, "open");
        check(dokebi_lock_provider_backend(provider, "bench", &backend, &error), error, "backend");
        pairs = dokebi_pairs;
        state = backend;
    } else
#endif
        if (strcmp(subject, "baseline") != 0) die("unknown subject (built without the C surface?)");

    struct worker *workers = calloc((size_t)threads, sizeof *workers);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    if (!workers || !ids) die("out of memory");
    double start = now_s();
    double end = start + seconds * 1.25; /* the first fifth is warm-up */
    for (int i = 0; i < threads; i++) {
        workers[i] = (struct worker){ .pairs = pairs, .state = state, .end = end, .exact_pairs = exact_pairs, .per_pair_ns = malloc(MAX_BATCHES * sizeof(double)) };
        if (!workers[i].per_pair_ns) die("out of memory");
        if (pthread_create(&ids[i], NULL, run_worker, &workers[i]) != 0) die("pthread_create");
    }
    long total = 0, batches = 0;
    double from = end, to = start;
    for (int i = 0; i < threads; i++) {
        pthread_join(ids[i], NULL);
        total += workers[i].pairs_done;
        batches += workers[i].batches;
        if (workers[i].measured_from < from) from = workers[i].measured_from;
        if (workers[i].measured_to > to) to = workers[i].measured_to;
    }
    double *all = malloc((size_t)(batches > 0 ? batches : 1) * sizeof(double));
    if (!all) die("out of memory");
    long k = 0;
    for (int i = 0; i < threads; i++)
        for (long b = 0; b < workers[i].batches; b++) all[k++] = workers[i].per_pair_ns[b];
    qsort(all, (size_t)batches, sizeof(double), by_value);
    double measured = to - from;
    printf("{\"pairs\":%ld,\"seconds\":%.6f,\"opsPerSec\":%.1f,\"p50Us\":%.6f,\"p99Us\":%.6f,\"latencyBatch\":%d}\n", total, measured,
           (double)total / measured, quantile(all, batches, 0.5) / 1e3, quantile(all, batches, 0.99) / 1e3, BATCH);
#ifdef WITH_DOKEBI
    if (backend) dokebi_lock_backend_free(backend);
    if (provider) {
        dokebi_lock_provider_close(provider);
        dokebi_lock_provider_free(provider);
    }
#endif
    return 0;
}
