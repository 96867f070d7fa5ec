/* The local driver through the C API: acquire, wait, limits, fences,
 * release, the asynchronous acquire, a blocking acquire cancelled from
 * another thread, and close. */
#include <sched.h>

#include "check.h"

static const char *const YAML =
    "schemaVersion: 1\n"
    "options:\n"
    "  dokebi-lock:\n"
    "    backends:\n"
    "      main: {}\n"
    "      tiny:\n"
    "        maxKeys: 2\n"
    "        maxWaiters: 1\n"
    "        waitTimeoutMs: 20\n";

static void names_are_listed_sorted(const dokebi_lock_provider *provider) {
    CHECK(dokebi_lock_provider_name_count(provider) == 2);
    CHECK(strcmp(dokebi_lock_provider_name(provider, 0), "main") == 0);
    CHECK(strcmp(dokebi_lock_provider_name(provider, 1), "tiny") == 0);
    CHECK(dokebi_lock_provider_name(provider, 2) == NULL);
}

/* A held key's holder, with its fence, and a waiter, as inspect reads them. */
static void inspect_reads_the_holder_and_its_waiters(const dokebi_lock_backend *main_) {
    dokebi_lock_lease *lease = must_acquire(main_, "inspected", 0);
    outcome waiter;
    outcome_init(&waiter);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(main_, KEY("inspected"), 10000, on_acquired, &waiter, NULL, ERR));
    /* The asynchronous acquire joins the key's queue on the completion thread. */
    dokebi_lock_inspection *found = NULL;
    for (int tries = 0;; tries++) {
        CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_inspect(main_, KEY("inspected"), &found, ERR));
        if (dokebi_lock_inspection_waiting(found) == 1 || tries == 200000) break;
        dokebi_lock_inspection_free(found);
        sched_yield();
    }
    CHECK(dokebi_lock_inspection_held(found) == 1 && dokebi_lock_inspection_waiting(found) == 1);
    CHECK(dokebi_lock_inspection_holder_remaining_ms(found, 0) == -1 && !dokebi_lock_inspection_fence(found, NULL));
    uint64_t fence = 0;
    CHECK(dokebi_lock_inspection_holder_fence(found, 0, &fence) && fence == fence_of(lease));
    CHECK(dokebi_lock_inspection_holder_held_ms(found, 0) >= 0 && dokebi_lock_inspection_holder_held_ms(found, 1) == -1);
    CHECK(strcmp(dokebi_lock_inspection_backend(found), "main") == 0);
    dokebi_lock_inspection_free(found);
    dokebi_lock_lease_free(lease);
    CHECK(outcome_wait(&waiter) == DOKEBI_LOCK_OK);
    outcome_destroy(&waiter);
}

/* Every holder of a key is removed at once, as by its release: the lease is
 * no longer valid, its own release answers false, and the waiter is granted;
 * a shared key loses all its readers. */
static void force_release_removes_the_holders_and_grants_the_waiter(const dokebi_lock_backend *main_) {
    dokebi_lock_lease *lease = must_acquire(main_, "forced", 0);
    outcome waiter;
    outcome_init(&waiter);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(main_, KEY("forced"), 10000, on_acquired, &waiter, NULL, ERR));
    /* The asynchronous acquire joins the key's queue on the completion thread. */
    dokebi_lock_backend_status status;
    do {
        sched_yield();
        CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_get_status(main_, &status, ERR));
    } while (status.waiting == 0);
    dokebi_lock_forced_release *forced = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_force_release(main_, KEY("forced"), &forced, ERR));
    CHECK(dokebi_lock_forced_release_removed(forced) == 1 && !dokebi_lock_forced_release_fence(forced, NULL));
    CHECK(strcmp(dokebi_lock_forced_release_backend(forced), "main") == 0);
    dokebi_lock_forced_release_free(forced);
    CHECK(!dokebi_lock_lease_valid(lease));
    CHECK(outcome_wait(&waiter) == DOKEBI_LOCK_OK);
    CHECK(fence_of(waiter.lease) > fence_of(lease));
    bool released = true;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
    CHECK(!released && dokebi_lock_lease_valid(waiter.lease));
    dokebi_lock_lease_free(lease);
    outcome_destroy(&waiter);

    dokebi_lock_key key = {KEY("forced")};
    dokebi_lock_acquire_options shared = {.mode = DOKEBI_LOCK_MODE_SHARED, .keys = &key, .key_count = 1};
    dokebi_lock_lease *readers[2] = {NULL, NULL};
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_ex(main_, &shared, 0, &readers[0], ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_ex(main_, &shared, 0, &readers[1], ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_force_release(main_, KEY("forced"), &forced, ERR));
    CHECK(dokebi_lock_forced_release_removed(forced) == 2);
    dokebi_lock_forced_release_free(forced);
    CHECK(!dokebi_lock_lease_valid(readers[0]) && !dokebi_lock_lease_valid(readers[1]));
    dokebi_lock_lease_free(readers[0]);
    dokebi_lock_lease_free(readers[1]);

    forced = NULL;
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_backend_force_release(main_, "", 0, &forced, ERR));
    CHECK(forced == NULL);
}

