#include <stdio.h>
#include <string.h>

#include "lock.h"

static const char CONFIG[] = "schemaVersion: 1\n"
                             "options:\n"
                             "  dokebi-lock:\n"
                             "    backends:\n"
                             "      jobs: { driver: file, directory: /tmp/quickstart-locks }\n";

int main(void) {
    dokebi_lock_provider *provider = NULL;
    dokebi_lock_backend *jobs = NULL;
    dokebi_lock_lease *lease = NULL;
    dokebi_lock_error *error = NULL;
    if (dokebi_lock_provider_open(CONFIG, strlen(CONFIG), &provider, &error) != DOKEBI_LOCK_OK ||
        dokebi_lock_provider_backend(provider, "jobs", &jobs, &error) != DOKEBI_LOCK_OK ||
        dokebi_lock_acquire(jobs, "nightly-report", 14, DOKEBI_LOCK_WAIT_DEFAULT, &lease, &error) != DOKEBI_LOCK_OK) {
        fprintf(stderr, "%s: %s\n", dokebi_lock_error_name(error), dokebi_lock_error_fix(error));
        dokebi_lock_error_free(error);
        dokebi_lock_backend_free(jobs);
        dokebi_lock_provider_free(provider);
        return 1;
    }
    /* critical section: pass the fence along with writes to other stores */
    printf("holding nightly-report, fence %s\n", dokebi_lock_lease_fence(lease));
    dokebi_lock_lease_release(lease, NULL, NULL);
    dokebi_lock_lease_free(lease);
    dokebi_lock_backend_free(jobs);
    dokebi_lock_provider_free(provider);
    return 0;
}
