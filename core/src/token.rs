//! The token file: `snowflake_ext/marks.token` in the data directory. It records which marks
//! table this server's marks live in: the table's token (a random number in its header row)
//! and where the table is (the OIDs of its database and of the table). So a table that was
//! dropped and created again, the wrong database in `snowflake.database`, or a copy of the
//! table (a database made from a template, a dump restored elsewhere) is told apart from the
//! server's own table and from a first start (see `startup.rs`). Base backups, standbys and
//! pg_upgrade keep both OIDs. The format, pure; the file is written and read by
//! `token_file.rs`.
//!
//! 40 bytes, little-endian: the magic `SFTOKEN1`, the format version (u32), the database OID
//! (u32), the table OID (u32), 4 zero bytes, the token (u64), and an FNV-1a checksum of the 32
//! bytes before it (u64).

pub const MAGIC: &[u8; 8] = b"SFTOKEN1";
pub const FORMAT: u32 = 1;
pub const LEN: usize = 40;

/// Which marks table: its token, and the OIDs of its database and of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub token: u64,
    pub database: u32,
    pub table: u32,
}

/// Why the bytes are not a token file this version can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// Shorter or longer than a token file, or with another magic: torn, truncated, padded or
    /// foreign.
    NotATokenFile { len: usize },
    /// Written by a newer version of the extension.
    UnknownFormat(u32),
    /// The checksum does not match: damaged.
    Damaged,
}

/// FNV-1a: enough to tell a damaged file from a whole one.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

pub fn encode(id: &Identity) -> [u8; LEN] {
    let mut out = [0u8; LEN];
    out[..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    out[12..16].copy_from_slice(&id.database.to_le_bytes());
    out[16..20].copy_from_slice(&id.table.to_le_bytes());
    out[24..32].copy_from_slice(&id.token.to_le_bytes());
    let sum = checksum(&out[..32]);
    out[32..].copy_from_slice(&sum.to_le_bytes());
    out
}

pub fn decode(bytes: &[u8]) -> Result<Identity, Invalid> {
    if bytes.len() != LEN || &bytes[..8] != MAGIC {
        return Err(Invalid::NotATokenFile { len: bytes.len() });
    }
    let format = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if format != FORMAT {
        return Err(Invalid::UnknownFormat(format));
    }
    if checksum(&bytes[..32]).to_le_bytes() != bytes[32..] {
        return Err(Invalid::Damaged);
    }
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
    Ok(Identity {
        token: u64::from_le_bytes(bytes[24..32].try_into().unwrap()),
        database: u32_at(12),
        table: u32_at(16),
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

    #[test]
    fn identities_round_trip() {
        for token in [1, 42, u64::MAX] {
            let id = Identity { token, ..ID };
            assert_eq!(decode(&encode(&id)), Ok(id));
        }
    }

    #[test]
    fn torn_truncated_padded_damaged_and_newer_files_are_refused() {
        let good = encode(&ID);
        assert_eq!(decode(&good[..20]), Err(Invalid::NotATokenFile { len: 20 }));
        assert_eq!(decode(&[]), Err(Invalid::NotATokenFile { len: 0 }));
        let mut padded = good.to_vec();
        padded.extend_from_slice(&[0; 100]);
        assert_eq!(decode(&padded), Err(Invalid::NotATokenFile { len: 140 }));
        for at in [0, 9, 13, 17, 26, 38] {
            let mut bad = good;
            bad[at] ^= 0x40;
            assert!(decode(&bad).is_err(), "a flip at byte {at} went unnoticed");
        }
        let mut newer = good;
        newer[8] = 2;
        assert_eq!(decode(&newer), Err(Invalid::UnknownFormat(2)));
    }
}
