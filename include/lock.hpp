/*
 * lock.hpp: a header-only C++17 wrapper over lock.h (liblock).
 *
 * RAII: a Provider closes and frees its provider, a Lease releases and frees its
 * lease in the destructor (call release() first to learn the outcome, e.g.
 * LEASE_LOST). Failures throw dokebi::lock::Error, which carries the status,
 * code name, message, fix and option issues; try_acquire returns an empty
 * std::optional instead of throwing LOCK_BUSY. Objects are move-only; the
 * thread rules of lock.h apply (any thread may use them, destroy each once).
 *
 * Without exceptions (-fno-exceptions, or DOKEBI_LOCK_NO_EXCEPTIONS defined
 * before the include), every call that could throw returns a
 * dokebi::lock::Result<T> instead: check ok(), then take value() or error().
 * Asynchronous acquires hand their callback a Result<Lease> in both forms.
 */
#ifndef DOKEBI_LOCK_HPP
#define DOKEBI_LOCK_HPP

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#if defined(__cpp_exceptions) && !defined(DOKEBI_LOCK_NO_EXCEPTIONS)
#define DOKEBI_LOCK_EXCEPTIONS 1
#endif

#include "lock.h"

namespace dokebi::lock {

/// One option problem of an INVALID_OPTIONS error.
struct Issue {
    std::string path;
    std::string message;
    /// DOKEBI_LOCK_UNKNOWN_CONNECTION or DOKEBI_LOCK_INVALID_OPTIONS.
    dokebi_lock_status status;
};

/// A failed call: what lock.h reports through dokebi_lock_error.
class Error : public std::runtime_error {
public:
    /// Takes the error handle (and frees it); `error` may be NULL.
    Error(dokebi_lock_status status, dokebi_lock_error *error)
        : std::runtime_error(text(dokebi_lock_error_message(error), "dokebi-lock call failed")),
          status_(status),
          fix_(text(dokebi_lock_error_fix(error), "")),
          details_(text(dokebi_lock_error_details(error), "")) {
        for (std::size_t i = 0; i < dokebi_lock_error_issue_count(error); ++i) {
            issues_.push_back({dokebi_lock_error_issue_path(error, i), dokebi_lock_error_issue_message(error, i),
                               dokebi_lock_error_issue_status(error, i)});
        }
        dokebi_lock_error_free(error);
    }

    dokebi_lock_status status() const noexcept { return status_; }
    /// The stable code name, e.g. "WAIT_TIMEOUT".
    const char *code() const noexcept { return dokebi_lock_status_name(status_); }
    const std::string &fix() const noexcept { return fix_; }
    /// The error's details as JSON text (docs/errors.md), empty when it has none.
    const std::string &details() const noexcept { return details_; }
    const std::vector<Issue> &issues() const noexcept { return issues_; }

private:
    static std::string text(const char *value, const char *fallback) { return value ? value : fallback; }

    dokebi_lock_status status_;
    std::string fix_;
    std::string details_;
    std::vector<Issue> issues_;
};

/// A value or the Error of the call that could not make it.
template <typename T>
class Result {
public:
    Result(T value) : outcome_(std::move(value)) {}
    Result(Error error) : outcome_(std::move(error)) {}

    bool ok() const noexcept { return outcome_.index() == 0; }
    explicit operator bool() const noexcept { return ok(); }
    /// The value; only when ok().
    T &value() & { return std::get<0>(outcome_); }
    /// The value moved out of a temporary Result, by value: a reference into
    /// the temporary would die at the end of the statement that bound it.
    T value() && { return std::get<0>(std::move(outcome_)); }
    /// The error; only when !ok().
    const Error &error() const { return std::get<1>(outcome_); }

private:
    std::variant<T, Error> outcome_;
};

/// The outcome of a call that makes no value.
template <>
class Result<void> {
public:
    Result() = default;
    Result(Error error) : error_(std::move(error)) {}

