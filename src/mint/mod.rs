pub mod bench_floor;
pub mod clock;
pub mod lastval;
pub mod nextval;
pub mod wait;
