//! quiche (BoringSSL) and its `h3` module: `GET /1k` answered with 1,024 bytes, one
//! thread, our own UDP loop (mio; one `recv_from`/`send_to` per datagram, no GSO: the
//! sans-I/O API leaves batching to the caller). Connections are keyed by the connection
//! ID we issue (16 random bytes here; a real server would encode the worker in it).

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;

use quic_stacks::{args, body_for};
use quiche::h3::NameValue;

const MAX_UDP: usize = 1350;
const HEAD_PENDING: usize = usize::MAX;
/// The length of the connection IDs we issue (short headers carry no length).
const CID_LEN: usize = 16;

struct Conn {
    quic: quiche::Connection,
    h3: Option<quiche::h3::Connection>,
    /// Responses not fully written yet: stream -> body bytes sent, or `HEAD_PENDING`
    /// when even the response head did not fit.
    pending: HashMap<u64, usize>,
}

fn main() {
    let (port, cert, key) = args();
    let mut cfg = quiche::Config::new(quiche::PROTOCOL_VERSION).expect("config");
    cfg.load_cert_chain_from_pem_file(&cert).expect("cert");
    cfg.load_priv_key_from_pem_file(&key).expect("key");
    cfg.set_application_protos(quiche::h3::APPLICATION_PROTOCOL)
        .expect("alpn");
    cfg.set_max_idle_timeout(30_000);
    cfg.set_max_recv_udp_payload_size(MAX_UDP);
    cfg.set_max_send_udp_payload_size(MAX_UDP);
    // The same windows as quinn's defaults, roughly: 100 concurrent streams.
    cfg.set_initial_max_data(10_000_000);
    cfg.set_initial_max_stream_data_bidi_local(1_250_000);
    cfg.set_initial_max_stream_data_bidi_remote(1_250_000);
    cfg.set_initial_max_stream_data_uni(1_250_000);
    cfg.set_initial_max_streams_bidi(100);
    cfg.set_initial_max_streams_uni(100);
    let h3cfg = quiche::h3::Config::new().expect("h3 config");

    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut sock = mio::net::UdpSocket::bind(addr).expect("bind");
    let mut poll = mio::Poll::new().expect("poll");
    poll.registry()
        .register(&mut sock, mio::Token(0), mio::Interest::READABLE)
        .expect("register");
    let mut events = mio::Events::with_capacity(64);
    eprintln!("quiche-h3 listening on {addr}");

    let mut seed = [0u8; CID_LEN];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut seed))
        .expect("urandom");
    let mut next_id: u64 = 0;
    // Our CIDs -> connection; the client's first DCID -> our CID (its Initial retries).
    let mut conns: HashMap<Vec<u8>, Conn> = HashMap::new();
    let mut aliases: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut buf = vec![0u8; 65535];
    let mut out = vec![0u8; MAX_UDP];

    loop {
        let timeout = conns.values().filter_map(|c| c.quic.timeout()).min();
        match poll.poll(&mut events, timeout) {
            Ok(()) => {}
            // valgrind's vgdb (callgrind_control) interrupts the wait.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("poll: {e}"),
        }
        if events.is_empty() {
            conns.values_mut().for_each(|c| c.quic.on_timeout());
        }
        loop {
            let (len, from) = match sock.recv_from(&mut buf) {
                Ok(v) => v,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => panic!("recv: {e}"),
            };
            let pkt = &mut buf[..len];
            let Ok(hdr) = quiche::Header::from_slice(pkt, CID_LEN) else {
                continue;
            };
            let dcid = hdr.dcid.to_vec();
            let key = if conns.contains_key(&dcid) {
                dcid
            } else if let Some(k) = aliases.get(&dcid) {
                k.clone()
            } else {
                if hdr.ty != quiche::Type::Initial || !quiche::version_is_supported(hdr.version) {
                    continue;
                }
                next_id += 1;
                let mut id = seed;
                for (b, n) in id.iter_mut().zip(next_id.to_le_bytes()) {
                    *b ^= n;
                }
                let scid = quiche::ConnectionId::from_vec(id.to_vec());
                let Ok(quic) = quiche::accept(&scid, None, addr, from, &mut cfg) else {
                    continue;
                };
                aliases.insert(dcid, id.to_vec());
                conns.insert(
                    id.to_vec(),
                    Conn {
                        quic,
                        h3: None,
                        pending: HashMap::new(),
                    },
                );
                id.to_vec()
            };
            let Some(c) = conns.get_mut(&key) else {
                continue;
            };
            if c.quic
                .recv(pkt, quiche::RecvInfo { from, to: addr })
                .is_err()
            {
                continue;
            }
            serve(c, &h3cfg);
        }
        for c in conns.values_mut() {
            loop {
                match c.quic.send(&mut out) {
                    Ok((n, info)) => {
                        if let Err(e) = sock.send_to(&out[..n], info.to) {
                            if e.kind() == std::io::ErrorKind::WouldBlock {
                                break;
                            }
                            panic!("send: {e}");
                        }
                    }
                    Err(quiche::Error::Done) => break,
                    Err(_) => {
                        let _ = c.quic.close(false, 0x1, b"fail");
                        break;
                    }
                }
            }
        }
        conns.retain(|_, c| !c.quic.is_closed());
        if aliases.len() > 2 * conns.len() + 64 {
            aliases.retain(|_, k| conns.contains_key(k));
        }
    }
}

