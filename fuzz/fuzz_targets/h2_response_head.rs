//! Fuzzes our HPACK encoder against our decoder: the field lines of a response head,
//! as our handlers write them (and as an origin's fields reach them), encoded three
//! times on one connection (the name memo and the dynamic table in use from the second
//! time on, the client's table size changed before the third) decode to exactly the
//! fields expected: valid names lowercased, connection-specific fields left out, values
//! as written, in order.
#![no_main]

use edge_http::h2::hpack::{Decoder, Encoder, HeaderList};
use edge_http::h2::is_token_byte;
use edge_http::FieldLines;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&size, data)) = data.split_first() else {
        return;
    };
    let mut want = vec![(b":status".to_vec(), b"200".to_vec())];
    let mut lines = FieldLines::new(data, 64);
    for (n, v) in lines.by_ref() {
        if n.is_empty() || !n.iter().all(|&b| is_token_byte(b)) {
            continue;
        }
        let n = n.to_ascii_lowercase();
        if matches!(
            &n[..],
            b"connection" | b"keep-alive" | b"proxy-connection" | b"upgrade" | b"transfer-encoding"
        ) {
            continue;
        }
        want.push((n, v.to_vec()));
    }
    let mut enc = Encoder::new();
    let mut dec = Decoder::new(4096);
    let mut list = HeaderList::default();
    for round in 0..3 {
        if round == 2 {
            enc.set_peer_table_size(size as usize * 16);
        }
        let mut out = Vec::new();
        enc.status(&mut out, 200);
        for (n, v) in FieldLines::new(data, 64) {
            enc.field(&mut out, n, v);
        }
        dec.decode(&out, &mut list, 1 << 20).expect("our own block decodes");
        let got: Vec<(Vec<u8>, Vec<u8>)> =
            list.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect();
        assert_eq!(got, want, "round {round}");
    }
});
