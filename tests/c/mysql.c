/* The mysql driver through the C API, against the machine's MariaDB
 * (MYSQL_URL, else mysql://root@127.0.0.1:3306/test in the clear: the tests
 * run under qemu too, where a TLS handshake is slow), on the table
 * dokebi_c_test under a namespace of this run. Two providers stand for two
 * processes sharing the server. */
/* getpid is POSIX, not C11: musl shows it only when asked. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>
#include <unistd.h>

#include "check.h"

static char yaml[2048];

/* A configuration with the backend `shared` (leaseMs 5000) on `url`, under
 * `namespace`. */
static const char *config(const char *url, const char *namespace_) {
    int len = snprintf(yaml, sizeof yaml,
                       "schemaVersion: 1\n"
                       "options:\n"
                       "  dokebi-lock:\n"
                       "    backends:\n"
                       "      shared: { driver: mysql, connection: main, table: dokebi_c_test, namespace: %s, leaseMs: 5000 }\n"
                       "  dokebi-mysql:\n"
                       "    connections:\n"
                       "      main: { url: \"%s\", connectTimeoutMs: 5000, commandTimeoutMs: 2000 }\n",
                       namespace_, url);
    CHECK(len > 0 && (size_t)len < sizeof yaml);
    return yaml;
}

static void a_lease_is_shared_between_providers(const dokebi_lock_backend *one, const dokebi_lock_backend *two) {
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
    CHECK(!dokebi_lock_lease_valid(lease) && dokebi_lock_lease_remaining_ms(lease) == 0);
    CHECK(outcome_wait(&waiter) == DOKEBI_LOCK_OK);
    CHECK(fence_of(waiter.lease) > first);
    outcome_destroy(&waiter); /* frees (so releases) the waiter's lease */
    dokebi_lock_lease_free(lease);

    /* Freeing a held lease releases it for everyone. */
    lease = must_acquire(two, "order:42", 0);
    dokebi_lock_lease_free(lease);
    dokebi_lock_lease_free(must_acquire(one, "order:42", 0));
}

static void an_unreachable_server_is_provider_failed(void) {
    dokebi_lock_provider *provider = open_provider(config("mysql://root@127.0.0.1:1/test", "unreachable"));
    dokebi_lock_backend *backend = get_backend(provider, "shared");
    dokebi_lock_lease *lease = NULL;
    CHECK_STATUS(DOKEBI_LOCK_PROVIDER_FAILED, dokebi_lock_try_acquire(backend, KEY("k"), &lease, ERR));
    CHECK(lease == NULL);
    dokebi_lock_backend_free(backend);
    dokebi_lock_provider_free(provider);
}

static void close_releases_held_leases(dokebi_lock_provider *provider, const dokebi_lock_backend *held_by, const dokebi_lock_backend *other) {
    dokebi_lock_lease *lease = must_acquire(held_by, "closing", 0);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_close(provider));
    CHECK(!dokebi_lock_lease_valid(lease));
    dokebi_lock_lease_free(must_acquire(other, "closing", 0));
    dokebi_lock_lease *late = NULL;
    CHECK_STATUS(DOKEBI_LOCK_CLOSED, dokebi_lock_acquire(held_by, KEY("closing"), 0, &late, ERR));
    dokebi_lock_lease_free(lease);
}

/* The status of a mysql backend reports its connection, as a redis
 * one's does, and the backend names its driver. */
static void the_status_reports_the_connection(const dokebi_lock_backend *one) {
    dokebi_lock_lease *lease = must_acquire(one, "status", 0);
    dokebi_lock_backend_status status;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_get_status(one, &status, ERR));
    CHECK(strcmp(dokebi_lock_backend_driver(one), "mysql") == 0);
    CHECK(!status.is_redis && status.held == 1);
    CHECK(status.connected && status.last_error == DOKEBI_LOCK_OK && status.last_probe_unix_ms > 0);
    dokebi_lock_lease_free(lease);
    CHECK(dokebi_lock_backend_driver(NULL) == NULL);
}

int main(void) {
    const char *url = getenv("MYSQL_URL");
    if (url == NULL) {
        url = "mysql://root@127.0.0.1:3306/test?ssl-mode=DISABLED";
    }
    char namespace_[64];
    snprintf(namespace_, sizeof namespace_, "c-test-%ld-%ld", (long)time(NULL), (long)getpid());
    dokebi_lock_provider *first = open_provider(config(url, namespace_));
    dokebi_lock_provider *second = open_provider(config(url, namespace_));
    dokebi_lock_backend *one = get_backend(first, "shared");
    dokebi_lock_backend *two = get_backend(second, "shared");

    a_lease_is_shared_between_providers(one, two);
    the_status_reports_the_connection(one);
    an_unreachable_server_is_provider_failed();
    close_releases_held_leases(first, one, two);

    dokebi_lock_backend_free(one);
    dokebi_lock_backend_free(two);
    dokebi_lock_provider_free(first);
    dokebi_lock_provider_free(second);
    printf("mysql: ok\n");
    return 0;
}