    bool ok() const noexcept { return !error_.has_value(); }
    explicit operator bool() const noexcept { return ok(); }
    /// The error; only when !ok().
    const Error &error() const { return *error_; }

private:
    std::optional<Error> error_;
};

#ifdef DOKEBI_LOCK_EXCEPTIONS
/// What a call returns: T itself (failures throw).
template <typename T>
using Returns = T;
#else
/// What a call returns: a Result<T> (nothing throws).
template <typename T>
using Returns = Result<T>;
#endif

namespace detail {

/// The Error of a failed call, thrown or returned.
template <typename T>
Returns<T> fail(dokebi_lock_status status, dokebi_lock_error *error) {
#ifdef DOKEBI_LOCK_EXCEPTIONS
    throw Error(status, error);
#else
    return Error(status, error);
#endif
}

/// The outcome of a call that made `value` (when `status` is OK): the value,
/// or (after the call has returned: as arguments of one call, `status` and
/// `error` would be evaluated in no particular order) its Error, thrown or
/// returned.
template <typename T>
Returns<T> finish(dokebi_lock_status status, dokebi_lock_error *error, T &&value) {
    if (status != DOKEBI_LOCK_OK) {
        return fail<T>(status, error);
    }
    return std::forward<T>(value);
}

/// The same for a call that makes no value.
inline Returns<void> finish(dokebi_lock_status status, dokebi_lock_error *error) {
    if (status != DOKEBI_LOCK_OK) {
        return fail<void>(status, error);
    }
    return Returns<void>();
}

/// The C options of Kind-ed acquires: the keys as lock.h takes them, alive
/// as long as this object (the call's duration).
class AcquireOptions {
public:
    AcquireOptions(const std::vector<std::string_view> &keys, std::uint32_t mode, std::uint32_t limit, std::uint32_t weight) {
        keys_.reserve(keys.size());
        for (std::string_view key : keys) {
            keys_.push_back(dokebi_lock_key{key.data(), key.size()});
        }
        options_ = dokebi_lock_acquire_options{mode, limit, weight, keys_.data(), keys_.size()};
    }
    const dokebi_lock_acquire_options *get() const noexcept { return &options_; }

private:
    std::vector<dokebi_lock_key> keys_;
    dokebi_lock_acquire_options options_;
};

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

/// What an acquire asks for beyond a plain exclusive lease (see
/// dokebi_lock_acquire_ex): shared mode, or `weight` units of a key counted
/// to `limit`. The default is a plain lease.
struct Kind {
    std::uint32_t mode = DOKEBI_LOCK_MODE_EXCLUSIVE;
    /// 0: a plain lock (limit 1).
    std::uint32_t limit = 0;
    /// 0: one unit.
    std::uint32_t weight = 0;

    /// Readers of a reader/writer lock: held together, never with a writer.
    static Kind shared() noexcept { return Kind{DOKEBI_LOCK_MODE_SHARED, 0, 0}; }
    /// `weight` of a key's `limit` units.
    static Kind counted(std::uint32_t limit, std::uint32_t weight = 1) noexcept { return Kind{DOKEBI_LOCK_MODE_EXCLUSIVE, limit, weight}; }
};

/// A held lease; the destructor releases it if it is still held.
class Lease {
public:
    explicit Lease(dokebi_lock_lease *raw) noexcept : lease_(raw) {}

    /// The C handle, still owned by this lease: for the C calls the wrapper
    /// has no method for (dokebi_lock_lease_served_by, for one).
    dokebi_lock_lease *native_handle() const noexcept { return lease_.get(); }

    /// The key (of a lease over several keys, the first).
    std::string_view key() const noexcept {
        std::size_t len = 0;
        const char *bytes = dokebi_lock_lease_key(lease_.get(), &len);
        return bytes ? std::string_view(bytes, len) : std::string_view();
    }
    /// Every key, in the order the acquire gave them.
    std::vector<std::string_view> keys() const {
        std::vector<std::string_view> keys;
        for (std::size_t i = 0, count = dokebi_lock_lease_key_count(lease_.get()); i < count; i++) {
            std::size_t len = 0;
            const char *bytes = dokebi_lock_lease_key_at(lease_.get(), i, &len);
            keys.emplace_back(bytes, len);
        }
        return keys;
    }
    /// The fencing token of the key at `index` of keys(), as a decimal string.
    std::string fence_at(std::size_t index) const {
        const char *fence = dokebi_lock_lease_fence_at(lease_.get(), index);
        return fence ? fence : "";
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
    Returns<bool> renew() {
        bool valid = false;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_lease_renew(lease_.get(), &valid, &error);
        return detail::finish(status, error, std::move(valid));
    }
    /// True when this call released the lease, false when it already was.
    Returns<bool> release() {
        bool released = false;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_lease_release(lease_.get(), &released, &error);
        return detail::finish(status, error, std::move(released));
    }

private:
    detail::Handle<dokebi_lock_lease, dokebi_lock_lease_free> lease_;
};

/// A section run by Backend::with_lock: its fence, and whether the lease
/// was lost meanwhile (then stop: the work is no longer exclusive).
class Section {
public:
    explicit Section(const dokebi_lock_section *raw) noexcept : section_(raw) {}

