/* Errors through the C API: every getter, option issues, NULL handles,
 * invalid keys and arguments. */
#include "check.h"

/* The text before the backends of a configuration. */
#define BACKENDS              \
    "schemaVersion: 1\n"      \
    "options:\n"              \
    "  dokebi-lock:\n"        \
    "    backends:\n"

static const char *const YAML =
    BACKENDS
    "      main:\n"
    "        maxKeyBytes: 8\n";

static void invalid_options_list_every_issue(void) {
    const char *yaml =
        BACKENDS
        "      a: { maxKeys: 0 }\n"
        "      b: { colour: blue }\n";
    dokebi_lock_provider *provider = (dokebi_lock_provider *)&yaml;
    dokebi_lock_error *error = NULL;
    CHECK(dokebi_lock_provider_open(yaml, strlen(yaml), &provider, &error) == DOKEBI_LOCK_INVALID_OPTIONS);
    CHECK(provider == (dokebi_lock_provider *)&yaml); /* untouched on failure */
    CHECK(dokebi_lock_error_code(error) == DOKEBI_LOCK_INVALID_OPTIONS);
    CHECK(strcmp(dokebi_lock_error_name(error), "INVALID_OPTIONS") == 0);
    CHECK(strstr(dokebi_lock_error_message(error), "invalid options") != NULL);
    CHECK(strlen(dokebi_lock_error_fix(error)) > 0);
    CHECK(dokebi_lock_error_cause(error) == NULL);
    CHECK(strstr(dokebi_lock_error_details(error), "\"issues\":[") != NULL);
    CHECK(dokebi_lock_error_issue_count(error) == 2);
    CHECK(strcmp(dokebi_lock_error_issue_path(error, 0), "backends.a.maxKeys") == 0);
    CHECK(strcmp(dokebi_lock_error_issue_path(error, 1), "backends.b.colour") == 0);
    CHECK(strlen(dokebi_lock_error_issue_message(error, 0)) > 0);
    CHECK(strlen(dokebi_lock_error_issue_message(error, 1)) > 0);
    CHECK(dokebi_lock_error_issue_path(error, 2) == NULL);
    CHECK(dokebi_lock_error_issue_message(error, 2) == NULL);
    CHECK(dokebi_lock_error_issue_status(error, 0) == DOKEBI_LOCK_INVALID_OPTIONS);
    CHECK(dokebi_lock_error_issue_status(error, 2) == DOKEBI_LOCK_OK);
    dokebi_lock_error_free(error);

    /* Not UTF-8 (an options error still lists its issue), and not YAML at all. */
    error = NULL;
    CHECK(dokebi_lock_provider_open("\xff\xfe", 2, &provider, &error) == DOKEBI_LOCK_INVALID_OPTIONS);
    CHECK(dokebi_lock_error_issue_count(error) == 1 && strcmp(dokebi_lock_error_issue_path(error, 0), "") == 0);
    dokebi_lock_error_free(error);
    CHECK_STATUS(DOKEBI_LOCK_INVALID_OPTIONS, dokebi_lock_provider_open(KEY("[unclosed"), &provider, ERR));
    CHECK(provider == (dokebi_lock_provider *)&yaml);
}

/* Each issue carries its own code, so an undefined connection is told apart
 * from other problems also when one error lists both. */
static void each_issue_has_its_own_code(void) {
    const char *yaml =
        BACKENDS
        "      a: { maxKeys: 0 }\n"
        "      r: { driver: redis, connection: nowhere, leaseMs: 10000 }\n";
    dokebi_lock_provider *provider = NULL;
    dokebi_lock_error *error = NULL;
    CHECK(dokebi_lock_provider_open(yaml, strlen(yaml), &provider, &error) == DOKEBI_LOCK_INVALID_OPTIONS);
    CHECK(dokebi_lock_error_issue_count(error) == 2);
    int connection = strcmp(dokebi_lock_error_issue_path(error, 0), "backends.r.connection") == 0 ? 0 : 1;
    CHECK(strcmp(dokebi_lock_error_issue_path(error, connection), "backends.r.connection") == 0);
    CHECK(dokebi_lock_error_issue_status(error, connection) == DOKEBI_LOCK_UNKNOWN_CONNECTION);
    CHECK(dokebi_lock_error_issue_status(error, 1 - connection) == DOKEBI_LOCK_INVALID_OPTIONS);
    dokebi_lock_error_free(error);
}

