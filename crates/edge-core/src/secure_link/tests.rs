use super::*;
use crate::testutil::req;
use crate::vars::{normalize_uri, Client, Known, Maps, Routed};

const NOW: u64 = 1_700_000_000;

fn verifier(secrets: &[&[u8]], include: &[&str]) -> Verifier {
    let known = Known::default();
    let t = include
        .iter()
        .map(|s| Template::compile(s, &known).unwrap())
        .collect();
    Verifier::new(secrets, "expires", "sig", t)
}

/// The verdict on `target` from client 10.0.0.1.
fn check(v: &Verifier, target: &str) -> Verdict {
    check_from(v, target, "10.0.0.1")
}

fn check_from(v: &Verifier, target: &str, ip: &str) -> Verdict {
    let head = req(target, &[("Host", "example.com")]);
    let mut routed = Routed::default();
    if let Ok(Cow::Owned(u)) = normalize_uri(head.path()) {
        routed.uri = Some(u.into());
    }
    let client = Client {
        peer: SocketAddr::new(ip.parse().unwrap(), 5555),
        tls: false,
        server_port: 80,
    };
    let maps = Maps::default();
    v.verify(&Ctx::new(&head, client, "", &routed, &maps), NOW)
}

use std::net::SocketAddr;

/// The HMAC the contract defines, computed independently of the verifier.
fn reference_sig(secret: &[u8], parts: &[&str], expires: u64) -> String {
    let mut msg = parts.join("\n");
    msg.push('\n');
    msg.push_str(&expires.to_string());
    let k = hmac::Key::new(hmac::HMAC_SHA256, secret);
    hex(hmac::sign(&k, msg.as_bytes()).as_ref())
}

fn link(path: &str, secret: &[u8], expires: u64) -> String {
    format!(
        "{path}?expires={expires}&sig={}",
        reference_sig(secret, &[path], expires)
    )
}

