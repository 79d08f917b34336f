//! SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed hash made to be a MAC for short
//! messages. The mark writer seals the marks table's header and rows with it, under a key
//! that lives only in the data directory (`token.rs`), so that nobody who can change the
//! table through SQL, but cannot read the server's files, can make an edited table look like
//! the one the writer left (`startup.rs`).

/// SipHash-2-4 of `message` under `key`.
pub fn siphash24(key: &[u8; 16], message: &[u8]) -> u64 {
    let k0 = u64::from_le_bytes(key[..8].try_into().unwrap());
    let k1 = u64::from_le_bytes(key[8..].try_into().unwrap());
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let mut chunks = message.chunks_exact(8);
    for chunk in &mut chunks {
        let m = u64::from_le_bytes(chunk.try_into().unwrap());
        v[3] ^= m;
        rounds(&mut v, 2);
        v[0] ^= m;
    }
    let mut last = [0u8; 8];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    last[7] = message.len() as u8;
    let b = u64::from_le_bytes(last);
    v[3] ^= b;
    rounds(&mut v, 2);
    v[0] ^= b;
    v[2] ^= 0xff;
    rounds(&mut v, 4);
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

fn rounds(v: &mut [u64; 4], n: usize) {
    for _ in 0..n {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_vectors() {
        // The paper's key 00..0f; its Appendix A message 00..0e, and the first entries of the
        // reference implementation's vectors (messages 00..(n-1)).
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let message: Vec<u8> = (0..15).collect();
        assert_eq!(siphash24(&key, &message), 0xa129_ca61_49be_45e5);
        assert_eq!(siphash24(&key, &[]), 0x726f_db47_dd0e_0e31);
        assert_eq!(siphash24(&key, &[0]), 0x74f8_39c5_93dc_67fd);
        let eight: Vec<u8> = (0..8).collect();
        assert_eq!(siphash24(&key, &eight), 0x93f5_f579_9a93_2462);
    }
}
