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
//! * a marks schema whose header row is missing, or whose objects another role made or could
//!   change (the glue checks that, `src/marks/marks_table.rs`): refuse;
//! * a table whose seal (`marks::seal`, under the key the token file keeps) does not match its
//!   header and rows: rows deleted, changed or added, the header changed, the table emptied,
//!   through SQL by someone who cannot read the data directory: refuse;
//! * a table whose generation is behind the one the token file records (an older copy
//!   restored over it, or it was rolled back): refuse;
//! * a token file or state file that cannot be read or is damaged, a table from a newer format
//!   or another layout: refuse.
//!
//! Refusing is what keeps ids from repeating when the state that guarantees it is doubtful;
//! the way out is `snowflake_restore_mark`, which raises every worker above the largest id the
//! administrator knows of and accepts the table as it is.

use crate::layout::Layout;
use crate::token;

/// The version of the marks table's format this code writes and reads. Format 1 (0.2.0) had
/// no generation and no digest in its header, format 2 (0.3.0) no record of the registry the
/// server leases from; both are read, and written as format 3.
pub const FORMAT: i32 = 3;

/// The token file, relative to the data directory, as messages name it.
pub const TOKEN_FILE: &str = "snowflake_ext/marks.token";

/// The marks table's one header row, and where the table is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub format: i32,
    /// `Layout`'s text form.
    pub layout: String,
    pub identity: token::Identity,
    /// Bumped by the mark writer with every write (0 in format 1).
    pub generation: u64,
    /// `marks::seal` of the header and the rows the writer last wrote (`None` in format 1).
    pub digest: Option<u64>,
    /// The registry this server last leased from, and the highest epoch it saw there (none
    /// before format 3).
    pub seen: crate::lease::Seen,
}

impl Meta {
    /// The fields the seal covers.
    pub fn header(&self) -> crate::marks::Header<'_> {
        crate::marks::Header {
            format: self.format,
            layout: &self.layout,
            token: self.identity.token,
            generation: self.generation,
            seen: self.seen,
        }
    }
}

/// What the marks schema holds, as the mark writer found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No marks schema: nothing was ever written here, or it was dropped.
    Nothing,
    /// A marks schema that cannot be used: objects another role made or could change, a table
    /// missing, a header that cannot be read. Why, naming the object and its owner.
    Doubtful(String),
    /// The marks table's header, and its rows in worker order.
    Table {
        meta: Meta,
        rows: Vec<(u32, crate::marks::Row)>,
    },
}

/// What the token file held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenFile {
    Absent,
    Token(token::Recorded),
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
    /// Load the table. `write_token`: the token file is missing (or behind the table) and
    /// must be written.
    Load { write_token: bool },
    /// Refuse to mint, for this reason.
    Doubt(String),
}

/// Why marks made in the layout `made_in` (a marks table's header) cannot be read under
/// `layout`, if they cannot: both named as people know them (a preset's name).
pub fn other_layout(made_in: &str, layout: &Layout) -> Option<String> {
    (made_in != layout.to_string()).then(|| {
        format!(
            "the marks were made in the layout '{}', but snowflake.layout is '{}'; \
             the layout cannot change under existing ids",
            Layout::label_of(made_in),
            layout.label()
        )
    })
}

