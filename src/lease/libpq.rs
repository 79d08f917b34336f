//! A connection to the registry through libpq, as contrib/dblink and postgres_fdw talk to
//! other servers from inside one: libpq's non-blocking calls, and every wait on the process
//! latch and the socket together (`WaitLatchOrSocket`), each bounded by a deadline, so the
//! lease keeper still answers SIGTERM and its latch while the network is slow or gone. libpq
//! reads passwords from the passfile and connection parameters from the service file as it
//! does for psql; nothing here prints the connection string.

use pgrx::pg_sys;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::time::Instant;

#[allow(non_camel_case_types)]
type PGconn = c_void;
#[allow(non_camel_case_types)]
type PGresult = c_void;

/// libpq's `PostgresPollingStatusType`.
const PGRES_POLLING_FAILED: c_int = 0;
const PGRES_POLLING_READING: c_int = 1;
const PGRES_POLLING_WRITING: c_int = 2;
const PGRES_POLLING_OK: c_int = 3;
/// libpq's `ConnStatusType`.
const CONNECTION_BAD: c_int = 1;
/// libpq's `ExecStatusType`.
const PGRES_COMMAND_OK: c_int = 1;
const PGRES_TUPLES_OK: c_int = 2;
/// `PG_DIAG_SQLSTATE`.
const PG_DIAG_SQLSTATE: c_int = b'C' as c_int;

#[repr(C)]
struct PQconninfoOption {
    keyword: *mut c_char,
    envvar: *mut c_char,
    compiled: *mut c_char,
    val: *mut c_char,
    label: *mut c_char,
    dispchar: *mut c_char,
    dispsize: c_int,
}

// SAFETY: the declarations match libpq-fe.h (PostgreSQL 14 to 18 and the libpq 15 this links
// against); libpq's ABI is stable across those.
#[link(name = "pq")]
unsafe extern "C" {
    fn PQconnectStart(conninfo: *const c_char) -> *mut PGconn;
    fn PQconnectPoll(conn: *mut PGconn) -> c_int;
    fn PQstatus(conn: *const PGconn) -> c_int;
    fn PQsocket(conn: *const PGconn) -> c_int;
    fn PQerrorMessage(conn: *const PGconn) -> *const c_char;
    fn PQfinish(conn: *mut PGconn);
    fn PQsetnonblocking(conn: *mut PGconn, arg: c_int) -> c_int;
    fn PQsendQueryParams(
        conn: *mut PGconn,
        command: *const c_char,
        n_params: c_int,
        param_types: *const pg_sys::Oid,
        param_values: *const *const c_char,
        param_lengths: *const c_int,
        param_formats: *const c_int,
        result_format: c_int,
    ) -> c_int;
    fn PQflush(conn: *mut PGconn) -> c_int;
    fn PQconsumeInput(conn: *mut PGconn) -> c_int;
    fn PQisBusy(conn: *mut PGconn) -> c_int;
    fn PQgetResult(conn: *mut PGconn) -> *mut PGresult;
    fn PQresultStatus(res: *const PGresult) -> c_int;
    fn PQresultErrorMessage(res: *const PGresult) -> *const c_char;
    fn PQresultErrorField(res: *const PGresult, fieldcode: c_int) -> *const c_char;
    fn PQntuples(res: *const PGresult) -> c_int;
    fn PQnfields(res: *const PGresult) -> c_int;
    fn PQgetvalue(res: *const PGresult, row: c_int, col: c_int) -> *const c_char;
    fn PQgetisnull(res: *const PGresult, row: c_int, col: c_int) -> c_int;
    fn PQclear(res: *mut PGresult);
    fn PQconninfoParse(conninfo: *const c_char, errmsg: *mut *mut c_char) -> *mut PQconninfoOption;
    fn PQconninfoFree(options: *mut PQconninfoOption);
    fn PQfreemem(ptr: *mut c_void);
    fn PQhost(conn: *const PGconn) -> *const c_char;
    fn PQport(conn: *const PGconn) -> *const c_char;
}

/// Why a call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The deadline passed first.
    TimedOut(&'static str),
    /// SIGTERM, or the postmaster died: stop now.
    Interrupted,
    /// libpq's or the server's error, and the SQLSTATE when the server sent one.
    Error {
        message: String,
        sqlstate: Option<String>,
    },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::TimedOut(what) => write!(f, "no answer in time while {what}"),
            Failure::Interrupted => write!(f, "interrupted"),
            Failure::Error { message, sqlstate } => match sqlstate {
                Some(code) => write!(f, "{message} (SQLSTATE {code})"),
                None => write!(f, "{message}"),
            },
        }
    }
}

