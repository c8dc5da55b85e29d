use super::*;
use crate::transport::write_all;
use std::io::Read;
use std::net::TcpListener;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Latency starts at the intended time when the server held the connection then, or
/// when the client was late by more than its timer's slack; at the actual send when
/// only the timer's slack separates them.
#[test]
fn open_loop_latency_starts_where_the_wait_is_the_servers() {
    let t = Instant::now();
    let ms = |n: u64| Duration::from_millis(n);
    let due = t + ms(10);
    // Free since before `due`, sent 1 ms late: the client's timer.
    assert_eq!(open_loop_start(due, due + ms(1), t), due + ms(1));
    // On time.
    assert_eq!(open_loop_start(due, due, t), due);
    // The connection was busy until after `due` (the previous response was late):
    // the server's wait, charged from `due`.
    assert_eq!(open_loop_start(due, due + ms(1), due + ms(1)), due);
    // Free, but the client 50 ms late (overloaded): charged from `due`, as wrk2.
    assert_eq!(open_loop_start(due, due + ms(50), t), due);
}

#[test]
fn connect_times_the_handshake() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    rt().block_on(async {
        let fd = connect(addr, None, Instant::now() + Duration::from_secs(2))
            .await
            .ok()
            .expect("connect");
        let (mut srv, _) = l.accept().unwrap();
        write_all(&fd, b"ping", Instant::now() + Duration::from_secs(2))
            .await
            .unwrap();
        let mut buf = [0u8; 4];
        srv.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
    });
    drop(l);
    // Nobody listens any more: refused, not a timeout.
    rt().block_on(async {
        let r = connect(addr, None, Instant::now() + Duration::from_secs(2)).await;
        assert!(matches!(r, Err(ConnectError::Failed)));
    });
}

#[test]
fn connect_binds_the_source_address() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    for src in ["127.0.0.3", "127.0.0.77"] {
        let ip: IpAddr = src.parse().unwrap();
        rt().block_on(async {
            let _fd = connect(addr, Some(ip), Instant::now() + Duration::from_secs(2))
                .await
                .ok()
                .expect("connect");
            let (_srv, peer) = l.accept().unwrap();
            assert_eq!(peer.ip(), ip);
            assert_ne!(peer.port(), 0);
        });
    }
    // An address this host does not have: a connect failure, not a panic.
    rt().block_on(async {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let r = connect(addr, Some(ip), Instant::now() + Duration::from_secs(2)).await;
        assert!(matches!(r, Err(ConnectError::Failed)));
    });
}

#[test]
fn open_loop_schedule_is_even() {
    let t0 = Instant::now();
    let mut p = Pacing::Open {
        t0,
        interval_ns: 2_500_000.0,
        k: 0,
    };
    let mut due = Vec::new();
    for _ in 0..5 {
        due.push(p.due().unwrap().duration_since(t0).as_micros());
        p.advance();
    }
    assert_eq!(due, vec![0, 2500, 5000, 7500, 10000]);
    assert!(Pacing::Closed.due().is_none());
}
