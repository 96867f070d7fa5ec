/* dokebi-lock from C: lock an order with the local backend, and with a Redis
 * lease too when REDIS_URL is set (e.g. redis://127.0.0.1:6379/0).
 *
 * Build: scripts/build-c && make -C examples/c && examples/c/example
 * or by hand, with PKG_CONFIG_PATH=<prefix>/lib/pkgconfig:
 *   cc -std=c11 main.c $(pkg-config --cflags --libs liblock) -Wl,-rpath,<prefix>/lib
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock.h"

/* Prints a failed call's error and frees it; returns the exit status. */
static int report(const char *what, dokebi_lock_error *error) {
    fprintf(stderr, "%s failed: %s: %s\n  fix: %s\n", what, dokebi_lock_error_name(error), dokebi_lock_error_message(error),
            dokebi_lock_error_fix(error));
    for (size_t i = 0; i < dokebi_lock_error_issue_count(error); i++) {
        fprintf(stderr, "  %s: %s\n", dokebi_lock_error_issue_path(error, i), dokebi_lock_error_issue_message(error, i));
    }
    dokebi_lock_error_free(error);
    return 1;
}

/* Takes `key` on `backend_name`, "writes" with the fence, releases. */
static int lock_order(const dokebi_lock_provider *provider, const char *backend_name, const char *key) {
    dokebi_lock_backend *backend = NULL;
    dokebi_lock_lease *lease = NULL;
    dokebi_lock_error *error = NULL;
    if (dokebi_lock_provider_backend(provider, backend_name, &backend, &error) != DOKEBI_LOCK_OK) {
        return report("backend", error);
    }
    if (dokebi_lock_acquire(backend, key, strlen(key), DOKEBI_LOCK_WAIT_DEFAULT, &lease, &error) != DOKEBI_LOCK_OK) {
        dokebi_lock_backend_free(backend);
        return report("acquire", error);
    }
    /* The critical section: pass the fence along with writes to other stores,
     * which keep only writes with a larger fence than they have seen. */
    printf("%s: holding %s with fence %s\n", backend_name, key, dokebi_lock_lease_fence(lease));

    bool released = false;
    int failed = dokebi_lock_lease_release(lease, &released, &error) != DOKEBI_LOCK_OK ? report("release", error) : 0;
    printf("%s: released=%s\n", backend_name, released ? "true" : "false");
    dokebi_lock_lease_free(lease);
    dokebi_lock_backend_free(backend);
    return failed;
}

int main(void) {
    const char *redis_url = getenv("REDIS_URL");
    char yaml[1024];
    int len = snprintf(yaml, sizeof yaml,
                       "schemaVersion: 1\n"
                       "options:\n"
                       "  dokebi-lock:\n"
                       "    backends:\n"
                       "      orders: { waitTimeoutMs: 1000 }\n"
                       "%s",
                       redis_url ? "      shared: { driver: redis, connection: main, namespace: example-c, leaseMs: 10000 }\n"
                                   "  dokebi-redis:\n"
                                   "    connections:\n"
                                   "      main: { url: \"" : "");
    if (redis_url) {
        len += snprintf(yaml + len, sizeof yaml - (size_t)len, "%s\" }\n", redis_url);
    }
    if (len < 0 || (size_t)len >= sizeof yaml) {
        fprintf(stderr, "REDIS_URL is too long\n");
        return 1;
    }

    dokebi_lock_provider *provider = NULL;
    dokebi_lock_error *error = NULL;
    if (dokebi_lock_provider_open(yaml, (size_t)len, &provider, &error) != DOKEBI_LOCK_OK) {
        return report("open", error);
    }
    printf("liblock %s, backends:", dokebi_lock_version());
    for (size_t i = 0; i < dokebi_lock_provider_name_count(provider); i++) {
        printf(" %s", dokebi_lock_provider_name(provider, i));
    }
    printf("\n");

    int failed = lock_order(provider, "orders", "order:42");
    if (redis_url && !failed) {
        failed = lock_order(provider, "shared", "order:42");
    }
    dokebi_lock_provider_free(provider);
    return failed;
}
