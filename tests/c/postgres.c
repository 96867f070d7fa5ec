/* The postgres driver through the C API, against the machine's PostgreSQL
 * (PG_URL, else postgres://postgres@127.0.0.1:5432/test in the clear: the
 * tests run under qemu too, where a TLS handshake is slow), in the schema
 * dokebi_c_test under a namespace of this run. Two providers stand for two
 * processes sharing the server; the checks are those of every store
 * (store.h). */
/* getpid is POSIX, not C11 (store.h): musl shows it only when asked. */
#define _POSIX_C_SOURCE 200809L
#include "store.h"

static const sql_store postgres = {.driver = "postgres", .section = "dokebi-postgres", .place = "schema: dokebi_c_test",
                                   .url_variable = "PG_URL", .default_url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
                                   .unreachable_url = "postgres://postgres@127.0.0.1:1/test"};

int main(void) { return test_sql_store(&postgres); }