/// The names a connection string sets, or why it is not one (libpq's own message, which
/// never repeats a password). For checking `snowflake.registry` when it is set.
pub fn parse_conninfo(conninfo: &str) -> Result<Vec<String>, String> {
    let text = CString::new(conninfo).map_err(|_| "it contains a NUL byte".to_string())?;
    let mut err: *mut c_char = std::ptr::null_mut();
    // SAFETY: libpq parses the NUL-terminated string and returns an array it allocated (freed
    // below), or NULL and an error message it allocated (freed below).
    unsafe {
        let options = PQconninfoParse(text.as_ptr(), &mut err);
        if options.is_null() {
            let message = if err.is_null() {
                "out of memory".to_string()
            } else {
                let m = CStr::from_ptr(err).to_string_lossy().trim().to_string();
                PQfreemem(err.cast());
                m
            };
            return Err(message);
        }
        let mut set = Vec::new();
        let mut at = options;
        while !(*at).keyword.is_null() {
            if !(*at).val.is_null() {
                set.push(CStr::from_ptr((*at).keyword).to_string_lossy().into_owned());
            }
            at = at.add(1);
        }
        PQconninfoFree(options);
        Ok(set)
    }
}

/// What a wait ends on, besides the deadline.
enum Socket {
    Readable,
    Writable,
}

/// Waits on the latch and the socket until one is ready or `deadline` passes. `should_stop`
/// is asked after every wake-up (SIGTERM sets the latch).
fn wait(
    sock: c_int,
    on: Socket,
    deadline: Instant,
    what: &'static str,
    should_stop: &dyn Fn() -> bool,
) -> Result<(), Failure> {
    loop {
        if should_stop() {
            return Err(Failure::Interrupted);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Failure::TimedOut(what));
        }
        let socket_event = match on {
            Socket::Readable => pg_sys::WL_SOCKET_READABLE,
            Socket::Writable => pg_sys::WL_SOCKET_WRITEABLE,
        };
        // SAFETY: the standard wait of a background worker on its own latch and a socket libpq
        // owns and keeps open while the connection lives.
        let woke = unsafe {
            let woke = pg_sys::WaitLatchOrSocket(
                pg_sys::MyLatch,
                (pg_sys::WL_LATCH_SET
                    | pg_sys::WL_TIMEOUT
                    | pg_sys::WL_EXIT_ON_PM_DEATH
                    | socket_event) as c_int,
                sock as pg_sys::pgsocket,
                left.as_millis() as i64 + 1,
                pg_sys::PG_WAIT_EXTENSION,
            );
            if woke & pg_sys::WL_LATCH_SET as c_int != 0 {
                pg_sys::ResetLatch(pg_sys::MyLatch);
            }
            woke
        };
        if woke & socket_event as c_int != 0 {
            return Ok(());
        }
    }
}

/// A connection to the registry.
pub struct Connection {
    conn: *mut PGconn,
}

// The connection is used by the lease keeper's one thread only.
impl Drop for Connection {
    fn drop(&mut self) {
        // SAFETY: the connection was returned by PQconnectStart and is finished once.
        unsafe { PQfinish(self.conn) };
    }
}

fn error_of(conn: *const PGconn) -> String {
    // SAFETY: PQerrorMessage returns a string owned by the connection, valid until its next
    // use; it is copied at once.
    unsafe {
        let m = PQerrorMessage(conn);
        if m.is_null() {
            String::new()
        } else {
            CStr::from_ptr(m).to_string_lossy().trim().to_string()
        }
    }
}

