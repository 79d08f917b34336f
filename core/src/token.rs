//! The token file: `snowflake_ext/marks.token` in the data directory. It records which marks
//! table this server's marks live in: the table's token (a random number in its header row)
//! and where the table is (the OIDs of its database and of the table). So a table that was
//! dropped and created again, the wrong database in `snowflake.database`, or a copy of the
//! table (a database made from a template, a dump restored elsewhere) is told apart from the
//! server's own table and from a first start (see `startup.rs`). Base backups, standbys and
//! pg_upgrade keep both OIDs. It also records the table's *generation*, a counter the mark
//! writer bumps in the table's header with every write and copies here before any id below
//! the marks it wrote is issued: a table whose generation is behind the file's was emptied,
//! rolled back or replaced by an older copy (see `startup.rs`). And it keeps the key the
//! writer seals the table with (`marks::seal`): the table can be changed through SQL by more
//! roles than can read this file, and none of them can seal an edited table.
//!
//! 64 bytes, little-endian: the magic `SFTOKEN1`, the format version (u32, 2), the database
//! OID (u32), the table OID (u32), 4 zero bytes, the token (u64), the generation (u64), the
//! key (16 bytes), and an FNV-1a checksum of the 56 bytes before it (u64). Format 1
//! (snowflake_ext 0.2.0) had no generation and no key and was 40 bytes long; it reads as
//! generation 0, without a key.

pub const MAGIC: &[u8; 8] = b"SFTOKEN1";
pub const FORMAT: u32 = 2;
pub const LEN: usize = 64;
/// The length of format 1, which had no generation.
const LEN_1: usize = 40;

/// Which marks table: its token, and the OIDs of its database and of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub token: u64,
    pub database: u32,
    pub table: u32,
}

/// What the token file records: which table, the generation last written to it, and the key
/// it is sealed with (none in format 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    pub identity: Identity,
    pub generation: u64,
    pub key: Option<[u8; 16]>,
}

/// Why the bytes are not a token file this version can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// It starts as a token file does (or is empty), but is shorter or longer than its format:
    /// torn, truncated or padded.
    WrongLength { len: usize, expected: usize },
    /// It does not start with the magic: another file, or its start overwritten.
    NotATokenFile { len: usize },
    /// Written by a newer version of the extension.
    UnknownFormat(u32),
    /// The checksum does not match: damaged.
    Damaged,
}

/// What is wrong, as the end of a sentence about the file: "the token file ... {this}". Users
/// read it in errors and in the log, so it says what was found and what it means, never Rust's
/// debug form.
impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Invalid::WrongLength { len: 0, .. } => f.write_str("is empty (truncated)"),
            Invalid::WrongLength { len, expected } if len < expected => {
                write!(f, "is {len} bytes long, not {expected} (torn or truncated)")
            }
            Invalid::WrongLength { len, expected } => write!(
                f,
                "is {len} bytes long, not {expected} (something was written past its end)"
            ),
            Invalid::NotATokenFile { len } => write!(
                f,
                "does not start with a token file's signature (it is {len} bytes long), so \
                 another file took its place or its start was overwritten"
            ),
            Invalid::UnknownFormat(format) => write!(
                f,
                "is in format {format}, written by a newer snowflake_ext (this one reads formats \
                 1 and {FORMAT})"
            ),
            Invalid::Damaged => f.write_str(
                "does not match its own checksum, so its contents were changed or damaged",
            ),
        }
    }
}

/// FNV-1a: enough to tell a damaged file from a whole one.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

