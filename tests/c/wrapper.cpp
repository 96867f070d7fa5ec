// The C++ wrapper (lock.hpp): RAII leases, errors as exceptions.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "lock.hpp"

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            std::exit(1);                                                            \
        }                                                                            \
    } while (0)

using namespace std::chrono_literals;
namespace lock = dokebi::lock;

static const char *const YAML =
    "schemaVersion: 1\n"
    "options:\n"
    "  dokebi-lock:\n"
    "    backends:\n"
    "      orders: {}\n";

// Runs `body`, which must throw a lock::Error with `status`.
template <typename Body>
static lock::Error expect_error(dokebi_lock_status status, Body body) {
    try {
        body();
    } catch (const lock::Error &error) {
        CHECK(error.status() == status);
        return error;
    }
    std::fprintf(stderr, "expected %s, nothing was thrown\n", dokebi_lock_status_name(status));
    std::exit(1);
}

int main() {
    auto provider = lock::Provider::open(YAML);
    CHECK(provider.names() == std::vector<std::string>{"orders"});
    auto orders = provider.backend("orders");

    std::uint64_t first_fence = 0;
    {
        auto lease = orders.acquire("order:42");
        CHECK(lease.key() == "order:42");
        CHECK(lease.valid());
        CHECK(lease.remaining_ms() == DOKEBI_LOCK_NEVER_EXPIRES);
        first_fence = lease.fence_value();
        CHECK(lease.fence() == std::to_string(first_fence));
        CHECK(!orders.try_acquire("order:42").has_value());
        auto timeout = expect_error(DOKEBI_LOCK_WAIT_TIMEOUT, [&] { orders.acquire("order:42", 5ms); });
        CHECK(std::string(timeout.code()) == "WAIT_TIMEOUT");
        CHECK(!timeout.fix().empty());
        CHECK(lease.renew());
    }  // released here by the destructor

    auto again = orders.try_acquire("order:42");
    CHECK(again.has_value() && again->fence_value() > first_fence);
    CHECK(again->release());
    CHECK(!again->release());
    auto moved = std::move(*again);
    CHECK(!moved.valid());
    CHECK(again->fence().empty());  // a moved-from lease holds nothing

    auto invalid = expect_error(DOKEBI_LOCK_INVALID_OPTIONS, [] {
        lock::Provider::open("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      a: { maxKeys: -1 }\n");
    });
    CHECK(invalid.issues().size() == 1 && invalid.issues()[0].path == "backends.a.maxKeys");
    expect_error(DOKEBI_LOCK_UNKNOWN_BACKEND, [&] { provider.backend("nope"); });
    expect_error(DOKEBI_LOCK_INVALID_KEY, [&] { orders.acquire(""); });

    auto held = orders.acquire("held");
    provider.close();
    CHECK(!held.valid());
    expect_error(DOKEBI_LOCK_CLOSED, [&] { orders.acquire("after-close", 0ms); });
    std::printf("wrapper: ok\n");
    return 0;
}
