//! Fuzzes the HTTP/2 response translation: a response head as our handlers write it
//! (and as an origin's fields reach it) becomes a status, a body framing and the fields
//! HEADERS carries, or an error; never a panic. Parsed twice with one memo of field
//! names (the second time every name comes from the memo), the results must agree, and
//! no connection-specific field may reach HEADERS.
#![no_main]

use bytes::Bytes;
use edge_core::http::h2stream::{response_fields, NameMemo};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let head = Bytes::copy_from_slice(data);
    let memo = NameMemo::default();
    let first = response_fields(&head, &memo);
    let again = response_fields(&head, &memo);
    match (first, again) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b, "the memo changed the result");
            if let Some((status, _, fields)) = a {
                assert!(status.as_u16() >= 200);
                for hop in [
                    "connection",
                    "keep-alive",
                    "proxy-connection",
                    "upgrade",
                    "transfer-encoding",
                ] {
                    assert!(!fields.contains_key(hop), "{hop} reached HEADERS");
                }
                assert!(fields.len() <= 64);
            }
        }
        (Err(_), Err(_)) => {}
        (a, b) => panic!("the memo changed the outcome: {a:?} / {b:?}"),
    }
});
