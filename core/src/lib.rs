//! The pure core of snowflake_ext: no PostgreSQL, no I/O but what its callers pass in.
//!
//! * `layout`: the bit layouts of ids (this extension's and the other systems').
//! * `timekeeper`: how a worker judges the wall clock (steps back, forward jumps, and the
//!   reference clock that bounds how far ahead ids may run).
//! * `generator`: one worker's state in shared memory and the protocol by which backends
//!   issue ids from it.
//! * `marks`: the mark writer's rules (raising, persisting at a clean stop, restoring,
//!   rewinding).
//! * `startup`: what a starting server does with the marks it finds (load them, start
//!   afresh, or refuse until an administrator restores them).
//! * `lease`: the rules of a worker id leased from a registry (ranges, timing, caps).
//! * `siphash`: the keyed hash that seals the marks table.
//! * `text`: ids as decimal, Crockford base32 and base62 text.
//! * `token`: the small file in the data directory that tells a server's own marks table
//!   from a replaced one.
//! * `legacy`: reading the state files of version 0.1.0, to carry their marks over.
//!
//! The extension crate is the PostgreSQL glue around these; every rule that decides an id
//! is here, unit-tested with fake clocks, and exercised by real threads in `tests/model.rs`.

pub mod conninfo;
pub mod generator;
pub mod layout;
pub mod lease;
pub mod legacy;
pub mod marks;
pub mod siphash;
pub mod startup;
pub mod text;
pub mod timekeeper;
pub mod token;
