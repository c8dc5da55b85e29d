//! Fuzzes `edge_core::vars::normalize_uri`, nginx's `$uri` (percent-decoding, `.`/`..`
//! segments, merged slashes) on any path a client can send. Invariants: nothing panics;
//! a result starts with `/`, has no `//`, no `.` or `..` segment, no raw control byte,
//! and every `%` in it starts a valid escape; normalizing it again gives it back
//! unchanged (idempotent); an input that is already normal comes back as it is.
#![no_main]

use edge_core::vars::normalize_uri;
use libfuzzer_sys::fuzz_target;
use std::borrow::Cow;

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(once) = normalize_uri(path) else {
        return;
    };
    assert!(once.starts_with('/'), "{path:?} -> {once:?}");
    assert!(!once.contains("//"), "{path:?} -> {once:?}");
    for seg in once.split('/') {
        assert!(seg != "." && seg != "..", "{path:?} -> {once:?}");
    }
    let b = once.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        assert!(c >= 0x20 && c != 0x7f, "{path:?} -> {once:?}");
        if c == b'%' {
            assert!(
                b.len() > i + 2 && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit(),
                "{path:?} -> {once:?}"
            );
        }
    }
    if let Cow::Borrowed(s) = &once {
        assert_eq!(*s, path);
    }
    let twice = normalize_uri(&once).expect("a normalized path normalizes");
    assert_eq!(twice, once, "not idempotent on {path:?}");
});
