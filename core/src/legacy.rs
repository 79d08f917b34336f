//! The state files of version 0.1.0 (`snowflake_ext/lease.0` and `lease.1` in the data
//! directory), read once to carry their marks into the marks table when a server that ran
//! 0.1.0 first starts with this version. Pure decoding; the files are read by the mark writer (`src/marks/writer/` of the extension).
//!
//! Each file: the magic `SFLEASE1`, a generation (u64), the mark of each of 1,024 workers in
//! ticks of the default layout (u64 each) and an FNV-1a checksum, all little-endian. The newer
//! intact generation bounds every id 0.1.0 issued.

use crate::token::checksum;

pub const FILES: [&str; 2] = ["snowflake_ext/lease.0", "snowflake_ext/lease.1"];
const MAGIC: &[u8; 8] = b"SFLEASE1";
const WORKERS: usize = 1024;
pub const LEN: usize = 8 + 8 + WORKERS * 8 + 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub generation: u64,
    /// Per worker, a tick of the default layout: every id of that worker is below it.
    pub marks: Vec<u64>,
}

/// The snapshot in `bytes`, or `None` if they are not a whole, intact 0.1.0 state file.
pub fn decode(bytes: &[u8]) -> Option<Snapshot> {
    if bytes.len() != LEN || &bytes[..8] != MAGIC {
        return None;
    }
    let (body, sum) = bytes.split_at(LEN - 8);
    if checksum(body).to_le_bytes() != sum {
        return None;
    }
    let word = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().unwrap());
    Some(Snapshot {
        generation: word(8),
        marks: (0..WORKERS).map(|w| word(16 + w * 8)).collect(),
    })
}

/// Of the two files, the newer intact one.
pub fn newest(a: Option<Snapshot>, b: Option<Snapshot>) -> Option<Snapshot> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if a.generation >= b.generation { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file as 0.1.0 wrote it.
    fn file(generation: u64, marks: &[u64]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&generation.to_le_bytes());
        for w in 0..WORKERS {
            out.extend_from_slice(&marks.get(w).copied().unwrap_or(0).to_le_bytes());
        }
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    #[test]
    fn files_of_0_1_0_are_read_and_the_newer_wins() {
        let a = decode(&file(7, &[1, 2, 3])).unwrap();
        let b = decode(&file(8, &[4])).unwrap();
        assert_eq!(a.marks[..3], [1, 2, 3]);
        assert_eq!(newest(Some(a.clone()), Some(b.clone())), Some(b.clone()));
        assert_eq!(newest(None, Some(a.clone())), Some(a));
        let mut torn = file(9, &[5]);
        torn[100] ^= 1;
        assert_eq!(decode(&torn), None);
        assert_eq!(decode(&file(9, &[5])[..100]), None);
    }
}
