//! The keeper's link to the registry: the connection string in use, the connection (opened
//! with a pinned search_path), what it notes from every answer (the registry's limits and
//! epoch), and how this server describes itself to the registry.

use super::*;

impl Keeper {
    /// The connection string to use now: the old one while a move to a new one is pending.
    pub(super) fn conninfo(&self) -> String {
        if self.switching {
            self.connected_with.clone()
        } else {
            settings::registry()
        }
    }

    /// A registry to talk to, connected by `deadline`.
    pub(super) fn registry(&mut self, deadline: Instant) -> Result<Registry<'_>, Failure> {
        self.registry_stopping_on(deadline, &terminating)
    }

    /// As `registry`, with what ends its waits early besides the deadline.
    pub(super) fn registry_stopping_on(
        &mut self,
        deadline: Instant,
        should_stop: &'static dyn Fn() -> bool,
    ) -> Result<Registry<'_>, Failure> {
        if self.conn.is_none() {
            let conninfo = self.conninfo();
            let mut conn = open(&conninfo, deadline, should_stop)?;
            // Its limits first: the lease asked for must fit its lock-delay.
            let limits = Registry {
                conn: &mut conn,
                deadline,
                should_stop,
            }
            .identity()?;
            self.note(&limits);
            self.shared.control().lease.registry.set(&conn.server());
            self.conn = Some(conn);
            self.connected_with = conninfo;
        }
        Ok(Registry {
            conn: self.conn.as_mut().expect("connected"),
            deadline,
            should_stop,
        })
    }

    /// The registry this server leased from and the highest epoch it saw there.
    pub(super) fn seen(&self) -> Seen {
        self.shared.control().registry_seen
    }

    /// Takes note of an answer: the registry's limits, and its epoch (kept with the marks). The
    /// registry this server leases from changes only with a lease granted by another one.
    pub(super) fn note(&mut self, a: &Answer) {
        if a.lock_delay_ms > 0 {
            self.lock_delay_ms = a.lock_delay_ms;
        }
        if a.max_skew_ms > 0 {
            self.max_skew_ms = a.max_skew_ms;
        }
        if matches!(a.outcome, Outcome::Foreign | Outcome::Identity)
            || a.registry == 0
            || !self.registry_seen_known()
        {
            return;
        }
        let changed = {
            let mut control = self.shared.control();
            let seen = control.registry_seen;
            let granted = a.outcome == Outcome::Granted;
            let next = if seen.registry == a.registry || seen.registry == 0 || granted {
                seen.after(a.registry, a.epoch)
            } else {
                seen
            };
            control.registry_seen = next;
            next != seen
        };
        if changed {
            // The mark writer keeps it with the marks at its next write.
            self.shared.wake_writer();
        }
    }

    /// Whether the mark writer has read which registry this server leased from (every call
    /// sends it; a lease is used only once it is known).
    pub(super) fn registry_seen_known(&self) -> bool {
        self.shared.control().registry_seen_known
    }
}

/// A connection to the registry at `conninfo`, its session's search_path pinned.
pub(super) fn open(
    conninfo: &str,
    deadline: Instant,
    should_stop: &'static dyn Fn() -> bool,
) -> Result<Connection, Failure> {
    let mut conn = Connection::open(conninfo, deadline, should_stop)?;
    conn.query(
        "SET search_path = pg_catalog, pg_temp",
        &[],
        deadline,
        should_stop,
    )?;
    Ok(conn)
}

/// This server, as the registry tells it apart.
pub(super) fn identity(shared: &Shared) -> Holder {
    let mut host = [0u8; 256];
    // SAFETY: gethostname writes at most the length given into the buffer.
    unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len() - 1) };
    let host = std::ffi::CStr::from_bytes_until_nul(&host)
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    // SAFETY: plain reads of the server's identity, set before any background worker starts.
    let (system_identifier, port, data_directory) = unsafe {
        (
            pg_sys::GetSystemIdentifier(),
            pg_sys::PostPortNumber,
            std::ffi::CStr::from_ptr(pg_sys::DataDir)
                .to_string_lossy()
                .into_owned(),
        )
    };
    Holder {
        system_identifier: system_identifier.to_string(),
        host,
        port,
        data_directory,
        timeline: timeline(),
        boot: format!("{:016x}", shared.boot.load(Relaxed)),
        host_run: host_run(),
        secret: secret(),
    }
}

/// This server's secret for the registry (`Holder::secret`): 128 random bits kept in
/// `snowflake_ext.lease_secret` in the data directory (mode 0600, made at the first start that
/// leases). Unreadable, a new one is drawn for this start only: the registry then believes no
/// earlier start of this server, which waits out the lock-delay like any other claimer.
fn secret() -> String {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let valid = |s: &str| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit());
    let drawn = format!("{:016x}{:016x}", clock::random_u64(), clock::random_u64());
    // SAFETY: DataDir is set before any background worker starts, and never changes.
    let dir = unsafe { std::ffi::CStr::from_ptr(pg_sys::DataDir) }
        .to_string_lossy()
        .into_owned();
    let path = std::path::Path::new(&dir).join("snowflake_ext.lease_secret");
    if let Ok(kept) = std::fs::read_to_string(&path) {
        if valid(kept.trim()) {
            return kept.trim().to_string();
        }
    }
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| {
            f.write_all(drawn.as_bytes())?;
            f.sync_all()
        });
    if let Err(e) = made {
        errors::warn(
            format!(
                "snowflake: {NAME}: {} could not be made ({e}): a secret for this start only is used",
                path.display()
            ),
            "Until it can be, a restart of this server waits out the registry's lock-delay before it leases its worker id again. Remove a damaged file; the server makes it again.",
        );
    }
    drawn
}

/// The machine run this server started on: the kernel's boot id, and the mount, network and
/// IPC namespaces the postmaster runs in (this process inherited them). What cannot be read
/// is replaced by a random value, which never matches: an earlier start of this server then
/// waits out the lock-delay like any other holder.
pub(super) fn host_run() -> String {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| format!("unknown-{:016x}", clock::random_u64()));
    let ns = |name: &str| {
        std::fs::read_link(format!("/proc/self/ns/{name}"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("unknown-{:016x}", clock::random_u64()))
    };
    format!("{boot_id} {} {} {}", ns("mnt"), ns("net"), ns("ipc"))
}

/// This server's timeline (the keeper starts once recovery has ended).
pub(super) fn timeline() -> i32 {
    // SAFETY: reads of the timeline WAL is written on; before 15, RecoveryInProgress() sets
    // this process's copy of it once recovery has ended.
    unsafe {
        #[cfg(feature = "pg14")]
        {
            pg_sys::RecoveryInProgress();
            pg_sys::ThisTimeLineID as i32
        }
        #[cfg(not(feature = "pg14"))]
        {
            pg_sys::GetWALInsertionTimeLine() as i32
        }
    }
}
