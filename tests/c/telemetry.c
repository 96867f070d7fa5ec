/* Telemetry for C hosts (dokebi_lock_provider_open_with_telemetry): slow
 * acquires and holds, wait timeouts, a Redis connection coming up and forced
 * releases reach the callback, with backend and connection names and codes,
 * never keys; no
 * callback runs once dokebi_lock_provider_free has returned, though handles
 * taken from the provider outlive it. */
/* alarm is POSIX, not C11: glibc shows it anyway, musl only when asked. */
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <unistd.h>

#include "check.h"

#define MAX_EVENTS 64

/* The events seen, copied out of the callback (its strings die with it). */
static struct {
    pthread_mutex_t mutex;
    int count;
    struct {
        dokebi_lock_event_kind kind;
        char backend[32];
        char connection[32];
        dokebi_lock_status code;
        bool up;
        /* A forced release's (dokebi_lock_event_forced_release). */
        uint32_t removed;
        uint64_t fence;
        /* A wait's details (dokebi_lock_event_details) named this process as the holder. */
        bool told_holder;
    } events[MAX_EVENTS];
} seen = {PTHREAD_MUTEX_INITIALIZER, 0, {{0}}};

static void copy(char *to, const char *from) {
    snprintf(to, 32, "%s", from ? from : "");
}

static void record(const dokebi_lock_event *event, void *user_data) {
    CHECK(user_data == &seen);
    pthread_mutex_lock(&seen.mutex);
    if (seen.count < MAX_EVENTS) {
        seen.events[seen.count].kind = event->kind;
        copy(seen.events[seen.count].backend, event->backend);
        copy(seen.events[seen.count].connection, event->connection);
        seen.events[seen.count].code = event->code;
        seen.events[seen.count].up = event->up;
        const dokebi_lock_forced_release_event *forced = dokebi_lock_event_forced_release(event);
        CHECK((forced != NULL) == (event->kind == DOKEBI_LOCK_EVENT_FORCED_RELEASE));
        CHECK(dokebi_lock_event_trace(event) == NULL);
        if (forced != NULL) {
            CHECK(&forced->event == event);
            seen.events[seen.count].removed = forced->removed;
            seen.events[seen.count].fence = forced->fence;
        }
        const char *details = dokebi_lock_event_details(event);
        CHECK(details == NULL || event->kind == DOKEBI_LOCK_EVENT_WAIT_TIMEOUT || event->kind == DOKEBI_LOCK_EVENT_SLOW_ACQUIRE);
        char pid[40];
        snprintf(pid, sizeof pid, ":%ld\"", (long)getpid());
        seen.events[seen.count].told_holder = details != NULL && strstr(details, "\"holders\":[{") != NULL && strstr(details, pid) != NULL;
        seen.count++;
    }
    pthread_mutex_unlock(&seen.mutex);
}

/* How many events of `kind` from `name` (backend or connection) with `code` were seen. */
static int count(dokebi_lock_event_kind kind, const char *name, dokebi_lock_status code) {
    int n = 0;
    pthread_mutex_lock(&seen.mutex);
    for (int i = 0; i < seen.count; i++) {
        const char *from = kind == DOKEBI_LOCK_EVENT_CONNECTION ? seen.events[i].connection : seen.events[i].backend;
        if (seen.events[i].kind == kind && strcmp(from, name) == 0 && seen.events[i].code == code) {
            n++;
        }
        CHECK(strstr(seen.events[i].backend, "secret") == NULL && strstr(seen.events[i].connection, "secret") == NULL);
    }
    pthread_mutex_unlock(&seen.mutex);
    return n;
}

/* How many events of `kind` named this process as the key's holder. */
static int told_holder(dokebi_lock_event_kind kind) {
    int n = 0;
    pthread_mutex_lock(&seen.mutex);
    for (int i = 0; i < seen.count; i++) {
        n += seen.events[i].kind == kind && seen.events[i].told_holder;
    }
    pthread_mutex_unlock(&seen.mutex);
    return n;
}

