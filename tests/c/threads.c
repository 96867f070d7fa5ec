/* Several pthreads contend on one key: never two holders at once, every
 * acquire is served, fences grow in the order the section is entered. */
#include <sched.h>

#include "check.h"

#define THREADS 8
#define ROUNDS 2000

static const char *const YAML =
    "schemaVersion: 1\n"
    "options:\n"
    "  dokebi-lock:\n"
    "    backends:\n"
    "      main: {}\n";

/* Touched only inside the critical section, deliberately without atomics:
 * a second holder would show up as a lost update or a seen flag. */
static int in_section;
static long counter;
static unsigned long long last_fence;
static int overlaps;
static int fence_regressions;

static void critical_section(const dokebi_lock_lease *lease) {
    if (in_section) {
        overlaps++;
    }
    in_section = 1;
    unsigned long long fence = fence_of(lease);
    if (fence <= last_fence) {
        fence_regressions++;
    }
    last_fence = fence;
    long seen = counter;
    sched_yield(); /* widen the window a broken lock would let others into */
    counter = seen + 1;
    in_section = 0;
}

static void *contend(void *backend_) {
    const dokebi_lock_backend *backend = (const dokebi_lock_backend *)backend_;
    for (int round = 0; round < ROUNDS; round++) {
        dokebi_lock_lease *lease = NULL;
        if (round % 10 == 0) {
            /* Now and then a try: busy is fine, then wait like the others. */
            dokebi_lock_status status = dokebi_lock_try_acquire(backend, KEY("shared"), &lease, NULL);
            CHECK(status == DOKEBI_LOCK_OK || status == DOKEBI_LOCK_LOCK_BUSY);
        }
        if (lease == NULL) {
            lease = must_acquire(backend, "shared", 60000);
        }
        critical_section(lease);
        bool released = false;
        CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
        CHECK(released);
        dokebi_lock_lease_free(lease);
    }
    return NULL;
}

int main(void) {
    dokebi_lock_provider *provider = open_provider(YAML);
    /* Each thread takes its own backend handle; all share the one backend. */
    dokebi_lock_backend *backends[THREADS];
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++) {
        backends[i] = get_backend(provider, "main");
        CHECK(pthread_create(&threads[i], NULL, contend, backends[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
        dokebi_lock_backend_free(backends[i]);
    }
    CHECK(overlaps == 0);
    CHECK(fence_regressions == 0);
    CHECK(counter == (long)THREADS * ROUNDS);
    dokebi_lock_provider_free(provider);
    printf("threads: ok (%d threads x %d rounds)\n", THREADS, ROUNDS);
    return 0;
}
