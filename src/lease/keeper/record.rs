//! The holder's own record of its lease: `snowflake_ext.lease` in the data directory, rewritten
//! whole (temporary file, fsync, rename, fsync of the directory) after every grant and renewal,
//! and removed when the lease is given back. A later start of this server on the same machine
//! run continues that lease at once only while this record says it still runs, by the boot
//! clock, and brings its fence: the registry's word alone never proves that the last holder
//! stopped, since a registry can be restored from a copy without a trace (the 900 duplicates
//! that a same-timeline restore and forged epochs gave). Without a record (never written,
//! unreadable, from another machine run, run out) the claim waits out the lock-delay, which is
//! what it costs if this file is lost: availability, never uniqueness.

use super::connection::host_run;
use super::{Held, NAME};
use crate::{errors, mint::clock};
use pgrx::pg_sys;
use std::fs::{self, File};
use std::io::Write;
use std::path::PathBuf;

const FILE: &str = "snowflake_ext.lease";
const TEMP: &str = "snowflake_ext.lease.tmp";

/// A lease as its holder recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Recorded {
    pub worker: u32,
    pub fence: i64,
    /// The boot time (ms) until which the lease may be used.
    pub usable_until: u64,
}

/// This start of the server (`Holder::boot`): a record it wrote itself is never read back,
/// since within one start the lease in shared memory is the newer (a grant not yet recorded).
fn this_start(boot: &str) -> String {
    format!("start={boot}")
}

fn path(name: &str) -> PathBuf {
    // SAFETY: DataDir is set before any background worker starts, and never changes.
    let dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) }
        .to_string_lossy()
        .into_owned();
    PathBuf::from(dir).join(name)
}

/// Records `held` as this server's running lease. A failure is logged, never fatal: a record
/// that lags makes a later start wait, never mint beside another holder.
pub(super) fn write(held: &Held, usable_until: u64, boot: &str) {
    let text = format!(
        "{} {} {} {} {}\n",
        held.worker,
        held.fence,
        usable_until,
        this_start(boot),
        host_run()
    );
    let written = (|| -> std::io::Result<()> {
        let mut f = File::create(path(TEMP))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(path(TEMP), path(FILE))?;
        File::open(path("."))?.sync_all()
    })();
    if let Err(e) = written {
        errors::warn(
            format!("snowflake: {NAME}: {FILE} could not be written: {e}"),
            "Until it can be, a restart of this server waits out the registry's lock-delay before it leases its worker id again.",
        );
    }
}

/// Forgets the lease (given back, or lost): a later start claims like any other server.
pub(super) fn remove() {
    let _ = fs::remove_file(path(FILE));
}

/// The lease an earlier start of this server recorded, if it was recorded on this machine run
/// and still runs by the boot clock.
pub(super) fn running(boot: &str) -> Option<Recorded> {
    let text = fs::read_to_string(path(FILE)).ok()?;
    // The machine run, last, has spaces of its own.
    let mut fields = text.trim_end().splitn(5, ' ');
    let worker = fields.next()?.parse().ok()?;
    let fence = fields.next()?.parse().ok()?;
    let usable_until: u64 = fields.next()?.parse().ok()?;
    let start = fields.next()?;
    let run = fields.next()?;
    (start != this_start(boot) && run == host_run() && clock::boot_ms() < usable_until).then_some(
        Recorded {
            worker,
            fence,
            usable_until,
        },
    )
}