/* The forced releases `backend` reported, in order: how many, and the
 * holders each removed and the fence each raised. */
static int forced_releases(const char *backend, uint32_t removed[], uint64_t fence[], int max) {
    int n = 0;
    pthread_mutex_lock(&seen.mutex);
    for (int i = 0; i < seen.count; i++) {
        if (seen.events[i].kind == DOKEBI_LOCK_EVENT_FORCED_RELEASE && strcmp(seen.events[i].backend, backend) == 0) {
            if (n < max) {
                removed[n] = seen.events[i].removed;
                fence[n] = seen.events[i].fence;
            }
            n++;
        }
    }
    pthread_mutex_unlock(&seen.mutex);
    return n;
}

/* Force-releases `key` of `backend`: the fence it raised (0 on local). */
static uint64_t force_release(const dokebi_lock_backend *backend, const char *key) {
    dokebi_lock_forced_release *forced = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_force_release(backend, KEY(key), &forced, ERR));
    uint64_t fence = 0;
    dokebi_lock_forced_release_fence(forced, &fence);
    dokebi_lock_forced_release_free(forced);
    return fence;
}

static uint64_t waiting(const dokebi_lock_backend *backend) {
    dokebi_lock_backend_status status;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_get_status(backend, &status, ERR));
    return status.waiting;
}

static void *acquire_and_release(void *backend) {
    dokebi_lock_lease *lease = must_acquire(backend, "secret-order-42", 5000);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, NULL, ERR));
    dokebi_lock_lease_free(lease);
    return NULL;
}

/* The host data of a provider freed before its handles: freed right after
 * the provider, so a later callback is a use after free (AddressSanitizer),
 * and counted against `provider_freed` (without it). */
struct host {
    int events;
};

static bool provider_freed;

static void count_on_host(const dokebi_lock_event *event, void *user_data) {
    (void)event;
    CHECK(!provider_freed);
    ((struct host *)user_data)->events++;
}

static void no_callback_runs_after_the_provider_is_freed(const char *yaml, size_t len) {
    struct host *host = calloc(1, sizeof *host);
    CHECK(host != NULL);
    dokebi_lock_provider *provider = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_open_with_trace_events(yaml, len, count_on_host, host,
                                                                             DOKEBI_LOCK_TRACE_ACQUIRE | DOKEBI_LOCK_TRACE_HOLD,
                                                                             &provider, ERR));
    dokebi_lock_backend *orders = get_backend(provider, "orders"), *shared = get_backend(provider, "shared");
    dokebi_lock_lease *local = must_acquire(orders, "after-free", 0), *remote = must_acquire(shared, "after-free", 0);
    CHECK(host->events >= 2);
    dokebi_lock_provider_free(provider);
    provider_freed = true;
    free(host);
    /* The handles outlive the provider: their calls fail or end the leases,
     * with nobody told. */
    dokebi_lock_lease_free(local);
    dokebi_lock_lease_free(remote);
    dokebi_lock_lease *none = NULL;
    CHECK_STATUS(DOKEBI_LOCK_CLOSED, dokebi_lock_acquire(orders, KEY("after-free"), 0, &none, ERR));
    CHECK_STATUS(DOKEBI_LOCK_CLOSED, dokebi_lock_acquire(shared, KEY("after-free"), 0, &none, ERR));
    dokebi_lock_backend_free(orders);
    dokebi_lock_backend_free(shared);
    provider_freed = false;
}

/* A callback that calls into a redis backend from the event of a redis
 * acquire: the store drivers' thread runs it, and a blocking call there
 * would wait for that thread itself. It is refused (INVALID_ARGUMENT),
 * never a hang (SIGALRM ends a hung test). */
