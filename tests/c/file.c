/* The file driver through the C API: a key of one directory shared by two
 * providers and by two processes (each child forked before the parent opens
 * anything, each test in a process of its own), a holder's death freeing it, fences rising; shared and counted
 * leases held across two processes, and sets of keys taken in opposite
 * orders by two processes without deadlock. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char yaml[512];

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1000.0 + (double)t.tv_nsec / 1e6;
}

struct waiter {
    dokebi_lock_backend *backend;
    dokebi_lock_lease *lease;
    double granted_ms;
};

static void *wait_for_key(void *arg) {
    struct waiter *waiter = arg;
    waiter->lease = must_acquire(waiter->backend, "shared-key", 10000);
    waiter->granted_ms = now_ms();
    return NULL;
}

/* Two providers in one process open the lock files apart: the kernel keeps
 * them apart as it keeps two processes. */
static void a_key_held_through_one_provider_makes_another_wait_until_released(void) {
    dokebi_lock_provider *one = open_provider(yaml), *two = open_provider(yaml);
    dokebi_lock_backend *a = get_backend(one, "files"), *b = get_backend(two, "files");
    dokebi_lock_lease *held = must_acquire(a, "shared-key", 0);
    CHECK(dokebi_lock_lease_valid(held));
    CHECK(dokebi_lock_lease_remaining_ms(held) == DOKEBI_LOCK_NEVER_EXPIRES);
    dokebi_lock_lease *other = NULL;
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire(b, KEY("shared-key"), &other, ERR));
    CHECK_STATUS(DOKEBI_LOCK_WAIT_TIMEOUT, dokebi_lock_acquire(b, KEY("shared-key"), 30, &other, ERR));

    struct waiter waiter = { b, NULL, 0 };
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, wait_for_key, &waiter) == 0);
    struct timespec pause_for = { 0, 50 * 1000 * 1000 };
    nanosleep(&pause_for, NULL);
    double released_ms = now_ms();
    bool released = false;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_lease_release(held, &released, ERR));
    CHECK(released);
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(waiter.granted_ms - released_ms < 1000.0);
    CHECK(fence_of(waiter.lease) > fence_of(held));

    dokebi_lock_lease_free(waiter.lease);
    dokebi_lock_lease_free(held);
    dokebi_lock_backend_free(a);
    dokebi_lock_backend_free(b);
    dokebi_lock_provider_free(one);
    dokebi_lock_provider_free(two);
}

/* A child process holds the key until it is killed; the parent waits and
 * gets the key as soon as the child is dead. */
static void a_killed_holder_process_frees_the_key(void) {
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        close(ready[0]);
        dokebi_lock_provider *provider = open_provider(yaml);
        dokebi_lock_backend *files = get_backend(provider, "files");
        dokebi_lock_lease *lease = must_acquire(files, "held-by-child", 0);
        (void)lease;
        CHECK(write(ready[1], "h", 1) == 1);
        for (;;) pause();
    }
    close(ready[1]);
    char byte = 0;
    CHECK(read(ready[0], &byte, 1) == 1 && byte == 'h');
    close(ready[0]);

    dokebi_lock_provider *provider = open_provider(yaml);
    dokebi_lock_backend *files = get_backend(provider, "files");
    dokebi_lock_lease *lease = NULL;
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire(files, KEY("held-by-child"), &lease, ERR));
    /* The child's record names it: the provider's label, `<host>:<pid>`. */
    dokebi_lock_inspection *found = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_backend_inspect(files, KEY("held-by-child"), &found, ERR));
    CHECK(dokebi_lock_inspection_held(found) == 1 && dokebi_lock_inspection_mode(found) == DOKEBI_LOCK_MODE_EXCLUSIVE);
    char pid_suffix[32];
    snprintf(pid_suffix, sizeof pid_suffix, ":%d", (int)child);
    const char *label = dokebi_lock_inspection_holder_label(found, 0);
    CHECK(label != NULL && strlen(label) > strlen(pid_suffix));
    CHECK(strcmp(label + strlen(label) - strlen(pid_suffix), pid_suffix) == 0);
    CHECK(dokebi_lock_inspection_holder_remaining_ms(found, 0) == -1);
    CHECK(dokebi_lock_inspection_holder_held_ms(found, 0) >= 0);
    uint64_t child_fence = 0;
    CHECK(dokebi_lock_inspection_holder_fence(found, 0, &child_fence) && child_fence > 0);
    dokebi_lock_inspection_free(found);
    /* Nor can it take a lock the kernel holds for another process. */
    dokebi_lock_forced_release *forced = NULL;
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_backend_force_release(files, KEY("held-by-child"), &forced, ERR));
    double killed_ms = now_ms();
    CHECK(kill(child, SIGKILL) == 0);
    lease = must_acquire(files, "held-by-child", 10000);
    CHECK(now_ms() - killed_ms < 1000.0);
    CHECK(fence_of(lease) > child_fence);
    CHECK(dokebi_lock_lease_valid(lease));
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    dokebi_lock_lease_free(lease);
    dokebi_lock_backend_free(files);
    dokebi_lock_provider_free(provider);
}

static dokebi_lock_acquire_options kind(const dokebi_lock_key *keys, size_t count, uint32_t mode, uint32_t limit, uint32_t weight) {
    dokebi_lock_acquire_options options = {mode, limit, weight, keys, count};
    return options;
}

/* A child holds "doc" shared and 2 of 3 units of "pool" until told; the
 * parent's reader joins it, its writer is refused, one unit is left, and
 * another limit is INVALID_ARGUMENT. */
