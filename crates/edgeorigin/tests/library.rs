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
        xxhash_rust::xxh3::xxh3_64(&whole)
    );
}