static void a_held_key_is_busy_then_times_out_and_is_free_after_release(const dokebi_lock_backend *main_) {
    dokebi_lock_lease *lease = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_try_acquire(main_, KEY("order:42"), &lease, ERR));
    CHECK(dokebi_lock_lease_valid(lease));
    CHECK(dokebi_lock_lease_remaining_ms(lease) == DOKEBI_LOCK_NEVER_EXPIRES);
    size_t len = 0;
    const char *key = dokebi_lock_lease_key(lease, &len);
    CHECK(len == 8 && memcmp(key, "order:42", 8) == 0);

    /* Out-parameters are untouched on failure. */
    dokebi_lock_lease *sentinel = (dokebi_lock_lease *)&len, *other = sentinel;
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire(main_, KEY("order:42"), &other, ERR));
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_acquire(main_, KEY("order:42"), 0, &other, ERR));
    CHECK_STATUS(DOKEBI_LOCK_WAIT_TIMEOUT, dokebi_lock_acquire(main_, KEY("order:42"), 10, &other, ERR));
    CHECK(other == sentinel);

    /* Different keys are held at once. */
    dokebi_lock_lease *second = must_acquire(main_, "order:43", 0);

    bool released = false;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
    CHECK(released);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
    CHECK(!released);
    CHECK(!dokebi_lock_lease_valid(lease));
    CHECK(dokebi_lock_lease_remaining_ms(lease) == 0);
    bool valid = true;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_renew(lease, &valid, ERR));
    CHECK(!valid);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_renew(second, &valid, ERR));
    CHECK(valid);

    dokebi_lock_lease *again = must_acquire(main_, "order:42", 0);
    dokebi_lock_lease_free(again);
    dokebi_lock_lease_free(lease);
    dokebi_lock_lease_free(second);
}

static void fences_grow_with_every_acquire(const dokebi_lock_backend *main_) {
    unsigned long long last = 0;
    for (int i = 0; i < 5; i++) {
        dokebi_lock_lease *lease = must_acquire(main_, i % 2 ? "a" : "b", 0);
        unsigned long long fence = fence_of(lease);
        CHECK(fence > last);
        last = fence;
        dokebi_lock_lease_free(lease);
    }
}

static void freeing_a_held_lease_releases_it(const dokebi_lock_backend *main_) {
    dokebi_lock_lease *lease = must_acquire(main_, "freed", 0);
    dokebi_lock_lease_free(lease);
    dokebi_lock_lease_free(must_acquire(main_, "freed", 0));
}