static struct {
    dokebi_lock_provider *provider;
    const dokebi_lock_backend *shared;
    const dokebi_lock_lease *held;
    bool armed, on_driver_thread;
    pthread_t caller;
    int calls;
    dokebi_lock_status acquired, renewed, released, closed;
} nested;

static void call_back_in(const dokebi_lock_event *event, void *user_data) {
    (void)user_data;
    if (!nested.armed || event->kind != DOKEBI_LOCK_EVENT_ACQUIRE || nested.calls > 0 || pthread_equal(pthread_self(), nested.caller)) {
        return;
    }
    nested.calls++;
    nested.on_driver_thread = true;
    dokebi_lock_lease *inner = NULL;
    nested.acquired = dokebi_lock_try_acquire(nested.shared, KEY("nested-inner"), &inner, NULL);
    nested.renewed = dokebi_lock_lease_renew(nested.held, NULL, NULL);
    nested.released = dokebi_lock_lease_release(nested.held, NULL, NULL);
    nested.closed = dokebi_lock_provider_close(nested.provider);
    dokebi_lock_lease_free(inner);
}

static void a_blocking_call_from_the_drivers_thread_is_refused(const char *yaml, size_t len) {
    alarm(60);
    dokebi_lock_provider *provider = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_open_with_trace_events(yaml, len, call_back_in, NULL, DOKEBI_LOCK_TRACE_ACQUIRE,
                                                                             &provider, ERR));
    dokebi_lock_backend *shared = get_backend(provider, "shared");
    nested.provider = provider;
    nested.shared = shared;
    nested.caller = pthread_self();
    dokebi_lock_lease *held = must_acquire(shared, "nested-held", 0);
    nested.held = held;
    nested.armed = true;
    dokebi_lock_lease *lease = must_acquire(shared, "nested-outer", 0);
    CHECK(nested.on_driver_thread);
    CHECK(nested.acquired == DOKEBI_LOCK_INVALID_ARGUMENT && nested.renewed == DOKEBI_LOCK_INVALID_ARGUMENT);
    CHECK(nested.released == DOKEBI_LOCK_INVALID_ARGUMENT && nested.closed == DOKEBI_LOCK_INVALID_ARGUMENT);
    /* The driver still serves callers on other threads. */
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, NULL, ERR));
    bool released = false;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(held, &released, ERR));
    CHECK(released);
    dokebi_lock_lease_free(lease);
    dokebi_lock_lease_free(held);
    dokebi_lock_backend_free(shared);
    dokebi_lock_provider_free(provider);
    alarm(0);
}

