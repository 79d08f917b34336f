//! Shared memory, as data: the one segment every backend of the server maps ([`shmem`]) and
//! every type that lives in it ([`control`], [`mailbox`], [`lease`], [`citus`], [`text`]).
//! Nothing here imports the behaviour that reads or writes it. Locking, field by field (in the
//! manner of `pg_stat_statements.c`): `params`, `workers` and `boot` are written once, in the
//! postmaster, when the segment is made (`AddinShmemInitLock` held), and only read after;
//! the control block ([`control::Control`], with the writer's state, the marks table's
//! [`control::TableState`], the [`mailbox::Mailbox`], the lease's [`lease::Status`], the Citus
//! [`citus::Status`] and `registry_seen`) is read and written only under the control LWLock
//! (`Shared::control`), which nobody holds while waiting, doing I/O or raising an error; the
//! mark writer writes its state and table, the lease keeper the lease status (as does a
//! backend that stops a lease that ran out), the keeper and the writer (from the marks table)
//! `registry_seen`, the Citus check its status, an administrator's backend and the writer the
//! mailbox. A worker's [`Slot`](snowflake_core::generator::Slot) follows the generator's
//! protocol: backends move `word` by compare-and-swap (AcqRel) without any lock, the mark
//! writer alone raises `mark` (Release/`fetch_max`, after its transaction committed), the
//! writer sets and clears `word`'s `CLOSED` bit (AcqRel), as does whoever stops a lease under
//! the control lock, and the slow path's clock check writes the timekeeper's fields under the
//! control lock. `mark_requested` is set by backends and cleared
//! by the writer, SeqCst on both sides so that a request is never lost; `writer_latch` is
//! stored by the writer (Release, 0 before it exits) and loaded by backends (Acquire) to wake
//! it; `postmaster_nudged_at` is a Relaxed compare-and-swap among waiting backends (a rate
//! limit only). [`lease::LeaseShared`] is written by the lease keeper under the control lock
//! (Release), and its `worker` cleared under that lock by a backend that finds the lease ran
//! out; backends read both with Acquire, without the lock. In [`citus::CitusShared`], `state`
//! is revoked by any backend (`fetch_update`, AcqRel) and published by the Citus check only by
//! a compare-and-swap over the epoch it read; the check alone stores `configured`, `latch`,
//! `connect_attempts`, `marks_database` and `dist_node` (Release; read with Acquire); a
//! preparing backend claims a `prepared` entry by compare-and-swap (or sets
//! `prepared_overflow`), and the check frees it by compare-and-swap (and clears the flag).

pub mod citus;
pub mod control;
pub mod lease;
pub mod mailbox;
pub mod shmem;
pub mod text;
