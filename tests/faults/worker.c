/* The C worker of the fault suite: the same loop, arguments, options
 * (YAML in FAULTS_LOCK_YAML), draws and log lines as worker.rs, through
 * liblock (the lock; in a mixed run, with limit above 0, readers and counted
 * sections through dokebi_lock_acquire_ex) and a minimal RESP client (the
 * fenced store). Usage: worker <store_port> <keys> <hold_ms> <run_ms> <log>
 * <seed> <read_sha> <write_sha> <shared_read_sha> <limit> */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lock.h"

static void die(const char *what) {
    fprintf(stderr, "worker: %s\n", what);
    exit(2);
}

static uint64_t mono_us(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000u + (uint64_t)now.tv_nsec / 1000u;
}

static void sleep_ms(unsigned ms) {
    struct timespec pause = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

/* The store connection: send a command, read one integer reply. */
/* The code a failed acquire is logged with: log.rs's PLACED for a policy's
 * refusal of a key this process had on the member that could not serve. */
static const char *failure_code(const dokebi_lock_error *error) {
    const char *details = dokebi_lock_error_details(error);
    if (dokebi_lock_error_code(error) == DOKEBI_LOCK_NO_ELIGIBLE_BACKEND && details != NULL &&
        strstr(details, "\"code\":\"LOCK_BUSY\"") != NULL) {
        return "NO_ELIGIBLE_BACKEND:placed";
    }
    return dokebi_lock_error_name(error);
}

static int store_fd;
static char reply[512];
static size_t reply_len, reply_pos;

static int next_byte(void) {
    if (reply_pos == reply_len) {
        ssize_t n = read(store_fd, reply, sizeof reply);
        if (n <= 0) die("the store connection closed");
        reply_len = (size_t)n;
        reply_pos = 0;
    }
    return (unsigned char)reply[reply_pos++];
}

static long long store_call(int argc, const char **argv) {
    char command[1024];
    size_t len = (size_t)snprintf(command, sizeof command, "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        len += (size_t)snprintf(command + len, sizeof command - len, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
        if (len >= sizeof command) die("store command too long");
    }
    if (write(store_fd, command, len) != (ssize_t)len) die("store write failed");
    int type = next_byte();
    char line[256];
    size_t n = 0;
    for (int c = next_byte(); c != '\r'; c = next_byte()) {
        if (n + 1 < sizeof line) line[n++] = (char)c;
    }
    line[n] = 0;
    next_byte(); /* '\n' */
    if (type != ':') {
        fprintf(stderr, "worker: store replied %c%s\n", type, line);
        exit(2);
    }
    return strtoll(line, NULL, 10);
}

static uint64_t rng;

static unsigned below(unsigned n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % (n ? n : 1));
}

