//! The binary as a process: flat memory while streaming 1 GiB, flags and exit codes,
//! signals, several serving threads.

mod common;

use common::origin;
use edge_testkit::{bin, free_addr, get, Client, Proc};
use std::hash::Hasher as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Resident memory of `pid` in KiB, from /proc.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn one_gib_streams_with_flat_memory_and_a_matching_checksum() {
    const GIB: u64 = 1 << 30;
    let (p, addr) = origin(&[]);
    let pid = p.child.id();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(b"GET /obj/1g/1 HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();

    let mut buf = vec![0u8; 256 * 1024];
    let mut head = Vec::new();
    let (mut body_bytes, mut max_rss, mut samples) = (0u64, 0u64, 0u32);
    let mut hasher = twox_hash::XxHash3_64::new();
    let mut checksum = String::new();
    let mut next_sample = 0u64;
    let started = Instant::now();
    while body_bytes < GIB {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "bounded: 1 GiB took over 5 min"
        );
        let n = match s.read(&mut buf) {
            Ok(n) => n,
            // A signal meant for another test's child can interrupt the read.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("read after {body_bytes} body bytes: {e}"),
        };
        assert!(n > 0, "closed after {body_bytes} body bytes");
        let mut chunk = &buf[..n];
        if checksum.is_empty() {
            head.extend_from_slice(chunk);
            let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let text = String::from_utf8_lossy(&head[..end]).to_string();
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
            assert!(
                text.contains(&format!("Content-Length: {GIB}\r\n")),
                "{text}"
            );
            checksum = text
                .lines()
                .find_map(|l| l.strip_prefix("X-Checksum: "))
                .unwrap()
                .to_string();
            let body_start = end + 4 - (head.len() - n);
            chunk = &buf[body_start..n];
        }
        hasher.write(chunk);
        body_bytes += chunk.len() as u64;
        if body_bytes >= next_sample {
            max_rss = max_rss.max(rss_kib(pid));
            samples += 1;
            next_sample += 16 << 20;
        }
    }
    assert_eq!(body_bytes, GIB);
    eprintln!(
        "1 GiB streamed in {:?}, peak RSS {max_rss} KiB over {samples} samples",
        started.elapsed()
    );
    assert!(samples >= 60, "RSS sampled throughout ({samples} samples)");
    assert!(
        max_rss < 64 * 1024,
        "RSS peaked at {max_rss} KiB while streaming 1 GiB"
    );
    assert_eq!(
        format!("{:016x}", hasher.finish()),
        checksum,
        "the streamed GiB matches X-Checksum"
    );
}

#[test]
fn bad_flags_exit_2_with_a_message() {
    for args in [
        vec!["--listen", "nonsense"],
        vec!["--sizes", "1k,huge"],
        vec!["--obj-dist", "pareto"],
        vec!["--count", "0"],
        vec!["--threads", "0"],
        vec!["--no-such-flag"],
    ] {
        let out = std::process::Command::new(bin("edgeorigin"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error"), "{args:?}: {err}");
    }
    let out = std::process::Command::new(bin("edgeorigin"))
        .args(["--sizes", "1k,huge"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("huge"));
}

#[test]
fn address_in_use_exits_1() {
    let (_p, addr) = origin(&[]);
    for threads in ["1", "3"] {
        let mut q = Proc::spawn(
            &bin("edgeorigin"),
            &["--listen", &addr.to_string(), "--threads", threads],
        );
        assert_eq!(q.wait_exit(Duration::from_secs(10)), Some(1));
        assert!(q.stderr().contains("bind"), "{}", q.stderr());
    }
}

/// The test helpers' answer to a port taken between its pick and the server's bind: a
/// second start on new ports. The port is held by a bound socket that neither listens
/// nor allows address reuse, so the server's bind fails and a connect is refused.
#[test]
fn a_port_taken_before_the_bind_is_picked_again() {
    use socket2::{Domain, Socket, Type};
    let held = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    held.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let taken = held.local_addr().unwrap().as_socket().unwrap();
    let mut tries = 0;
    let (_p, addr) = edge_testkit::start_listening(|| {
        tries += 1;
        let addr = if tries == 1 { taken } else { free_addr() };
        let mut p = Proc::spawn(&bin("edgeorigin"), &["--listen", &addr.to_string()]);
        p.try_wait_port(addr, Duration::from_secs(10))?;
        Ok((p, addr))
    });
    assert_eq!(tries, 2);
    assert_ne!(addr, taken);
    assert_eq!(get(addr, "/obj/1k/1", &[]).status, 200);
}

#[test]
fn sigterm_and_sigint_exit_0() {
    for sig in ["TERM", "INT"] {
        let (mut p, addr) = origin(&[]);
        assert_eq!(get(addr, "/obj/1k/1", &[]).status, 200);
        let mut idle = Client::connect(addr); // an open keep-alive connection must not block exit
        assert_eq!(idle.get("/obj/1k/1", &[]).status, 200);
        p.signal(sig);
        assert_eq!(p.wait_exit(Duration::from_secs(10)), Some(0), "SIG{sig}");
        assert!(
            TcpStream::connect(addr).is_err(),
            "not listening after exit"
        );
    }
}

#[test]
fn several_threads_share_the_port() {
    let (p, addr) = origin(&["--threads", "3"]);
    // Many connections, all answered, the same bytes whichever thread serves them.
    let first = get(addr, "/obj/8k/8", &[]).body;
    let handles: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                (0..20)
                    .map(|_| c.get("/obj/8k/8", &[]).body)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for h in handles {
        for b in h.join().unwrap() {
            assert_eq!(b, first);
        }
    }
    let stats = String::from_utf8(get(addr, "/stats", &[]).body).unwrap();
    assert!(
        stats.starts_with("{\"requests\":121,"),
        "summed over threads: {stats}"
    );
    let threads = std::fs::read_dir(format!("/proc/{}/task", p.child.id()))
        .unwrap()
        .count();
    assert!(threads >= 4, "main + 3 serving threads, saw {threads}");
}

#[test]
fn prints_where_it_listens() {
    let addr = free_addr();
    let mut p = Proc::spawn(
        &bin("edgeorigin"),
        &["--listen", &addr.to_string(), "--threads", "2"],
    );
    p.wait_port(addr, Duration::from_secs(10));
    // The line is printed just after the listener is up; give it a moment.
    let started = Instant::now();
    while !p.stderr().contains(&format!("listening on {addr}")) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{}",
            p.stderr()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
