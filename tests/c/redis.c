/* The redis driver through the C API, against the private redis-server whose
 * URL is in REDIS_URL (started and killed by scripts/test-c). Two providers
 * stand for two processes sharing the server; the checks of every store are
 * in store.h, those of redis alone here. */
/* nanosleep is POSIX, not C11: glibc shows it anyway, musl only when asked. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "store.h"

static char yaml[2048];

/* A configuration with backends `shared` (leaseMs 5000) and `brief`
 * (leaseMs 100, on a connection whose commands time out before that) on
 * `url`, under `namespace`. */
static const char *config(const char *url, const char *namespace_) {
    int len = snprintf(yaml, sizeof yaml,
                       "schemaVersion: 1\n"
                       "options:\n"
                       "  dokebi-lock:\n"
                       "    backends:\n"
                       "      shared: { driver: redis, connection: main, namespace: %s, leaseMs: 5000 }\n"
                       "      brief: { driver: redis, connection: quick, namespace: %s, leaseMs: 100 }\n"
                       "  dokebi-redis:\n"
                       "    connections:\n"
                       "      main: { url: \"%s\", connectTimeoutMs: 500, commandTimeoutMs: 1000 }\n"
                       "      quick: { url: \"%s\", connectTimeoutMs: 500, commandTimeoutMs: 90 }\n",
                       namespace_, namespace_, url, url);
    CHECK(len > 0 && (size_t)len < sizeof yaml);
    return yaml;
}

static void sleep_ms(long ms) {
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

static void an_expired_lease_is_lost(const dokebi_lock_backend *brief) {
    dokebi_lock_lease *lease = must_acquire(brief, "expiring", 0);
    sleep_ms(300);
    CHECK(!dokebi_lock_lease_valid(lease));
    bool valid = true;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_renew(lease, &valid, ERR));
    CHECK(!valid);
    dokebi_lock_lease *next = must_acquire(brief, "expiring", 0);
    CHECK(fence_of(next) > fence_of(lease));
    dokebi_lock_error *error = NULL;
    CHECK(dokebi_lock_lease_release(lease, NULL, &error) == DOKEBI_LOCK_LEASE_LOST);
    CHECK(strcmp(dokebi_lock_error_name(error), "LEASE_LOST") == 0);
    dokebi_lock_error_free(error);
    dokebi_lock_lease_free(lease);
    dokebi_lock_lease_free(next);
}

/* Threads of two providers contend on one key: never two holders. */
static int in_section, overlaps;
static long counter;

static void *contend(void *backend_) {
    const dokebi_lock_backend *backend = (const dokebi_lock_backend *)backend_;
    for (int round = 0; round < 50; round++) {
        dokebi_lock_lease *lease = must_acquire(backend, "contended", 10000);
        if (in_section) {
            overlaps++;
        }
        in_section = 1;
        long seen = counter;
        sleep_ms(0);
        counter = seen + 1;
        in_section = 0;
        bool released = false;
        CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
        CHECK(released);
        dokebi_lock_lease_free(lease);
    }
    return NULL;
}

static void threads_of_two_providers_never_hold_at_once(const dokebi_lock_backend *one, const dokebi_lock_backend *two) {
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        CHECK(pthread_create(&threads[i], NULL, contend, (void *)(i % 2 ? one : two)) == 0);
    }
    for (int i = 0; i < 4; i++) {
        CHECK(pthread_join(threads[i], NULL) == 0);
    }
    CHECK(overlaps == 0 && counter == 200);
}

/* A blocking acquire waiting for a key another provider holds ends ABORTED
 * when its cancel handle is cancelled from another thread. */
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

static void a_blocking_acquire_is_cancelled_from_another_thread(const dokebi_lock_backend *one, const dokebi_lock_backend *two) {
    dokebi_lock_lease *held = must_acquire(one, "cancel-me", 0);
    dokebi_lock_pending *cancel = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_pending_new(&cancel, ERR));
    struct cancelled_wait wait = {two, cancel, DOKEBI_LOCK_OK};
    pthread_t waiter;
    CHECK(pthread_create(&waiter, NULL, wait_to_be_cancelled, &wait) == 0);
    dokebi_lock_backend_status status;
    do {
        sleep_ms(10);
        CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_get_status(two, &status, ERR));
    } while (status.waiting == 0);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_pending_cancel(cancel));
    CHECK(pthread_join(waiter, NULL) == 0);
    CHECK(wait.status == DOKEBI_LOCK_ABORTED);
    dokebi_lock_pending_free(cancel);
    dokebi_lock_lease_free(held);
}

int main(void) {
    const char *url = getenv("REDIS_URL");
    CHECK(url != NULL);
    char namespace_[64];
    snprintf(namespace_, sizeof namespace_, "c-test-%ld", (long)time(NULL));
    dokebi_lock_provider *first = open_provider(config(url, namespace_));
    dokebi_lock_provider *second = open_provider(config(url, namespace_));
    dokebi_lock_backend *one = get_backend(first, "shared");
    dokebi_lock_backend *two = get_backend(second, "shared");
    dokebi_lock_backend *brief = get_backend(first, "brief");

    a_lease_is_shared_between_providers(one, two);
    inspect_reads_the_other_provider_s_holders(one, two);
    a_labelled_handle_names_its_leases(one, two);
    force_release_breaks_the_other_provider_s_holder(one, two);
    an_expired_lease_is_lost(brief);
    a_blocking_acquire_is_cancelled_from_another_thread(one, two);
    threads_of_two_providers_never_hold_at_once(one, two);
    /* Port 1 on localhost: nothing listens there. */
    an_unreachable_server_is_provider_failed(config("redis://127.0.0.1:1/0", "c-test"));
    close_releases_held_leases(first, one, two);

    dokebi_lock_backend_free(one);
    dokebi_lock_backend_free(two);
    dokebi_lock_backend_free(brief);
    dokebi_lock_provider_free(first);
    dokebi_lock_provider_free(second);
    printf("redis: ok\n");
    return 0;
}
