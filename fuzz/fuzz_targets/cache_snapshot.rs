//! Fuzzes the index snapshot decoder (`edge_cache::snapshot::decode`) and the object
//! header check (`edge_cache::storage::decode_header`): both read files from the cache
//! volume, which a crash, a full disk or a hostile file can fill with any bytes. They
//! must return an error, never panic or allocate without bound; a snapshot that decodes
//! must encode back to the same bytes.
//!
//! Both formats end in (or carry) an xxh3 checksum that random bytes never match, so
//! each input is also tried with a valid one: the fuzzer then reaches the parsers behind
//! the checksum, as a file written by a buggy or hostile writer would.
#![no_main]

use std::hash::Hasher as _;
use edge_cache::{snapshot, storage};
use libfuzzer_sys::fuzz_target;
use twox_hash::XxHash3_64;

fuzz_target!(|data: &[u8]| {
    let levels = [1u8, 2];
    check_snapshot(data, &levels);
    let mut fixed = data.to_vec();
    if fixed.len() >= 8 {
        fixed[..8].copy_from_slice(b"EDGEIDX1");
    }
    let sum = XxHash3_64::oneshot(&fixed);
    fixed.extend_from_slice(&sum.to_le_bytes());
    check_snapshot(&fixed, &levels);

    let len = data.len() as u64;
    let _ = storage::decode_header(data, 0, len);
    if data.len() >= storage::PREFIX_LEN {
        let mut h = data.to_vec();
        h[..8].copy_from_slice(storage::MAGIC);
        h[8..12].copy_from_slice(&storage::FORMAT_VERSION.to_le_bytes());
        let meta_len = (h.len() - storage::PREFIX_LEN) as u32;
        h[12..16].copy_from_slice(&meta_len.to_le_bytes());
        let mut x = XxHash3_64::new();
        x.write(&h[..56]);
        x.write(&h[storage::PREFIX_LEN..]);
        let sum = x.finish();
        h[56..64].copy_from_slice(&sum.to_le_bytes());
        let hash = u128::from_le_bytes(h[32..48].try_into().unwrap());
        let _ = storage::decode_header(&h, hash, h.len() as u64);
    }
});

fn check_snapshot(data: &[u8], levels: &[u8]) {
    if let Ok(img) = snapshot::decode(data, levels) {
        assert_eq!(snapshot::encode(&img, levels), data);
    }
}
