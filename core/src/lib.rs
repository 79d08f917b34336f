//! The pure core of snowflake_ext: no PostgreSQL, no I/O but what its callers pass in.
//!
//! Its modules are listed, with the extension's, in the one code map of the project: the
//! extension crate's documentation (`src/lib.rs`, "Code map").
//!
//! The extension crate is the PostgreSQL glue around this crate; every rule that decides an id
//! is here, unit-tested with fake clocks, and exercised by real threads in `tests/model.rs`.

pub mod conninfo;
pub mod generator;
pub mod layout;
pub mod lease;
pub mod lease_model;
pub mod legacy;
pub mod marks;
pub mod siphash;
pub mod startup;
pub mod text;
pub mod timekeeper;
pub mod token;