    /// The fencing token as a decimal string.
    std::string fence() const {
        const char *fence = dokebi_lock_section_fence(section_);
        return fence ? fence : "";
    }
    bool lost() const noexcept { return dokebi_lock_section_lost(section_); }

private:
    const dokebi_lock_section *section_;
};

/// One asynchronous acquire; cancel() ends its wait (its callback then gets
/// ABORTED). Destroying it does not cancel.
class Pending {
public:
    explicit Pending(dokebi_lock_pending *raw) noexcept : pending_(raw) {}

    void cancel() noexcept { dokebi_lock_pending_cancel(pending_.get()); }

private:
    detail::Handle<dokebi_lock_pending, dokebi_lock_pending_free> pending_;
};

/// One live holder of an inspected key.
struct Holder {
    /// Its provider's `holder` label (host:pid by default); empty for a lease
    /// taken by a release before labels.
    std::optional<std::string> label;
    /// Units it holds: 1 unless the key is counted.
    std::uint32_t units = 0;
    /// Until its lease expires unless renewed; empty on the local driver.
    std::optional<std::chrono::milliseconds> remaining;
    /// The fence its grant got; empty where the store kept none.
    std::optional<std::uint64_t> fence;
    /// How long it has held the key, at least; empty where not known.
    std::optional<std::chrono::milliseconds> held_for;
};

/// One key as its store held it when read (Backend::inspect).
struct Inspection {
    /// The backend that answered (a policy's member, for a policy).
    std::string backend;
    /// True while someone holds the key.
    bool held = false;
    /// DOKEBI_LOCK_MODE_EXCLUSIVE or DOKEBI_LOCK_MODE_SHARED while held.
    std::uint32_t mode = DOKEBI_LOCK_MODE_EXCLUSIVE;
    /// The key's limit: above 1 for a counted key.
    std::uint32_t limit = 1;
    /// Live holders (the list has the first 64).
    std::uint32_t holder_count = 0;
    std::vector<Holder> holders;
    /// Acquires waiting for the key that the store knows of.
    std::uint32_t waiting = 0;
    /// No fence granted on the key so far is larger; empty where the store kept none (and on local).
    std::optional<std::uint64_t> fence;
};

/// What Backend::force_release did.
struct ForcedRelease {
    /// The backend whose store it changed.
    std::string backend;
    /// Live holders removed (0 when the key was free).
    std::uint32_t removed = 0;
    /// The raised fence (redis, postgres, mysql): write it to your fenced store as the highest seen.
    std::optional<std::uint64_t> fence;
};

/// One backend; cheap to keep, usable from any thread.
class Backend {
public:
    explicit Backend(dokebi_lock_backend *raw) noexcept : backend_(raw) {}

    /// The C handle, still owned by this backend: for the C calls the
    /// wrapper has no method for (a policy's dokebi_lock_policy_get_key_status,
    /// for one).
    dokebi_lock_backend *native_handle() const noexcept { return backend_.get(); }

    /// The keys of one lease over several keys, in the caller's order.
    using Keys = std::vector<std::string_view>;

    /// Blocks until the key is ours; the backend's waitTimeoutMs when `wait` is empty.
    Returns<Lease> acquire(std::string_view key, std::optional<std::chrono::milliseconds> wait = std::nullopt) const {
        return take([&](dokebi_lock_lease **lease, dokebi_lock_error **error) {
            return dokebi_lock_acquire(backend_.get(), key.data(), key.size(), detail::wait_ms(wait), lease, error);
        });
    }

