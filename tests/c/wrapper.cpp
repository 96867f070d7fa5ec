// The C++ wrapper (lock.hpp): RAII leases, errors as exceptions, with_lock,
// status and asynchronous acquires.
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include "check.h"
#include "lock.hpp"

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

/// Waits for one asynchronous outcome.
struct Outcome {
    std::mutex mutex;
    std::condition_variable arrived;
    std::optional<lock::Result<lock::Lease>> result;

    void set(lock::Result<lock::Lease> value) {
        std::lock_guard<std::mutex> guard(mutex);
        result.emplace(std::move(value));
        arrived.notify_one();
    }
    lock::Result<lock::Lease> take() {
        std::unique_lock<std::mutex> guard(mutex);
        arrived.wait(guard, [&] { return result.has_value(); });
        return std::move(*result);
    }
};

static void with_lock_runs_the_section_holding_the_key(lock::Backend &orders) {
    std::string seen_fence;
    int output = orders.with_lock("job", [&](const lock::Section &section) {
        seen_fence = section.fence();
        CHECK(!section.lost());
        CHECK(!orders.try_acquire("job").has_value());  // held during the section
        return 42;
    });
    CHECK(output == 42 && !seen_fence.empty());
    CHECK(orders.try_acquire("job").has_value());  // released after it
    // An exception of the section comes back out, after the release.
    try {
        orders.with_lock("job", [](const lock::Section &) -> int { throw std::logic_error("section failed"); });
        CHECK(false);
    } catch (const std::logic_error &error) {
        CHECK(std::string(error.what()) == "section failed");
    }
    CHECK(orders.try_acquire("job").has_value());
}

static void status_counts_held_leases(lock::Backend &orders) {
    auto lease = orders.acquire("counted");
    dokebi_lock_backend_status status = orders.status();
    CHECK(status.held == 1);
    CHECK(lease.release());
    CHECK(orders.status().held == 0);
}

static void an_asynchronous_acquire_completes_or_is_cancelled(lock::Backend &orders) {
    auto held = orders.acquire("async");
    Outcome cancelled;
    auto pending = orders.acquire_async("async", [&](lock::Result<lock::Lease> result) { cancelled.set(std::move(result)); }, 10000ms);
    pending.cancel();
    auto aborted = cancelled.take();
    CHECK(!aborted.ok() && aborted.error().status() == DOKEBI_LOCK_ABORTED);

    Outcome granted;
    auto waiting = orders.acquire_async("async", [&](lock::Result<lock::Lease> result) { granted.set(std::move(result)); }, 10000ms);
    CHECK(held.release());
    auto lease = granted.take();
    CHECK(lease.ok() && lease.value().key() == "async" && lease.value().fence_value() > held.fence_value());
}

static void kinds_take_shared_counted_and_several_keys(lock::Backend &orders) {
    auto reader = orders.acquire({"doc"}, lock::Kind::shared());
    auto other = orders.try_acquire({"doc"}, lock::Kind::shared());
    CHECK(other.has_value() && orders.held_shared() == 2);
    CHECK(!orders.try_acquire("doc").has_value());  // a writer waits for the readers
    CHECK(reader.release() && other->release());

    auto heavy = orders.acquire({"slots"}, lock::Kind::counted(3, 2));
    CHECK(orders.try_acquire({"slots"}, lock::Kind::counted(3)).has_value());
    expect_error(DOKEBI_LOCK_INVALID_ARGUMENT, [&] { orders.acquire({"slots"}, lock::Kind::counted(4)); });

    auto both = orders.acquire({"from", "to"}, lock::Kind{});
    CHECK((both.keys() == std::vector<std::string_view>{"from", "to"}));
    CHECK(both.fence_at(1) == both.fence() && both.fence_at(2).empty());
    int seen = orders.with_lock({"x", "y"}, lock::Kind::shared(), [](const lock::Section &section) { return section.fence().empty() ? 0 : 1; });
    CHECK(seen == 1);
    Outcome granted;
    auto waiting = orders.acquire_async({"to", "z"}, lock::Kind{}, [&](lock::Result<lock::Lease> result) { granted.set(std::move(result)); }, 10000ms);
    CHECK(both.release());
    auto lease = granted.take();
    CHECK(lease.ok() && lease.value().keys().size() == 2);
    expect_error(DOKEBI_LOCK_INVALID_ARGUMENT, [&] { orders.acquire({"a", "a"}, lock::Kind{}); });
}

