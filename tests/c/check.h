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
