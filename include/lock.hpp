/*
 * lock.hpp: a header-only C++17 wrapper over lock.h (liblock).
 *
 * RAII: a Provider closes and frees its provider, a Lease releases and frees its
 * lease in the destructor (call release() first to learn the outcome, e.g.
 * LEASE_LOST). Failures throw dokebi::lock::Error, which carries the status,
 * code name, message, fix and option issues; try_acquire returns an empty
 * std::optional instead of throwing LOCK_BUSY. Objects are move-only; the
 * thread rules of lock.h apply (any thread may use them, destroy each once).
 */
#ifndef DOKEBI_LOCK_HPP
#define DOKEBI_LOCK_HPP

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lock.h"

namespace dokebi::lock {

/// One option problem of an INVALID_OPTIONS error.
struct Issue {
    std::string path;
    std::string message;
};

/// A failed call: what lock.h reports through dokebi_lock_error.
class Error : public std::runtime_error {
public:
    /// Takes the error handle (and frees it); `error` may be NULL.
    Error(dokebi_lock_status status, dokebi_lock_error *error)
        : std::runtime_error(text(dokebi_lock_error_message(error), "dokebi-lock call failed")),
          status_(status),
          fix_(text(dokebi_lock_error_fix(error), "")) {
        for (std::size_t i = 0; i < dokebi_lock_error_issue_count(error); ++i) {
            issues_.push_back({dokebi_lock_error_issue_path(error, i), dokebi_lock_error_issue_message(error, i)});
        }
        dokebi_lock_error_free(error);
    }

    dokebi_lock_status status() const noexcept { return status_; }
    /// The stable code name, e.g. "WAIT_TIMEOUT".
    const char *code() const noexcept { return dokebi_lock_status_name(status_); }
    const std::string &fix() const noexcept { return fix_; }
    const std::vector<Issue> &issues() const noexcept { return issues_; }

private:
    static std::string text(const char *value, const char *fallback) { return value ? value : fallback; }

    dokebi_lock_status status_;
    std::string fix_;
    std::vector<Issue> issues_;
};

namespace detail {

/// Throws for a failed status. Call it after the call has returned: as
/// arguments of one call, `status` and `error` would be evaluated in no
/// particular order.
inline void check(dokebi_lock_status status, dokebi_lock_error *error) {
    if (status != DOKEBI_LOCK_OK) {
        throw Error(status, error);
    }
}

/// -1 (DOKEBI_LOCK_WAIT_DEFAULT) when no wait is given.
inline std::int64_t wait_ms(std::optional<std::chrono::milliseconds> wait) {
    return wait ? static_cast<std::int64_t>(wait->count()) : DOKEBI_LOCK_WAIT_DEFAULT;
}

/// Owns one handle of lock.h and frees it with `Free`.
template <typename T, void (*Free)(T *)>
class Handle {
public:
    explicit Handle(T *raw = nullptr) noexcept : raw_(raw) {}
    Handle(Handle &&other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
    Handle &operator=(Handle &&other) noexcept {
        if (this != &other) {
            Free(std::exchange(raw_, std::exchange(other.raw_, nullptr)));
        }
        return *this;
    }
    Handle(const Handle &) = delete;
    Handle &operator=(const Handle &) = delete;
    ~Handle() { Free(raw_); }

    T *get() const noexcept { return raw_; }

private:
    T *raw_;
};

}  // namespace detail

/// A held lease; the destructor releases it if it is still held.
class Lease {
public:
    explicit Lease(dokebi_lock_lease *raw) noexcept : lease_(raw) {}

    std::string_view key() const noexcept {
        std::size_t len = 0;
        const char *bytes = dokebi_lock_lease_key(lease_.get(), &len);
        return bytes ? std::string_view(bytes, len) : std::string_view();
    }
    bool valid() const noexcept { return dokebi_lock_lease_valid(lease_.get()); }
    /// Milliseconds left; DOKEBI_LOCK_NEVER_EXPIRES (-1) for a held local lease.
    std::int64_t remaining_ms() const noexcept { return dokebi_lock_lease_remaining_ms(lease_.get()); }
    /// The fencing token as a decimal string (empty for a moved-from lease).
    std::string fence() const {
        const char *fence = dokebi_lock_lease_fence(lease_.get());
        return fence ? fence : "";
    }
    /// The fencing token as a number (it always fits 64 bits; 0 for a moved-from lease).
    std::uint64_t fence_value() const noexcept {
        const char *fence = dokebi_lock_lease_fence(lease_.get());
        return fence ? std::strtoull(fence, nullptr, 10) : 0;
    }

    /// True while the lease is still ours.
    bool renew() {
        bool valid = false;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_lease_renew(lease_.get(), &valid, &error);
        detail::check(status, error);
        return valid;
    }
    /// True when this call released the lease, false when it already was.
    bool release() {
        bool released = false;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_lease_release(lease_.get(), &released, &error);
        detail::check(status, error);
        return released;
    }

private:
    detail::Handle<dokebi_lock_lease, dokebi_lock_lease_free> lease_;
};

/// One backend; cheap to keep, usable from any thread.
class Backend {
public:
    explicit Backend(dokebi_lock_backend *raw) noexcept : backend_(raw) {}

    /// Blocks until the key is ours; the backend's waitTimeoutMs when `wait` is empty.
    Lease acquire(std::string_view key, std::optional<std::chrono::milliseconds> wait = std::nullopt) const {
        dokebi_lock_lease *lease = nullptr;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_acquire(backend_.get(), key.data(), key.size(), detail::wait_ms(wait), &lease, &error);
        detail::check(status, error);
        return Lease(lease);
    }

    /// The lease if the key is free now; empty when it is held (LOCK_BUSY).
    std::optional<Lease> try_acquire(std::string_view key) const {
        dokebi_lock_lease *lease = nullptr;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_try_acquire(backend_.get(), key.data(), key.size(), &lease, &error);
        if (status == DOKEBI_LOCK_LOCK_BUSY) {
            dokebi_lock_error_free(error);
            return std::nullopt;
        }
        detail::check(status, error);
        return Lease(lease);
    }

private:
    detail::Handle<dokebi_lock_backend, dokebi_lock_backend_free> backend_;
};

/// Every backend of one configuration; the destructor closes it.
class Provider {
public:
    /// Opens the YAML configuration text.
    static Provider open(std::string_view yaml) {
        dokebi_lock_provider *provider = nullptr;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_provider_open(yaml.data(), yaml.size(), &provider, &error);
        detail::check(status, error);
        return Provider(provider);
    }

    std::vector<std::string> names() const {
        std::vector<std::string> names;
        for (std::size_t i = 0; i < dokebi_lock_provider_name_count(provider_.get()); ++i) {
            names.emplace_back(dokebi_lock_provider_name(provider_.get(), i));
        }
        return names;
    }

    Backend backend(const std::string &name) const {
        dokebi_lock_backend *backend = nullptr;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_provider_backend(provider_.get(), name.c_str(), &backend, &error);
        detail::check(status, error);
        return Backend(backend);
    }

    /// Rejects waiters and ends held leases; later calls throw CLOSED.
    void close() { detail::check(dokebi_lock_provider_close(provider_.get()), nullptr); }

private:
    explicit Provider(dokebi_lock_provider *raw) noexcept : provider_(raw) {}

    detail::Handle<dokebi_lock_provider, dokebi_lock_provider_free> provider_;
};

}  // namespace dokebi::lock

#endif /* DOKEBI_LOCK_HPP */