static void inspect_names_the_holder_and_force_release_breaks_it(lock::Backend &orders) {
    auto free = orders.inspect("stuck");
    CHECK(!free.held && free.holders.empty() && free.backend == "orders" && !free.fence);
    auto lease = orders.acquire("stuck");
    auto found = orders.inspect("stuck");
    CHECK(found.held && found.holder_count == 1 && found.mode == DOKEBI_LOCK_MODE_EXCLUSIVE && found.limit == 1);
    CHECK(found.holders.size() == 1 && found.holders[0].units == 1 && !found.holders[0].remaining);
    CHECK(found.holders[0].fence == lease.fence_value());
    CHECK(found.holders[0].held_for && found.holders[0].held_for->count() >= 0 && found.holders[0].held_for->count() < 5000);
    const std::string pid = ":" + std::to_string(getpid());
    const std::string &label = found.holders[0].label.value();
    CHECK(label.size() > pid.size() && label.compare(label.size() - pid.size(), pid.size(), pid) == 0);
    auto busy = expect_error(DOKEBI_LOCK_LOCK_BUSY, [&] { orders.acquire("stuck", 0ms); });
    CHECK(busy.details().find("\"label\":\"" + label + "\"") != std::string::npos);

    auto forced = orders.force_release("stuck");
    CHECK(forced.backend == "orders" && forced.removed == 1 && !forced.fence);
    CHECK(!lease.valid() && !orders.inspect("stuck").held);
    expect_error(DOKEBI_LOCK_INVALID_KEY, [&] { orders.inspect(""); });
    expect_error(DOKEBI_LOCK_INVALID_KEY, [&] { orders.force_release(""); });

    // A handle whose leases carry a label of their own.
    auto job = orders.with_holder("job-7");
    auto labelled = job.acquire("stuck");
    CHECK(orders.inspect("stuck").holders.at(0).label.value() == "job-7");
    CHECK(labelled.release());
    expect_error(DOKEBI_LOCK_INVALID_ARGUMENT, [&] { orders.with_holder(""); });
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
        // What the wrapper has no method for: the C calls on its handles.
        CHECK(std::string(dokebi_lock_backend_driver(orders.native_handle())) == "local");
        CHECK(std::string(dokebi_lock_lease_fence(lease.native_handle())) == lease.fence());
        CHECK(dokebi_lock_lease_served_by(lease.native_handle()) == nullptr);  // not a policy's lease
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
    CHECK(invalid.issues().size() == 1 && invalid.issues()[0].path == "backends.a.maxKeys" &&
          invalid.issues()[0].status == DOKEBI_LOCK_INVALID_OPTIONS);
    CHECK(invalid.details().find("\"issues\":[") != std::string::npos);
    expect_error(DOKEBI_LOCK_UNKNOWN_BACKEND, [&] { provider.backend("nope"); });
    expect_error(DOKEBI_LOCK_INVALID_KEY, [&] { orders.acquire(""); });

    with_lock_runs_the_section_holding_the_key(orders);
    status_counts_held_leases(orders);
    an_asynchronous_acquire_completes_or_is_cancelled(orders);
    kinds_take_shared_counted_and_several_keys(orders);
    inspect_names_the_holder_and_force_release_breaks_it(orders);

    auto held = orders.acquire("held");
    provider.close();
    CHECK(!held.valid());
    expect_error(DOKEBI_LOCK_CLOSED, [&] { orders.acquire("after-close", 0ms); });
    std::printf("wrapper: ok\n");
    return 0;
}