pub fn encode(recorded: &Recorded) -> [u8; LEN] {
    let id = &recorded.identity;
    let mut out = [0u8; LEN];
    out[..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    out[12..16].copy_from_slice(&id.database.to_le_bytes());
    out[16..20].copy_from_slice(&id.table.to_le_bytes());
    out[24..32].copy_from_slice(&id.token.to_le_bytes());
    out[32..40].copy_from_slice(&recorded.generation.to_le_bytes());
    out[40..56].copy_from_slice(&recorded.key.unwrap_or_default());
    let sum = checksum(&out[..56]);
    out[56..].copy_from_slice(&sum.to_le_bytes());
    out
}

pub fn decode(bytes: &[u8]) -> Result<Recorded, Invalid> {
    let start = bytes.len().min(MAGIC.len());
    if bytes[..start] != MAGIC[..start] {
        return Err(Invalid::NotATokenFile { len: bytes.len() });
    }
    if bytes.len() < 12 {
        // The magic, or the start of it, and no format: cut short.
        return Err(Invalid::WrongLength {
            len: bytes.len(),
            expected: LEN,
        });
    }
    let format = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    let body = match format {
        1 => LEN_1 - 8,
        FORMAT => LEN - 8,
        _ => return Err(Invalid::UnknownFormat(format)),
    };
    if bytes.len() != body + 8 {
        return Err(Invalid::WrongLength {
            len: bytes.len(),
            expected: body + 8,
        });
    }
    if checksum(&bytes[..body]).to_le_bytes() != bytes[body..] {
        return Err(Invalid::Damaged);
    }
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
    let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
    Ok(Recorded {
        identity: Identity {
            token: u64_at(24),
            database: u32_at(12),
            table: u32_at(16),
        },
        generation: if format == 1 { 0 } else { u64_at(32) },
        key: (format != 1).then(|| bytes[40..56].try_into().unwrap()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: Identity = Identity {
        token: 0x1234_5678_9abc_def0,
        database: 5,
        table: 16_384,
    };
    const REC: Recorded = Recorded {
        identity: ID,
        generation: 77,
        key: Some([7; 16]),
    };

    #[test]
    fn records_round_trip() {
        for token in [1, 42, u64::MAX] {
            for generation in [0, 1, u64::MAX] {
                let r = Recorded {
                    identity: Identity { token, ..ID },
                    generation,
                    key: Some([token as u8; 16]),
                };
                assert_eq!(decode(&encode(&r)), Ok(r));
            }
        }
    }

    #[test]
    fn a_format_1_file_reads_as_generation_0() {
        // As snowflake_ext 0.2.0 wrote it.
        let mut old = [0u8; LEN_1];
        old[..8].copy_from_slice(MAGIC);
        old[8..12].copy_from_slice(&1u32.to_le_bytes());
        old[12..16].copy_from_slice(&ID.database.to_le_bytes());
        old[16..20].copy_from_slice(&ID.table.to_le_bytes());
        old[24..32].copy_from_slice(&ID.token.to_le_bytes());
        let sum = checksum(&old[..32]);
        old[32..].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(
            decode(&old),
            Ok(Recorded {
                identity: ID,
                generation: 0,
                key: None
            })
        );
    }

    #[test]
    fn torn_truncated_padded_damaged_and_newer_files_are_refused() {
        let good = encode(&REC);
        let short = |len| Err(Invalid::WrongLength { len, expected: LEN });
        assert_eq!(decode(&good[..20]), short(20));
        assert_eq!(decode(&good[..48]), short(48));
        assert_eq!(decode(&good[..5]), short(5));
        assert_eq!(decode(&[]), short(0));
        let mut padded = good.to_vec();
        padded.extend_from_slice(&[0; 100]);
        assert_eq!(decode(&padded), short(164));
        assert_eq!(
            decode(b"PGDMP, not a token file"),
            Err(Invalid::NotATokenFile { len: 23 })
        );
        for at in [0, 9, 13, 17, 26, 33, 38, 46, 55, 62] {
            let mut bad = good;
            bad[at] ^= 0x40;
            assert!(decode(&bad).is_err(), "a flip at byte {at} went unnoticed");
        }
        let mut newer = good;
        newer[8] = 3;
        assert_eq!(decode(&newer), Err(Invalid::UnknownFormat(3)));
    }

    #[test]
    fn every_reason_reads_as_a_sentence_with_its_figures() {
        let said = |why: Invalid| why.to_string();
        assert_eq!(
            said(Invalid::WrongLength {
                len: 60,
                expected: 64
            }),
            "is 60 bytes long, not 64 (torn or truncated)"
        );
        assert!(said(Invalid::WrongLength {
            len: 4160,
            expected: 64
        })
        .contains("4160 bytes"));
        assert!(said(Invalid::WrongLength {
            len: 0,
            expected: 64
        })
        .contains("empty"));
        assert!(said(Invalid::NotATokenFile { len: 7 }).contains("signature"));
        assert!(said(Invalid::UnknownFormat(3)).contains("format 3"));
        assert!(said(Invalid::Damaged).contains("checksum"));
        for why in [
            Invalid::WrongLength {
                len: 1,
                expected: 64,
            },
            Invalid::NotATokenFile { len: 1 },
            Invalid::UnknownFormat(9),
            Invalid::Damaged,
        ] {
            let text = said(why);
            assert!(!text.contains('{') && !text.contains("Invalid"), "{text}");
        }
    }
}
