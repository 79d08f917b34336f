//! What a server does with the marks it finds when its mark writer starts: load them,
//! start afresh, or refuse to mint until an administrator restores them. Pure: the caller reads
//! the marks table, the token file and the 0.1.0 state files and passes what it found.
//!
//! The marks table is the truth; the token file in the data directory only records *which*
//! table (`token.rs`): it is written after the first marks are committed. So:
//!
//! * no marks schema and no token file: nothing was ever minted here (a first start). The
//!   only case that starts from the clock, after carrying over the marks of 0.1.0's state
//!   files if any;
//! * a table that is the one the file names, or a table and no file (a restored base backup
//!   or pg_upgrade carries the table but need not carry the file): load it;
//! * a token file and no table, or a table that is not the one the file names (another token,
//!   another database or table OID): the table this server wrote was dropped, re-created or
//!   copied, or `snowflake.database` names another database. Its marks may be lost: refuse;
//! * a marks schema whose header row is missing: refuse;
//! * a token file or state file that cannot be read or is damaged, a table from a newer format
//!   or another layout: refuse.
//!
//! Refusing is what keeps ids from repeating when the state that guarantees it is doubtful;
//! the way out is `snowflake_restore_mark`, which raises every worker above the largest id the
//! administrator knows of and accepts the table as it is.

use crate::layout::Layout;
use crate::token;

/// The version of the marks table's format this code writes and reads.
pub const FORMAT: i32 = 1;

/// The marks table's one header row, and where the table is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub format: i32,
    /// `Layout`'s text form.
    pub layout: String,
    pub identity: token::Identity,
}

/// What the token file held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenFile {
    Absent,
    Token(token::Identity),
    Unreadable(String),
    Invalid(token::Invalid),
}

/// What 0.1.0's state files held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Legacy {
    Absent,
    /// Per worker of the default layout, a tick every id is below.
    Marks(Vec<u64>),
    Unreadable(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing was ever minted here: start from the clock, above these marks if 0.1.0 left
    /// any (in ticks of the default layout, per worker).
    Fresh { legacy: Option<Vec<u64>> },
    /// Load the table. `write_token`: the token file is missing and must be written.
    Load { write_token: bool },
    /// Refuse to mint, for this reason.
    Doubt(String),
}

