//! Fuzzes the index snapshot decoder (`edge_cache::snapshot::decode`) and the object
//! header check (`edge_cache::storage::decode_header`): both read files from the cache
//! volume, which a crash, a full disk or a hostile file can fill with any bytes. They
//! must return an error, never panic or allocate without bound; a snapshot that decodes
//! must encode back to the same bytes.
#![no_main]

use edge_cache::{snapshot, storage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(img) = snapshot::decode(data, &[1, 2]) {
        assert_eq!(snapshot::encode(&img, &[1, 2]), data);
    }
    let len = data.len() as u64;
    let _ = storage::header_len(data);
    let _ = storage::decode_header(data, 0, len);
});
