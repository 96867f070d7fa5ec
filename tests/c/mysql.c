/* The mysql driver through the C API, against the machine's MariaDB
 * (MYSQL_URL, else mysql://root@127.0.0.1:3306/test in the clear: the tests
 * run under qemu too, where a TLS handshake is slow), on the table
 * dokebi_c_test under a namespace of this run. Two providers stand for two
 * processes sharing the server; the checks are those of every store
 * (store.h). */
/* getpid is POSIX, not C11 (store.h): musl shows it only when asked. */
#define _POSIX_C_SOURCE 200809L
#include "store.h"

static const sql_store mysql = {.driver = "mysql", .section = "dokebi-mysql", .place = "table: dokebi_c_test",
                                .url_variable = "MYSQL_URL", .default_url = "mysql://root@127.0.0.1:3306/test?ssl-mode=DISABLED",
                                .unreachable_url = "mysql://root@127.0.0.1:1/test"};

int main(void) { return test_sql_store(&mysql); }
