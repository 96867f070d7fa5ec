/* Lock kinds through the C API (the `_ex` calls): shared mode, counted
 * locks, several keys at once, their bad arguments, the lease's keys and
 * fences, and the asynchronous and section forms; on the local driver. */
#include "check.h"

static const char *const YAML =
    "schemaVersion: 1\n"
    "options:\n"
    "  dokebi-lock:\n"
    "    backends:\n"
    "      main:\n"
    "        waitTimeoutMs: 2000\n";

/* Options of one key. */
static dokebi_lock_acquire_options one(const dokebi_lock_key *key, uint32_t mode, uint32_t limit, uint32_t weight) {
    dokebi_lock_acquire_options options = {mode, limit, weight, key, 1};
    return options;
}

static void readers_share_a_key_and_a_writer_waits_for_them(const dokebi_lock_backend *backend) {
    dokebi_lock_key key = {KEY("cache")};
    dokebi_lock_acquire_options shared = one(&key, DOKEBI_LOCK_MODE_SHARED, 0, 0);
    dokebi_lock_acquire_options plain = one(&key, DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0);
    dokebi_lock_lease *r1 = NULL, *r2 = NULL, *w = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_try_acquire_ex(backend, &shared, &r1, ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_ex(backend, &shared, 0, &r2, ERR));
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire_ex(backend, &plain, &w, ERR));
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire(backend, KEY("cache"), &w, ERR));
    CHECK(w == NULL);

    dokebi_lock_backend_status status;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_get_status(backend, &status, ERR));
    CHECK(status.held == 2 && dokebi_lock_backend_held_shared(backend) == 2);

    /* A writer queued behind the readers; a later reader waits behind it. */
    outcome writer, reader;
    outcome_init(&writer);
    outcome_init(&reader);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async_ex(backend, &plain, DOKEBI_LOCK_WAIT_DEFAULT, on_acquired, &writer, NULL, ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async_ex(backend, &shared, DOKEBI_LOCK_WAIT_DEFAULT, on_acquired, &reader, NULL, ERR));
    unsigned long long reader_fence = fence_of(r2);
    dokebi_lock_lease_free(r1);
    dokebi_lock_lease_free(r2);
    CHECK(outcome_wait(&writer) == DOKEBI_LOCK_OK);
    CHECK(fence_of(writer.lease) > reader_fence);
    dokebi_lock_lease_free(writer.lease);
    CHECK(outcome_wait(&reader) == DOKEBI_LOCK_OK);
    dokebi_lock_lease_free(reader.lease);
}

static void a_counted_key_holds_at_most_limit_units(const dokebi_lock_backend *backend) {
    dokebi_lock_key key = {KEY("exports")};
    dokebi_lock_acquire_options two = one(&key, DOKEBI_LOCK_MODE_EXCLUSIVE, 3, 2);
    dokebi_lock_acquire_options unit = one(&key, DOKEBI_LOCK_MODE_EXCLUSIVE, 3, 0);
    dokebi_lock_acquire_options other_limit = one(&key, DOKEBI_LOCK_MODE_EXCLUSIVE, 4, 0);
    dokebi_lock_lease *a = NULL, *b = NULL, *c = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_try_acquire_ex(backend, &two, &a, ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_try_acquire_ex(backend, &unit, &b, ERR));
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire_ex(backend, &unit, &c, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_try_acquire_ex(backend, &other_limit, &c, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_try_acquire(backend, KEY("exports"), &c, ERR));
    dokebi_lock_lease_free(a);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_try_acquire_ex(backend, &unit, &c, ERR));
    dokebi_lock_lease_free(b);
    dokebi_lock_lease_free(c);
}

