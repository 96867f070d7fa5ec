/* The policy driver through the C API, from YAML: a lease says which member
 * served it and its tier, is released on that member when freed; a rule that
 * fails closed on an unreachable Redis (a port nothing listens on) is
 * NO_ELIGIBLE_BACKEND, and a rule that falls back is served by the file
 * member; the policy's events name the member. Per key, the policy says the
 * rule and the last acquisition (member, fenced, when); per member, what it
 * served, its fallbacks and refusals, and whether it is skipped. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <time.h>
#include <unistd.h>

static int64_t now_unix_ms(void) {
    struct timespec now;
    CHECK(clock_gettime(CLOCK_REALTIME, &now) == 0);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static dokebi_lock_policy_key_status key_status(const dokebi_lock_backend *policy, const char *key) {
    dokebi_lock_policy_key_status status;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_policy_get_key_status(policy, KEY(key), &status, ERR));
    return status;
}

/* Member `index` of `policy`, which must be called `name` and have served,
 * fallen back for and refused what it is given. */
static void check_member(const dokebi_lock_backend *policy, size_t index, const char *name, const char *driver,
                         const char *tier, uint64_t served, uint64_t fallbacks, uint64_t refusals, bool skipped) {
    dokebi_lock_policy_member_status member;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_policy_get_member_status(policy, index, &member, ERR));
    CHECK(strcmp(member.backend, name) == 0);
    CHECK(strcmp(member.driver, driver) == 0 && strcmp(member.tier, tier) == 0);
    CHECK(member.served == served && member.fallbacks == fallbacks && member.refusals == refusals);
    CHECK(member.skipped == skipped);
}

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
    /* details.tried names the member and why it could not serve, never the key. */
    const char *details = dokebi_lock_error_details(error);
    CHECK(details != NULL && strstr(details, "\"tried\":[{") != NULL);
    CHECK(strstr(details, "\"backend\":\"cache\"") != NULL && strstr(details, "\"code\":\"PROVIDER_FAILED\"") != NULL);
    CHECK(strstr(details, "secret") == NULL);
    dokebi_lock_error_free(error);

    int64_t before = now_unix_ms();
    lease = must_acquire(locks, "order:1", 1000);
    int64_t after = now_unix_ms();
    CHECK(strcmp(dokebi_lock_lease_served_by(lease), "host") == 0);
    CHECK(strcmp(dokebi_lock_lease_served_tier(lease), "host") == 0);
    bool released = false;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
    CHECK(released);
    dokebi_lock_lease_free(lease);
    CHECK(__atomic_load_n(&skipped_events, __ATOMIC_SEQ_CST) == 1);
    CHECK(__atomic_load_n(&fallback_events, __ATOMIC_SEQ_CST) == 1);

    /* Per key: the rule, and which member served it last, fenced, when. */
    dokebi_lock_policy_key_status status = key_status(locks, "order:1");
    CHECK(strcmp(status.rule, "default") == 0 && status.rule_index == 2 && status.pattern == NULL);
    CHECK(strcmp(status.preferred, "cache") == 0 && strcmp(status.min_tier, "host") == 0);
    CHECK(strcmp(status.on_unavailable, "fallBack") == 0);
    CHECK(status.has_last && strcmp(status.last_backend, "host") == 0 && strcmp(status.last_tier, "host") == 0);
    CHECK(status.last_fenced);
    CHECK(status.last_unix_ms >= before && status.last_unix_ms <= after);
    const char *preferred = status.preferred;
    status = key_status(locks, "tmp:1");
    CHECK(strcmp(status.rule, "rules[1]") == 0 && status.rule_index == 1 && strcmp(status.pattern, "glob:tmp:*") == 0);
    CHECK(strcmp(status.preferred, "mem") == 0 && strcmp(status.min_tier, "process") == 0);
    CHECK(status.has_last && strcmp(status.last_backend, "mem") == 0 && strcmp(status.last_tier, "process") == 0);
    CHECK(status.last_unix_ms <= before);
    /* A refused key was acquired nowhere. */
    status = key_status(locks, "pay:secret");
    CHECK(strcmp(status.rule, "rules[0]") == 0 && status.rule_index == 0 && strcmp(status.pattern, "prefix:pay:") == 0);
    CHECK(strcmp(status.preferred, "cache") == 0 && strcmp(status.min_tier, "shared") == 0);
    CHECK(strcmp(status.on_unavailable, "failClosed") == 0);
    CHECK(!status.has_last && status.last_backend == NULL && status.last_tier == NULL && !status.last_fenced);
    CHECK(status.last_unix_ms == -1);
    status = key_status(locks, "order:never");
    CHECK(status.rule_index == 2 && !status.has_last);
    /* The names belong to the backend handle: the same string each call. */
    CHECK(status.preferred == preferred);

    /* Per member, in the order the rules first name them: cache refused
     * pay:secret and is skipped, mem served tmp:1 twice (LOCK_BUSY is not
     * served), host served order:1 as a fallback. */
    CHECK(dokebi_lock_policy_member_count(locks) == 3);
    check_member(locks, 0, "cache", "redis", "shared", 0, 0, 1, true);
    check_member(locks, 1, "mem", "local", "process", 2, 0, 0, false);
    check_member(locks, 2, "host", "file", "host", 1, 1, 0, false);
    dokebi_lock_policy_member_status member;
    error = NULL;
    CHECK(dokebi_lock_policy_get_member_status(locks, 3, &member, &error) == DOKEBI_LOCK_INVALID_ARGUMENT);
    CHECK(strstr(dokebi_lock_error_message(error), "3 members") != NULL);
    dokebi_lock_error_free(error);
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_policy_get_member_status(locks, 0, NULL, ERR));

    /* Bad keys are INVALID_KEY, never quoted; NULLs INVALID_ARGUMENT. */
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_policy_get_key_status(locks, "", 0, &status, ERR));
    error = NULL;
    CHECK(dokebi_lock_policy_get_key_status(locks, "pay:\xff-secret", 12, &status, &error) == DOKEBI_LOCK_INVALID_KEY);
    CHECK(strstr(dokebi_lock_error_message(error), "secret") == NULL);
    dokebi_lock_error_free(error);
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_policy_get_key_status(NULL, KEY("order:1"), &status, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_policy_get_key_status(locks, KEY("order:1"), NULL, ERR));
    CHECK(dokebi_lock_policy_member_count(NULL) == 0);

    /* A lease of another driver serves nobody's policy. */
    dokebi_lock_backend *mem = get_backend(provider, "mem");
    lease = must_acquire(mem, "direct", 0);
    CHECK(dokebi_lock_lease_served_by(lease) == NULL && dokebi_lock_lease_served_tier(lease) == NULL);
    dokebi_lock_lease_free(lease);
    /* Nor does its backend answer for one. */
    error = NULL;
    CHECK(dokebi_lock_policy_get_key_status(mem, KEY("direct"), &status, &error) == DOKEBI_LOCK_INVALID_ARGUMENT);
    CHECK(strstr(dokebi_lock_error_message(error), "direct") == NULL);
    dokebi_lock_error_free(error);
    CHECK(dokebi_lock_policy_member_count(mem) == 0);
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_policy_get_member_status(mem, 0, &member, ERR));

    dokebi_lock_backend_free(mem);
    dokebi_lock_backend_free(locks);
    dokebi_lock_provider_free(provider);
    printf("policy: ok\n");
    return 0;
}
