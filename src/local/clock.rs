//! When a local lease was granted, for `inspect`'s "held for": a monotonic
//! clock in milliseconds, read once per grant. A coarse clock where there is
//! one (Linux's `CLOCK_MONOTONIC_COARSE`: a read of the kernel's last tick,
//! a few ns, where the precise clock cost a plain pair about 20 ns), so
//! the figure is good to the kernel's tick (1 to 4 ms).

/// Milliseconds of a monotonic clock: only differences mean anything.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn now_ms() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    (now.tv_sec as u64).saturating_mul(1000) + now.tv_nsec as u64 / 1_000_000
}

/// Milliseconds of a monotonic clock: only differences mean anything.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64
}