static void several_keys_are_one_lease_with_a_fence_per_key(const dokebi_lock_backend *backend) {
    dokebi_lock_key keys[] = {{KEY("from")}, {KEY("to")}};
    dokebi_lock_acquire_options both = {DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0, keys, 2};
    dokebi_lock_lease *lease = NULL, *other = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_ex(backend, &both, 0, &lease, ERR));
    CHECK(dokebi_lock_lease_key_count(lease) == 2);
    size_t len = 0;
    const char *second = dokebi_lock_lease_key_at(lease, 1, &len);
    CHECK(len == 2 && memcmp(second, "to", 2) == 0);
    CHECK(dokebi_lock_lease_key_at(lease, 2, &len) == NULL);
    CHECK(strcmp(dokebi_lock_lease_fence_at(lease, 0), dokebi_lock_lease_fence(lease)) == 0);
    CHECK(strcmp(dokebi_lock_lease_fence_at(lease, 1), dokebi_lock_lease_fence(lease)) == 0);
    CHECK(dokebi_lock_lease_fence_at(lease, 2) == NULL);
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire(backend, KEY("to"), &other, ERR));

    /* A wait for a set that times out leaves none of it held. */
    dokebi_lock_key more[] = {{KEY("spare")}, {KEY("to")}};
    dokebi_lock_acquire_options overlapping = {DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0, more, 2};
    CHECK_STATUS(DOKEBI_LOCK_WAIT_TIMEOUT, dokebi_lock_acquire_ex(backend, &overlapping, 20, &other, ERR));
    other = must_acquire(backend, "spare", 0);
    dokebi_lock_lease_free(other);

    bool released = false;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
    CHECK(released && !dokebi_lock_lease_valid(lease));
    dokebi_lock_lease_free(lease);
    other = must_acquire(backend, "to", 0);
    CHECK(dokebi_lock_lease_key_count(other) == 1);
    dokebi_lock_lease_free(other);
}

static int count_section(const dokebi_lock_section *section, void *user_data) {
    CHECK(dokebi_lock_section_fence(section) != NULL);
    *(int *)user_data += 1;
    return 7;
}

static void with_lock_ex_runs_a_section_over_every_key(const dokebi_lock_backend *backend) {
    dokebi_lock_key keys[] = {{KEY("a")}, {KEY("b")}, {KEY("c")}};
    dokebi_lock_acquire_options all = {DOKEBI_LOCK_MODE_SHARED, 0, 0, keys, 3};
    int runs = 0, result = 0;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_with_lock_ex(backend, &all, 0, count_section, &runs, &result, ERR));
    CHECK(runs == 1 && result == 7);
    dokebi_lock_lease *free_again = must_acquire(backend, "b", 0);
    dokebi_lock_lease_free(free_again);
}

static void bad_options_are_invalid_argument_and_take_nothing(const dokebi_lock_backend *backend) {
    dokebi_lock_key key = {KEY("k")};
    dokebi_lock_key twice[] = {{KEY("k")}, {KEY("k")}};
    dokebi_lock_key empty = {NULL, 0};
    dokebi_lock_key null_with_length = {NULL, 3};
    dokebi_lock_acquire_options bad[] = {
        one(&key, 2, 0, 0),                             /* no such mode */
        one(&key, DOKEBI_LOCK_MODE_SHARED, 2, 0),       /* shared with a limit */
        one(&key, DOKEBI_LOCK_MODE_EXCLUSIVE, 2, 3),    /* weight above limit */
        one(&key, DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 2),    /* weight above the default limit */
        {DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0, twice, 2},   /* a key twice */
        {DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0, &key, 0},    /* no keys */
        {DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0, NULL, 1},    /* keys NULL */
        one(&null_with_length, DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0),
    };
    dokebi_lock_lease *sentinel = (dokebi_lock_lease *)&key, *lease = sentinel;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_acquire_ex(backend, &bad[i], 0, &lease, ERR));
    }
    dokebi_lock_acquire_options empty_key = one(&empty, DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0);
    CHECK_STATUS(DOKEBI_LOCK_INVALID_KEY, dokebi_lock_acquire_ex(backend, &empty_key, 0, &lease, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_acquire_ex(backend, NULL, 0, &lease, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_acquire_async_ex(backend, NULL, 0, on_acquired, NULL, NULL, ERR));
    int result = 0;
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_with_lock_ex(backend, &bad[0], 0, count_section, &result, &result, ERR));
    CHECK(lease == sentinel);
    dokebi_lock_backend_status status;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_get_status(backend, &status, ERR));
    CHECK(status.held == 0 && status.waiting == 0);
}

int main(void) {
    dokebi_lock_provider *provider = open_provider(YAML);
    dokebi_lock_backend *backend = get_backend(provider, "main");
    readers_share_a_key_and_a_writer_waits_for_them(backend);
    a_counted_key_holds_at_most_limit_units(backend);
    several_keys_are_one_lease_with_a_fence_per_key(backend);
    with_lock_ex_runs_a_section_over_every_key(backend);
    bad_options_are_invalid_argument_and_take_nothing(backend);
    dokebi_lock_backend_free(backend);
    dokebi_lock_provider_free(provider);
    printf("kinds: ok\n");
    return 0;
}