static void key_limit_and_queue_full(const dokebi_lock_backend *tiny) {
    dokebi_lock_lease *a = must_acquire(tiny, "a", 0);
    dokebi_lock_lease *b = must_acquire(tiny, "b", 0);
    dokebi_lock_lease *c = NULL;
    CHECK_STATUS(DOKEBI_LOCK_KEY_LIMIT, dokebi_lock_acquire(tiny, KEY("c"), 0, &c, ERR));
    CHECK(c == NULL);

    /* One waiter fills the queue (maxWaiters: 1). Asynchronous acquires
     * start on the completion thread in call order, so the second finds the
     * first queued. */
    outcome waiter, overflow;
    outcome_init(&waiter);
    outcome_init(&overflow);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(tiny, KEY("a"), 60000, on_acquired, &waiter, NULL, ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(tiny, KEY("b"), 60000, on_acquired, &overflow, NULL, ERR));
    CHECK(outcome_wait(&overflow) == DOKEBI_LOCK_QUEUE_FULL);
    CHECK_STATUS(DOKEBI_LOCK_QUEUE_FULL, dokebi_lock_acquire(tiny, KEY("b"), 1000, &c, ERR));
    CHECK(c == NULL);
    /* With the queue full, a free key (under maxKeys) is still granted. */
    dokebi_lock_lease_free(b);
    dokebi_lock_lease *free_key = must_acquire(tiny, "free", 0);

    dokebi_lock_lease_free(a);
    CHECK(outcome_wait(&waiter) == DOKEBI_LOCK_OK);
    CHECK(dokebi_lock_lease_valid(waiter.lease));
    dokebi_lock_lease_free(free_key);
    outcome_destroy(&waiter);
    outcome_destroy(&overflow);
}

/* The asynchronous acquire: waiters are served first come, first served. */
typedef struct {
    pthread_mutex_t mutex;
    pthread_cond_t changed;
    int order[3];
    int count;
} fifo_log;

typedef struct {
    fifo_log *log;
    int id;
} fifo_waiter;

static void on_fifo_acquired(void *userdata, dokebi_lock_status status, dokebi_lock_lease *lease, dokebi_lock_error *error) {
    fifo_waiter *w = (fifo_waiter *)userdata;
    CHECK(status == DOKEBI_LOCK_OK && error == NULL);
    pthread_mutex_lock(&w->log->mutex);
    w->log->order[w->log->count++] = w->id;
    pthread_cond_broadcast(&w->log->changed);
    pthread_mutex_unlock(&w->log->mutex);
    /* Freeing hands the key to the next waiter. */
    dokebi_lock_lease_free(lease);
}

static void async_waiters_are_served_in_order(const dokebi_lock_backend *main_) {
    dokebi_lock_lease *holder = must_acquire(main_, "fifo", 0);
    fifo_log log = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0, 0, 0}, 0};
    fifo_waiter waiters[3] = {{&log, 3}, {&log, 1}, {&log, 2}};
    for (int i = 0; i < 3; i++) {
        CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(main_, KEY("fifo"), 60000, on_fifo_acquired, &waiters[i], NULL, ERR));
    }
    /* Acquires start in call order: once a later one has completed, the
     * three are queued behind the holder. */
    outcome marker;
    outcome_init(&marker);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(main_, KEY("marker"), 0, on_acquired, &marker, NULL, ERR));
    CHECK(outcome_wait(&marker) == DOKEBI_LOCK_OK);
    CHECK(log.count == 0);
    dokebi_lock_lease_free(holder);

    pthread_mutex_lock(&log.mutex);
    while (log.count < 3) {
        pthread_cond_wait(&log.changed, &log.mutex);
    }
    pthread_mutex_unlock(&log.mutex);
    CHECK(log.order[0] == 3 && log.order[1] == 1 && log.order[2] == 2);
    outcome_destroy(&marker);
}

