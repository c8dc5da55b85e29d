//! Fuzzes `parse_response` for GET and HEAD requests: no panic, sane consumed length.
#![no_main]

use edge_http::{parse_response, BodyKind, Limits, Method};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for method in [Method::Get, Method::Head] {
        if let Ok(Some((head, n))) = parse_response(data, &Limits::default(), &method) {
            assert!(n <= data.len());
            if method == Method::Head {
                assert_eq!(head.body, BodyKind::Empty);
            }
        }
    }
});
