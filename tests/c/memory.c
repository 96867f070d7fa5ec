/* Resource check: local acquire/release cycles leave memory flat.
 * Usage: memory [cycles [leaks-only]] (cycles default to 1000000).
 * After a warm-up, the resident set is sampled every 100000 cycles; it may
 * not grow by more than 1 MiB (a leak of one byte per cycle would show as
 * about 1 MB per million). Under AddressSanitizer, whose quarantine grows
 * the resident set by design, pass `leaks-only`: its leak check is the
 * test there. */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>

#include "check.h"

static long resident_kib(void) {
    long pages = 0, resident = 0;
    FILE *statm = fopen("/proc/self/statm", "r");
    CHECK(statm != NULL);
    CHECK(fscanf(statm, "%ld %ld", &pages, &resident) == 2);
    fclose(statm);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void cycle(const dokebi_lock_backend *backend, long i) {
    char key[32];
    int len = snprintf(key, sizeof key, "key-%ld", i % 64);
    dokebi_lock_lease *lease = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_try_acquire(backend, key, (size_t)len, &lease, ERR));
    bool released = false;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(lease, &released, ERR));
    CHECK(released);
    dokebi_lock_lease_free(lease);
}

int main(int argc, char **argv) {
    long cycles = argc > 1 ? atol(argv[1]) : 1000000;
    dokebi_lock_provider *provider = open_provider("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      main: {}\n");
    dokebi_lock_backend *backend = get_backend(provider, "main");
    long warm_up = cycles / 10;
    for (long i = 0; i < warm_up; i++) {
        cycle(backend, i);
    }
    long before = resident_kib(), peak = before;
    for (long i = 0; i < cycles; i++) {
        cycle(backend, i);
        if (i % 100000 == 0 && resident_kib() > peak) {
            peak = resident_kib();
        }
    }
    long after = resident_kib();
    peak = after > peak ? after : peak;
    printf("memory: %ld acquire/release cycles, resident %ld KiB -> %ld KiB (peak %ld KiB)\n", cycles, before, after, peak);
    if (argc <= 2 || strcmp(argv[2], "leaks-only") != 0) {
        CHECK(peak - before <= 1024);
    }
    dokebi_lock_backend_free(backend);
    dokebi_lock_provider_free(provider);
    return 0;
}