int main(int argc, char **argv) {
    if (argc != 11) die("expected 10 arguments");
    const char *read_sha = argv[7], *write_sha = argv[8], *shared_read_sha = argv[9], *yaml = getenv("FAULTS_LOCK_YAML");
    unsigned limit = (unsigned)atoi(argv[10]);
    if (!yaml) die("FAULTS_LOCK_YAML is not set");
    int store_port = atoi(argv[1]);
    unsigned keys = (unsigned)atoi(argv[2]), hold_ms = (unsigned)atoi(argv[3]);
    uint64_t run_until = mono_us() + (uint64_t)strtoull(argv[4], NULL, 10) * 1000u;
    rng = strtoull(argv[6], NULL, 10) | 1;

    dokebi_lock_provider *provider = NULL;
    dokebi_lock_backend *backend = NULL;
    if (dokebi_lock_provider_open(yaml, strlen(yaml), &provider, NULL) != DOKEBI_LOCK_OK) die("provider_open");
    if (dokebi_lock_provider_backend(provider, "faults", &backend, NULL) != DOKEBI_LOCK_OK) die("provider_backend");

    store_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_port = htons((uint16_t)store_port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(store_fd, (struct sockaddr *)&address, sizeof address) != 0) die("the store is down");
    FILE *log = fopen(argv[5], "a");
    if (!log) die("cannot open the log");

    while (mono_us() < run_until) {
        char key[16], hash[32], attempts[32], value[32], kind[32];
        unsigned index = below(keys);
        snprintf(key, sizeof key, "k%u", index);
        /* The kind, drawn as worker.rs's pick does. */
        dokebi_lock_key lock_key = {key, strlen(key)};
        dokebi_lock_acquire_options options = {DOKEBI_LOCK_MODE_EXCLUSIVE, 0, 0, &lock_key, 1};
        if (limit == 0) {
            strcpy(kind, "x");
        } else if (index == keys - 1) {
            options.limit = limit;
            options.weight = 1 + below(2);
            snprintf(kind, sizeof kind, "c%uw%u", options.limit, options.weight);
        } else if (below(3) != 0) {
            options.mode = DOKEBI_LOCK_MODE_SHARED;
            strcpy(kind, "s");
        } else {
            strcpy(kind, "x");
        }
        dokebi_lock_lease *lease = NULL;
        uint64_t asked = mono_us();
        dokebi_lock_error *error = NULL;
        dokebi_lock_status status =
            limit == 0 ? dokebi_lock_acquire(backend, key, strlen(key), DOKEBI_LOCK_WAIT_DEFAULT, &lease, &error)
                       : dokebi_lock_acquire_ex(backend, &options, DOKEBI_LOCK_WAIT_DEFAULT, &lease, &error);
        if (status != DOKEBI_LOCK_OK) {
            fprintf(log, "F %s %llu %s\n", failure_code(error), (unsigned long long)mono_us(), key);
            fflush(log);
            dokebi_lock_error_free(error);
            sleep_ms(20);
            continue;
        }
        const char *fence = dokebi_lock_lease_fence(lease);
        uint64_t start = mono_us();
        /* The policy member that served the lease, asked again at its end: it must not have moved. */
        const char *member = dokebi_lock_lease_served_by(lease);
        fprintf(log, "A %s %s %llu %s %llu %s\n", key, fence, (unsigned long long)start, kind, (unsigned long long)asked,
                member ? member : "-");
        fflush(log);
        snprintf(hash, sizeof hash, "store:%s", key);
        snprintf(attempts, sizeof attempts, "attempts:%s", key);
        long long read = 0;
        if (kind[0] == 'x') {
            const char *read_cmd[] = {"EVALSHA", read_sha, "1", hash, fence};
            read = store_call(5, read_cmd);
        } else if (kind[0] == 's') {
            const char *read_cmd[] = {"EVALSHA", shared_read_sha, "2", hash, attempts, fence};
            read = store_call(6, read_cmd);
        }
        sleep_ms(below(hold_ms + 1));
        const char *outcome = "R";
        if (read >= 0 && kind[0] == 's') {
            outcome = "S";
        } else if (read >= 0 && kind[0] == 'c') {
            outcome = "-";
        } else if (read >= 0) {
            snprintf(value, sizeof value, "%lld", read + 1);
            const char *write_cmd[] = {"EVALSHA", write_sha, "2", hash, attempts, fence, value};
            outcome = store_call(7, write_cmd) == 1 ? "W" : "X";
        }
        uint64_t end = mono_us();
        fprintf(log, "Q %llu\n", (unsigned long long)end);
        fflush(log);
        char served[64];
        member = dokebi_lock_lease_served_by(lease);
        snprintf(served, sizeof served, "%s", member ? member : "-");
        bool released = false;
        status = dokebi_lock_lease_release(lease, &released, NULL);
        const char *release = status != DOKEBI_LOCK_OK ? dokebi_lock_status_name(status) : released ? "OK" : "FALSE";
        fprintf(log, "E %s %s %llu %llu %s %s %s %llu %s\n", key, fence, (unsigned long long)start, (unsigned long long)end, outcome,
                release, kind, (unsigned long long)asked, served);
        fflush(log);
        dokebi_lock_lease_free(lease);
    }
    fclose(log);
    close(store_fd);
    dokebi_lock_backend_free(backend);
    dokebi_lock_provider_free(provider);
    return 0;
}
