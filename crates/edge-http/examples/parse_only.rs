//! Profiling harness: parses one request in a loop, for `perf record` or
//! `valgrind --tool=callgrind` (instruction counts are stable on a noisy machine):
//! `parse_only [iterations] [small]`.
use std::hint::black_box;
fn main() {
    let req: &[u8] = b"GET /obj/10k/12345?v=3 HTTP/1.1\r\nHost: cdn.example.com\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\nAccept: text/html,*/*;q=0.8\r\nAccept-Encoding: gzip, deflate, br, zstd\r\nAccept-Language: en-US,en;q=0.9\r\nCache-Control: no-cache\r\nConnection: keep-alive\r\nCookie: session=abcdef0123456789\r\nReferer: https://cdn.example.com/index.html\r\nIf-None-Match: \"5d8c72a5edda8\"\r\n\r\n";
    let small: &[u8] = b"GET /obj/1k/1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n";
    let req = if std::env::args().nth(2).as_deref() == Some("small") {
        small
    } else {
        req
    };
    let limits = edge_http::Limits::default();
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000_000);
    for _ in 0..n {
        black_box(edge_http::parse_request(black_box(req), &limits).unwrap());
    }
}
