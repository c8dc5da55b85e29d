use super::*;

/// A self-signed certificate for `names`, written as `<tag>.pem` and `<tag>.key`.
fn cert(dir: &Path, tag: &str, names: &[&str]) -> (PathBuf, PathBuf) {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let ck = rcgen::generate_simple_self_signed(names).unwrap();
    let c = dir.join(format!("{tag}.pem"));
    let k = dir.join(format!("{tag}.key"));
    std::fs::write(&c, ck.cert.pem()).unwrap();
    std::fs::write(&k, ck.key_pair.serialize_pem()).unwrap();
    (c, k)
}

#[test]
fn key_pairs_load_and_mismatches_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, ka) = cert(dir.path(), "a", &["a.example"]);
    let (_cb, kb) = cert(dir.path(), "b", &["b.example", "*.b.example"]);
    let pair = load_key_pair(&ca, &ka).unwrap();
    assert_eq!(pair.dns_names, vec!["a.example".to_string()]);
    let e = load_key_pair(&ca, &kb).err().unwrap();
    assert!(e.contains("does not match"), "{e}");
    let e = load_key_pair(&dir.path().join("none.pem"), &ka)
        .err()
        .unwrap();
    assert!(e.contains("none.pem"), "{e}");
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not pem at all\n").unwrap();
    let e = load_key_pair(&junk, &ka).err().unwrap();
    assert!(e.contains("junk.pem"), "{e}");
    // A key file holding a certificate, not a key.
    let e = load_key_pair(&ca, &ca).err().unwrap();
    assert!(e.contains("a.pem"), "{e}");
}

#[test]
fn sni_picks_exact_then_wildcard_then_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, ka) = cert(dir.path(), "a", &["a.example"]);
    let (cb, kb) = cert(dir.path(), "b", &["b.example", "*.b.example"]);
    let (cc, kc) = cert(dir.path(), "c", &["c.example"]);
    let r = resolver(&[
        (ca, ka, vec![]),
        (cb, kb, vec![]),
        // An explicit list replaces the certificate's own names.
        (cc, kc, vec!["Named.Example".into()]),
    ])
    .unwrap();
    let a = r.pick(Some("a.example"));
    let b = r.pick(Some("b.example"));
    let c = r.pick(Some("named.example"));
    assert!(!Arc::ptr_eq(&a, &b) && !Arc::ptr_eq(&b, &c) && !Arc::ptr_eq(&a, &c));
    assert!(Arc::ptr_eq(&r.pick(Some("x.b.example")), &b), "wildcard");
    assert!(
        Arc::ptr_eq(&r.pick(Some("B.EXAMPLE.")), &b),
        "case and trailing dot"
    );
    // One label only, no name, an unknown name, the cert's own name when a list is set:
    // the default (the first certificate).
    for n in [
        Some("x.y.b.example"),
        None,
        Some("other.example"),
        Some("c.example"),
    ] {
        assert!(Arc::ptr_eq(&r.pick(n), &a), "{n:?}");
    }
}

#[test]
fn alpn_follows_http2_and_resumption_can_be_off() {
    let dir = tempfile::tempdir().unwrap();
    let (c, k) = cert(dir.path(), "a", &["a.example"]);
    let certs = [(c, k, vec![])];
    let with = server_config(&certs, true, true, true).unwrap().0;
    assert_eq!(
        with.alpn_protocols,
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    );
    assert!(with.ticketer.enabled());
    let without = server_config(&certs, false, false, false).unwrap().0;
    assert_eq!(without.alpn_protocols, vec![b"http/1.1".to_vec()]);
    assert!(!without.ticketer.enabled());
    assert_eq!(without.send_tls13_tickets, 0);
    assert!(server_config(&[], true, true, false).is_err());
}

#[test]
fn handshake_errors_are_classified() {
    use std::io::{Error, ErrorKind};
    assert_eq!(
        HANDSHAKE_ERRORS[handshake_error_kind(&Error::from(ErrorKind::TimedOut))],
        "timeout"
    );
    assert_eq!(
        HANDSHAKE_ERRORS[handshake_error_kind(&Error::from(ErrorKind::UnexpectedEof))],
        "eof"
    );
    let alert = Error::new(
        ErrorKind::InvalidData,
        rustls::Error::AlertReceived(rustls::AlertDescription::BadCertificate),
    );
    assert_eq!(HANDSHAKE_ERRORS[handshake_error_kind(&alert)], "alert");
    let proto = Error::new(
        ErrorKind::InvalidData,
        rustls::Error::InvalidMessage(rustls::InvalidMessage::MissingData("x")),
    );
    assert_eq!(HANDSHAKE_ERRORS[handshake_error_kind(&proto)], "protocol");
    let ciphers = Error::new(
        ErrorKind::InvalidData,
        rustls::Error::PeerIncompatible(rustls::PeerIncompatible::NoCipherSuitesInCommon),
    );
    assert_eq!(
        HANDSHAKE_ERRORS[handshake_error_kind(&ciphers)],
        "no_shared_cipher"
    );
}
