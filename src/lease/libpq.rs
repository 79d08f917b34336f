//! A connection to the registry through libpq, as contrib/dblink and postgres_fdw talk to
//! other servers from inside one: libpq's non-blocking calls, and every wait on the process
//! latch and the socket together (`WaitLatchOrSocket`), each bounded by a deadline, so the
//! lease keeper still answers SIGTERM and its latch while the network is slow or gone. libpq
//! reads passwords from the passfile and connection parameters from the service file as it
//! does for psql; nothing here prints the connection string.

use pgrx::pg_sys;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;
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

/// The libpq functions the keeper calls, loaded from the library at run time.
// SAFETY: these are only the types of libpq's functions, as libpq-fe.h declares them; each is
// filled from the symbol of that name (`symbol!`), and every call site states why its
// arguments are valid.
struct Api {
    connect_start: unsafe extern "C" fn(*const c_char) -> *mut PGconn,
    connect_poll: unsafe extern "C" fn(*mut PGconn) -> c_int,
    status: unsafe extern "C" fn(*const PGconn) -> c_int,
    socket: unsafe extern "C" fn(*const PGconn) -> c_int,
    error_message: unsafe extern "C" fn(*const PGconn) -> *const c_char,
    finish: unsafe extern "C" fn(*mut PGconn),
    set_nonblocking: unsafe extern "C" fn(*mut PGconn, c_int) -> c_int,
    #[allow(clippy::type_complexity)]
    send_query_params: unsafe extern "C" fn(
        *mut PGconn,
        *const c_char,
        c_int,
        *const pg_sys::Oid,
        *const *const c_char,
        *const c_int,
        *const c_int,
        c_int,
    ) -> c_int,
    flush: unsafe extern "C" fn(*mut PGconn) -> c_int,
    consume_input: unsafe extern "C" fn(*mut PGconn) -> c_int,
    is_busy: unsafe extern "C" fn(*mut PGconn) -> c_int,
    get_result: unsafe extern "C" fn(*mut PGconn) -> *mut PGresult,
    result_status: unsafe extern "C" fn(*const PGresult) -> c_int,
    result_error_message: unsafe extern "C" fn(*const PGresult) -> *const c_char,
    result_error_field: unsafe extern "C" fn(*const PGresult, c_int) -> *const c_char,
    ntuples: unsafe extern "C" fn(*const PGresult) -> c_int,
    nfields: unsafe extern "C" fn(*const PGresult) -> c_int,
    get_value: unsafe extern "C" fn(*const PGresult, c_int, c_int) -> *const c_char,
    get_is_null: unsafe extern "C" fn(*const PGresult, c_int, c_int) -> c_int,
    clear: unsafe extern "C" fn(*mut PGresult),
    host: unsafe extern "C" fn(*const PGconn) -> *const c_char,
    port: unsafe extern "C" fn(*const PGconn) -> *const c_char,
}

/// libpq, loaded once per process, and only by the lease keeper: a libpq loaded into the
/// postmaster would be inherited by every process, and a walreceiver of another major than
/// that libpq's would then use it (and refuse the options its own `pg_basebackup -R` wrote).
/// The server's own library directory first (its libpq matches it), then the system's.
fn api() -> Result<&'static Api, Failure> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(|e| Failure::Error {
        message: e.clone(),
        sqlstate: None,
    })
}

// Each symbol's type is its field's, which the transmute takes from where it goes.
#[allow(clippy::missing_transmute_annotations)]
fn load() -> Result<Api, String> {
    let mut own = [0 as c_char; pg_sys::MAXPGPATH as usize];
    // SAFETY: get_lib_path writes at most MAXPGPATH bytes, NUL-terminated, from the path of
    // the running executable, which PostgreSQL set at start-up.
    let own = unsafe {
        pg_sys::get_lib_path(
            std::ptr::addr_of!(pg_sys::my_exec_path).cast(),
            own.as_mut_ptr(),
        );
        CStr::from_ptr(own.as_ptr()).to_string_lossy().into_owned()
    };
    let candidates = [format!("{own}/libpq.so.5"), "libpq.so.5".to_string()];
    let mut tried = Vec::new();
    let handle = candidates.iter().find_map(|path| {
        let name = CString::new(path.as_str()).ok()?;
        // SAFETY: dlopen with a NUL-terminated path; the handle is never closed.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            tried.push(path.clone());
        }
        (!handle.is_null()).then_some(handle)
    });
    let Some(handle) = handle else {
        return Err(format!(
            "libpq could not be loaded (tried {}); install libpq5",
            tried.join(", ")
        ));
    };
    macro_rules! symbol {
        ($name:literal) => {{
            // SAFETY: a NUL-terminated symbol name looked up in the library just loaded.
            let p = unsafe { libc::dlsym(handle, concat!($name, "\0").as_ptr().cast()) };
            if p.is_null() {
                return Err(format!("libpq has no {}", $name));
            }
            // SAFETY: the symbol is libpq's function of that name, whose C prototype
            // (libpq-fe.h, stable across PostgreSQL 14 to 18) is the field's type.
            unsafe { std::mem::transmute::<*mut c_void, _>(p) }
        }};
    }
    Ok(Api {
        connect_start: symbol!("PQconnectStart"),
        connect_poll: symbol!("PQconnectPoll"),
        status: symbol!("PQstatus"),
        socket: symbol!("PQsocket"),
        error_message: symbol!("PQerrorMessage"),
        finish: symbol!("PQfinish"),
        set_nonblocking: symbol!("PQsetnonblocking"),
        send_query_params: symbol!("PQsendQueryParams"),
        flush: symbol!("PQflush"),
        consume_input: symbol!("PQconsumeInput"),
        is_busy: symbol!("PQisBusy"),
        get_result: symbol!("PQgetResult"),
        result_status: symbol!("PQresultStatus"),
        result_error_message: symbol!("PQresultErrorMessage"),
        result_error_field: symbol!("PQresultErrorField"),
        ntuples: symbol!("PQntuples"),
        nfields: symbol!("PQnfields"),
        get_value: symbol!("PQgetvalue"),
        get_is_null: symbol!("PQgetisnull"),
        clear: symbol!("PQclear"),
        host: symbol!("PQhost"),
        port: symbol!("PQport"),
    })
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
        // The socket is libpq's, kept open while the connection lives.
        let woke = crate::bgworker::latch::wait_once(
            Some(left.as_millis() as i64 + 1),
            Some((sock as pg_sys::pgsocket, socket_event)),
        );
        if woke & socket_event as c_int != 0 {
            return Ok(());
        }
    }
}

