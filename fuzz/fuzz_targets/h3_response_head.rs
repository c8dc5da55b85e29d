//! Fuzzes the HTTP/3 response translation: the field lines of a response head as our
//! handlers write them (and as an origin's fields reach them) become the fields HEADERS
//! carries, or an error; never a panic. Translated twice with one memo of field names
//! (the second time every name comes from the memo), the results must agree, and no
//! connection-specific field may reach HEADERS.
#![no_main]

use bytes::Bytes;
use edge_core::http::h3fields::{response_fields, NameMemo};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let block = Bytes::copy_from_slice(data);
    let memo = NameMemo::default();
    let first = response_fields(&block, &memo);
    let again = response_fields(&block, &memo);
    match (first, again) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b, "the memo changed the result");
            for hop in [
                "connection",
                "keep-alive",
                "proxy-connection",
                "upgrade",
                "transfer-encoding",
            ] {
                assert!(!a.contains_key(hop), "{hop} reached HEADERS");
            }
            assert!(a.len() <= 64);
        }
        (Err(_), Err(_)) => {}
        (a, b) => panic!("the memo changed the outcome: {a:?} / {b:?}"),
    }
});
