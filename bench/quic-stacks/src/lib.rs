//! Shared bits of the QUIC stack evaluation servers (issue 31, scope item 2).
//!
//! How it fits: each binary in `src/bin` is a minimal HTTP/3 server on one stack
//! (quinn + h3, quiche's h3 module) answering `GET /1k` with 1,024 bytes on one thread,
//! started by `run.py` with the same certificate; run.py measures them side by side.
//! Nothing here is part of the edgecache workspace.

/// The response body of `/1k` (and the size for any other path is 404, empty).
pub const BODY_1K: [u8; 1024] = [b'x'; 1024];

/// `(port, cert.pem, key.pem, option)` from the command line: `BIN PORT CERT KEY [OPT]`
/// (the quiche server takes `gso`).
pub fn args() -> (u16, String, String, Option<String>) {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 4 && a.len() != 5 {
        eprintln!("usage: {} PORT CERT.pem KEY.pem [OPTION]", a[0]);
        std::process::exit(2);
    }
    let port = a[1].parse().expect("port");
    (port, a[2].clone(), a[3].clone(), a.get(4).cloned())
}

/// The body for a request path: `Some(body)` for `/1k`, `None` (404) otherwise.
pub fn body_for(path: &str) -> Option<&'static [u8]> {
    (path == "/1k").then_some(&BODY_1K[..])
}
