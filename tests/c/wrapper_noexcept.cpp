// The C++ wrapper (lock.hpp) without exceptions (compiled with
// -fno-exceptions): every call that could throw returns a lock::Result.
#include <string>
#include <type_traits>
#include <utility>

#include "check.h"
#include "lock.hpp"

#ifdef DOKEBI_LOCK_EXCEPTIONS
#error "this test is compiled with -fno-exceptions"
#endif

using namespace std::chrono_literals;
namespace lock = dokebi::lock;

// value() of a temporary Result hands its value over: a reference to it
// would die with the Result at the end of the statement that bound it.
static_assert(!std::is_reference<decltype(std::declval<lock::Result<lock::Lease>>().value())>::value,
              "Result<T>::value() && must return T, not a reference into the temporary");

int main() {
    auto invalid = lock::Provider::open("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      a: { maxKeys: -1 }\n");
    CHECK(!invalid.ok() && invalid.error().status() == DOKEBI_LOCK_INVALID_OPTIONS);
    CHECK(invalid.error().issues().size() == 1 && invalid.error().issues()[0].path == "backends.a.maxKeys" &&
          invalid.error().issues()[0].status == DOKEBI_LOCK_INVALID_OPTIONS);

    auto provider = lock::Provider::open("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      orders: {}\n");
    CHECK(provider.ok());
    auto unknown = provider.value().backend("nope");
    CHECK(!unknown && std::string(unknown.error().code()) == "UNKNOWN_BACKEND");
    auto orders = provider.value().backend("orders");
    CHECK(orders.ok());

    auto lease = orders.value().acquire("order:42");
    CHECK(lease.ok() && lease.value().valid());
    auto busy = orders.value().try_acquire("order:42");
    CHECK(busy.ok() && !busy.value().has_value());
    auto timeout = orders.value().acquire("order:42", 5ms);
    CHECK(!timeout.ok() && timeout.error().status() == DOKEBI_LOCK_WAIT_TIMEOUT && !timeout.error().fix().empty());
    auto renewed = lease.value().renew();
    CHECK(renewed.ok() && renewed.value());
    auto status = orders.value().status();
    CHECK(status.ok() && status.value().held == 1);
    auto released = lease.value().release();
    CHECK(released.ok() && released.value());

    // Bound from a temporary Result: the lease lives as long as the reference.
    auto &&taken = orders.value().acquire("taken").value();
    CHECK(taken.valid() && taken.key() == "taken");

    auto output = orders.value().with_lock("job", [](const lock::Section &section) { return section.fence().size(); });
    CHECK(output.ok() && output.value() > 0);

    auto closed = provider.value().close();
    CHECK(closed.ok());
    auto after = orders.value().acquire("after-close", 0ms);
    CHECK(!after.ok() && after.error().status() == DOKEBI_LOCK_CLOSED);
    std::printf("wrapper_noexcept: ok\n");
    return 0;
}