static void readers_and_units_are_shared_by_two_processes(void) {
    int ready[2], go[2];
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    dokebi_lock_key doc = {KEY("doc")}, pool = {KEY("pool")};
    dokebi_lock_acquire_options reader = kind(&doc, 1, DOKEBI_LOCK_MODE_SHARED, 0, 0);
    dokebi_lock_acquire_options writer = kind(&doc, 1, DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0);
    dokebi_lock_acquire_options unit = kind(&pool, 1, DOKEBI_LOCK_MODE_EXCLUSIVE, 3, 1);
    dokebi_lock_acquire_options two_units = kind(&pool, 1, DOKEBI_LOCK_MODE_EXCLUSIVE, 3, 2);
    dokebi_lock_acquire_options other_limit = kind(&pool, 1, DOKEBI_LOCK_MODE_EXCLUSIVE, 2, 1);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        dokebi_lock_provider *provider = open_provider(yaml);
        dokebi_lock_backend *files = get_backend(provider, "files");
        dokebi_lock_lease *reading = NULL, *units = NULL;
        CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_ex(files, &reader, 0, &reading, ERR));
        CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_ex(files, &two_units, 0, &units, ERR));
        CHECK(write(ready[1], "h", 1) == 1);
        char byte = 0;
        CHECK(read(go[0], &byte, 1) == 1);
        dokebi_lock_lease_free(reading);
        dokebi_lock_lease_free(units);
        dokebi_lock_backend_free(files);
        dokebi_lock_provider_free(provider);
        _exit(0);
    }
    char byte = 0;
    CHECK(read(ready[0], &byte, 1) == 1 && byte == 'h');
    dokebi_lock_provider *provider = open_provider(yaml);
    dokebi_lock_backend *files = get_backend(provider, "files");
    dokebi_lock_lease *reading = NULL, *last = NULL, *refused = NULL;
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_try_acquire_ex(files, &reader, &reading, ERR));
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire_ex(files, &writer, &refused, ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_try_acquire_ex(files, &unit, &last, ERR));
    dokebi_lock_lease_free(last);
    CHECK_STATUS(DOKEBI_LOCK_INVALID_ARGUMENT, dokebi_lock_try_acquire_ex(files, &other_limit, &refused, ERR));
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_try_acquire_ex(files, &unit, &last, ERR));
    CHECK_STATUS(DOKEBI_LOCK_LOCK_BUSY, dokebi_lock_try_acquire_ex(files, &unit, &refused, ERR));
    dokebi_lock_lease_free(last);
    dokebi_lock_lease_free(reading);
    CHECK(write(go[1], "g", 1) == 1);
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_try_acquire_ex(files, &writer, &last, ERR));
    dokebi_lock_lease_free(last);
    dokebi_lock_backend_free(files);
    dokebi_lock_provider_free(provider);
    close(ready[0]);
    close(ready[1]);
    close(go[0]);
    close(go[1]);
}

/* Takes {first, second} 200 times, each held a moment. */
static void take_pairs(const char *first, const char *second) {
    dokebi_lock_provider *provider = open_provider(yaml);
    dokebi_lock_backend *files = get_backend(provider, "files");
    dokebi_lock_key keys[] = {{KEY(first)}, {KEY(second)}};
    dokebi_lock_acquire_options both = kind(keys, 2, DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0);
    for (int round = 0; round < 200; round++) {
        dokebi_lock_lease *lease = NULL;
        CHECK_STATUS(DOKEBI_LOCK_OK, dokebi_lock_acquire_ex(files, &both, 10000, &lease, ERR));
        CHECK(dokebi_lock_lease_key_count(lease) == 2);
        dokebi_lock_lease_free(lease);
    }
    dokebi_lock_backend_free(files);
    dokebi_lock_provider_free(provider);
}

static void sets_of_keys_in_opposite_orders_finish_in_two_processes(void) {
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        take_pairs("left", "right");
        _exit(0);
    }
    take_pairs("right", "left");
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Runs `test` in a process of its own, which has opened nothing: each test
 * forks its second process before it opens a provider, so no process forks
 * while it has threads (the driver's), which qemu-user cannot emulate. */
static void in_own_process(void (*test)(void)) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        test();
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void) {
    char directory[] = "/tmp/dokebi-lock-c-file-XXXXXX";
    CHECK(mkdtemp(directory) != NULL);
    /* A minute between polls: only a release's wake-up is in time. */
    snprintf(yaml, sizeof yaml,
             "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n"
             "      files: { driver: file, directory: '%s/locks', pollIntervalMs: 60000 }\n",
             directory);
    in_own_process(a_killed_holder_process_frees_the_key);
    in_own_process(readers_and_units_are_shared_by_two_processes);
    in_own_process(sets_of_keys_in_opposite_orders_finish_in_two_processes);
    in_own_process(a_key_held_through_one_provider_makes_another_wait_until_released);

    /* Every key is free: no lock or unit file is left behind (the directory's
       fence floor, floor.lock, the counters of removed lock files, stays). */
    char locks[600];
    snprintf(locks, sizeof locks, "%s/locks", directory);
    DIR *listing = opendir(locks);
    CHECK(listing != NULL);
    int left = 0;
    for (struct dirent *entry; (entry = readdir(listing)) != NULL;) {
        if (entry->d_name[0] != '.' && strcmp(entry->d_name, "floor.lock") != 0) left++;
    }
    closedir(listing);
    CHECK(left == 0);
    printf("file: ok\n");
    return 0;
}