int main(void) {
    const char *url = getenv("REDIS_URL");
    CHECK(url != NULL);
    char yaml[1024];
    int len = snprintf(yaml, sizeof yaml,
                       "schemaVersion: 1\n"
                       "options:\n"
                       "  dokebi-lock:\n"
                       "    backends:\n"
                       "      orders: { slowAcquireMs: 0, slowHoldMs: 0 }\n"
                       "      shared: { driver: redis, connection: main, namespace: c-telemetry, leaseMs: 5000 }\n"
                       "  dokebi-redis:\n"
                       "    connections:\n"
                       "      main: { url: \"%s\" }\n",
                       url);
    CHECK(len > 0 && (size_t)len < sizeof yaml);
    dokebi_lock_provider *provider = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_open_with_telemetry(yaml, (size_t)len, record, &seen, &provider, ERR));
    dokebi_lock_backend *orders = get_backend(provider, "orders");

    /* A granted key is no wait; a wait that times out is reported twice. */
    dokebi_lock_lease *lease = must_acquire(orders, "secret-order-42", 0);
    CHECK(count(DOKEBI_LOCK_EVENT_SLOW_ACQUIRE, "orders", DOKEBI_LOCK_OK) == 0);
    dokebi_lock_lease *none = NULL;
    CHECK_STATUS(DOKEBI_LOCK_WAIT_TIMEOUT, dokebi_lock_acquire(orders, KEY("secret-order-42"), 10, &none, ERR));
    CHECK(count(DOKEBI_LOCK_EVENT_WAIT_TIMEOUT, "orders", DOKEBI_LOCK_WAIT_TIMEOUT) == 1);
    CHECK(count(DOKEBI_LOCK_EVENT_SLOW_ACQUIRE, "orders", DOKEBI_LOCK_WAIT_TIMEOUT) == 1);
    /* Both tell who held the key: this process, by its default label. */
    CHECK(told_holder(DOKEBI_LOCK_EVENT_WAIT_TIMEOUT) == 1 && told_holder(DOKEBI_LOCK_EVENT_SLOW_ACQUIRE) == 1);
    /* A wait that ends with the key (slowAcquireMs 0: every wait is slow). */
    pthread_t waiter;
    CHECK(pthread_create(&waiter, NULL, acquire_and_release, orders) == 0);
    while (waiting(orders) == 0) {
        sched_yield();
    }
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, NULL, ERR));
    CHECK(pthread_join(waiter, NULL) == 0);
    CHECK(count(DOKEBI_LOCK_EVENT_SLOW_ACQUIRE, "orders", DOKEBI_LOCK_OK) == 1);
    CHECK(count(DOKEBI_LOCK_EVENT_SLOW_HOLD, "orders", DOKEBI_LOCK_OK) == 2);
    dokebi_lock_lease_free(lease);

    /* A forced release is reported by the backend that broke the key: the
     * holders it removed (also none), and no fence on the local driver. */
    dokebi_lock_lease *forced_lease = must_acquire(orders, "secret-order-44", 0);
    CHECK(force_release(orders, "secret-order-44") == 0);
    CHECK(force_release(orders, "secret-order-44") == 0);
    uint32_t removed[2];
    uint64_t fences[2];
    CHECK(forced_releases("orders", removed, fences, 2) == 2);
    CHECK(removed[0] == 1 && removed[1] == 0 && fences[0] == 0 && fences[1] == 0);
    bool released = true;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(forced_lease, &released, ERR));
    CHECK(!released);
    dokebi_lock_lease_free(forced_lease);

    /* The redis driver connects in the background; the first acquire waits for it. */
    dokebi_lock_backend *shared = get_backend(provider, "shared");
    dokebi_lock_lease *redis_lease = must_acquire(shared, "secret-order-43", 0);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(redis_lease, NULL, ERR));
    dokebi_lock_lease_free(redis_lease);
    /* A redis forced release: the fence it raised, as its answer's. */
    redis_lease = must_acquire(shared, "secret-order-45", 0);
    uint64_t raised = force_release(shared, "secret-order-45");
    CHECK(raised > strtoull(dokebi_lock_lease_fence(redis_lease), NULL, 10));
    CHECK(forced_releases("shared", removed, fences, 2) == 1);
    CHECK(removed[0] == 1 && fences[0] == raised);
    CHECK_STATUS(DOKEBI_LOCK_LEASE_LOST, dokebi_lock_lease_release(redis_lease, NULL, ERR));
    dokebi_lock_lease_free(redis_lease);
    CHECK(count(DOKEBI_LOCK_EVENT_CONNECTION, "main", DOKEBI_LOCK_OK) >= 1);
    pthread_mutex_lock(&seen.mutex);
    bool came_up = false;
    for (int i = 0; i < seen.count; i++) {
        came_up = came_up || (seen.events[i].kind == DOKEBI_LOCK_EVENT_CONNECTION && seen.events[i].up);
    }
    pthread_mutex_unlock(&seen.mutex);
    CHECK(came_up);

    dokebi_lock_backend_free(shared);
    dokebi_lock_backend_free(orders);
    dokebi_lock_provider_free(provider);

    no_callback_runs_after_the_provider_is_freed(yaml, (size_t)len);
    a_blocking_call_from_the_drivers_thread_is_refused(yaml, (size_t)len);
    printf("telemetry: ok\n");
    return 0;
}