#[test]
fn a_valid_link_passes_and_the_contract_is_hmac_sha256_hex() {
    let v = verifier(&[b"secret"], &["$uri"]);
    assert_eq!(
        check(&v, &link("/a/b", b"secret", NOW + 60)),
        Verdict::Valid
    );
    // The expiry second itself is still valid (nginx: expired when expires < now).
    assert_eq!(check(&v, &link("/a/b", b"secret", NOW)), Verdict::Valid);
    // RFC 4231 test case 2 pins the primitive: HMAC-SHA256("Jefe", ...).
    let k = hmac::Key::new(hmac::HMAC_SHA256, b"Jefe");
    assert_eq!(
        hex(hmac::sign(&k, b"what do ya want for nothing?").as_ref()),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    // Upper-case hex decodes to the same bytes.
    let up = link("/a/b", b"secret", NOW + 60).to_ascii_uppercase();
    let up = up
        .replace("/A/B?EXPIRES=", "/a/b?expires=")
        .replace("&SIG=", "&sig=");
    assert_eq!(check(&v, &up), Verdict::Valid);
}

#[test]
fn tampering_is_forbidden() {
    let v = verifier(&[b"secret"], &["$uri"]);
    let good = link("/a/b", b"secret", NOW + 60);
    // Another path with the same arguments.
    let other = good.replacen("/a/b", "/a/c", 1);
    assert_eq!(check(&v, &other), Verdict::Forbidden);
    // A later expiry with the same signature.
    let later = good.replacen(&format!("{}", NOW + 60), &format!("{}", NOW + 61), 1);
    assert_eq!(check(&v, &later), Verdict::Forbidden);
    // One flipped signature digit.
    let last = good.chars().last().unwrap();
    let flipped = format!(
        "{}{}",
        &good[..good.len() - 1],
        if last == '0' { '1' } else { '0' }
    );
    assert_eq!(check(&v, &flipped), Verdict::Forbidden);
    // Another secret.
    assert_eq!(
        check(&v, &link("/a/b", b"other", NOW + 60)),
        Verdict::Forbidden
    );
}

#[test]
fn expired_is_gone_only_with_a_valid_signature() {
    let v = verifier(&[b"secret"], &["$uri"]);
    assert_eq!(check(&v, &link("/a", b"secret", NOW - 1)), Verdict::Gone);
    assert_eq!(check(&v, &link("/a", b"secret", 0)), Verdict::Gone);
    // An expired link with a wrong signature says nothing about its expiry.
    assert_eq!(check(&v, &link("/a", b"bad", NOW - 1)), Verdict::Forbidden);
}

#[test]
fn arguments_are_parsed_strictly() {
    let v = verifier(&[b"secret"], &["$uri"]);
    let sig = reference_sig(b"secret", &["/a"], NOW + 60);
    let e = NOW + 60;
    for (target, why) in [
        ("/a".to_string(), "no query"),
        (format!("/a?expires={e}"), "no signature"),
        (format!("/a?sig={sig}"), "no expiry"),
        (format!("/a?expires={e}&sig={}", &sig[..63]), "short"),
        (format!("/a?expires={e}&sig={sig}0"), "long"),
        (format!("/a?expires={e}&sig={}g", &sig[..63]), "not hex"),
        (format!("/a?expires={e}&sig="), "empty signature"),
        (format!("/a?expires={e}&sig"), "signature without ="),
        (format!("/a?expires=0{e}&sig={sig}"), "leading zero"),
        (format!("/a?expires=+{e}&sig={sig}"), "sign"),
        (format!("/a?expires={e}.0&sig={sig}"), "fraction"),
        (format!("/a?expires=&sig={sig}"), "empty expiry"),
        (
            format!("/a?expires=99999999999999999999&sig={sig}"),
            "past u64",
        ),
        (
            format!("/a?expires={e}&sig={sig}&sig={sig}"),
            "repeated signature",
        ),
        (
            format!("/a?expires={e}&expires={e}&sig={sig}"),
            "repeated expiry",
        ),
        (
            format!("/a?EXPIRES={e}&SIG={sig}"),
            "names are case-sensitive",
        ),
        (format!("/a?expires=%31{e}&sig={sig}"), "not decoded"),
    ] {
        assert_eq!(check(&v, &target), Verdict::Forbidden, "{why}: {target}");
    }
    assert_eq!(
        parse_args(Some("sig=x"), "expires", "sig"),
        Err(ArgsError::Missing)
    );
    assert_eq!(
        parse_args(Some("expires=1&sig=zz"), "expires", "sig"),
        Err(ArgsError::BadSignature)
    );
    assert_eq!(
        parse_args(Some("expires=01&sig=zz"), "expires", "sig"),
        Err(ArgsError::BadExpiry)
    );
    assert_eq!(
        parse_args(Some("sig=1&sig=2&expires=1"), "expires", "sig"),
        Err(ArgsError::Repeated)
    );
    // Other arguments, in any order, do not disturb them.
    let ok = format!("/a?x=1&sig={sig}&y&expires={e}&z=");
    assert_eq!(check(&v, &ok), Verdict::Valid);
}

#[test]
fn rotated_secrets_old_and_new_verify_a_third_does_not() {
    let v = verifier(&[b"new", b"old"], &["$uri"]);
    assert_eq!(check(&v, &link("/o", b"new", NOW + 9)), Verdict::Valid);
    assert_eq!(check(&v, &link("/o", b"old", NOW + 9)), Verdict::Valid);
    assert_eq!(
        check(&v, &link("/o", b"third", NOW + 9)),
        Verdict::Forbidden
    );
    assert_eq!(check(&v, &link("/o", b"old", NOW - 9)), Verdict::Gone);
    // The first secret signs.
    let head = req("/o", &[]);
    let routed = Routed::default();
    let maps = Maps::default();
    let client = Client {
        peer: "10.0.0.1:1".parse().unwrap(),
        tls: false,
        server_port: 80,
    };
    let ctx = Ctx::new(&head, client, "", &routed, &maps);
    assert_eq!(
        v.sign(&v.message(&ctx, 5)),
        reference_sig(b"new", &["/o"], 5)
    );
}

#[test]
fn the_path_is_normalized_as_routing_does() {
    let v = verifier(&[b"s"], &["$uri"]);
    let sig = reference_sig(b"s", &["/a-b/c"], NOW + 5);
    let q = format!("?expires={}&sig={sig}", NOW + 5);
    for path in ["/a-b/c", "/a%2Db/c", "/a-b//./c", "/x/../a-b/c"] {
        assert_eq!(check(&v, &format!("{path}{q}")), Verdict::Valid, "{path}");
    }
    assert_eq!(check(&v, &format!("/a-b/C{q}")), Verdict::Forbidden);
}

#[test]
fn include_binds_the_client_and_the_query() {
    let v = verifier(&[b"s"], &["$uri", "$remote_addr"]);
    let e = NOW + 5;
    let sig = reference_sig(b"s", &["/f", "10.0.0.1"], e);
    let target = format!("/f?expires={e}&sig={sig}");
    assert_eq!(check_from(&v, &target, "10.0.0.1"), Verdict::Valid);
    assert_eq!(check_from(&v, &target, "10.0.0.2"), Verdict::Forbidden);

    // `$args` and `$request_uri` see the query without our two arguments.
    let v = verifier(&[b"s"], &["$request_uri", "$args|$is_args|$arg_sig"]);
    let sig = reference_sig(b"s", &["/f?a=1&b=2", "a=1&b=2|?|"], e);
    assert_eq!(
        check(&v, &format!("/f?a=1&b=2&expires={e}&sig={sig}")),
        Verdict::Valid
    );
    assert_eq!(
        check(&v, &format!("/f?a=1&expires={e}&b=2&sig={sig}")),
        Verdict::Valid,
        "the arguments may sit anywhere"
    );
    assert_eq!(
        check(&v, &format!("/f?a=1&b=3&expires={e}&sig={sig}")),
        Verdict::Forbidden,
        "another query"
    );
    let bare = reference_sig(b"s", &["/f", "||"], e);
    assert_eq!(
        check(&v, &format!("/f?expires={e}&sig={bare}")),
        Verdict::Valid,
        "a query of only our arguments is no query"
    );
}

#[test]
fn strip_args_keeps_the_other_pieces_in_order() {
    assert!(matches!(
        strip_args("a=1&b=2", "e", "s"),
        Cow::Borrowed("a=1&b=2")
    ));
    assert_eq!(strip_args("e=1&a=1&s=2&b", "e", "s"), "a=1&b");
    assert_eq!(strip_args("e=1&s=2", "e", "s"), "");
    assert_eq!(strip_args("a&&e&b", "e", "s"), "a&&b");
    assert_eq!(strip_args("ee=1&e", "e", "s"), "ee=1");
}

#[test]
fn key_args_drop_both_arguments_from_any_policy() {
    let v = verifier(&[b"s"], &["$uri"]);
    let p = v.key_args(None);
    assert_eq!(&*p.apply("a=1&expires=5&sig=ab&b=2"), "a=1&b=2");
    let sorted = v.key_args(Some(ArgsPolicy {
        sort: true,
        include: Some(vec![ArgPattern::parse("*").unwrap()]),
        exclude: Vec::new(),
    }));
    assert_eq!(&*sorted.apply("sig=1&b=2&expires=3&a=1"), "a=1&b=2");
}