static void async_acquire_times_out_and_is_cancelled(const dokebi_lock_backend *main_) {
    dokebi_lock_lease *holder = must_acquire(main_, "async", 0);

    outcome timed;
    outcome_init(&timed);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(main_, KEY("async"), 10, on_acquired, &timed, NULL, ERR));
    CHECK(outcome_wait(&timed) == DOKEBI_LOCK_WAIT_TIMEOUT);
    CHECK(timed.lease == NULL);
    outcome_destroy(&timed);

    a_cancelled_wait_is_aborted(main_, "async");

    /* Cancelling after the grant does nothing. */
    dokebi_lock_lease_free(holder);
    outcome granted;
    outcome_init(&granted);
    dokebi_lock_pending *pending = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(main_, KEY("async"), 60000, on_acquired, &granted, &pending, ERR));
    CHECK(outcome_wait(&granted) == DOKEBI_LOCK_OK);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_pending_cancel(pending));
    CHECK(dokebi_lock_lease_valid(granted.lease));
    dokebi_lock_pending_free(pending);
    outcome_destroy(&granted);
}

/* A callback may call back into the library, blocking calls and close included. */
typedef struct {
    dokebi_lock_provider *provider;
    const dokebi_lock_backend *backend;
    outcome done;
} reentrant;

static void on_acquired_then_close(void *userdata, dokebi_lock_status status, dokebi_lock_lease *lease, dokebi_lock_error *error) {
    reentrant *r = (reentrant *)userdata;
    CHECK(status == DOKEBI_LOCK_OK && error == NULL);
    dokebi_lock_lease *other = must_acquire(r->backend, "other", 1000);
    dokebi_lock_lease_free(other);
    CHECK(dokebi_lock_provider_close(r->provider) == DOKEBI_LOCK_OK);
    on_acquired(&r->done, dokebi_lock_lease_valid(lease) ? DOKEBI_LOCK_INVALID_ARGUMENT : DOKEBI_LOCK_OK, NULL, NULL);
    dokebi_lock_lease_free(lease);
}

static void a_callback_may_block_and_close_its_provider(void) {
    reentrant r;
    r.provider = open_provider(YAML);
    dokebi_lock_backend *backend = get_backend(r.provider, "main");
    r.backend = backend;
    outcome_init(&r.done);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(backend, KEY("k"), 1000, on_acquired_then_close, &r, NULL, ERR));
    CHECK(outcome_wait(&r.done) == DOKEBI_LOCK_OK); /* the lease ended with the close */
    outcome_destroy(&r.done);
    dokebi_lock_backend_free(backend);
    dokebi_lock_provider_free(r.provider);
}

/* A thread blocked in acquire while the provider closes. */
static void *wait_for_closed(void *backend) {
    dokebi_lock_lease *lease = NULL;
    CHECK_STATUS(DOKEBI_LOCK_CLOSED, dokebi_lock_acquire((const dokebi_lock_backend *)backend, KEY("closing"), 60000, &lease, ERR));
    CHECK(lease == NULL);
    return NULL;
}

static void close_rejects_waiters_and_ends_leases(dokebi_lock_provider *provider, const dokebi_lock_backend *main_) {
    dokebi_lock_lease *held = must_acquire(main_, "closing", 0);
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, wait_for_closed, (void *)main_) == 0);
    outcome waiter;
    outcome_init(&waiter);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(main_, KEY("closing"), 60000, on_acquired, &waiter, NULL, ERR));

    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_close(provider));
    /* close returns after the callbacks have run. */
    CHECK(waiter.called == 1 && waiter.status == DOKEBI_LOCK_CLOSED);
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(!dokebi_lock_lease_valid(held));
    bool released = true;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(held, &released, ERR));
    CHECK(!released);

    dokebi_lock_lease *late = NULL;
    dokebi_lock_backend *backend = NULL;
    CHECK_STATUS(DOKEBI_LOCK_CLOSED, dokebi_lock_acquire(main_, KEY("other"), 0, &late, ERR));
    CHECK_STATUS(DOKEBI_LOCK_CLOSED, dokebi_lock_provider_backend(provider, "main", &backend, ERR));
    CHECK(late == NULL && backend == NULL);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_close(provider)); /* idempotent */

    outcome late_async;
    outcome_init(&late_async);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(main_, KEY("other"), 0, on_acquired, &late_async, NULL, ERR));
    CHECK(outcome_wait(&late_async) == DOKEBI_LOCK_CLOSED);
    outcome_destroy(&late_async);
    outcome_destroy(&waiter);
    dokebi_lock_lease_free(held);
}

