/* What every store-backed driver (redis, postgres, mysql) promises through
 * the C API, written once: each driver's test calls these with its own
 * backends, so a check added here holds for every store (header-only, as
 * check.h: scripts/test-c compiles each test from its one .c file). Two
 * providers on one server stand for two processes. */
#ifndef DOKEBI_LOCK_TEST_STORE_H
#define DOKEBI_LOCK_TEST_STORE_H

/* getpid, nanosleep and clock_gettime are POSIX, not C11: a test including
 * this header asks for them (_POSIX_C_SOURCE) before any include, or musl
 * does not show them. */
#include <time.h>
#include <unistd.h>

#include "check.h"

static inline void a_lease_is_shared_between_providers(const dokebi_lock_backend *one, const dokebi_lock_backend *two) {
    dokebi_lock_lease *lease = must_acquire(one, "order:42", 0);
    CHECK(dokebi_lock_lease_valid(lease));
    int64_t remaining = dokebi_lock_lease_remaining_ms(lease);
    CHECK(remaining > 0 && remaining <= 5000);
    unsigned long long first = fence_of(lease);

    dokebi_lock_lease *other = NULL;
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire(two, KEY("order:42"), &other, ERR));
    CHECK_STATUS(DOKEBI_LOCK_WAIT_TIMEOUT, dokebi_lock_acquire(two, KEY("order:42"), 50, &other, ERR));
    CHECK(other == NULL);

    /* A waiter in the other provider gets the key when it is released. */
    outcome waiter;
    outcome_init(&waiter);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(two, KEY("order:42"), 10000, on_acquired, &waiter, NULL, ERR));
    bool valid = false, released = false;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_renew(lease, &valid, ERR));
    CHECK(valid);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
    CHECK(released);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
    CHECK(!released);
    CHECK(!dokebi_lock_lease_valid(lease) && dokebi_lock_lease_remaining_ms(lease) == 0);
    CHECK(outcome_wait(&waiter) == DOKEBI_LOCK_OK);
    CHECK(fence_of(waiter.lease) > first);

    /* A waiter cancelled while the key is held ends with ABORTED. */
    a_cancelled_wait_is_aborted(one, "order:42");
    outcome_destroy(&waiter); /* frees (so releases) the waiter's lease */
    dokebi_lock_lease_free(lease);

    /* Freeing a held lease releases it for everyone. */
    lease = must_acquire(two, "order:42", 0);
    dokebi_lock_lease_free(lease);
    dokebi_lock_lease_free(must_acquire(one, "order:42", 0));
}

/* What `two` reads of a key `one` holds, then of readers of both, then of
 * it free (docs/locks.md, "Who holds a key"). */
static inline void inspect_reads_the_other_provider_s_holders(const dokebi_lock_backend *one, const dokebi_lock_backend *two) {
    dokebi_lock_inspection *found = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_inspect(two, KEY("inspected"), &found, ERR));
    CHECK(dokebi_lock_inspection_held(found) == 0 && dokebi_lock_inspection_holder_count(found) == 0);
    CHECK(dokebi_lock_inspection_limit(found) == 1 && dokebi_lock_inspection_waiting(found) == 0);
    CHECK(strcmp(dokebi_lock_inspection_backend(found), "shared") == 0);
    dokebi_lock_inspection_free(found);

    dokebi_lock_lease *lease = must_acquire(one, "inspected", 0);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_inspect(two, KEY("inspected"), &found, ERR));
    CHECK(dokebi_lock_inspection_held(found) == 1 && dokebi_lock_inspection_mode(found) == DOKEBI_LOCK_MODE_EXCLUSIVE);
    CHECK(dokebi_lock_inspection_holder_count(found) == 1 && dokebi_lock_inspection_holder_units(found, 0) == 1);
    int64_t remaining = dokebi_lock_inspection_holder_remaining_ms(found, 0);
    CHECK(remaining > 0 && remaining <= 5000);
    uint64_t fence = 0;
    CHECK(dokebi_lock_inspection_fence(found, &fence) && fence >= fence_of(lease));
    uint64_t holder_fence = 0;
    CHECK(dokebi_lock_inspection_holder_fence(found, 0, &holder_fence) && holder_fence == fence_of(lease));
    CHECK(dokebi_lock_inspection_holder_held_ms(found, 0) >= 0 && dokebi_lock_inspection_holder_held_ms(found, 0) < 5000);
    CHECK(dokebi_lock_inspection_holder_held_ms(found, 1) == -1);
    CHECK(dokebi_lock_inspection_holder_units(found, 1) == 0 && dokebi_lock_inspection_holder_remaining_ms(found, 1) == -1);
    /* The holder's label: this host's name and this process's id by default. */
    char pid[32];
    snprintf(pid, sizeof pid, ":%ld", (long)getpid());
    const char *label = dokebi_lock_inspection_holder_label(found, 0);
    CHECK(label != NULL && strlen(label) > strlen(pid) && strcmp(label + strlen(label) - strlen(pid), pid) == 0);
    CHECK(dokebi_lock_inspection_holder_label(found, 1) == NULL && dokebi_lock_inspection_holder_label(NULL, 0) == NULL);
    dokebi_lock_inspection_free(found);

    /* A try that finds it held names the holder in its error's details. */
    dokebi_lock_lease *other = NULL;
    dokebi_lock_error *busy = NULL;
    CHECK(dokebi_lock_try_acquire(two, KEY("inspected"), &other, &busy) == DOKEBI_LOCK_LOCK_BUSY);
    const char *details = dokebi_lock_error_details(busy);
    CHECK(details != NULL && strstr(details, "\"holders\":[{") != NULL && strstr(details, pid) != NULL);
    dokebi_lock_error_free(busy);
    dokebi_lock_lease_free(lease);

    dokebi_lock_key key = {KEY("inspected")};
    dokebi_lock_acquire_options shared = {.mode = DOKEBI_LOCK_MODE_SHARED, .keys = &key, .key_count = 1};
    dokebi_lock_lease *readers[2] = {NULL, NULL};
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_ex(one, &shared, 0, &readers[0], ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_ex(two, &shared, 0, &readers[1], ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_inspect(one, KEY("inspected"), &found, ERR));
    CHECK(dokebi_lock_inspection_held(found) == 2 && dokebi_lock_inspection_mode(found) == DOKEBI_LOCK_MODE_SHARED);
    dokebi_lock_inspection_free(found);
    dokebi_lock_lease_free(readers[0]);
    dokebi_lock_lease_free(readers[1]);

    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_backend_inspect(two, "", 0, &found, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_backend_inspect(two, KEY("inspected"), NULL, ERR));
    CHECK(dokebi_lock_inspection_held(NULL) == 0 && dokebi_lock_inspection_backend(NULL) == NULL);
    dokebi_lock_inspection_free(NULL);
}

