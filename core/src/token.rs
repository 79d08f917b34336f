//! The token file: `snowflake_ext/marks.token` in the data directory. It holds the token of
//! the marks table this server's marks live in, so that a table that was dropped and created
//! again, or the wrong database in `snowflake.database`, is told apart from a first start
//! (see `writer.rs` in the extension). The format, pure; the file is written and read by
//! `token_file.rs`.
//!
//! 32 bytes: the magic `SFTOKEN1`, a little-endian format version (u32), 4 zero bytes, the
//! token (u64) and an FNV-1a checksum of the 24 bytes before it (u64).

pub const MAGIC: &[u8; 8] = b"SFTOKEN1";
pub const FORMAT: u32 = 1;
pub const LEN: usize = 32;

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

pub fn encode(token: u64) -> [u8; LEN] {
    let mut out = [0u8; LEN];
    out[..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    out[16..24].copy_from_slice(&token.to_le_bytes());
    let sum = checksum(&out[..24]);
    out[24..].copy_from_slice(&sum.to_le_bytes());
    out
}

pub fn decode(bytes: &[u8]) -> Result<u64, Invalid> {
    if bytes.len() != LEN || &bytes[..8] != MAGIC {
        return Err(Invalid::NotATokenFile { len: bytes.len() });
    }
    let format = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if format != FORMAT {
        return Err(Invalid::UnknownFormat(format));
    }
    if checksum(&bytes[..24]).to_le_bytes() != bytes[24..] {
        return Err(Invalid::Damaged);
    }
    Ok(u64::from_le_bytes(bytes[16..24].try_into().unwrap()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        for token in [1, 42, u64::MAX] {
            assert_eq!(decode(&encode(token)), Ok(token));
        }
    }

    #[test]
    fn torn_truncated_padded_damaged_and_newer_files_are_refused() {
        let good = encode(0x1234_5678_9abc_def0);
        assert_eq!(decode(&good[..20]), Err(Invalid::NotATokenFile { len: 20 }));
        assert_eq!(decode(&[]), Err(Invalid::NotATokenFile { len: 0 }));
        let mut padded = good.to_vec();
        padded.extend_from_slice(&[0; 100]);
        assert_eq!(decode(&padded), Err(Invalid::NotATokenFile { len: 132 }));
        for at in [0, 9, 17, 30] {
            let mut bad = good;
            bad[at] ^= 0x40;
            assert!(decode(&bad).is_err(), "a flip at byte {at} went unnoticed");
        }
        let mut newer = good;
        newer[8] = 2;
        assert_eq!(decode(&newer), Err(Invalid::UnknownFormat(2)));
    }
}
