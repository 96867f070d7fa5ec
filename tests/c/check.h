/* Assertions and small helpers shared by the C and C++ tests (header-only). */
#ifndef DOKEBI_LOCK_TEST_CHECK_H
#define DOKEBI_LOCK_TEST_CHECK_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock.h"

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

/* Checks that `call` returned `want`; frees the error the call produced. */
#define CHECK_STATUS(want, call)                                                   \
    do {                                                                           \
        dokebi_lock_error *check_error_ = NULL;                                    \
        dokebi_lock_status check_got_ = (call);                                    \
        if (check_got_ != (want)) {                                                \
            fprintf(stderr, "%s:%d: %s returned %s (%s), expected %s\n", __FILE__, __LINE__, #call, \
                    dokebi_lock_status_name(check_got_),                           \
                    check_error_ ? dokebi_lock_error_message(check_error_) : "-",  \
                    dokebi_lock_status_name(want));                                \
            exit(1);                                                               \
        }                                                                          \
        dokebi_lock_error_free(check_error_);                                      \
    } while (0)

/* Use as the out_error argument inside CHECK_STATUS. */
#define ERR (&check_error_)

#define KEY(text) (text), strlen(text)

static inline dokebi_lock_provider *open_provider(const char *yaml) {
    dokebi_lock_provider *provider = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_open(yaml, strlen(yaml), &provider, ERR));
    return provider;
}

static inline dokebi_lock_backend *get_backend(const dokebi_lock_provider *provider, const char *name) {
    dokebi_lock_backend *backend = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_backend(provider, name, &backend, ERR));
    return backend;
}

static inline dokebi_lock_lease *must_acquire(const dokebi_lock_backend *backend, const char *key, int64_t wait_ms) {
    dokebi_lock_lease *lease = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire(backend, KEY(key), wait_ms, &lease, ERR));
    return lease;
}

static inline unsigned long long fence_of(const dokebi_lock_lease *lease) {
    return strtoull(dokebi_lock_lease_fence(lease), NULL, 10);
}

/* The label `inspect` through `reader` gives the first holder of `key`
 * (the caller frees nothing: the text is copied into `label`). */
static inline void first_label(const dokebi_lock_backend *reader, const char *key, char *label, size_t size) {
    dokebi_lock_inspection *found = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_inspect(reader, KEY(key), &found, ERR));
    const char *text = dokebi_lock_inspection_holder_label(found, 0);
    snprintf(label, size, "%s", text == NULL ? "(none)" : text);
    dokebi_lock_inspection_free(found);
}

/* A handle of `one` labelled by dokebi_lock_backend_with_holder: its leases
 * (blocking, of a kind, asynchronous, a section) are named by that label
 * as `reader` inspects them; `one`'s own keep the provider's; a label the
 * options would refuse is INVALID_ARGUMENT. */
static inline void a_labelled_handle_names_its_leases(const dokebi_lock_backend *one, const dokebi_lock_backend *reader) {
    dokebi_lock_backend *job = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_with_holder(one, "job-7 \xc3\xbc", &job, ERR));
    char label[64];
    dokebi_lock_lease *lease = must_acquire(job, "labelled", 0);
    first_label(reader, "labelled", label, sizeof label);
    CHECK(strcmp(label, "job-7 \xc3\xbc") == 0);
    dokebi_lock_lease_free(lease);

    dokebi_lock_key key = {KEY("labelled")};
    dokebi_lock_acquire_options counted = {DOKEBI_LOCK_MODE_EXCLUSIVE, 2, 0, &key, 1};
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_ex(job, &counted, 0, &lease, ERR));
    first_label(reader, "labelled", label, sizeof label);
    CHECK(strcmp(label, "job-7 \xc3\xbc") == 0);
    dokebi_lock_lease_free(lease);

    lease = must_acquire(one, "labelled", 0);
    first_label(reader, "labelled", label, sizeof label);
    CHECK(strcmp(label, "job-7 \xc3\xbc") != 0 && strcmp(label, "(none)") != 0);
    dokebi_lock_lease_free(lease);
    dokebi_lock_backend_free(job);

    dokebi_lock_backend *bad = NULL;
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_backend_with_holder(one, "", &bad, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_backend_with_holder(one, NULL, &bad, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_backend_with_holder(one, "a\x01b", &bad, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_backend_with_holder(one, "\xff", &bad, ERR));
    CHECK(bad == NULL);
}

/* The outcome of one asynchronous acquire, handed over by its callback. */
typedef struct {
    pthread_mutex_t mutex;
    pthread_cond_t done;
    int called;
    dokebi_lock_status status;
    dokebi_lock_lease *lease;
    dokebi_lock_error *error;
} outcome;

static inline void outcome_init(outcome *o) {
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->mutex, NULL);
    pthread_cond_init(&o->done, NULL);
}

static inline void on_acquired(void *userdata, dokebi_lock_status status, dokebi_lock_lease *lease, dokebi_lock_error *error) {
    outcome *o = (outcome *)userdata;
    pthread_mutex_lock(&o->mutex);
    o->called += 1;
    o->status = status;
    o->lease = lease;
    o->error = error;
    pthread_cond_broadcast(&o->done);
    pthread_mutex_unlock(&o->mutex);
}

/* Waits for the callback, frees the error, returns the status. */
static inline dokebi_lock_status outcome_wait(outcome *o) {
    pthread_mutex_lock(&o->mutex);
    while (!o->called) {
        pthread_cond_wait(&o->done, &o->mutex);
    }
    pthread_mutex_unlock(&o->mutex);
    dokebi_lock_error_free(o->error);
    o->error = NULL;
    return o->status;
}

static inline void outcome_destroy(outcome *o) {
    CHECK(o->called <= 1);
    dokebi_lock_lease_free(o->lease);
    dokebi_lock_error_free(o->error);
    pthread_mutex_destroy(&o->mutex);
    pthread_cond_destroy(&o->done);
}

/* An asynchronous acquire of `key` on `backend`, where another holds it, is
 * cancelled while it waits: it ends with ABORTED, and cancelling again
 * does nothing. */
static inline void a_cancelled_wait_is_aborted(const dokebi_lock_backend *backend, const char *key) {
    outcome cancelled;
    outcome_init(&cancelled);
    dokebi_lock_pending *pending = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_async(backend, KEY(key), 60000, on_acquired, &cancelled, &pending, ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_pending_cancel(pending));
    CHECK(outcome_wait(&cancelled) == DOKEBI_LOCK_ABORTED);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_pending_cancel(pending)); /* idempotent */
    dokebi_lock_pending_free(pending);
    outcome_destroy(&cancelled);
}

#endif
