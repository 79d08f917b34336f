//! The two clocks a worker reads, in the layout's time units: the wall clock, which ids carry,
//! and the boot clock, which only moves forward at the real pace (see
//! `snowflake_core::timekeeper` for why both).

use snowflake_core::layout::Layout;
use snowflake_core::timekeeper::Readings;

/// The wall clock (`CLOCK_REALTIME`, what `faketime` moves in the tests) in Unix milliseconds;
/// 0 before 1970. Read with `clock_gettime` itself, on the hot path: `SystemTime::now()` and
/// its `Duration` arithmetic cost a few dozen instructions more per id.
#[inline]
pub fn unix_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid one we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec
        .max(0)
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec / 1_000_000)
}

/// The wall clock in time units since the layout's epoch.
#[inline]
pub fn wall(layout: &Layout) -> u64 {
    layout.time_from_unix_ms(unix_ms())
}

/// Milliseconds since boot, suspend included (`CLOCK_BOOTTIME`; `faketime` leaves it alone).
pub fn boot_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid one we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Both clocks, read together.
pub fn readings(layout: &Layout) -> Readings {
    let boot = boot_ms() / layout.unit_ms as u64;
    Readings {
        wall: wall(layout),
        boot,
    }
}

/// 64 random bits, never 0: for tokens and keys. `pg_strong_random` (OpenSSL's generator,
/// whose state is in this process's memory) mixed with the kernel's `getrandom` and the clock's
/// nanoseconds: two copies of a VM resumed from one snapshot have the same generator state and
/// would draw the same numbers (the registry would take the copy's renewal for a repeat of
/// the original's); the kernel reseeds on a VM fork, and the two never read the same instant.
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: pg_strong_random fills the buffer we pass, of the length we pass.
    let ok = unsafe { pgrx::pg_sys::pg_strong_random(bytes.as_mut_ptr().cast(), bytes.len()) };
    let mut n = if ok { u64::from_le_bytes(bytes) } else { 0 };
    #[cfg(target_os = "linux")]
    {
        let mut kernel = [0u8; 8];
        // SAFETY: getrandom writes at most the length we pass into the buffer we pass; without
        // blocking (a pool not yet initialised leaves it short, and it is not used).
        let got = unsafe {
            libc::getrandom(
                kernel.as_mut_ptr().cast(),
                kernel.len(),
                libc::GRND_NONBLOCK,
            )
        };
        if got == kernel.len() as isize {
            n ^= u64::from_le_bytes(kernel);
        }
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // The nanoseconds spread over all 64 bits (a multiplicative hash), so that they change the
    // high bits too (some callers keep 63).
    n ^= nanos.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    if n != 0 {
        n
    } else {
        (((unix_ms() as u64) << 20) ^ boot_ms()) | 1
    }
}
