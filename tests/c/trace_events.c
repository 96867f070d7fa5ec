/* Acquire and hold events for C hosts that ask for them
 * (dokebi_lock_provider_open_with_trace_events): on a local and a redis
 * backend, a contended acquire, a wait timeout, a counted acquire of two
 * keys, releases and (redis) a lease found lost each come with their
 * driver, wait or hold, outcome, fence and kind, never a key; a host that
 * opened with dokebi_lock_provider_open_with_telemetry gets none of them. */
/* nanosleep is POSIX, not C11: glibc shows it anyway, musl only when asked. */
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define MAX_EVENTS 256
/* How long the holder keeps the key while another thread waits for it. */
#define HOLD_MS 50

/* One event, copied out of the callback (its strings die with it). */
typedef struct {
    dokebi_lock_event_kind kind;
    char backend[32];
    char driver[16];
    uint64_t duration_ms;
    dokebi_lock_status code;
    uint64_t fence;
    uint32_t mode, limit, weight;
    size_t key_count;
} seen_event;

typedef struct {
    pthread_mutex_t mutex;
    int count;
    seen_event events[MAX_EVENTS];
} journal;

static journal traced = {PTHREAD_MUTEX_INITIALIZER, 0, {{0}}};
static journal untraced = {PTHREAD_MUTEX_INITIALIZER, 0, {{0}}};

static void copy(char *to, size_t size, const char *from) {
    snprintf(to, size, "%s", from ? from : "");
}

static void record(const dokebi_lock_event *event, void *user_data) {
    journal *j = user_data;
    CHECK(j == &traced || j == &untraced);
    const dokebi_lock_trace_event *trace = dokebi_lock_event_trace(event);
    bool is_trace = event->kind == DOKEBI_LOCK_EVENT_ACQUIRE || event->kind == DOKEBI_LOCK_EVENT_HOLD;
    CHECK((trace != NULL) == is_trace);
    CHECK(trace == NULL || &trace->event == event);
    pthread_mutex_lock(&j->mutex);
    CHECK(j->count < MAX_EVENTS);
    seen_event *e = &j->events[j->count++];
    memset(e, 0, sizeof *e);
    e->kind = event->kind;
    copy(e->backend, sizeof e->backend, event->backend);
    e->duration_ms = event->duration_ms;
    e->code = event->code;
    if (trace) {
        copy(e->driver, sizeof e->driver, trace->driver);
        e->fence = trace->fence;
        e->mode = trace->mode;
        e->limit = trace->limit;
        e->weight = trace->weight;
        e->key_count = trace->key_count;
    }
    CHECK(strstr(e->backend, "secret") == NULL);
    pthread_mutex_unlock(&j->mutex);
}

/* How many events of `kind` from `backend` with `fence` and `code`. */
static int count(journal *j, dokebi_lock_event_kind kind, const char *backend, uint64_t fence, dokebi_lock_status code) {
    int n = 0;
    pthread_mutex_lock(&j->mutex);
    for (int i = 0; i < j->count; i++) {
        const seen_event *e = &j->events[i];
        n += e->kind == kind && strcmp(e->backend, backend) == 0 && e->fence == fence && e->code == code;
    }
    pthread_mutex_unlock(&j->mutex);
    return n;
}

/* The one event of `kind` from `backend` with `fence` and `code` (a copy). */
static seen_event the(journal *j, dokebi_lock_event_kind kind, const char *backend, uint64_t fence, dokebi_lock_status code) {
    CHECK(count(j, kind, backend, fence, code) == 1);
    seen_event found = {0};
    pthread_mutex_lock(&j->mutex);
    for (int i = 0; i < j->count; i++) {
        const seen_event *e = &j->events[i];
        if (e->kind == kind && strcmp(e->backend, backend) == 0 && e->fence == fence && e->code == code) {
            found = *e;
        }
    }
    pthread_mutex_unlock(&j->mutex);
    return found;
}

