/* The policy driver through the C API, from YAML: a lease says which member
 * served it and its tier, is released on that member when freed; a rule that
 * fails closed on an unreachable Redis (a port nothing listens on) is
 * NO_ELIGIBLE_BACKEND, and a rule that falls back is served by the file
 * member; the policy's events name the member. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <unistd.h>

static char yaml[2048];
static int skipped_events, fallback_events;

static void on_event(const dokebi_lock_event *event, void *user_data) {
    (void)user_data;
    if (event->kind == DOKEBI_LOCK_EVENT_POLICY_SKIPPED) {
        CHECK(strcmp(event->backend, "locks") == 0 && strcmp(event->connection, "cache") == 0);
        CHECK(event->code == DOKEBI_LOCK_PROVIDER_FAILED);
        __atomic_add_fetch(&skipped_events, 1, __ATOMIC_SEQ_CST);
    }
    if (event->kind == DOKEBI_LOCK_EVENT_POLICY_FALLBACK) {
        CHECK(strcmp(event->connection, "host") == 0);
        __atomic_add_fetch(&fallback_events, 1, __ATOMIC_SEQ_CST);
    }
}

int main(void) {
    char dir[] = "/tmp/dokebi-c-policy-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    snprintf(yaml, sizeof yaml,
             "schemaVersion: 1\n"
             "options:\n"
             "  dokebi-redis:\n"
             "    connections:\n"
             "      down: { url: \"redis://127.0.0.1:1/0\", connectTimeoutMs: 200, commandTimeoutMs: 200 }\n"
             "  dokebi-lock:\n"
             "    backends:\n"
             "      cache: { driver: redis, connection: down, leaseMs: 1000 }\n"
             "      host: { driver: file, directory: \"%s/locks\" }\n"
             "      mem: {}\n"
             "      locks:\n"
             "        driver: policy\n"
             "        rules:\n"
             "          - { prefix: \"pay:\", backends: [cache] }\n"
             "          - { glob: \"tmp:*\", backends: [mem] }\n"
             "        default: { backends: [cache, host], minTier: host, onUnavailable: fallBack }\n",
             dir);
    dokebi_lock_provider *provider = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_open_with_telemetry(yaml, strlen(yaml), on_event, NULL, &provider, ERR));
    dokebi_lock_backend *locks = get_backend(provider, "locks");
    CHECK(strcmp(dokebi_lock_backend_driver(locks), "policy") == 0);

    dokebi_lock_lease *lease = must_acquire(locks, "tmp:1", 0);
    CHECK(strcmp(dokebi_lock_lease_served_by(lease), "mem") == 0);
    CHECK(strcmp(dokebi_lock_lease_served_tier(lease), "process") == 0);
    dokebi_lock_lease *other = NULL;
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire(locks, KEY("tmp:1"), &other, ERR));
    dokebi_lock_lease_free(lease);
    lease = must_acquire(locks, "tmp:1", 0);
    dokebi_lock_lease_free(lease);

    dokebi_lock_lease *refused = NULL;
    dokebi_lock_error *error = NULL;
    CHECK(dokebi_lock_acquire(locks, KEY("pay:secret"), 1000, &refused, &error) == DOKEBI_LOCK_NO_ELIGIBLE_BACKEND);
    CHECK(strcmp(dokebi_lock_error_name(error), "NO_ELIGIBLE_BACKEND") == 0);
    CHECK(strstr(dokebi_lock_error_message(error), "cache") != NULL);
    CHECK(strstr(dokebi_lock_error_message(error), "secret") == NULL);
    CHECK(strstr(dokebi_lock_error_fix(error), "cache") != NULL);
    dokebi_lock_error_free(error);

    lease = must_acquire(locks, "order:1", 1000);
    CHECK(strcmp(dokebi_lock_lease_served_by(lease), "host") == 0);
    CHECK(strcmp(dokebi_lock_lease_served_tier(lease), "host") == 0);
    bool released = false;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
    CHECK(released);
    dokebi_lock_lease_free(lease);
    CHECK(__atomic_load_n(&skipped_events, __ATOMIC_SEQ_CST) == 1);
    CHECK(__atomic_load_n(&fallback_events, __ATOMIC_SEQ_CST) == 1);

    /* A lease of another driver serves nobody's policy. */
    dokebi_lock_backend *mem = get_backend(provider, "mem");
    lease = must_acquire(mem, "direct", 0);
    CHECK(dokebi_lock_lease_served_by(lease) == NULL && dokebi_lock_lease_served_tier(lease) == NULL);
    dokebi_lock_lease_free(lease);

    dokebi_lock_backend_free(mem);
    dokebi_lock_backend_free(locks);
    dokebi_lock_provider_free(provider);
    printf("policy: ok\n");
    return 0;
}
