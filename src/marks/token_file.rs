//! Reading and writing the token file, `snowflake_ext/marks.token` in the data directory
//! (format: `snowflake_core::token`; why it exists: `snowflake_core::startup`).
//!
//! It is replaced whole (written to a temporary file, fsynced, renamed over the old one, the
//! directory fsynced) and read back to verify, so it is never torn, short or over-long.

use snowflake_core::startup::TokenFile;
use snowflake_core::token::{self, Recorded};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Relative to the data directory, every server process's working directory.
pub const DIR: &str = "snowflake_ext";
const PATH: &str = "snowflake_ext/marks.token";
const TEMP: &str = "snowflake_ext/marks.token.tmp";

pub fn read() -> TokenFile {
    match fs::read(PATH) {
        Ok(bytes) => match token::decode(&bytes) {
            Ok(t) => TokenFile::Token(t),
            Err(why) => TokenFile::Invalid(why),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::metadata(DIR) {
            // The file is missing, but is the directory readable at all?
            Ok(_) => match fs::read_dir(DIR) {
                Ok(_) => TokenFile::Absent,
                Err(e) => TokenFile::Unreadable(format!("{DIR}/: {e}")),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => TokenFile::Absent,
            Err(e) => TokenFile::Unreadable(format!("{DIR}/: {e}")),
        },
        Err(e) => TokenFile::Unreadable(format!("{PATH}: {e}")),
    }
}

pub fn write(value: &Recorded) -> io::Result<()> {
    if !Path::new(DIR).is_dir() {
        fs::create_dir(DIR)?;
        File::open(".")?.sync_all()?;
    }
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(TEMP)?;
        file.write_all(&token::encode(value))?;
        file.sync_all()?;
    }
    fs::rename(TEMP, PATH)?;
    File::open(DIR)?.sync_all()?;
    match read() {
        TokenFile::Token(t) if t == *value => Ok(()),
        other => Err(io::Error::other(format!(
            "{PATH} did not read back as written (marks table token {:016x}, generation {}): it {}",
            value.identity.token,
            value.generation,
            describe(&other)
        ))),
    }
}

/// What a read of the token file found, as the end of a sentence about it ("it ...").
pub fn describe(file: &TokenFile) -> String {
    match file {
        TokenFile::Absent => "is missing".into(),
        TokenFile::Token(t) => format!(
            "records marks table token {:016x} (database OID {}, table OID {}) at generation {}",
            t.identity.token, t.identity.database, t.identity.table, t.generation
        ),
        TokenFile::Unreadable(e) => format!("cannot be read: {e}"),
        TokenFile::Invalid(why) => why.to_string(),
    }
}