pub fn decide(found: &Found, file: &TokenFile, legacy: &Legacy, layout: &Layout) -> Decision {
    let recorded = match file {
        TokenFile::Unreadable(e) => {
            return Decision::Doubt(format!(
                "the token file {TOKEN_FILE} in the data directory cannot be read ({e})"
            ))
        }
        TokenFile::Invalid(why) => {
            return Decision::Doubt(format!(
                "the token file {TOKEN_FILE} in the data directory is damaged: it {why}"
            ))
        }
        TokenFile::Absent => None,
        TokenFile::Token(t) => Some(*t),
    };
    let (meta, rows) = match found {
        Found::Doubtful(why) => return Decision::Doubt(why.clone()),
        Found::Table { meta, rows } => (meta, rows),
        Found::Nothing => {
            if let Some(t) = recorded {
                return Decision::Doubt(format!(
                    "this server's marks were kept in a marks table (token {:016x}) that is gone: it \
                     was dropped, or snowflake.database names another database than before",
                    t.identity.token
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
        }
    };
    if meta.format > FORMAT {
        return Decision::Doubt(format!(
            "the marks table is in format {}, written by a newer snowflake_ext (this one reads format {FORMAT})",
            meta.format
        ));
    }
    if let Some(why) = other_layout(&meta.layout, layout) {
        return Decision::Doubt(why);
    }
    if let Some(t) = recorded.filter(|t| t.identity != meta.identity) {
        return Decision::Doubt(format!(
            "the marks table (token {:016x}, database OID {}, table OID {}) is not the one this server \
             wrote (token {:016x}, database OID {}, table OID {}): it was replaced or copied, or \
             snowflake.database names another database than before",
            meta.identity.token,
            meta.identity.database,
            meta.identity.table,
            t.identity.token,
            t.identity.database,
            t.identity.table
        ));
    }
    if let Some(key) = recorded.and_then(|t| t.key) {
        let sealed = crate::marks::seal(&key, &meta.header(), rows.iter().map(|(w, r)| (*w, r)));
        if meta.digest != Some(sealed) {
            return Decision::Doubt(
                "the rows of snowflake_ext_state.marks, or its header, are not the ones the mark \
                 writer last wrote (their seal does not match): rows were deleted, changed or added \
                 by hand, or the table was emptied"
                    .into(),
            );
        }
    }
    match recorded {
        Some(t) if t.generation > meta.generation => Decision::Doubt(format!(
            "snowflake_ext_state.marks is at generation {}, behind generation {} that this server \
             wrote last: it was emptied and refilled, rolled back, or an older copy of it was \
             restored",
            meta.generation, t.generation
        )),
        Some(t) => Decision::Load {
            write_token: t.generation < meta.generation || t.key.is_none(),
        },
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

    const KEY: [u8; 16] = [5; 16];

    /// The token file of a server that wrote table `token` last at generation 10.
    fn file(token: u64) -> TokenFile {
        TokenFile::Token(token::Recorded {
            identity: id(token),
            generation: 10,
            key: Some(KEY),
        })
    }

    fn rows() -> Vec<(u32, crate::marks::Row)> {
        vec![(
            3,
            crate::marks::Row {
                mark: 1 << 30,
                ..Default::default()
            },
        )]
    }

    /// A header as the writer seals it, over `rows()`.
    fn sealed(meta: Meta) -> Meta {
        let digest = crate::marks::seal(&KEY, &meta.header(), rows().iter().map(|(w, r)| (*w, r)));
        Meta {
            digest: Some(digest),
            ..meta
        }
    }

    fn meta(token: u64) -> Meta {
        sealed(Meta {
            format: FORMAT,
            layout: L.to_string(),
            identity: id(token),
            generation: 10,
            digest: None,
            seen: Default::default(),
        })
    }

    /// The table with `meta` and `rows()`.
    fn table(meta: Meta) -> Found {
        Found::Table { meta, rows: rows() }
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
            decide(&Found::Nothing, &TokenFile::Absent, &Legacy::Absent, &L),
            Decision::Fresh { legacy: None }
        );
        let legacy = Legacy::Marks(vec![5; 1024]);
        assert_eq!(
            decide(&Found::Nothing, &TokenFile::Absent, &legacy, &L),
            Decision::Fresh {
                legacy: Some(vec![5; 1024])
            }
        );
    }

    #[test]
    fn the_servers_own_table_is_loaded_with_or_without_its_token_file() {
        assert_eq!(
            decide(&table(meta(7)), &file(7), &Legacy::Absent, &L),
            Decision::Load { write_token: false }
        );
        // pg_upgrade and restored base backups carry the table, not necessarily the file.
        assert_eq!(
            decide(&table(meta(7)), &TokenFile::Absent, &Legacy::Absent, &L),
            Decision::Load { write_token: true }
        );
        // Once the table exists, 0.1.0's files no longer matter.
        let broken = Legacy::Unreadable("x".into());
        assert_eq!(
            decide(&table(meta(7)), &file(7), &broken, &L),
            Decision::Load { write_token: false }
        );
    }

    #[test]
    fn lost_replaced_damaged_or_foreign_state_is_refused() {
        assert!(doubt(decide(&Found::Nothing, &file(7), &Legacy::Absent, &L)).contains("gone"));
        assert!(
            doubt(decide(&table(meta(8)), &file(7), &Legacy::Absent, &L))
                .contains("not the one this server wrote")
        );
        assert!(doubt(decide(
            &table(meta(7)),
            &TokenFile::Unreadable("Permission denied".into()),
            &Legacy::Absent,
            &L
        ))
        .contains("Permission denied"));
        assert!(doubt(decide(
            &Found::Nothing,
            &TokenFile::Invalid(token::Invalid::Damaged),
            &Legacy::Absent,
            &L
        ))
        .contains("damaged"));
        assert!(doubt(decide(
            &Found::Nothing,
            &TokenFile::Absent,
            &Legacy::Unreadable("torn".into()),
            &L
        ))
        .contains("0.1.0"));
        let newer = Meta {
            format: FORMAT + 1,
            ..meta(7)
        };
        assert!(doubt(decide(&table(newer), &file(7), &Legacy::Absent, &L)).contains("newer"));
        let sony = Meta {
            layout: Layout::SONYFLAKE.to_string(),
            ..meta(7)
        };
        assert!(doubt(decide(&table(sony), &file(7), &Legacy::Absent, &L))
            .contains("cannot change under existing ids"));
    }

    #[test]
    fn a_table_behind_its_token_file_or_changed_by_hand_is_refused() {
        // Emptied (TRUNCATE, DELETE) or edited while the server was down: its seal fails.
        let emptied = Found::Table {
            meta: meta(7),
            rows: Vec::new(),
        };
        assert!(doubt(decide(&emptied, &file(7), &Legacy::Absent, &L)).contains("by hand"));
        // The header downgraded to format 1 (whose tables had no seal), or its seal forged
        // without the key: refused too.
        let downgraded = Meta {
            format: 1,
            digest: None,
            ..meta(7)
        };
        assert!(doubt(decide(&table(downgraded), &file(7), &Legacy::Absent, &L)).contains("seal"));
        let forged = Meta {
            digest: Some(crate::marks::seal(&[0; 16], &meta(7).header(), [])),
            ..meta(7)
        };
        let forged_empty = Found::Table {
            meta: forged,
            rows: Vec::new(),
        };
        assert!(doubt(decide(&forged_empty, &file(7), &Legacy::Absent, &L)).contains("seal"));
        // An older copy restored over it: sealed, but behind the generation the server last
        // wrote.
        let older = sealed(Meta {
            generation: 9,
            ..meta(7)
        });
        assert!(doubt(decide(&table(older), &file(7), &Legacy::Absent, &L)).contains("behind"));
        // A table ahead of the file (a crash between the commit and the file) is loaded, and
        // the file brought up to date.
        let ahead = sealed(Meta {
            generation: 11,
            ..meta(7)
        });
        assert_eq!(
            decide(&table(ahead), &file(7), &Legacy::Absent, &L),
            Decision::Load { write_token: true }
        );
        // A table of 0.2.0 (format 1: no generation, no seal) with its token file (no key).
        let old = Meta {
            format: 1,
            generation: 0,
            digest: None,
            ..meta(7)
        };
        let old_file = TokenFile::Token(token::Recorded {
            identity: id(7),
            generation: 0,
            key: None,
        });
        assert_eq!(
            decide(&table(old), &old_file, &Legacy::Absent, &L),
            Decision::Load { write_token: true }
        );
        // Objects the writer cannot trust: refused with the reason the glue found.
        let foreign = Found::Doubtful("schema snowflake_ext_state is owned by app".into());
        assert!(
            doubt(decide(&foreign, &TokenFile::Absent, &Legacy::Absent, &L))
                .contains("owned by app")
        );
    }
}