    /// Blocks until every key of `keys` is ours in `kind`, as one lease (all or none).
    Returns<Lease> acquire(const Keys &keys, Kind kind, std::optional<std::chrono::milliseconds> wait = std::nullopt) const {
        detail::AcquireOptions options(keys, kind.mode, kind.limit, kind.weight);
        return take([&](dokebi_lock_lease **lease, dokebi_lock_error **error) {
            return dokebi_lock_acquire_ex(backend_.get(), options.get(), detail::wait_ms(wait), lease, error);
        });
    }

    /// The lease if the key is free now; empty when it is held (LOCK_BUSY).
    Returns<std::optional<Lease>> try_acquire(std::string_view key) const {
        return take_now([&](dokebi_lock_lease **lease, dokebi_lock_error **error) {
            return dokebi_lock_try_acquire(backend_.get(), key.data(), key.size(), lease, error);
        });
    }

    /// The lease of every key of `keys` in `kind` if they can be granted now; empty otherwise.
    Returns<std::optional<Lease>> try_acquire(const Keys &keys, Kind kind) const {
        detail::AcquireOptions options(keys, kind.mode, kind.limit, kind.weight);
        return take_now([&](dokebi_lock_lease **lease, dokebi_lock_error **error) {
            return dokebi_lock_try_acquire_ex(backend_.get(), options.get(), lease, error);
        });
    }

    /// Acquires without blocking: `done(Result<Lease>)` runs once, on the
    /// provider's completion thread (see lock.h), and must not throw.
    template <typename Done>
    Returns<Pending> acquire_async(std::string_view key, Done done, std::optional<std::chrono::milliseconds> wait = std::nullopt) const {
        return start(std::move(done), [&](void *callback, dokebi_lock_pending **pending, dokebi_lock_error **error) {
            return dokebi_lock_acquire_async(backend_.get(), key.data(), key.size(), detail::wait_ms(wait), &completed, callback, pending, error);
        });
    }

    /// acquire_async of every key of `keys` in `kind`, as one lease.
    template <typename Done>
    Returns<Pending> acquire_async(const Keys &keys, Kind kind, Done done, std::optional<std::chrono::milliseconds> wait = std::nullopt) const {
        detail::AcquireOptions options(keys, kind.mode, kind.limit, kind.weight);
        return start(std::move(done), [&](void *callback, dokebi_lock_pending **pending, dokebi_lock_error **error) {
            return dokebi_lock_acquire_async_ex(backend_.get(), options.get(), detail::wait_ms(wait), &completed, callback, pending, error);
        });
    }

    /// Holds `key` while `section(const Section &)` runs, renewing a redis
    /// lease meanwhile, and releases it after; gives back what the section
    /// returned. LEASE_LOST when the lease was lost during the section. An
    /// exception thrown by the section is rethrown after the release.
    template <typename Fn>
    Returns<std::invoke_result_t<Fn &, const Section &>> with_lock(std::string_view key, Fn section,
                                                                  std::optional<std::chrono::milliseconds> wait = std::nullopt) const {
        return run<Fn>(section, [&](dokebi_lock_section_fn run, void *call, int *ignored, dokebi_lock_error **error) {
            return dokebi_lock_with_lock(backend_.get(), key.data(), key.size(), detail::wait_ms(wait), run, call, ignored, error);
        });
    }

    /// with_lock holding every key of `keys` in `kind` (the section's fence is the first key's).
    template <typename Fn>
    Returns<std::invoke_result_t<Fn &, const Section &>> with_lock(const Keys &keys, Kind kind, Fn section,
                                                                  std::optional<std::chrono::milliseconds> wait = std::nullopt) const {
        detail::AcquireOptions options(keys, kind.mode, kind.limit, kind.weight);
        return run<Fn>(section, [&](dokebi_lock_section_fn run, void *call, int *ignored, dokebi_lock_error **error) {
            return dokebi_lock_with_lock_ex(backend_.get(), options.get(), detail::wait_ms(wait), run, call, ignored, error);
        });
    }

    /// Counts of the backend (never keys).
    Returns<dokebi_lock_backend_status> status() const {
        dokebi_lock_backend_status snapshot{};
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_backend_get_status(backend_.get(), &snapshot, &error);
        return detail::finish(status, error, std::move(snapshot));
    }