/* A blocking acquire given a cancel handle: cancelled from another thread
 * while it waits, it ends ABORTED with nothing held; a handle cancelled
 * before aborts the next call at once; without one it waits as usual. */
struct cancelled_wait {
    const dokebi_lock_backend *backend;
    const dokebi_lock_pending *cancel;
    dokebi_lock_status status;
};

static void *wait_to_be_cancelled(void *arg) {
    struct cancelled_wait *wait = arg;
    dokebi_lock_key key = {KEY("cancel-me")};
    dokebi_lock_acquire_options options = {DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0, &key, 1};
    dokebi_lock_lease *lease = NULL;
    wait->status = dokebi_lock_acquire_ex_cancellable(wait->backend, &options, 60000, wait->cancel, &lease, NULL);
    CHECK(lease == NULL);
    return NULL;
}

static void a_blocking_acquire_is_cancelled_from_another_thread(const dokebi_lock_backend *backend) {
    dokebi_lock_lease *held = must_acquire(backend, "cancel-me", 0);
    dokebi_lock_pending *cancel = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_pending_new(&cancel, ERR));
    struct cancelled_wait wait = {backend, cancel, DOKEBI_LOCK_OK};
    pthread_t waiter;
    CHECK(pthread_create(&waiter, NULL, wait_to_be_cancelled, &wait) == 0);
    dokebi_lock_backend_status status;
    do {
        sched_yield();
        CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_get_status(backend, &status, ERR));
    } while (status.waiting == 0);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_pending_cancel(cancel));
    CHECK(pthread_join(waiter, NULL) == 0);
    CHECK(wait.status == DOKEBI_LOCK_ABORTED);
    /* Cancelled for good: the next call with it aborts at once, even for a free key. */
    dokebi_lock_key other = {KEY("free-key")};
    dokebi_lock_acquire_options options = {DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0, &other, 1};
    dokebi_lock_lease *lease = NULL;
    CHECK_STATUS(DOKEBI_LOCK_ABORTED, dokebi_lock_acquire_ex_cancellable(backend, &options, 0, cancel, &lease, ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_ex_cancellable(backend, &options, 0, NULL, &lease, ERR));
    dokebi_lock_lease_free(lease);
    dokebi_lock_pending_free(cancel);
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_pending_new(NULL, ERR));
    dokebi_lock_lease_free(held);
}

int main(void) {
    dokebi_lock_provider *provider = open_provider(YAML);
    names_are_listed_sorted(provider);
    dokebi_lock_backend *main_ = get_backend(provider, "main");
    dokebi_lock_backend *tiny = get_backend(provider, "tiny");

    a_held_key_is_busy_then_times_out_and_is_free_after_release(main_);
    inspect_reads_the_holder_and_its_waiters(main_);
    a_labelled_handle_names_its_leases(main_, main_);
    force_release_removes_the_holders_and_grants_the_waiter(main_);
    fences_grow_with_every_acquire(main_);
    freeing_a_held_lease_releases_it(main_);
    key_limit_and_queue_full(tiny);
    async_waiters_are_served_in_order(main_);
    async_acquire_times_out_and_is_cancelled(main_);
    a_blocking_acquire_is_cancelled_from_another_thread(main_);
    a_callback_may_block_and_close_its_provider();
    close_rejects_waiters_and_ends_leases(provider, main_);

    /* Handles outlive the provider: freed in any order. */
    dokebi_lock_lease *survivor = NULL;
    dokebi_lock_provider_free(provider);
    CHECK_STATUS(DOKEBI_LOCK_CLOSED, dokebi_lock_try_acquire(tiny, KEY("x"), &survivor, ERR));
    dokebi_lock_forced_release *forced = NULL;
    CHECK_STATUS(DOKEBI_LOCK_CLOSED, dokebi_lock_backend_force_release(tiny, KEY("x"), &forced, ERR));
    dokebi_lock_backend_free(main_);
    dokebi_lock_backend_free(tiny);
    printf("local: ok\n");
    return 0;
}