static void getters_of_null_answer_null_false_or_zero(void) {
    CHECK(dokebi_lock_error_code(NULL) == DOKEBI_LOCK_OK);
    CHECK(dokebi_lock_error_name(NULL) == NULL);
    CHECK(dokebi_lock_error_message(NULL) == NULL);
    CHECK(dokebi_lock_error_fix(NULL) == NULL);
    CHECK(dokebi_lock_error_cause(NULL) == NULL);
    CHECK(dokebi_lock_error_details(NULL) == NULL);
    CHECK(dokebi_lock_error_issue_count(NULL) == 0);
    CHECK(dokebi_lock_error_issue_path(NULL, 0) == NULL);
    CHECK(dokebi_lock_error_issue_message(NULL, 0) == NULL);
    CHECK(dokebi_lock_error_issue_status(NULL, 0) == DOKEBI_LOCK_OK);
    size_t len = 99;
    CHECK(dokebi_lock_lease_key(NULL, &len) == NULL && len == 99);
    CHECK(!dokebi_lock_lease_valid(NULL));
    CHECK(dokebi_lock_lease_remaining_ms(NULL) == 0);
    CHECK(dokebi_lock_lease_fence(NULL) == NULL);
    CHECK(dokebi_lock_provider_name_count(NULL) == 0);
    CHECK(dokebi_lock_provider_name(NULL, 0) == NULL);
}

static void every_free_accepts_null(void) {
    dokebi_lock_provider_free(NULL);
    dokebi_lock_backend_free(NULL);
    dokebi_lock_lease_free(NULL);
    dokebi_lock_pending_free(NULL);
    dokebi_lock_error_free(NULL);
}

static void status_names_are_stable(void) {
    CHECK(strcmp(dokebi_lock_status_name(DOKEBI_LOCK_OK), "OK") == 0);
    CHECK(strcmp(dokebi_lock_status_name(DOKEBI_LOCK_INVALID_ARGUMENT), "INVALID_ARGUMENT") == 0);
    CHECK(strcmp(dokebi_lock_status_name(DOKEBI_LOCK_PANIC), "PANIC") == 0);
    CHECK(strcmp(dokebi_lock_status_name(4242), "UNKNOWN") == 0);
    CHECK(DOKEBI_LOCK_WAIT_TIMEOUT == 10 && DOKEBI_LOCK_INVALID_ARGUMENT == 23);
}

