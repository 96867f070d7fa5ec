/* fork() after a provider was opened: the child inherits the parent's
 * handles, and the file driver's lock files with them. Every call of the
 * child on a handle of the parent is refused (CLOSED, saying fork), never
 * a hang, and freeing them in the child neither releases the parent's
 * leases nor removes its lock files; a provider the child opens itself
 * works. Host only: qemu-user cannot fork a process that has threads. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char yaml[512];
static char redis_yaml[1024];

static void never(void *userdata, dokebi_lock_status status, dokebi_lock_lease *lease, dokebi_lock_error *error) {
    (void)userdata, (void)status, (void)lease, (void)error;
    CHECK(!"the callback of a refused acquire ran");
}

/* Expects `status` to be the fork refusal, and says so in its message. */
#define CHECK_FORK_REFUSAL(call)                                                    \
    do {                                                                            \
        dokebi_lock_error *refusal_ = NULL;                                         \
        CHECK((call) == DOKEBI_LOCK_CLOSED);                                        \
        CHECK(refusal_ != NULL && strstr(dokebi_lock_error_message(refusal_), "fork") != NULL); \
        dokebi_lock_error_free(refusal_);                                           \
    } while (0)
#define REFUSAL (&refusal_)

static void in_the_child(dokebi_lock_provider *provider, dokebi_lock_backend *files, dokebi_lock_lease *held,
                         dokebi_lock_provider *remote, dokebi_lock_backend *shared, dokebi_lock_lease *remote_held) {
    alarm(30); /* a hang is a failure */
    dokebi_lock_lease *lease = NULL;
    bool flag = false;
    CHECK_FORK_REFUSAL(dokebi_lock_acquire(files, KEY("other"), 0, &lease, REFUSAL));
    CHECK_FORK_REFUSAL(dokebi_lock_acquire(shared, KEY("other"), 1000, &lease, REFUSAL));
    CHECK_FORK_REFUSAL(dokebi_lock_lease_release(held, &flag, REFUSAL));
    CHECK_FORK_REFUSAL(dokebi_lock_lease_renew(remote_held, &flag, REFUSAL));
    CHECK_FORK_REFUSAL(dokebi_lock_lease_release(remote_held, &flag, REFUSAL));
    CHECK_FORK_REFUSAL(dokebi_lock_acquire_async(shared, KEY("other"), 1000, never, NULL, NULL, REFUSAL));
    dokebi_lock_backend *again = NULL;
    CHECK_FORK_REFUSAL(dokebi_lock_provider_backend(provider, "files", &again, REFUSAL));
    CHECK(dokebi_lock_provider_close(remote) == DOKEBI_LOCK_CLOSED);
    /* Freeing the parent's handles touches nothing of the parent's. */
    dokebi_lock_lease_free(held);
    dokebi_lock_lease_free(remote_held);
    dokebi_lock_backend_free(files);
    dokebi_lock_backend_free(shared);
    dokebi_lock_provider_free(provider);
    dokebi_lock_provider_free(remote);
    /* A provider of the child's own works, and finds the parent's key held. */
    dokebi_lock_provider *own = open_provider(yaml);
    dokebi_lock_backend *own_files = get_backend(own, "files");
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire(own_files, KEY("parent-key"), &lease, ERR));
    lease = must_acquire(own_files, "child-key", 0);
    dokebi_lock_lease_free(lease);
    dokebi_lock_backend_free(own_files);
    dokebi_lock_provider_free(own);
    _exit(0);
}

int main(void) {
    const char *url = getenv("REDIS_URL");
    CHECK(url != NULL);
    char directory[] = "/tmp/dokebi-lock-c-fork-XXXXXX";
    CHECK(mkdtemp(directory) != NULL);
    snprintf(yaml, sizeof yaml, "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      files: { driver: file, directory: '%s' }\n",
             directory);
    int len = snprintf(redis_yaml, sizeof redis_yaml,
                       "schemaVersion: 1\n"
                       "options:\n"
                       "  dokebi-lock:\n"
                       "    backends:\n"
                       "      shared: { driver: redis, connection: main, namespace: c-fork-%ld-%ld, leaseMs: 5000 }\n"
                       "  dokebi-redis:\n"
                       "    connections:\n"
                       "      main: { url: \"%s\", commandTimeoutMs: 1000 }\n",
                       (long)time(NULL), (long)getpid(), url);
    CHECK(len > 0 && (size_t)len < sizeof redis_yaml);

    dokebi_lock_provider *provider = open_provider(yaml), *remote = open_provider(redis_yaml);
    dokebi_lock_backend *files = get_backend(provider, "files"), *shared = get_backend(remote, "shared");
    dokebi_lock_lease *held = must_acquire(files, "parent-key", 0), *remote_held = must_acquire(shared, "parent-key", 0);

    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        in_the_child(provider, files, held, remote, shared, remote_held);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "fork: the child failed (%s %d)\n", WIFSIGNALED(status) ? "signal" : "exit",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        exit(1);
    }

    /* The parent still holds both keys: another provider finds them busy. */
    CHECK(dokebi_lock_lease_valid(held) && dokebi_lock_lease_valid(remote_held));
    dokebi_lock_provider *other = open_provider(yaml), *other_remote = open_provider(redis_yaml);
    dokebi_lock_backend *other_files = get_backend(other, "files"), *other_shared = get_backend(other_remote, "shared");
    dokebi_lock_lease *lease = NULL;
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire(other_files, KEY("parent-key"), &lease, ERR));
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire(other_shared, KEY("parent-key"), &lease, ERR));
    bool released = false;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(held, &released, ERR));
    CHECK(released);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(remote_held, &released, ERR));
    CHECK(released);
    lease = must_acquire(other_files, "parent-key", 0);
    dokebi_lock_lease_free(lease);

    dokebi_lock_lease_free(held);
    dokebi_lock_lease_free(remote_held);
    dokebi_lock_backend_free(files);
    dokebi_lock_backend_free(shared);
    dokebi_lock_backend_free(other_files);
    dokebi_lock_backend_free(other_shared);
    dokebi_lock_provider_free(provider);
    dokebi_lock_provider_free(remote);
    dokebi_lock_provider_free(other);
    dokebi_lock_provider_free(other_remote);
    char command[128];
    snprintf(command, sizeof command, "rm -rf '%s'", directory);
    CHECK(system(command) == 0);
    printf("fork: ok\n");
    return 0;
}