/* `two` breaks a key `one` holds while `two` waits for it: the holder is
 * removed, the fence raised past its own, the waiter granted at once (not
 * when the lease would end), and the holder finds its lease gone at its next
 * renewal and release (docs/locks.md, "Breaking a stuck lock"). */
static inline void force_release_breaks_the_other_provider_s_holder(const dokebi_lock_backend *one, const dokebi_lock_backend *two) {
    dokebi_lock_lease *lease = must_acquire(one, "forced", 0);
    outcome waiter;
    outcome_init(&waiter);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(two, KEY("forced"), 10000, on_acquired, &waiter, NULL, ERR));
    /* The waiter shows in the store before the key is broken. */
    dokebi_lock_inspection *found = NULL;
    for (int tries = 0;; tries++) {
        CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_inspect(one, KEY("forced"), &found, ERR));
        uint32_t waiting = dokebi_lock_inspection_waiting(found);
        dokebi_lock_inspection_free(found);
        if (waiting == 1) break;
        CHECK(tries < 500);
        struct timespec pause = {0, 10 * 1000000L};
        nanosleep(&pause, NULL);
    }

    struct timespec before, after;
    clock_gettime(CLOCK_MONOTONIC, &before);
    dokebi_lock_forced_release *forced = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_force_release(two, KEY("forced"), &forced, ERR));
    CHECK(dokebi_lock_forced_release_removed(forced) == 1);
    CHECK(strcmp(dokebi_lock_forced_release_backend(forced), "shared") == 0);
    uint64_t fence = 0;
    CHECK(dokebi_lock_forced_release_fence(forced, &fence) && fence > fence_of(lease));
    dokebi_lock_forced_release_free(forced);
    CHECK(outcome_wait(&waiter) == DOKEBI_LOCK_OK);
    clock_gettime(CLOCK_MONOTONIC, &after);
    CHECK((after.tv_sec - before.tv_sec) * 1000 + (after.tv_nsec - before.tv_nsec) / 1000000 < 2000);
    CHECK(fence_of(waiter.lease) > fence);

    bool valid = true, released = true;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_renew(lease, &valid, ERR));
    CHECK(!valid && !dokebi_lock_lease_valid(lease));
    CHECK_STATUS(DOKEBI_LOCK_LEASE_LOST, dokebi_lock_lease_release(lease, &released, ERR));
    dokebi_lock_lease_free(lease);
    outcome_destroy(&waiter); /* frees (so releases) the waiter's lease */

    /* A free key: nobody removed, its fence raised all the same. */
    uint64_t again = 0;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_force_release(one, KEY("forced"), &forced, ERR));
    CHECK(dokebi_lock_forced_release_removed(forced) == 0);
    CHECK(dokebi_lock_forced_release_fence(forced, &again) && again > fence);
    dokebi_lock_forced_release_free(forced);

    forced = NULL;
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_backend_force_release(two, "", 0, &forced, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_backend_force_release(two, KEY("forced"), NULL, ERR));
    CHECK(forced == NULL);
    CHECK(dokebi_lock_forced_release_removed(NULL) == 0 && dokebi_lock_forced_release_backend(NULL) == NULL);
    CHECK(!dokebi_lock_forced_release_fence(NULL, NULL));
    dokebi_lock_forced_release_free(NULL);
}

