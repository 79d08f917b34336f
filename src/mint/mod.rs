//! Minting: everything a backend does to hand out ids. [`nextval`] is the generating functions
//! and the path each takes (the lock-free fast path, then the slow path under the control
//! lock); [`wait`] is how a backend waits for a mark or for the clock without holding the lock;
//! [`clock`] reads the wall and boot clocks; [`lastval`] remembers this session's last id; and
//! [`bench_floor`] is the benchmark's reference function, outside the extension's SQL.

pub mod bench_floor;
pub mod clock;
pub mod lastval;
pub mod nextval;
pub mod wait;
