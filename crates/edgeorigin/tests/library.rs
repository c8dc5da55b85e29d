//! The library API as edgecache embeds it: `start` in-process, serve, `shutdown`.

use edge_testkit::{free_addr, get};
use edgeorigin::{start, ObjDist, Options};
use std::net::{SocketAddr, TcpStream};

#[test]
fn default_options_are_the_documented_ones() {
    let o = Options::default();
    assert_eq!(o.listen, SocketAddr::from(([127, 0, 0, 1], 8081)));
    assert_eq!(o.sizes, vec![1024, 10240, 102400, 1 << 20]);
    assert_eq!(
        (o.count, o.obj_dist, o.max_age, o.threads),
        (1000, ObjDist::Fixed, 3600, 1)
    );
    assert_eq!("zipf".parse::<ObjDist>(), Ok(ObjDist::Zipf));
    assert!("pareto".parse::<ObjDist>().is_err());
}

#[test]
fn start_serves_in_process_until_shutdown() {
    let opts = Options {
        listen: "127.0.0.1:0".parse().unwrap(),
        threads: 2,
        max_age: 7,
        ..Options::default()
    };
    let h = start(opts).unwrap();
    let addr = h.local_addr();
    assert_ne!(addr.port(), 0, "the real port is reported");
    let r = get(addr, "/obj/10k/1", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("cache-control"), Some("max-age=7"));
    let mut expect = vec![0u8; 10240];
    edgeorigin::object_bytes(10240, 1, 0, &mut expect);
    assert_eq!(r.body, expect);
    assert_eq!(
        r.header("x-checksum").unwrap(),
        format!("{:016x}", edgeorigin::checksum(10240, 1))
    );
    assert_eq!(h.stats().obj, (1, 10240));
    h.reset_stats();
    assert_eq!(h.stats().requests, 0);
    h.shutdown();
    assert!(TcpStream::connect(addr).is_err(), "closed after shutdown");
}

#[test]
fn bind_errors_are_returned() {
    let addr = free_addr();
    let first = start(Options {
        listen: addr,
        ..Options::default()
    })
    .unwrap();
    let again = start(Options {
        listen: addr,
        ..Options::default()
    });
    let err = again.err().expect("second bind on the same port fails");
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    let group = start(Options {
        listen: addr,
        threads: 4,
        ..Options::default()
    });
    assert_eq!(
        group.err().map(|e| e.kind()),
        Some(std::io::ErrorKind::AddrInUse),
        "no silent SO_REUSEPORT split"
    );
    drop(first);
    assert!(start(Options {
        listen: addr,
        threads: 0,
        ..Options::default()
    })
    .is_err());
}

#[test]
fn library_content_functions() {
    assert_eq!(edgeorigin::parse_size("16m"), Some(16 << 20));
    let mut whole = vec![0u8; 5000];
    edgeorigin::text_bytes(5000, 2, 0, &mut whole);
    let mut part = vec![0u8; 100];
    edgeorigin::text_bytes(5000, 2, 1234, &mut part);
    assert_eq!(part, &whole[1234..1334]);
    assert_eq!(
        edgeorigin::text_checksum(5000, 2),
        twox_hash::XxHash3_64::oneshot(&whole)
    );
}

/// A range deep inside a 2 GiB object is its own bytes (nothing before it generated);
/// `/stats` counts a streamed body as it is written, so a client that leaves midway is
/// charged what it was sent, and no request.
#[test]
fn huge_ranges_and_streamed_bytes_are_counted_as_sent() {
    use std::io::{Read, Write};
    let h = start(Options {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Options::default()
    })
    .unwrap();
    let addr = h.local_addr();
    let first = (1u64 << 30) + 12345;
    let range = format!("Range: bytes={first}-{}", first + (1 << 20) - 1);
    let r = get(addr, "/obj/2g/3", &[&range]);
    assert_eq!(r.status, 206);
    let mut expect = vec![0u8; 1 << 20];
    edgeorigin::object_bytes(2 << 30, 3, first, &mut expect);
    assert!(r.body == expect, "the bytes at the offset");
    assert_eq!(h.stats().obj, (1, 1 << 20));
    h.reset_stats();

    // 64 MiB, streamed: read 4 MiB of it, then leave.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /obj/64m/1 HTTP/1.1\r\nHost: o\r\n\r\n")
        .unwrap();
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    while got < 4 << 20 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the origin closed early");
        got += n;
    }
    // Counted while it goes out (the count follows each write: wait for it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while h.stats().bytes < 3 << 20 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mid = h.stats();
    assert!(mid.bytes >= 3 << 20, "{mid:?}");
    assert_eq!(mid.requests, 0, "not answered yet");
    drop(s);
    // The write fails once the client is gone: the bytes stay, the request never counts.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let after = h.stats();
    assert!(
        after.bytes >= mid.bytes && after.bytes < 64 << 20,
        "{after:?}"
    );
    assert_eq!(after.requests, 0);
    h.shutdown();
}
