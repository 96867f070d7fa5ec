/* dokebi_lock_with_lock and dokebi_lock_backend_get_status: a section runs with
 * the lease held and releases it after; a redis section longer than its
 * lease stays exclusive because the driver renews it; a section whose lease
 * another thread's close took (file, redis, postgres) sees it lost and the
 * call fails. The redis half uses the private server in REDIS_URL (started
 * and killed by scripts/test-c), the postgres one the machine's (PG_URL). */
/* nanosleep and mkdtemp are POSIX, not C11: glibc shows them anyway, musl only when asked. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>
#include <unistd.h>

#include "check.h"

static char yaml[2048];

static void sleep_ms(long ms) {
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

struct probe {
    const dokebi_lock_backend *other; /* a backend that must find the key busy */
    int rounds;                       /* how many 50 ms pauses the section takes */
    char fence[32];
};

static int section(const dokebi_lock_section *granted, void *user_data) {
    struct probe *probe = user_data;
    snprintf(probe->fence, sizeof probe->fence, "%s", dokebi_lock_section_fence(granted));
    for (int i = 0; i < probe->rounds; i++) {
        dokebi_lock_lease *intruder = NULL;
        CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire(probe->other, KEY("job"), &intruder, ERR));
        CHECK(!dokebi_lock_section_lost(granted));
        sleep_ms(50);
    }
    return 42;
}

static void a_local_section_holds_the_key_and_releases_it(const dokebi_lock_backend *local) {
    struct probe probe = {local, 1, {0}};
    int result = 0;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_with_lock(local, KEY("job"), 0, section, &probe, &result, ERR));
    CHECK(result == 42);
    CHECK(strtoull(probe.fence, NULL, 10) > 0);
    dokebi_lock_backend_status status;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_get_status(local, &status, ERR));
    CHECK(status.held == 0 && status.waiting == 0 && status.acquired == 1 && !status.is_redis);
    dokebi_lock_lease *again = must_acquire(local, "job", 0);
    dokebi_lock_lease_free(again);

    /* Bad arguments, and a busy key with no wait, leave out_result alone. */
    result = 7;
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_with_lock(local, KEY("job"), 0, NULL, &probe, &result, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_with_lock(NULL, KEY("job"), 0, section, &probe, &result, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_with_lock(local, "\xff", 1, 0, section, &probe, &result, ERR));
    dokebi_lock_lease *held = must_acquire(local, "job", 0);
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_with_lock(local, KEY("job"), 0, section, &probe, &result, ERR));
    CHECK(result == 7);
    dokebi_lock_lease_free(held);
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_backend_get_status(local, NULL, ERR));
    CHECK(dokebi_lock_section_fence(NULL) == NULL);
    CHECK(!dokebi_lock_section_lost(NULL));
}

static void a_redis_section_longer_than_its_lease_stays_exclusive(const dokebi_lock_backend *one, const dokebi_lock_backend *two) {
    /* leaseMs is 400: the section takes about 1.2 s, three leases. A
     * shorter lease made a renewal late by 100 ms (a loaded machine under
     * ASan) lose it: the test is of renewal, not of a scheduler's latency. */
    struct probe probe = {two, 24, {0}};
    int result = 0;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_with_lock(one, KEY("job"), 0, section, &probe, &result, ERR));
    CHECK(result == 42);
    dokebi_lock_lease *after = must_acquire(two, "job", 0);
    CHECK(fence_of(after) > strtoull(probe.fence, NULL, 10));
    dokebi_lock_lease_free(after);
    dokebi_lock_backend_status status;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_get_status(one, &status, ERR));
    CHECK(status.is_redis && status.connected && status.lost == 0 && status.held == 0);
    CHECK(status.last_probe_unix_ms > 0);
}

/* A section during which another thread closes the provider. */
struct closing {
    dokebi_lock_provider *provider;
    bool lost; /* what the section saw once close had returned */
};

static void *close_provider(void *provider) {
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_close(provider));
    return NULL;
}

static int closed_under_it(const dokebi_lock_section *granted, void *user_data) {
    struct closing *closing = user_data;
    pthread_t closer;
    CHECK(pthread_create(&closer, NULL, close_provider, closing->provider) == 0);
    CHECK(pthread_join(closer, NULL) == 0);
    /* Close took the lease: the section must learn it (within 5 s, a bound
     * far above any delivery; the check is of the outcome, not its speed). */
    for (int i = 0; i < 100 && !dokebi_lock_section_lost(granted); i++) {
        sleep_ms(50);
    }
    closing->lost = dokebi_lock_section_lost(granted);
    return 42;
}

