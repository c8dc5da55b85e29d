//! Fuzzes our HTTP/2 request side: any bytes as HPACK header blocks (two blocks on one
//! decoder, so the second one reads the dynamic table the first built) decode to a
//! header list or an error, never a panic, and a list becomes a request head with the
//! checks of our HTTP/1.1 parser, or a refusal. A head has no connection-specific
//! field, at most one cookie field, and a chunked body only when there is a body; a
//! list over its limit is flagged, never kept beyond it.
#![no_main]

use edge_http::h2::hpack::{Decoder, HeaderList};
use edge_http::h2::request_head;
use edge_http::{BodyKind, Limits, Version};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let has_body = flags & 1 == 1;
    let limit = if flags & 2 == 0 { 16 * 1024 } else { 300 };
    let mut dec = Decoder::new(4096);
    let mut list = HeaderList::default();
    let split = data.iter().position(|&b| b == 0xff).unwrap_or(data.len());
    for block in [&data[..split], data.get(split + 1..).unwrap_or_default()] {
        if dec.decode(block, &mut list, limit).is_err() {
            return;
        }
        let kept: usize = list.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
        assert!(kept <= limit, "{kept} bytes kept over a limit of {limit}");
        assert!(list.over_limit || kept == list.size);
        let Ok((head, _len)) = request_head(&list, has_body, &Limits::default(), None) else {
            continue;
        };
        assert_eq!(head.version, Version::Http2);
        assert!(head.body != BodyKind::Chunked || has_body);
        for hop in ["connection", "transfer-encoding", "te", "upgrade", "keep-alive", "expect"] {
            assert!(!head.headers.contains(hop), "{hop}");
        }
        assert!(head.headers.get_all("cookie").count() <= 1);
    }
});