/// A connection to the registry.
pub struct Connection {
    api: &'static Api,
    conn: *mut PGconn,
}

// The connection is used by the lease keeper's one thread only.
impl Drop for Connection {
    fn drop(&mut self) {
        // SAFETY: the connection was returned by PQconnectStart and is finished once.
        unsafe { (self.api.finish)(self.conn) };
    }
}

fn error_of(api: &Api, conn: *const PGconn) -> String {
    // SAFETY: PQerrorMessage returns a string owned by the connection, valid until its next
    // use; it is copied at once.
    unsafe {
        let m = (api.error_message)(conn);
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
        let api = api()?;
        // SAFETY: libpq copies the string; the result is owned by the Connection from here on.
        let conn = unsafe { (api.connect_start)(text.as_ptr()) };
        if conn.is_null() {
            return Err(Failure::Error {
                message: "out of memory".into(),
                sqlstate: None,
            });
        }
        let c = Connection { api, conn };
        // SAFETY: a connection libpq just started.
        if unsafe { (api.status)(c.conn) } == CONNECTION_BAD {
            return Err(Failure::Error {
                message: error_of(api, c.conn),
                sqlstate: None,
            });
        }
        // As libpq's documentation says: wait for writing first, then as PQconnectPoll asks.
        let mut on = Socket::Writable;
        loop {
            // SAFETY: the connection is alive; its socket may change while it tries hosts.
            let sock = unsafe { (api.socket)(c.conn) };
            wait(
                sock,
                on,
                deadline,
                "connecting to the registry",
                should_stop,
            )?;
            // SAFETY: as above.
            match unsafe { (api.connect_poll)(c.conn) } {
                PGRES_POLLING_OK => break,
                PGRES_POLLING_READING => on = Socket::Readable,
                PGRES_POLLING_WRITING => on = Socket::Writable,
                PGRES_POLLING_FAILED => {
                    return Err(Failure::Error {
                        message: error_of(api, c.conn),
                        sqlstate: None,
                    })
                }
                _ => on = Socket::Writable,
            }
        }
        // SAFETY: a connected connection.
        if unsafe { (api.set_nonblocking)(c.conn, 1) } != 0 {
            return Err(Failure::Error {
                message: error_of(api, c.conn),
                sqlstate: None,
            });
        }
        Ok(c)
    }

    fn socket(&self) -> c_int {
        // SAFETY: the connection is alive.
        unsafe { (self.api.socket)(self.conn) }
    }

    /// 0: all sent; 1: more to send; -1: failed.
    fn flush(&mut self) -> c_int {
        // SAFETY: the connection is alive and non-blocking.
        unsafe { (self.api.flush)(self.conn) }
    }

    fn busy(&mut self) -> bool {
        // SAFETY: the connection is alive.
        unsafe { (self.api.is_busy)(self.conn) != 0 }
    }

    fn consume(&mut self) -> bool {
        // SAFETY: the connection is alive and non-blocking.
        unsafe { (self.api.consume_input)(self.conn) != 0 }
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
            format!(
                "{}:{}",
                show((self.api.host)(self.conn)),
                show((self.api.port)(self.conn))
            )
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
            (self.api.send_query_params)(
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
            return Err(bad(error_of(self.api, self.conn)));
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
                _ => return Err(bad(error_of(self.api, self.conn))),
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
                    return Err(bad(error_of(self.api, self.conn)));
                }
            }
            // SAFETY: the connection is alive; libpq hands over the result, cleared below.
            let res = unsafe { (self.api.get_result)(self.conn) };
            if res.is_null() {
                break;
            }
            let api = self.api;
            // SAFETY: a result libpq returned, read and then cleared once.
            unsafe {
                match (api.result_status)(res) {
                    PGRES_TUPLES_OK | PGRES_COMMAND_OK => {
                        let mut out = Vec::new();
                        for r in 0..(api.ntuples)(res) {
                            let mut row = Vec::new();
                            for f in 0..(api.nfields)(res) {
                                row.push(((api.get_is_null)(res, r, f) == 0).then(|| {
                                    CStr::from_ptr((api.get_value)(res, r, f))
                                        .to_string_lossy()
                                        .into_owned()
                                }));
                            }
                            out.push(row);
                        }
                        rows = Some(out);
                    }
                    _ => {
                        let code = (api.result_error_field)(res, PG_DIAG_SQLSTATE);
                        failure.get_or_insert(Failure::Error {
                            message: CStr::from_ptr((api.result_error_message)(res))
                                .to_string_lossy()
                                .trim()
                                .to_string(),
                            sqlstate: (!code.is_null())
                                .then(|| CStr::from_ptr(code).to_string_lossy().into_owned()),
                        });
                    }
                }
                (api.clear)(res);
            }
        }
        match (failure, rows) {
            (Some(f), _) => Err(f),
            (None, Some(rows)) => Ok(rows),
            (None, None) => Ok(Vec::new()),
        }
    }
}