/* Events of the kinds ACQUIRE and HOLD from `backend`. */
static int traces(journal *j, const char *backend) {
    int n = 0;
    pthread_mutex_lock(&j->mutex);
    for (int i = 0; i < j->count; i++) {
        const seen_event *e = &j->events[i];
        n += (e->kind == DOKEBI_LOCK_EVENT_ACQUIRE || e->kind == DOKEBI_LOCK_EVENT_HOLD) && strcmp(e->backend, backend) == 0;
    }
    pthread_mutex_unlock(&j->mutex);
    return n;
}

static int events_from(journal *j, const char *backend) {
    int n = 0;
    pthread_mutex_lock(&j->mutex);
    for (int i = 0; i < j->count; i++) {
        n += strcmp(j->events[i].backend, backend) == 0;
    }
    pthread_mutex_unlock(&j->mutex);
    return n;
}

static void sleep_ms(long ms) {
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

static uint64_t waiting(const dokebi_lock_backend *backend) {
    dokebi_lock_backend_status status;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_get_status(backend, &status, ERR));
    return status.waiting;
}

typedef struct {
    const dokebi_lock_backend *backend;
    dokebi_lock_lease *lease;
} waiter;

static void *wait_for_key(void *arg) {
    waiter *w = arg;
    w->lease = must_acquire(w->backend, "secret-order-42", 5000);
    return NULL;
}

static void release(dokebi_lock_lease *lease, dokebi_lock_status want) {
    CHECK_STATUS(want, dokebi_lock_lease_release(lease, NULL, ERR));
    dokebi_lock_lease_free(lease);
}

/* The fences of what `contend` did. */
typedef struct {
    uint64_t first, second, counted;
} fences;

/* A key held HOLD_MS while another thread waits for it; a wait that times
 * out; two keys of a counted lock at once. */
static fences contend(const dokebi_lock_backend *backend) {
    fences f;
    dokebi_lock_lease *first = must_acquire(backend, "secret-order-42", 0);
    f.first = fence_of(first);
    waiter w = {backend, NULL};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, wait_for_key, &w) == 0);
    while (waiting(backend) == 0) {
        sched_yield();
    }
    sleep_ms(HOLD_MS);
    release(first, DOKEBI_LOCK_OK);
    CHECK(pthread_join(thread, NULL) == 0);
    f.second = fence_of(w.lease);
    dokebi_lock_lease *none = NULL;
    CHECK_STATUS(DOKEBI_LOCK_WAIT_TIMEOUT, dokebi_lock_acquire(backend, KEY("secret-order-42"), 20, &none, ERR));
    release(w.lease, DOKEBI_LOCK_OK);

    dokebi_lock_key keys[2] = {{KEY("secret-a")}, {KEY("secret-b")}};
    dokebi_lock_acquire_options counted = {DOKEBI_LOCK_MODE_EXCLUSIVE, 3, 2, keys, 2};
    dokebi_lock_lease *lease = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_ex(backend, &counted, 0, &lease, ERR));
    f.counted = fence_of(lease);
    release(lease, DOKEBI_LOCK_OK);
    return f;
}