/* `yaml` names a server where nothing listens (port 1 on localhost) for its
 * backend `shared`: an acquire is PROVIDER_FAILED, with a cause and a fix. */
static inline void an_unreachable_server_is_provider_failed(const char *yaml) {
    dokebi_lock_provider *provider = open_provider(yaml);
    dokebi_lock_backend *backend = get_backend(provider, "shared");
    dokebi_lock_lease *lease = NULL;
    dokebi_lock_error *error = NULL;
    CHECK(dokebi_lock_acquire(backend, KEY("k"), 0, &lease, &error) == DOKEBI_LOCK_PROVIDER_FAILED);
    CHECK(lease == NULL);
    CHECK(dokebi_lock_error_cause(error) != NULL);
    CHECK(strlen(dokebi_lock_error_fix(error)) > 0);
    dokebi_lock_error_free(error);
    CHECK_STATUS(DOKEBI_LOCK_PROVIDER_FAILED, dokebi_lock_try_acquire(backend, KEY("k"), &lease, ERR));
    CHECK(lease == NULL);
    dokebi_lock_backend_free(backend);
    dokebi_lock_provider_free(provider);
}

static inline void close_releases_held_leases(dokebi_lock_provider *provider, const dokebi_lock_backend *held_by, const dokebi_lock_backend *other) {
    dokebi_lock_lease *lease = must_acquire(held_by, "closing", 0);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_close(provider));
    CHECK(!dokebi_lock_lease_valid(lease));
    dokebi_lock_lease_free(must_acquire(other, "closing", 0));
    dokebi_lock_lease *late = NULL;
    CHECK_STATUS(DOKEBI_LOCK_CLOSED, dokebi_lock_acquire(held_by, KEY("closing"), 0, &late, ERR));
    dokebi_lock_lease_free(lease);
}

/* The status of a backend on a SQL store reports its connection, as a redis
 * one's does, and the backend names its driver. */
static inline void the_status_reports_the_connection(const dokebi_lock_backend *one, const char *driver) {
    dokebi_lock_lease *lease = must_acquire(one, "status", 0);
    dokebi_lock_backend_status status;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_get_status(one, &status, ERR));
    CHECK(strcmp(dokebi_lock_backend_driver(one), driver) == 0);
    CHECK(!status.is_redis && status.held == 1);
    CHECK(status.connected && status.last_error == DOKEBI_LOCK_OK && status.last_probe_unix_ms > 0);
    dokebi_lock_lease_free(lease);
    CHECK(dokebi_lock_backend_driver(NULL) == NULL);
}

/* A SQL store's test: its driver, the options section of its connections,
 * where its tables go (`schema: ...`, `table: ...`), the variable naming its
 * server and the URL used without it, and a URL where nothing listens. */
typedef struct {
    const char *driver;
    const char *section;
    const char *place;
    const char *url_variable;
    const char *default_url;
    const char *unreachable_url;
} sql_store;

/* A configuration with the backend `shared` (leaseMs 5000) on `url`, under
 * `namespace`, in a buffer of the caller's. */
static inline const char *sql_config(const sql_store *store, const char *url, const char *namespace_, char *yaml, size_t size) {
    int len = snprintf(yaml, size,
                       "schemaVersion: 1\n"
                       "options:\n"
                       "  dokebi-lock:\n"
                       "    backends:\n"
                       "      shared: { driver: %s, connection: main, %s, namespace: %s, leaseMs: 5000 }\n"
                       "  %s:\n"
                       "    connections:\n"
                       "      main: { url: \"%s\", connectTimeoutMs: 5000, commandTimeoutMs: 2000 }\n",
                       store->driver, store->place, namespace_, store->section, url);
    CHECK(len > 0 && (size_t)len < size);
    return yaml;
}

/* Runs every check above against the store, under a namespace of this run
 * (apart from others on the same server); prints "<driver>: ok". */
static inline int test_sql_store(const sql_store *store) {
    const char *url = getenv(store->url_variable);
    if (url == NULL) {
        url = store->default_url;
    }
    char namespace_[64];
    snprintf(namespace_, sizeof namespace_, "c-test-%ld-%ld", (long)time(NULL), (long)getpid());
    char yaml[2048];
    dokebi_lock_provider *first = open_provider(sql_config(store, url, namespace_, yaml, sizeof yaml));
    dokebi_lock_provider *second = open_provider(yaml);
    dokebi_lock_backend *one = get_backend(first, "shared");
    dokebi_lock_backend *two = get_backend(second, "shared");

    a_lease_is_shared_between_providers(one, two);
    inspect_reads_the_other_provider_s_holders(one, two);
    force_release_breaks_the_other_provider_s_holder(one, two);
    the_status_reports_the_connection(one, store->driver);
    an_unreachable_server_is_provider_failed(sql_config(store, store->unreachable_url, "unreachable", yaml, sizeof yaml));
    close_releases_held_leases(first, one, two);

    dokebi_lock_backend_free(one);
    dokebi_lock_backend_free(two);
    dokebi_lock_provider_free(first);
    dokebi_lock_provider_free(second);
    printf("%s: ok\n", store->driver);
    return 0;
}

#endif