pub fn decide(meta: Option<&Meta>, file: &TokenFile, legacy: &Legacy, layout: &Layout) -> Decision {
    let file_token = match file {
        TokenFile::Unreadable(e) => {
            return Decision::Doubt(format!(
                "the token file snowflake_ext/marks.token cannot be read ({e})"
            ))
        }
        TokenFile::Invalid(why) => {
            return Decision::Doubt(format!(
                "the token file snowflake_ext/marks.token is damaged ({why:?})"
            ))
        }
        TokenFile::Absent => None,
        TokenFile::Token(t) => Some(*t),
    };
    let Some(meta) = meta else {
        if let Some(t) = file_token {
            return Decision::Doubt(format!(
                "this server's marks were kept in a marks table (token {:016x}) that is gone: it \
                 was dropped, or snowflake.database names another database than before",
                t.token
            ));
        }
        return match legacy {
            Legacy::Unreadable(e) => Decision::Doubt(format!(
                "the state files of snowflake_ext 0.1.0 in snowflake_ext/ cannot be read or are damaged ({e})"
            )),
            Legacy::Marks(marks) => Decision::Fresh {
                legacy: Some(marks.clone()),
            },
            Legacy::Absent => Decision::Fresh { legacy: None },
        };
    };
    if meta.format > FORMAT {
        return Decision::Doubt(format!(
            "the marks table is in format {}, written by a newer snowflake_ext (this one reads format {FORMAT})",
            meta.format
        ));
    }
    let configured = layout.to_string();
    if meta.layout != configured {
        return Decision::Doubt(format!(
            "the marks were made in the layout '{}', but snowflake.layout is '{configured}'; \
             the layout cannot change under existing ids",
            meta.layout
        ));
    }
    match file_token {
        Some(t) if t != meta.identity => Decision::Doubt(format!(
            "the marks table (token {:016x}, database OID {}, table OID {}) is not the one this server \
             wrote (token {:016x}, database OID {}, table OID {}): it was replaced or copied, or \
             snowflake.database names another database than before",
            meta.identity.token,
            meta.identity.database,
            meta.identity.table,
            t.token,
            t.database,
            t.table
        )),
        Some(_) => Decision::Load { write_token: false },
        None => Decision::Load { write_token: true },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Layout = Layout::SNOWFLAKE;

    fn id(token: u64) -> token::Identity {
        token::Identity {
            token,
            database: 5,
            table: 16_400,
        }
    }

    fn meta(token: u64) -> Meta {
        Meta {
            format: FORMAT,
            layout: L.to_string(),
            identity: id(token),
        }
    }

    fn doubt(d: Decision) -> String {
        match d {
            Decision::Doubt(why) => why,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn only_a_first_start_starts_from_the_clock() {
        assert_eq!(
            decide(None, &TokenFile::Absent, &Legacy::Absent, &L),
            Decision::Fresh { legacy: None }
        );
        let legacy = Legacy::Marks(vec![5; 1024]);
        assert_eq!(
            decide(None, &TokenFile::Absent, &legacy, &L),
            Decision::Fresh {
                legacy: Some(vec![5; 1024])
            }
        );
    }

    #[test]
    fn the_servers_own_table_is_loaded_with_or_without_its_token_file() {
        assert_eq!(
            decide(
                Some(&meta(7)),
                &TokenFile::Token(id(7)),
                &Legacy::Absent,
                &L
            ),
            Decision::Load { write_token: false }
        );
        // pg_upgrade and restored base backups carry the table, not necessarily the file.
        assert_eq!(
            decide(Some(&meta(7)), &TokenFile::Absent, &Legacy::Absent, &L),
            Decision::Load { write_token: true }
        );
        // Once the table exists, 0.1.0's files no longer matter.
        let broken = Legacy::Unreadable("x".into());
        assert_eq!(
            decide(Some(&meta(7)), &TokenFile::Token(id(7)), &broken, &L),
            Decision::Load { write_token: false }
        );
    }

    #[test]
    fn lost_replaced_damaged_or_foreign_state_is_refused() {
        assert!(
            doubt(decide(None, &TokenFile::Token(id(7)), &Legacy::Absent, &L)).contains("gone")
        );
        assert!(doubt(decide(
            Some(&meta(8)),
            &TokenFile::Token(id(7)),
            &Legacy::Absent,
            &L
        ))
        .contains("not the one this server wrote"));
        assert!(doubt(decide(
            Some(&meta(7)),
            &TokenFile::Unreadable("Permission denied".into()),
            &Legacy::Absent,
            &L
        ))
        .contains("Permission denied"));
        assert!(doubt(decide(
            None,
            &TokenFile::Invalid(token::Invalid::Damaged),
            &Legacy::Absent,
            &L
        ))
        .contains("damaged"));
        assert!(doubt(decide(
            None,
            &TokenFile::Absent,
            &Legacy::Unreadable("torn".into()),
            &L
        ))
        .contains("0.1.0"));
        let newer = Meta {
            format: FORMAT + 1,
            ..meta(7)
        };
        assert!(doubt(decide(
            Some(&newer),
            &TokenFile::Token(id(7)),
            &Legacy::Absent,
            &L
        ))
        .contains("newer"));
        let sony = Meta {
            layout: Layout::SONYFLAKE.to_string(),
            ..meta(7)
        };
        assert!(doubt(decide(
            Some(&sony),
            &TokenFile::Token(id(7)),
            &Legacy::Absent,
            &L
        ))
        .contains("cannot change under existing ids"));
    }
}