impl Connection {
    /// Connects with `conninfo`, by `deadline`.
    pub fn open(
        conninfo: &str,
        deadline: Instant,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<Connection, Failure> {
        let text = CString::new(conninfo).map_err(|_| Failure::Error {
            message: "the connection string contains a NUL byte".into(),
            sqlstate: None,
        })?;
        // SAFETY: libpq copies the string; the result is owned by the Connection from here on.
        let conn = unsafe { PQconnectStart(text.as_ptr()) };
        if conn.is_null() {
            return Err(Failure::Error {
                message: "out of memory".into(),
                sqlstate: None,
            });
        }
        let c = Connection { conn };
        // SAFETY: a connection libpq just started.
        if unsafe { PQstatus(c.conn) } == CONNECTION_BAD {
            return Err(Failure::Error {
                message: error_of(c.conn),
                sqlstate: None,
            });
        }
        // As libpq's documentation says: wait for writing first, then as PQconnectPoll asks.
        let mut on = Socket::Writable;
        loop {
            // SAFETY: the connection is alive; its socket may change while it tries hosts.
            let sock = unsafe { PQsocket(c.conn) };
            wait(
                sock,
                on,
                deadline,
                "connecting to the registry",
                should_stop,
            )?;
            // SAFETY: as above.
            match unsafe { PQconnectPoll(c.conn) } {
                PGRES_POLLING_OK => break,
                PGRES_POLLING_READING => on = Socket::Readable,
                PGRES_POLLING_WRITING => on = Socket::Writable,
                PGRES_POLLING_FAILED => {
                    return Err(Failure::Error {
                        message: error_of(c.conn),
                        sqlstate: None,
                    })
                }
                _ => on = Socket::Writable,
            }
        }
        // SAFETY: a connected connection.
        if unsafe { PQsetnonblocking(c.conn, 1) } != 0 {
            return Err(Failure::Error {
                message: error_of(c.conn),
                sqlstate: None,
            });
        }
        Ok(c)
    }

    fn socket(&self) -> c_int {
        // SAFETY: the connection is alive.
        unsafe { PQsocket(self.conn) }
    }

    /// 0: all sent; 1: more to send; -1: failed.
    fn flush(&mut self) -> c_int {
        // SAFETY: the connection is alive and non-blocking.
        unsafe { PQflush(self.conn) }
    }

    fn busy(&mut self) -> bool {
        // SAFETY: the connection is alive.
        unsafe { PQisBusy(self.conn) != 0 }
    }

    fn consume(&mut self) -> bool {
        // SAFETY: the connection is alive and non-blocking.
        unsafe { PQconsumeInput(self.conn) != 0 }
    }

    /// Where the connection went: `host:port` (for messages; never the password).
    pub fn server(&self) -> String {
        // SAFETY: strings owned by the live connection, copied at once.
        unsafe {
            let show = |p: *const c_char| {
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                }
            };
            format!("{}:{}", show(PQhost(self.conn)), show(PQport(self.conn)))
        }
    }

    /// Runs `sql` with text parameters (NULL: `None`), by `deadline`, and returns its rows
    /// as text (NULL: `None`).
    pub fn query(
        &mut self,
        sql: &str,
        params: &[Option<String>],
        deadline: Instant,
        should_stop: &dyn Fn() -> bool,
    ) -> Result<Vec<Vec<Option<String>>>, Failure> {
        let bad = |message: String| Failure::Error {
            message,
            sqlstate: None,
        };
        let sql = CString::new(sql).map_err(|_| bad("a NUL byte in the query".into()))?;
        let values: Vec<Option<CString>> = params
            .iter()
            .map(|p| p.as_deref().map(|v| CString::new(v).unwrap_or_default()))
            .collect();
        let pointers: Vec<*const c_char> = values
            .iter()
            .map(|v| v.as_ref().map_or(std::ptr::null(), |v| v.as_ptr()))
            .collect();
        // SAFETY: every pointer is valid for the call (libpq copies the query and parameters
        // into its output buffer before returning).
        let sent = unsafe {
            PQsendQueryParams(
                self.conn,
                sql.as_ptr(),
                pointers.len() as c_int,
                std::ptr::null(),
                pointers.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                0,
            )
        };
        if sent == 0 {
            return Err(bad(error_of(self.conn)));
        }
        loop {
            match self.flush() {
                0 => break,
                1 => wait(
                    self.socket(),
                    Socket::Writable,
                    deadline,
                    "sending to the registry",
                    should_stop,
                )?,
                _ => return Err(bad(error_of(self.conn))),
            }
        }
        let mut rows = None;
        let mut failure = None;
        loop {
            while self.busy() {
                wait(
                    self.socket(),
                    Socket::Readable,
                    deadline,
                    "waiting for the registry",
                    should_stop,
                )?;
                if !self.consume() {
                    return Err(bad(error_of(self.conn)));
                }
            }
            // SAFETY: the connection is alive; libpq hands over the result, cleared below.
            let res = unsafe { PQgetResult(self.conn) };
            if res.is_null() {
                break;
            }
            // SAFETY: a result libpq returned, read and then cleared once.
            unsafe {
                match PQresultStatus(res) {
                    PGRES_TUPLES_OK | PGRES_COMMAND_OK => {
                        let mut out = Vec::new();
                        for r in 0..PQntuples(res) {
                            let mut row = Vec::new();
                            for f in 0..PQnfields(res) {
                                row.push((PQgetisnull(res, r, f) == 0).then(|| {
                                    CStr::from_ptr(PQgetvalue(res, r, f))
                                        .to_string_lossy()
                                        .into_owned()
                                }));
                            }
                            out.push(row);
                        }
                        rows = Some(out);
                    }
                    _ => {
                        let code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
                        failure.get_or_insert(Failure::Error {
                            message: CStr::from_ptr(PQresultErrorMessage(res))
                                .to_string_lossy()
                                .trim()
                                .to_string(),
                            sqlstate: (!code.is_null())
                                .then(|| CStr::from_ptr(code).to_string_lossy().into_owned()),
                        });
                    }
                }
                PQclear(res);
            }
        }
        match (failure, rows) {
            (Some(f), _) => Err(f),
            (None, Some(rows)) => Ok(rows),
            (None, None) => Ok(Vec::new()),
        }
    }
}
