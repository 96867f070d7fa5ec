/* dokebi_lock_with_lock and dokebi_lock_backend_get_status: a section runs with
 * the lease held and releases it after; a redis section longer than its
 * lease stays exclusive because the driver renews it. The redis half uses
 * the private server in REDIS_URL (started and killed by scripts/test-c). */
/* nanosleep is POSIX, not C11: glibc shows it anyway, musl only when asked. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

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
    puts("with_lock: ok");
    return 0;
}
