//! Fuzzes `parse_request` under default and tiny limits: no panic, and a head never
//! claims more bytes than it was given or than the head limit.
#![no_main]

use edge_http::{parse_request, BodyKind, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let tiny = Limits {
        max_request_line: 32,
        max_header_bytes: 96,
        max_headers: 4,
        max_body: Some(16),
    };
    for limits in [Limits::default(), tiny] {
        if let Ok(Some((head, n))) = parse_request(data, &limits) {
            assert!(n <= data.len() && n <= limits.max_header_bytes);
            assert_ne!(head.body, BodyKind::CloseDelimited);
            let again = parse_request(&data[..n], &limits).expect("head re-parses");
            assert_eq!(again.map(|(_, m)| m), Some(n));
            let _ = (head.path(), head.query(), head.host(), head.path_and_query());
        }
    }
});
