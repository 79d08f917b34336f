pub mod control;
pub mod shmem;