static void check_contention(const char *backend, const char *driver, fences f) {
    CHECK(traces(&traced, backend) == 7); /* 4 acquires, 3 holds */
    seen_event first = the(&traced, DOKEBI_LOCK_EVENT_ACQUIRE, backend, f.first, DOKEBI_LOCK_OK);
    CHECK(strcmp(first.driver, driver) == 0);
    CHECK(first.mode == DOKEBI_LOCK_MODE_EXCLUSIVE && first.limit == 1 && first.weight == 1 && first.key_count == 1);
    seen_event first_hold = the(&traced, DOKEBI_LOCK_EVENT_HOLD, backend, f.first, DOKEBI_LOCK_OK);
    CHECK(first_hold.duration_ms >= HOLD_MS && strcmp(first_hold.driver, driver) == 0);
    seen_event second = the(&traced, DOKEBI_LOCK_EVENT_ACQUIRE, backend, f.second, DOKEBI_LOCK_OK);
    CHECK(second.duration_ms >= HOLD_MS); /* it waited for all of the holder's hold */
    CHECK(second.fence > first.fence);
    the(&traced, DOKEBI_LOCK_EVENT_HOLD, backend, f.second, DOKEBI_LOCK_OK);
    seen_event timeout = the(&traced, DOKEBI_LOCK_EVENT_ACQUIRE, backend, 0, DOKEBI_LOCK_WAIT_TIMEOUT);
    CHECK(timeout.duration_ms >= 20 && timeout.key_count == 1);
    seen_event counted = the(&traced, DOKEBI_LOCK_EVENT_ACQUIRE, backend, f.counted, DOKEBI_LOCK_OK);
    CHECK(counted.mode == DOKEBI_LOCK_MODE_EXCLUSIVE && counted.limit == 3 && counted.weight == 2 && counted.key_count == 2);
    seen_event counted_hold = the(&traced, DOKEBI_LOCK_EVENT_HOLD, backend, f.counted, DOKEBI_LOCK_OK);
    CHECK(counted_hold.mode == 0 && counted_hold.key_count == 0);
}

static int open_yaml(char *yaml, size_t size, const char *url, const char *namespace) {
    int len = snprintf(yaml, size,
                       "schemaVersion: 1\n"
                       "options:\n"
                       "  dokebi-lock:\n"
                       "    backends:\n"
                       "      orders: { slowAcquireMs: 0 }\n"
                       "      shared: { driver: redis, connection: main, namespace: %s, leaseMs: 5000, slowAcquireMs: 0 }\n"
                       "      brief: { driver: redis, connection: main, namespace: %s, leaseMs: 600 }\n"
                       "  dokebi-redis:\n"
                       "    connections:\n"
                       "      main: { url: \"%s\", commandTimeoutMs: 500 }\n",
                       namespace, namespace, url);
    CHECK(len > 0 && (size_t)len < size);
    return len;
}

/* The file and postgres drivers name themselves in their events too. */
static void file_and_postgres_events_name_their_driver(void) {
    char directory[] = "/tmp/dokebi-lock-c-trace-XXXXXX";
    CHECK(mkdtemp(directory) != NULL);
    const char *pg = getenv("PG_URL");
    if (pg == NULL) {
        pg = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable";
    }
    char yaml[1024];
    int len = snprintf(yaml, sizeof yaml,
                       "schemaVersion: 1\n"
                       "options:\n"
                       "  dokebi-lock:\n"
                       "    backends:\n"
                       "      files: { driver: file, directory: '%s' }\n"
                       "      rows: { driver: postgres, connection: main, schema: dokebi_c_test, namespace: c-trace-%ld-%ld, leaseMs: 5000 }\n"
                       "  dokebi-postgres:\n"
                       "    connections:\n"
                       "      main: { url: \"%s\", connectTimeoutMs: 5000, commandTimeoutMs: 2000 }\n",
                       directory, (long)time(NULL), (long)getpid(), pg);
    CHECK(len > 0 && (size_t)len < sizeof yaml);
    dokebi_lock_provider *provider = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_open_with_trace_events(yaml, (size_t)len, record, &traced,
                                                                              DOKEBI_LOCK_TRACE_ACQUIRE | DOKEBI_LOCK_TRACE_HOLD,
                                                                              &provider, ERR));
    const char *names[] = {"files", "rows"}, *drivers[] = {"file", "postgres"};
    for (int i = 0; i < 2; i++) {
        dokebi_lock_backend *backend = get_backend(provider, names[i]);
        dokebi_lock_lease *lease = must_acquire(backend, "secret-order-45", 0);
        uint64_t fence = fence_of(lease);
        release(lease, DOKEBI_LOCK_OK);
        seen_event acquired = the(&traced, DOKEBI_LOCK_EVENT_ACQUIRE, names[i], fence, DOKEBI_LOCK_OK);
        seen_event held = the(&traced, DOKEBI_LOCK_EVENT_HOLD, names[i], fence, DOKEBI_LOCK_OK);
        if (strcmp(acquired.driver, drivers[i]) != 0 || strcmp(held.driver, drivers[i]) != 0) {
            fprintf(stderr, "trace_events: %s's events name the driver \"%s\" and \"%s\"\n", names[i], acquired.driver, held.driver);
        }
        CHECK(strcmp(acquired.driver, drivers[i]) == 0 && strcmp(held.driver, drivers[i]) == 0);
        dokebi_lock_backend_free(backend);
    }
    dokebi_lock_provider_free(provider);
    char command[128];
    snprintf(command, sizeof command, "rm -rf '%s'", directory);
    CHECK(system(command) == 0);
}

