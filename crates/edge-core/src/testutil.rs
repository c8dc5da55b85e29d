//! Helpers shared by this crate's unit tests.

use edge_http::RequestHead;

/// Parses a complete request head (`raw` ends with the blank line); panics if it is
/// not one.
pub(crate) fn parse(raw: &str) -> RequestHead {
    edge_http::parse_request(raw.as_bytes(), &edge_http::Limits::default())
        .unwrap()
        .unwrap()
        .0
}

/// `GET target HTTP/1.0` with these fields (1.0: Host optional).
pub(crate) fn req(target: &str, headers: &[(&str, &str)]) -> RequestHead {
    let mut raw = format!("GET {target} HTTP/1.0\r\n");
    for (n, v) in headers {
        raw.push_str(&format!("{n}: {v}\r\n"));
    }
    raw.push_str("\r\n");
    parse(&raw)
}

/// A current-thread runtime, as a worker has.
pub(crate) fn rt() -> tokio::runtime::Runtime {
    crate::rt::thread_runtime("test").unwrap()
}

/// A connected loopback pair: (server side as a tokio stream, client side as a std
/// stream).
pub(crate) async fn tcp_pair() -> (tokio::net::TcpStream, std::net::TcpStream) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().await.unwrap();
    (s, c)
}
