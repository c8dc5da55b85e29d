//! Fuzzes the signed-URL verifier (`edge_core::secure_link`) on any query and request
//! target a client can send. The first byte picks the `include` templates and the
//! expiry; the rest is the target (or, when it does not parse, only a query).
//! Invariants: nothing panics; a verdict other than 403 comes with arguments that parse;
//! `strip_args` leaves none of our arguments and is idempotent; and signing the target
//! (what `edgecache sign` does, which checks its result with the verifier) never makes a
//! URL the verifier refuses: a valid link for every target the server would route.
#![no_main]

use edge_core::secure_link::{parse_args, sign, strip_args, Verdict, Verifier};
use edge_core::vars::{normalize_uri, Client, Ctx, Known, Maps, Routed, Template};
use libfuzzer_sys::fuzz_target;
use std::borrow::Cow;

const NOW: u64 = 1_700_000_000;
const INCLUDES: [&[&str]; 4] = [
    &["$uri"],
    &["$uri", "$args"],
    &["$request_uri", "$remote_addr"],
    &["$arg_a$is_args$host", "$uri"],
];

fn name(piece: &str) -> &str {
    piece.split_once('=').map_or(piece, |(n, _)| n)
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let include = INCLUDES[usize::from(sel & 3)];

    let parsed = parse_args(Some(&text), "expires", "sig");
    let stripped = strip_args(&text, "expires", "sig");
    assert!(stripped
        .split('&')
        .all(|p| name(p) != "expires" && name(p) != "sig"));
    assert_eq!(strip_args(&stripped, "expires", "sig"), stripped);
    if parsed.is_ok() {
        assert!(matches!(stripped, Cow::Owned(_)));
    }

    let known = Known::default();
    let templates: Vec<Template> = include
        .iter()
        .map(|s| Template::compile(s, &known).unwrap())
        .collect();
    let v = Verifier::new(&[&b"k1"[..], b"k2"], "expires", "sig", templates);
    let raw = format!("GET {text} HTTP/1.1\r\nHost: h.example\r\n\r\n");
    if let Ok(Some((head, _))) =
        edge_http::parse_request(raw.as_bytes(), &edge_http::Limits::default())
    {
        let mut routed = Routed::default();
        match normalize_uri(head.path()) {
            Ok(Cow::Owned(u)) => routed.uri = Some(u.into()),
            Ok(Cow::Borrowed(_)) => {}
            Err(_) => return,
        }
        let client = Client {
            peer: "192.0.2.1:1".parse().unwrap(),
            tls: false,
            server_port: 80,
        };
        let maps = Maps::default();
        let ctx = Ctx::new(&head, client, "", &routed, &maps);
        let verdict = v.verify(&ctx, NOW);
        if verdict != Verdict::Forbidden {
            assert!(parse_args(head.query(), "expires", "sig").is_ok());
        }
    }

    // Signing round trip: sign_url verifies what it makes with the same verifier.
    if text.starts_with('/') {
        let include: Vec<String> = include.iter().map(|s| s.to_string()).collect();
        let expires = NOW + u64::from(sel >> 2);
        let r = sign::SignRequest {
            url: &text,
            secret: b"k1",
            expires,
            expires_arg: "expires",
            signature_arg: "sig",
            include: &include,
            remote_addr: Some("192.0.2.1".parse().unwrap()),
            headers: &["Host: h.example".to_string()],
        };
        if let Err(e) = sign::sign_url(&r) {
            assert!(!e.contains("internal error"), "{text:?}: {e}");
        }
    }
});
