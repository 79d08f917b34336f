//! The floor of the benchmark (bench/bench.py, M1 and the instruction count): a function that
//! does only what every generating call must do, the function call and the clock read, and
//! returns a bigint. `snowflake_nextval(1)` is measured against it: what it costs above this is
//! what generation itself costs.
//!
//! Not part of the extension's SQL (`sql = false`): the library exports the symbol, and the
//! benchmark, as a superuser, declares it in its own server with
//! `CREATE FUNCTION ... LANGUAGE c AS 'snowflake_ext', 'snowflake_bench_floor_wrapper'`.

use pgrx::prelude::*;

/// The wall clock in the layout's units plus `worker`: the same argument, the same clock read
/// and the same result type as `snowflake_nextval(worker)`, and nothing else.
#[pg_extern(volatile, parallel_safe, sql = false)]
fn snowflake_bench_floor(worker: Option<i32>) -> i64 {
    let layout = &crate::shared::shmem::shared().params.layout;
    crate::mint::clock::wall(layout) as i64 + worker.unwrap_or(0) as i64
}
