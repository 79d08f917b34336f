//! Placeholder until persistence lands: every worker starts fresh with an unlimited lease.

pub fn wait_for(_worker: u16, _through: u64) {
    unreachable!("leases are unlimited without persistence")
}

pub fn startup_state() -> crate::shmem::Generators {
    crate::shmem::Generators {
        workers: [crate::generator::Worker::FRESH; crate::layout::WORKERS],
    }
}
