/* Several pthreads contend on one key: never two holders at once, every
 * acquire is served, fences grow in the order the section is entered.
 * Completion threads: freeing a provider from another provider's callback
 * waits for the freed one's callbacks, and two callbacks freeing each
 * other's providers do not wait for each other for good. */
/* nanosleep is POSIX, not C11: glibc shows it anyway, musl only when asked. */
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <time.h>
#include <unistd.h>

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

/* Provider B's callback runs while provider A's callback frees B: the free
 * returns only after B's callback has returned. */
static struct {
    pthread_mutex_t mutex;
    dokebi_lock_provider *b;
    bool b_running, b_freed, b_done, a_done, b_saw_freed;
} across = {PTHREAD_MUTEX_INITIALIZER, NULL, false, false, false, false, false};

static void set(bool *flag) {
    pthread_mutex_lock(&across.mutex);
    *flag = true;
    pthread_mutex_unlock(&across.mutex);
}

static bool get(const bool *flag) {
    pthread_mutex_lock(&across.mutex);
    bool value = *flag;
    pthread_mutex_unlock(&across.mutex);
    return value;
}

static void on_b(void *userdata, dokebi_lock_status status, dokebi_lock_lease *lease, dokebi_lock_error *error) {
    (void)userdata;
    CHECK(status == DOKEBI_LOCK_OK);
    set(&across.b_running);
    /* Long enough for A's callback to start freeing B meanwhile. */
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    if (get(&across.b_freed)) {
        set(&across.b_saw_freed);
    }
    dokebi_lock_lease_free(lease);
    dokebi_lock_error_free(error);
    set(&across.b_done);
}

static void on_a(void *userdata, dokebi_lock_status status, dokebi_lock_lease *lease, dokebi_lock_error *error) {
    (void)userdata;
    CHECK(status == DOKEBI_LOCK_OK);
    dokebi_lock_provider_free(across.b);
    set(&across.b_freed);
    dokebi_lock_lease_free(lease);
    dokebi_lock_error_free(error);
    set(&across.a_done);
}

static void freeing_a_provider_from_another_ones_callback_waits_for_its_callbacks(void) {
    dokebi_lock_provider *a = open_provider(YAML);
    across.b = open_provider(YAML);
    dokebi_lock_backend *on_a_backend = get_backend(a, "main"), *on_b_backend = get_backend(across.b, "main");
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(on_b_backend, KEY("k"), 0, on_b, NULL, NULL, ERR));
    while (!get(&across.b_running)) {
        sched_yield();
    }
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(on_a_backend, KEY("k"), 0, on_a, NULL, NULL, ERR));
    while (!get(&across.a_done) || !get(&across.b_done)) {
        sched_yield();
    }
    CHECK(!across.b_saw_freed);
    dokebi_lock_backend_free(on_a_backend);
    dokebi_lock_backend_free(on_b_backend);
    dokebi_lock_provider_free(a);
}

/* Two providers' callbacks each free the other's provider, at once: one of
 * the frees must not wait for the other's callback, or neither returns
 * (SIGALRM ends a hung test). */
static struct {
    pthread_mutex_t mutex;
    dokebi_lock_provider *providers[2];
    int entered, returned;
} crossed = {PTHREAD_MUTEX_INITIALIZER, {NULL, NULL}, 0, 0};

static void free_the_other(void *userdata, dokebi_lock_status status, dokebi_lock_lease *lease, dokebi_lock_error *error) {
    CHECK(status == DOKEBI_LOCK_OK);
    dokebi_lock_lease_free(lease);
    dokebi_lock_error_free(error);
    int other = userdata == &crossed.providers[0] ? 1 : 0;
    pthread_mutex_lock(&crossed.mutex);
    crossed.entered++;
    pthread_mutex_unlock(&crossed.mutex);
    for (;;) {
        pthread_mutex_lock(&crossed.mutex);
        int entered = crossed.entered;
        pthread_mutex_unlock(&crossed.mutex);
        if (entered == 2) {
            break;
        }
        sched_yield();
    }
    dokebi_lock_provider_free(crossed.providers[other]);
    pthread_mutex_lock(&crossed.mutex);
    crossed.returned++;
    pthread_mutex_unlock(&crossed.mutex);
}

static void two_callbacks_freeing_each_others_provider_do_not_deadlock(void) {
    alarm(60);
    dokebi_lock_backend *backends[2];
    for (int i = 0; i < 2; i++) {
        crossed.providers[i] = open_provider(YAML);
        backends[i] = get_backend(crossed.providers[i], "main");
    }
    for (int i = 0; i < 2; i++) {
        CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(backends[i], KEY("k"), 0, free_the_other, &crossed.providers[i], NULL, ERR));
    }
    for (;;) {
        pthread_mutex_lock(&crossed.mutex);
        int returned = crossed.returned;
        pthread_mutex_unlock(&crossed.mutex);
        if (returned == 2) {
            break;
        }
        sched_yield();
    }
    for (int i = 0; i < 2; i++) {
        dokebi_lock_backend_free(backends[i]);
    }
    alarm(0);
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
    freeing_a_provider_from_another_ones_callback_waits_for_its_callbacks();
    two_callbacks_freeing_each_others_provider_do_not_deadlock();
    printf("threads: ok (%d threads x %d rounds)\n", THREADS, ROUNDS);
    return 0;
}