/// Start HTTP/3 once the handshake is done, continue blocked bodies, answer requests.
fn serve(c: &mut Conn, h3cfg: &quiche::h3::Config) {
    if c.h3.is_none() && c.quic.is_established() {
        match quiche::h3::Connection::with_transport(&mut c.quic, h3cfg) {
            Ok(h) => c.h3 = Some(h),
            Err(_) => return,
        }
    }
    let Some(h3) = c.h3.as_mut() else {
        return;
    };
    let writable: Vec<u64> = c.quic.writable().collect();
    for sid in writable {
        if let Some(mut sent) = c.pending.get(&sid).copied() {
            if sent == HEAD_PENDING {
                if respond_head(h3, &mut c.quic, sid, true).is_err() {
                    continue;
                }
                sent = 0;
                c.pending.insert(sid, 0);
            }
            let body = &quic_stacks::BODY_1K[sent..];
            match h3.send_body(&mut c.quic, sid, body, true) {
                Ok(n) if n == body.len() => {
                    c.pending.remove(&sid);
                }
                Ok(n) => {
                    c.pending.insert(sid, sent + n);
                }
                Err(quiche::h3::Error::Done) => {}
                Err(_) => {
                    c.pending.remove(&sid);
                }
            }
        }
    }
    loop {
        match h3.poll(&mut c.quic) {
            Ok((sid, quiche::h3::Event::Headers { list, .. })) => {
                let path = list
                    .iter()
                    .find(|h| h.name() == b":path")
                    .map(|h| String::from_utf8_lossy(h.value()).into_owned())
                    .unwrap_or_default();
                let body = body_for(&path);
                match respond_head(h3, &mut c.quic, sid, body.is_some()) {
                    Ok(()) => {}
                    Err(quiche::h3::Error::StreamBlocked) => {
                        if body.is_some() {
                            c.pending.insert(sid, HEAD_PENDING);
                        }
                        continue;
                    }
                    Err(e) => {
                        eprintln!("send_response {sid}: {e:?}");
                        continue;
                    }
                }
                if let Some(b) = body {
                    match h3.send_body(&mut c.quic, sid, b, true) {
                        Ok(n) if n == b.len() => {}
                        Ok(n) => {
                            c.pending.insert(sid, n);
                        }
                        Err(_) => {
                            c.pending.insert(sid, 0);
                        }
                    }
                }
            }
            Ok(_) => {}
            Err(quiche::h3::Error::Done) => break,
            Err(e) => {
                eprintln!("h3 poll: {e:?}");
                break;
            }
        }
    }
}

/// The response head: 200 with the 1 KiB length, or an empty 404 (which ends the stream).
fn respond_head(
    h3: &mut quiche::h3::Connection,
    quic: &mut quiche::Connection,
    sid: u64,
    found: bool,
) -> Result<(), quiche::h3::Error> {
    let (status, len): (&[u8], &[u8]) = if found {
        (b"200", b"1024")
    } else {
        (b"404", b"0")
    };
    let head = [
        quiche::h3::Header::new(b":status", status),
        quiche::h3::Header::new(b"content-length", len),
    ];
    h3.send_response(quic, sid, &head, !found)
}