int main(void) {
    const char *url = getenv("REDIS_URL");
    CHECK(url != NULL);
    char yaml[1024];
    int len = open_yaml(yaml, sizeof yaml, url, "c-traced");
    dokebi_lock_provider *provider = NULL;

    /* Asking for unknown events, or for events without a callback, is a mistake. */
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT,
                 dokebi_lock_provider_open_with_trace_events(yaml, (size_t)len, record, &traced, 4, &provider, ERR));
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT,
                 dokebi_lock_provider_open_with_trace_events(yaml, (size_t)len, NULL, NULL, DOKEBI_LOCK_TRACE_HOLD, &provider, ERR));
    CHECK(provider == NULL);
    CHECK(dokebi_lock_event_trace(NULL) == NULL);

    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_open_with_trace_events(yaml, (size_t)len, record, &traced,
                                                                              DOKEBI_LOCK_TRACE_ACQUIRE | DOKEBI_LOCK_TRACE_HOLD,
                                                                              &provider, ERR));
    dokebi_lock_backend *orders = get_backend(provider, "orders");
    dokebi_lock_backend *shared = get_backend(provider, "shared");
    dokebi_lock_backend *brief = get_backend(provider, "brief");

    check_contention("orders", "local", contend(orders));
    check_contention("shared", "redis", contend(shared));

    /* A redis lease that expired and was taken over: its hold ends lost. */
    dokebi_lock_lease *lost = must_acquire(brief, "secret-order-44", 0);
    uint64_t lost_fence = fence_of(lost);
    sleep_ms(700);
    dokebi_lock_lease *taker = must_acquire(brief, "secret-order-44", 0);
    release(lost, DOKEBI_LOCK_LEASE_LOST);
    seen_event lost_hold = the(&traced, DOKEBI_LOCK_EVENT_HOLD, "brief", lost_fence, DOKEBI_LOCK_LEASE_LOST);
    CHECK(lost_hold.duration_ms >= 700);
    release(taker, DOKEBI_LOCK_OK);
    CHECK(traces(&traced, "brief") == 4);

    dokebi_lock_backend_free(brief);
    dokebi_lock_backend_free(shared);
    dokebi_lock_backend_free(orders);
    dokebi_lock_provider_free(provider);

    /* The same with a host that did not ask: its threshold events come
     * (slowAcquireMs 0), the acquire and hold events do not. */
    len = open_yaml(yaml, sizeof yaml, url, "c-untraced");
    provider = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_provider_open_with_telemetry(yaml, (size_t)len, record, &untraced, &provider, ERR));
    orders = get_backend(provider, "orders");
    shared = get_backend(provider, "shared");
    contend(orders);
    contend(shared);
    CHECK(events_from(&untraced, "orders") > 0 && events_from(&untraced, "shared") > 0);
    CHECK(traces(&untraced, "orders") == 0 && traces(&untraced, "shared") == 0);
    dokebi_lock_backend_free(shared);
    dokebi_lock_backend_free(orders);
    dokebi_lock_provider_free(provider);

    file_and_postgres_events_name_their_driver();
    printf("trace_events: ok\n");
    return 0;
}