    /// Of the held leases status() counts, those held in shared mode.
    std::size_t held_shared() const noexcept { return dokebi_lock_backend_held_shared(backend_.get()); }

    /// The same backend, its leases labelled `holder` (a job, a request, a
    /// tenant) instead of the provider's `holder`: what inspect and another
    /// acquire's WAIT_TIMEOUT name them. INVALID_ARGUMENT for a label the
    /// options would refuse. The label ends at a NUL, as a C string does.
    Returns<Backend> with_holder(const std::string &holder) const {
        dokebi_lock_backend *labelled = nullptr;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_backend_with_holder(backend_.get(), holder.c_str(), &labelled, &error);
        return detail::finish(status, error, Backend(labelled));
    }

    /// What the store holds of `key` now: its holders (with their labels), waiters and fence.
    Returns<Inspection> inspect(std::string_view key) const {
        dokebi_lock_inspection *raw = nullptr;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_backend_inspect(backend_.get(), key.data(), key.size(), &raw, &error);
        detail::Handle<dokebi_lock_inspection, dokebi_lock_inspection_free> found(raw);
        Inspection inspection;
        if (status == DOKEBI_LOCK_OK) {
            inspection.backend = dokebi_lock_inspection_backend(raw);
            inspection.holder_count = dokebi_lock_inspection_held(raw);
            inspection.held = inspection.holder_count > 0;
            inspection.mode = dokebi_lock_inspection_mode(raw);
            inspection.limit = dokebi_lock_inspection_limit(raw);
            inspection.waiting = dokebi_lock_inspection_waiting(raw);
            std::uint64_t fence = 0;
            if (dokebi_lock_inspection_fence(raw, &fence)) inspection.fence = fence;
            for (std::size_t i = 0, count = dokebi_lock_inspection_holder_count(raw); i < count; i++) {
                Holder holder;
                if (const char *label = dokebi_lock_inspection_holder_label(raw, i)) holder.label = label;
                holder.units = dokebi_lock_inspection_holder_units(raw, i);
                std::int64_t left = dokebi_lock_inspection_holder_remaining_ms(raw, i);
                if (left >= 0) holder.remaining = std::chrono::milliseconds(left);
                if (dokebi_lock_inspection_holder_fence(raw, i, &fence)) holder.fence = fence;
                std::int64_t held = dokebi_lock_inspection_holder_held_ms(raw, i);
                if (held >= 0) holder.held_for = std::chrono::milliseconds(held);
                inspection.holders.push_back(std::move(holder));
            }
        }
        return detail::finish(status, error, std::move(inspection));
    }

    /// An operator's break of a stuck lock: removes every holder of `key` and
    /// (stores) raises its fence above every fence granted (docs/locks.md).
    Returns<ForcedRelease> force_release(std::string_view key) const {
        dokebi_lock_forced_release *raw = nullptr;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_backend_force_release(backend_.get(), key.data(), key.size(), &raw, &error);
        detail::Handle<dokebi_lock_forced_release, dokebi_lock_forced_release_free> forced(raw);
        ForcedRelease answer;
        if (status == DOKEBI_LOCK_OK) {
            answer.backend = dokebi_lock_forced_release_backend(raw);
            answer.removed = dokebi_lock_forced_release_removed(raw);
            std::uint64_t fence = 0;
            if (dokebi_lock_forced_release_fence(raw, &fence)) answer.fence = fence;
        }
        return detail::finish(status, error, std::move(answer));
    }

private:
    /// A blocking acquire: `call(&lease, &error)` is its C call.
    template <typename Call>
    static Returns<Lease> take(Call call) {
        dokebi_lock_lease *lease = nullptr;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = call(&lease, &error);
        return detail::finish(status, error, Lease(lease));
    }

    /// A try-acquire: LOCK_BUSY is an empty optional.
    template <typename Call>
    static Returns<std::optional<Lease>> take_now(Call call) {
        dokebi_lock_lease *lease = nullptr;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = call(&lease, &error);
        if (status == DOKEBI_LOCK_LOCK_BUSY) {
            dokebi_lock_error_free(error);
            return std::optional<Lease>();
        }
        return detail::finish(status, error, std::optional<Lease>(Lease(lease)));
    }

