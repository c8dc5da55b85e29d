//! quiche (BoringSSL) and its `h3` module: `GET /1k` answered with 1,024 bytes, one
//! thread, our own UDP loop (mio; one `recv_from` per datagram, and one `send_to` per
//! datagram, or with the `gso` option one `sendmsg` with UDP_SEGMENT per run of
//! same-size datagrams: the sans-I/O API leaves batching to the caller). Connections are keyed by the connection
//! ID we issue (16 random bytes here; a real server would encode the worker in it).

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;

use quic_stacks::{args, body_for};
use quiche::h3::NameValue;

const MAX_UDP: usize = 1350;
const HEAD_PENDING: usize = usize::MAX;
/// Datagrams in one GSO send at most (the kernel allows 64, and 64 KiB in all).
const MAX_SEGMENTS: usize = 40;
/// `UDP_SEGMENT` (linux/udp.h): the cmsg carrying the GSO segment size.
const UDP_SEGMENT: libc::c_int = 103;
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
    let (port, cert, key, opt) = args();
    let gso = opt.as_deref() == Some("gso");
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
    let mut batch: Vec<u8> = Vec::with_capacity(MAX_SEGMENTS * MAX_UDP);

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
            if gso {
                send_batched(&sock, c, &mut batch);
                continue;
            }
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

/// Everything the connection has to send, as runs of datagrams of one size to one
/// address (the last of a run may be shorter), each run in one `sendmsg` with GSO.
fn send_batched(sock: &mio::net::UdpSocket, c: &mut Conn, batch: &mut Vec<u8>) {
    batch.clear();
    let (mut seg, mut to) = (0usize, None);
    loop {
        let start = batch.len();
        batch.resize(start + MAX_UDP, 0);
        let (n, info) = match c.quic.send(&mut batch[start..]) {
            Ok(v) => v,
            Err(e) => {
                batch.truncate(start);
                if e != quiche::Error::Done {
                    let _ = c.quic.close(false, 0x1, b"fail");
                }
                break;
            }
        };
        batch.truncate(start + n);
        if start > 0 && (Some(info.to) != to || n > seg) {
            // It cannot join the run: send the run, start a new one with it.
            send_gso(sock, &batch[..start], seg, to.expect("run has an address"));
            batch.drain(..start);
        }
        if batch.len() == n {
            (seg, to) = (n, Some(info.to));
        }
        if n < seg || batch.len() / seg >= MAX_SEGMENTS {
            send_gso(sock, batch, seg, info.to);
            batch.clear();
        }
    }
    if let Some(to) = to.filter(|_| !batch.is_empty()) {
        send_gso(sock, batch, seg, to);
    }
}

/// One `sendmsg` of `buf` to `to` (IPv4), cut by the kernel into `seg`-byte datagrams.
fn send_gso(sock: &mio::net::UdpSocket, buf: &[u8], seg: usize, to: SocketAddr) {
    use std::os::fd::AsRawFd;
    let SocketAddr::V4(v4) = to else {
        panic!("IPv4 only");
    };
    let mut sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(v4.ip().octets()),
        },
        sin_zero: [0; 8],
    };
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 4];
    // SAFETY: msghdr is plain data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = &mut sa as *mut libc::sockaddr_in as *mut libc::c_void;
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if buf.len() > seg {
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        // SAFETY: CMSG_SPACE only computes a size.
        msg.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
        // SAFETY: msg_control points at cbuf (32 bytes, 8-aligned), larger than one
        // cmsghdr with 2 bytes of data, so the first header and its data lie inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, seg as u16);
        }
    }
    // SAFETY: msg points at sa, iov (which points at buf) and cbuf, all alive here.
    let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        // A full socket buffer drops the run: QUIC's loss recovery sends it again.
        if e.kind() != std::io::ErrorKind::WouldBlock {
            panic!("sendmsg: {e}");
        }
    }
}