/* Close gives the section's key away (released, so another process may take
 * it): the section sees it lost and the call fails, CLOSED or LEASE_LOST,
 * never OK with out_result written. */
static void a_section_whose_provider_closes_under_it_fails(const char *config, const char *backend_name) {
    dokebi_lock_provider *provider = open_provider(config);
    dokebi_lock_backend *backend = get_backend(provider, backend_name);
    struct closing closing = {provider, false};
    int result = 7;
    dokebi_lock_error *error = NULL;
    dokebi_lock_status status = dokebi_lock_with_lock(backend, KEY("closing"), 0, closed_under_it, &closing, &result, &error);
    if (status != DOKEBI_LOCK_CLOSED && status != DOKEBI_LOCK_LEASE_LOST) {
        fprintf(stderr, "with_lock (%s) after close: %s, section_lost %d, result %d\n", backend_name, dokebi_lock_status_name(status),
                (int)closing.lost, result);
    }
    CHECK(status == DOKEBI_LOCK_CLOSED || status == DOKEBI_LOCK_LEASE_LOST);
    CHECK(closing.lost);
    CHECK(result == 7);
    dokebi_lock_error_free(error);
    dokebi_lock_backend_free(backend);
    dokebi_lock_provider_free(provider);
}

int main(void) {
    dokebi_lock_provider *provider = open_provider("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      main: {}\n");
    dokebi_lock_backend *local = get_backend(provider, "main");
    a_local_section_holds_the_key_and_releases_it(local);
    dokebi_lock_backend_free(local);
    dokebi_lock_provider_free(provider);

    const char *url = getenv("REDIS_URL");
    CHECK(url != NULL);
    int len = snprintf(yaml, sizeof yaml,
                       "schemaVersion: 1\n"
                       "options:\n"
                       "  dokebi-lock:\n"
                       "    backends:\n"
                       "      shared: { driver: redis, connection: main, namespace: c-with-lock-%ld, leaseMs: 400 }\n"
                       "  dokebi-redis:\n"
                       "    connections:\n"
                       "      main: { url: \"%s\", commandTimeoutMs: 300 }\n",
                       (long)time(NULL), url);
    CHECK(len > 0 && (size_t)len < sizeof yaml);
    dokebi_lock_provider *first = open_provider(yaml), *second = open_provider(yaml);
    dokebi_lock_backend *one = get_backend(first, "shared"), *two = get_backend(second, "shared");
    a_redis_section_longer_than_its_lease_stays_exclusive(one, two);
    dokebi_lock_backend_free(one);
    dokebi_lock_backend_free(two);
    dokebi_lock_provider_free(first);
    dokebi_lock_provider_free(second);
    a_section_whose_provider_closes_under_it_fails(yaml, "shared");

    char directory[] = "/tmp/dokebi-lock-c-with-lock-XXXXXX";
    CHECK(mkdtemp(directory) != NULL);
    len = snprintf(yaml, sizeof yaml, "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      files: { driver: file, directory: '%s' }\n",
                   directory);
    CHECK(len > 0 && (size_t)len < sizeof yaml);
    a_section_whose_provider_closes_under_it_fails(yaml, "files");
    char command[128];
    snprintf(command, sizeof command, "rm -rf '%s'", directory);
    CHECK(system(command) == 0);

    const char *pg = getenv("PG_URL");
    if (pg == NULL) {
        pg = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable";
    }
    len = snprintf(yaml, sizeof yaml,
                   "schemaVersion: 1\n"
                   "options:\n"
                   "  dokebi-lock:\n"
                   "    backends:\n"
                   "      rows: { driver: postgres, connection: main, schema: dokebi_c_test, namespace: c-with-lock-%ld-%ld, leaseMs: 5000 }\n"
                   "  dokebi-postgres:\n"
                   "    connections:\n"
                   "      main: { url: \"%s\", connectTimeoutMs: 5000, commandTimeoutMs: 2000 }\n",
                   (long)time(NULL), (long)getpid(), pg);
    CHECK(len > 0 && (size_t)len < sizeof yaml);
    a_section_whose_provider_closes_under_it_fails(yaml, "rows");
    puts("with_lock: ok");
    return 0;
}