    /// An asynchronous acquire: `call(callback, &pending, &error)` is its C call.
    template <typename Done, typename Call>
    static Returns<Pending> start(Done done, Call call) {
        auto callback = new std::function<void(Result<Lease>)>(std::move(done));
        dokebi_lock_pending *pending = nullptr;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = call(callback, &pending, &error);
        if (status != DOKEBI_LOCK_OK) {
            delete callback;  // never called when the acquire did not start
        }
        return detail::finish(status, error, Pending(pending));
    }

    /// A with_lock: `call(run, &call, &ignored, &error)` is its C call.
    template <typename Fn, typename Call>
    static Returns<std::invoke_result_t<Fn &, const Section &>> run(Fn &section, Call c_call) {
        using Output = std::invoke_result_t<Fn &, const Section &>;
        static_assert(!std::is_void_v<Output>, "the section returns a value (return 0 when there is nothing to say)");
        SectionCall<Fn, Output> call{section, std::nullopt, nullptr};
        int ignored = 0;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = c_call(&SectionCall<Fn, Output>::run, &call, &ignored, &error);
#ifdef DOKEBI_LOCK_EXCEPTIONS
        if (call.thrown) {
            dokebi_lock_error_free(error);
            std::rethrow_exception(call.thrown);
        }
#endif
        if (status != DOKEBI_LOCK_OK) {
            return detail::fail<Output>(status, error);
        }
        return std::move(*call.output);
    }

    /// The C callback of acquire_async: hands the outcome to the C++ one
    /// (noexcept: a callback that throws ends the program, not unwinds C).
    static void completed(void *userdata, dokebi_lock_status status, dokebi_lock_lease *lease, dokebi_lock_error *error) noexcept {
        auto done = static_cast<std::function<void(Result<Lease>)> *>(userdata);
        if (status == DOKEBI_LOCK_OK) {
            (*done)(Result<Lease>(Lease(lease)));
        } else {
            (*done)(Result<Lease>(Error(status, error)));
        }
        delete done;
    }

    /// One with_lock call: the section, what it returned, what it threw.
    template <typename Fn, typename Output>
    struct SectionCall {
        Fn &section;
        std::optional<Output> output;
        std::exception_ptr thrown;

        /// The C section: runs the C++ one; nothing unwinds into C.
        static int run(const dokebi_lock_section *raw, void *user_data) {
            auto call = static_cast<SectionCall *>(user_data);
#ifdef DOKEBI_LOCK_EXCEPTIONS
            try {
                call->output.emplace(call->section(Section(raw)));
            } catch (...) {
                call->thrown = std::current_exception();
            }
#else
            call->output.emplace(call->section(Section(raw)));
#endif
            return 0;
        }
    };

    detail::Handle<dokebi_lock_backend, dokebi_lock_backend_free> backend_;
};

/// Every backend of one configuration; the destructor closes it.
class Provider {
public:
    /// Opens the YAML configuration text.
    static Returns<Provider> open(std::string_view yaml) {
        dokebi_lock_provider *provider = nullptr;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_provider_open(yaml.data(), yaml.size(), &provider, &error);
        return detail::finish(status, error, Provider(provider));
    }

    std::vector<std::string> names() const {
        std::vector<std::string> names;
        for (std::size_t i = 0; i < dokebi_lock_provider_name_count(provider_.get()); ++i) {
            names.emplace_back(dokebi_lock_provider_name(provider_.get(), i));
        }
        return names;
    }

    Returns<Backend> backend(const std::string &name) const {
        dokebi_lock_backend *backend = nullptr;
        dokebi_lock_error *error = nullptr;
        dokebi_lock_status status = dokebi_lock_provider_backend(provider_.get(), name.c_str(), &backend, &error);
        return detail::finish(status, error, Backend(backend));
    }

    /// Rejects waiters and ends held leases; later calls fail with CLOSED.
    Returns<void> close() { return detail::finish(dokebi_lock_provider_close(provider_.get()), nullptr); }

private:
    explicit Provider(dokebi_lock_provider *raw) noexcept : provider_(raw) {}

    detail::Handle<dokebi_lock_provider, dokebi_lock_provider_free> provider_;
};

}  // namespace dokebi::lock

#endif /* DOKEBI_LOCK_HPP */