static void null_handles_and_out_parameters_are_invalid_arguments(dokebi_lock_provider *provider, const dokebi_lock_backend *backend) {
    dokebi_lock_provider *no_provider = NULL;
    dokebi_lock_backend *no_backend = NULL;
    dokebi_lock_lease *lease = NULL;
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_provider_open(NULL, 5, &no_provider, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_provider_open(KEY("schemaVersion: 1"), NULL, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_provider_backend(NULL, "main", &no_backend, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_provider_backend(provider, NULL, &no_backend, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_provider_backend(provider, "main", NULL, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_acquire(NULL, KEY("k"), 0, &lease, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_acquire(backend, KEY("k"), 0, NULL, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_try_acquire(NULL, KEY("k"), &lease, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_acquire_async(NULL, KEY("k"), 0, on_acquired, NULL, NULL, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_acquire_async(backend, KEY("k"), 0, NULL, NULL, NULL, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_lease_renew(NULL, NULL, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_lease_release(NULL, NULL, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_pending_cancel(NULL));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_provider_close(NULL));
    CHECK(no_provider == NULL && no_backend == NULL && lease == NULL);

    /* The error explains itself; out_error may be NULL. */
    dokebi_lock_error *error = NULL;
    CHECK(dokebi_lock_acquire(NULL, KEY("k"), 0, &lease, &error) == DOKEBI_LOCK_INVALID_ARGUMENT);
    CHECK(strcmp(dokebi_lock_error_name(error), "INVALID_ARGUMENT") == 0);
    CHECK(strcmp(dokebi_lock_error_message(error), "backend is NULL") == 0);
    dokebi_lock_error_free(error);
    CHECK(dokebi_lock_acquire(NULL, KEY("k"), 0, &lease, NULL) == DOKEBI_LOCK_INVALID_ARGUMENT);
}

static void bad_keys_and_timeouts_are_rejected(const dokebi_lock_backend *backend) {
    dokebi_lock_lease *lease = NULL;
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_acquire(backend, "ab\xc3", 3, 0, &lease, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_acquire(backend, "\xed\xa0\x80", 3, 0, &lease, ERR)); /* a UTF-8 encoded surrogate */
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_try_acquire(backend, "", 0, &lease, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_try_acquire(backend, NULL, 0, &lease, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_try_acquire(backend, NULL, 4, &lease, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_acquire_async(backend, "\xff", 1, 0, on_acquired, NULL, NULL, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_acquire(backend, KEY("k"), -2, &lease, ERR));
    CHECK(lease == NULL);

    /* Over maxKeyBytes (8): the error never echoes the key. */
    dokebi_lock_error *error = NULL;
    CHECK(dokebi_lock_acquire(backend, KEY("secret-order-42"), 0, &lease, &error) == DOKEBI_LOCK_INVALID_KEY);
    CHECK(strstr(dokebi_lock_error_message(error), "secret") == NULL);
    dokebi_lock_error_free(error);

    /* A key with a NUL byte inside is INVALID_KEY, on every driver alike
     * (PostgreSQL's text holds no NUL). */
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_try_acquire(backend, "a\0b", 3, &lease, ERR));
    CHECK(lease == NULL);
}

static void keys_at_the_limit_and_far_past_it(const dokebi_lock_backend *backend) {
    dokebi_lock_lease *lease = NULL;
    /* Exactly maxKeyBytes (8) bytes is a key; one byte more is not, also
     * when the ninth byte is half of a two-byte character. */
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_try_acquire(backend, KEY("12345678"), &lease, ERR));
    dokebi_lock_lease_free(lease);
    lease = NULL;
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_try_acquire(backend, KEY("123456789"), &lease, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_try_acquire(backend, KEY("1234567\xc3\xa9"), &lease, ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_try_acquire(backend, KEY("123456\xc3\xa9"), &lease, ERR));
    dokebi_lock_lease_free(lease);
    lease = NULL;

    /* 64 MiB, valid UTF-8 and not: rejected, never copied into a message. */
    size_t huge = (size_t)64 << 20;
    char *key = malloc(huge);
    CHECK(key != NULL);
    memset(key, 'k', huge);
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_acquire(backend, key, huge, 0, &lease, ERR));
    key[huge - 1] = (char)0xff;
    dokebi_lock_error *error = NULL;
    CHECK(dokebi_lock_acquire(backend, key, huge, 0, &lease, &error) == DOKEBI_LOCK_INVALID_KEY);
    CHECK(strlen(dokebi_lock_error_message(error)) < 256);
    dokebi_lock_error_free(error);
    free(key);
    CHECK(lease == NULL);
}

static void extreme_timeouts_and_indexes(const dokebi_lock_provider *provider, const dokebi_lock_backend *backend) {
    dokebi_lock_lease *lease = NULL;
    /* The longest wait is a wait, not an overflow: a free key is granted... */
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire(backend, KEY("t"), INT64_MAX, &lease, ERR));
    /* ... and a held one waits until cancelled. */
    outcome waiter;
    outcome_init(&waiter);
    dokebi_lock_pending *pending = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(backend, KEY("t"), INT64_MAX, on_acquired, &waiter, &pending, ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_pending_cancel(pending));
    CHECK(outcome_wait(&waiter) == DOKEBI_LOCK_ABORTED);
    dokebi_lock_pending_free(pending);
    outcome_destroy(&waiter);
    dokebi_lock_lease *other = NULL;
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_acquire(backend, KEY("t"), INT64_MIN, &other, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_acquire_async(backend, KEY("t"), INT64_MIN, on_acquired, NULL, NULL, ERR));
    CHECK(other == NULL);
    dokebi_lock_lease_free(lease);

    CHECK(dokebi_lock_provider_name(provider, SIZE_MAX) == NULL);
    CHECK(strcmp(dokebi_lock_status_name(UINT32_MAX), "UNKNOWN") == 0);
    dokebi_lock_error *error = NULL;
    CHECK(dokebi_lock_provider_backend(provider, "nope", &(dokebi_lock_backend *){NULL}, &error) == DOKEBI_LOCK_UNKNOWN_BACKEND);
    CHECK(dokebi_lock_error_issue_path(error, SIZE_MAX) == NULL && dokebi_lock_error_issue_message(error, SIZE_MAX) == NULL);
    dokebi_lock_error_free(error);
}

/* Releasing twice, and every call on a lease and a backend whose provider
 * was closed and freed: the documented answers, no crash, no leak. */
static void double_release_and_use_after_close(void) {
    dokebi_lock_provider *provider = open_provider(YAML);
    dokebi_lock_backend *backend = get_backend(provider, "main");
    dokebi_lock_lease *lease = must_acquire(backend, "k", 0);
    bool released = false, valid = true;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
    CHECK(released);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
    CHECK(!released);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, NULL, ERR)); /* out_released is optional */

    dokebi_lock_lease *held = must_acquire(backend, "held", 0);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_close(provider));
    dokebi_lock_provider_free(provider);
    CHECK(!dokebi_lock_lease_valid(held) && dokebi_lock_lease_remaining_ms(held) == 0);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_renew(held, &valid, ERR));
    CHECK(!valid);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(held, &released, ERR));
    CHECK(!released);
    size_t len = 0;
    CHECK(dokebi_lock_lease_key(held, &len) != NULL && len == 4);
    CHECK(dokebi_lock_lease_fence(held) != NULL);
    dokebi_lock_lease *late = NULL;
    CHECK_STATUS(DOKEBI_LOCK_CLOSED, dokebi_lock_acquire(backend, KEY("k"), 0, &late, ERR));
    CHECK_STATUS(DOKEBI_LOCK_CLOSED, dokebi_lock_try_acquire(backend, KEY("k"), &late, ERR));
    CHECK(late == NULL);
    dokebi_lock_lease_free(held);
    dokebi_lock_lease_free(lease);
    dokebi_lock_backend_free(backend);
}

static void unknown_backends_are_reported(const dokebi_lock_provider *provider) {
    dokebi_lock_backend *backend = NULL;
    dokebi_lock_error *error = NULL;
    CHECK(dokebi_lock_provider_backend(provider, "nope", &backend, &error) == DOKEBI_LOCK_UNKNOWN_BACKEND);
    CHECK(backend == NULL);
    CHECK(strcmp(dokebi_lock_error_name(error), "UNKNOWN_BACKEND") == 0);
    CHECK(strstr(dokebi_lock_error_fix(error), "names") != NULL);
    dokebi_lock_error_free(error);
    CHECK_STATUS(DOKEBI_LOCK_UNKNOWN_BACKEND, dokebi_lock_provider_backend(provider, "\xff", &backend, ERR));
}

int main(void) {
    CHECK(strlen(dokebi_lock_version()) > 0);
    invalid_options_list_every_issue();
    each_issue_has_its_own_code();
    getters_of_null_answer_null_false_or_zero();
    every_free_accepts_null();
    status_names_are_stable();

    dokebi_lock_provider *provider = open_provider(YAML);
    dokebi_lock_backend *backend = get_backend(provider, "main");
    null_handles_and_out_parameters_are_invalid_arguments(provider, backend);
    bad_keys_and_timeouts_are_rejected(backend);
    unknown_backends_are_reported(provider);
    keys_at_the_limit_and_far_past_it(backend);
    extreme_timeouts_and_indexes(provider, backend);
    double_release_and_use_after_close();
    dokebi_lock_backend_free(backend);
    dokebi_lock_provider_free(provider);
    printf("errors: ok\n");
    return 0;
}
