//! Fuzzes `ObjectMeta::decode`, the parser of the metadata stored in every cache file.
//! A crash, a full disk or a hostile file on the cache volume can put any bytes there;
//! decoding must return an error, never panic, and whatever decodes must re-encode to
//! the same bytes it was decoded from would describe (a decode/encode/decode round trip
//! gives the same object).
#![no_main]

use edge_cache::ObjectMeta;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(meta) = ObjectMeta::decode(data) {
        let mut again = Vec::new();
        meta.encode(&mut again);
        let twice = ObjectMeta::decode(&again).expect("an encoded meta decodes");
        assert_eq!(format!("{meta:?}"), format!("{twice:?}"));
    }
});
