//! Kernel TLS (kTLS). rustls makes the handshake; then the session's keys go to the
//! kernel (`TCP_ULP "tls"`, `TLS_TX`, `TLS_RX`), which from there on encrypts what we
//! write and decrypts what we read. The connection is then a plain socket to the rest
//! of the server ([`super::Sock::ktls`]): a cache hit over HTTPS goes out by
//! `sendfile(2)` again, with no copy of the body into user space and no encryption
//! there (how Netflix serves TLS at line rate).
//!
//! What it takes:
//! - `enable_secret_extraction` on the listener's rustls config (`tls.ktls = true`).
//! - During the handshake, rustls must never read past a TLS record's end: bytes of a
//!   record it has only half read would be lost to the kernel, which takes the socket
//!   from the next byte on. [`TlsIo`] hands rustls one record (header, then body) per
//!   read until the handshake is done.
//! - After it, whatever rustls already decrypted (a request sent right behind the
//!   client's Finished) is taken out first, and what it still has to send (TLS 1.3
//!   session tickets) is written; then the secrets and sequence numbers are extracted
//!   and given to the kernel.
//!
//! A kernel without the `tls` module (`/proc/sys/net/ipv4/tcp_available_ulp` does not
//! list it) refuses `TCP_ULP` with ENOENT before anything is extracted: the connection
//! goes on in user space, the process logs it once and stops trying. A TLS 1.3
//! KeyUpdate from a client ends that connection (the kernels this runs on cannot take
//! new receive keys); browsers do not send one on HTTP connections.

use super::sys::{self, TlsDir};
use bytes::BytesMut;
use rustls::{ConnectionTrafficSecrets, ProtocolVersion};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;

/// Whether this kernel takes kTLS: not known until the first connection tries.
const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;
static SUPPORT: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether a handshake should be read record by record for kTLS (false once the kernel
/// has refused it).
pub fn worth_trying() -> bool {
    SUPPORT.load(Relaxed) != NO
}

/// What [`offload`] made of a connection whose handshake is done.
pub enum Offload {
    /// The kernel carries the session; `plaintext` is what rustls had decrypted already
    /// (the start of the first request, if it came with the handshake).
    Kernel { tcp: TcpStream, plaintext: BytesMut },
    /// Still rustls's (the kernel lacks kTLS, the cipher is not one it takes, or
    /// rustls still had bytes to send): it goes on in user space.
    User(Box<tokio_rustls::server::TlsStream<TlsIo>>),
    /// The keys were taken from rustls but the kernel refused them: the session can go
    /// on neither way, so the connection is lost (counted, logged at debug).
    Failed(io::Error),
}

/// Hands a finished handshake's session to the kernel (see the module's doc).
pub fn offload(mut tls: Box<tokio_rustls::server::TlsStream<TlsIo>>) -> Offload {
    let (io, conn) = tls.get_mut();
    // Part of a record already read (the handshake ended with the client's next record
    // on its way: rustls holds its start) cannot go to the kernel, which would take the
    // socket from its middle: that connection stays in user space.
    let mid_record = io.bounded.as_ref().is_some_and(|r| r.got != 0);
    io.unbound();
    if mid_record || !worth_trying() {
        return Offload::User(tls);
    }
    let fd = io.tcp.as_raw_fd();
    let cipher = conn
        .negotiated_cipher_suite()
        .map(|s| s.suite())
        .and_then(kernel_cipher);
    let version = match conn.protocol_version() {
        Some(ProtocolVersion::TLSv1_3) => TLS_1_3,
        Some(ProtocolVersion::TLSv1_2) => TLS_1_2,
        _ => return Offload::User(tls),
    };
    let Some(cipher) = cipher else {
        return Offload::User(tls);
    };
    if refused(version, cipher) {
        // This kernel refused these keys before (its kTLS predates the cipher, or
        // TLS 1.3): user space, not a lost connection.
        return Offload::User(tls);
    }
    // What rustls still has to send (session tickets) goes out first: the kernel's
    // record numbers count from after it.
    while conn.wants_write() {
        match conn.write_tls(&mut FdWriter(fd)) {
            Ok(_) => {}
            // A full socket buffer right after a handshake: rare; stay in user space.
            Err(_) => return Offload::User(tls),
        }
    }
    // Before any key leaves rustls: does the kernel take TLS at all?
    if let Err(e) = sys::set_tcp_ulp_tls(fd) {
        if matches!(
            e.raw_os_error(),
            Some(libc::ENOENT | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
        ) && SUPPORT.swap(NO, Relaxed) != NO
        {
            let ulps =
                std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp").unwrap_or_default();
            tracing::warn!(
                "kTLS is not available on this kernel ({e}; tcp_available_ulp: {:?}; load the \
                 `tls` module to use it): TLS is encrypted in user space, and hits over TLS \
                 are read and written instead of sent with sendfile",
                ulps.trim()
            );
        }
        return Offload::User(tls);
    }
    // What rustls decrypted already belongs to the application.
    let mut plaintext = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        match conn.reader().read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => plaintext.extend_from_slice(&chunk[..n]),
            Err(_) => break, // WouldBlock: nothing more buffered
        }
    }
    let (io, conn) = (*tls).into_inner();
    let secrets = match conn.dangerous_extract_secrets() {
        Ok(s) => s,
        Err(e) => return Offload::Failed(io::Error::other(format!("kTLS: {e}"))),
    };
    for (dir, (seq, secret)) in [(TlsDir::Tx, secrets.tx), (TlsDir::Rx, secrets.rx)] {
        let Some(info) = crypto_info(version, dir, seq, &secret) else {
            return Offload::Failed(io::Error::other("kTLS: a cipher the kernel does not take"));
        };
        if let Err(e) = sys::set_tls_keys(fd, dir, &info) {
            if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) {
                refuse(version, cipher);
            }
            return Offload::Failed(io::Error::new(
                e.kind(),
                format!("kTLS: setsockopt(SOL_TLS, {dir:?}): {e}"),
            ));
        }
    }
    SUPPORT.store(YES, Relaxed);
    Offload::Kernel {
        tcp: io.into_tcp(),
        plaintext,
    }
}

/// (TLS version, cipher) pairs this kernel refused keys for, one bit each (older
/// kernels took AES-128-GCM over TLS 1.2 first; AES-256, TLS 1.3 and ChaCha20 came
/// later): the connections that follow with such a pair stay in user space instead of
/// being lost the same way.
static REFUSED: AtomicU8 = AtomicU8::new(0);

fn refusal_bit(version: u16, cipher: u16) -> u8 {
    let c = match cipher {
        AES_GCM_128 => 0,
        AES_GCM_256 => 1,
        _ => 2,
    };
    1 << (c + if version == TLS_1_3 { 3 } else { 0 })
}

fn refused(version: u16, cipher: u16) -> bool {
    REFUSED.load(Relaxed) & refusal_bit(version, cipher) != 0
}

fn refuse(version: u16, cipher: u16) {
    let bit = refusal_bit(version, cipher);
    if REFUSED.fetch_or(bit, Relaxed) & bit == 0 {
        tracing::warn!(
            "kTLS: this kernel refused the keys of TLS {}.{} with cipher {cipher} (one \
             connection lost): such connections stay in user space from now on",
            version >> 8,
            (version & 0xff) - 1
        );
    }
}

/// `TLS_1_2_VERSION` and `TLS_1_3_VERSION` of `<linux/tls.h>`.
const TLS_1_2: u16 = 0x0303;
const TLS_1_3: u16 = 0x0304;
/// `TLS_CIPHER_*` of `<linux/tls.h>`.
const AES_GCM_128: u16 = 51;
const AES_GCM_256: u16 = 52;
const CHACHA20_POLY1305: u16 = 54;

/// The kernel's cipher for a negotiated suite (the ones our provider offers).
fn kernel_cipher(suite: rustls::CipherSuite) -> Option<u16> {
    use rustls::CipherSuite as S;
    match suite {
        S::TLS13_AES_128_GCM_SHA256
        | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => Some(AES_GCM_128),
        S::TLS13_AES_256_GCM_SHA384
        | S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => Some(AES_GCM_256),
        S::TLS13_CHACHA20_POLY1305_SHA256
        | S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        | S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => Some(CHACHA20_POLY1305),
        _ => None,
    }
}

/// The `tls12_crypto_info_*` struct of `<linux/tls.h>` for one direction, as bytes in
/// the kernel's layout: `{ u16 version; u16 cipher_type; }` then, for AES-GCM,
/// `iv[8] key[16|32] salt[4] rec_seq[8]`, for ChaCha20-Poly1305 `iv[12] key[32]
/// rec_seq[8]`. rustls's 12-byte IV is the GCM salt (4 bytes) and the explicit part (8)
/// for both TLS versions; `rec_seq` is the next record's sequence number, big-endian.
fn crypto_info(
    version: u16,
    dir: TlsDir,
    seq: u64,
    secret: &ConnectionTrafficSecrets,
) -> Option<Vec<u8>> {
    let (cipher, key, iv) = match secret {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (AES_GCM_128, key.as_ref(), iv.as_ref()),
        ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (AES_GCM_256, key.as_ref(), iv.as_ref()),
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
            (CHACHA20_POLY1305, key.as_ref(), iv.as_ref())
        }
        _ => return None,
    };
    layout(version, cipher, key, iv, seq, dir == TlsDir::Tx)
}

/// [`crypto_info`]'s bytes for a cipher, its key and rustls's 12-byte IV; None when the
/// lengths are not the cipher's.
///
/// TLS 1.2 AES-GCM sending is the exception. rustls made each record's nonce as salt ||
/// (explicit XOR sequence number), and the records it sent (the Finished at least)
/// used those; the kernel sends salt || iv and adds one to `iv` per record, with no
/// XOR. Handed rustls's explicit part as it is, the kernel's first record would reuse
/// the nonce of rustls's first one, under the same key (GCM then leaks its
/// authentication key). So the kernel's explicit nonces start half the 64-bit space
/// away (`tx`): rustls's differ from the explicit part in their few low bits only.
fn layout(version: u16, cipher: u16, key: &[u8], iv: &[u8], seq: u64, tx: bool) -> Option<Vec<u8>> {
    let key_len = match cipher {
        AES_GCM_128 => 16,
        AES_GCM_256 | CHACHA20_POLY1305 => 32,
        _ => return None,
    };
    if key.len() != key_len || iv.len() != 12 {
        return None;
    }
    let mut v = Vec::with_capacity(56);
    v.extend_from_slice(&version.to_ne_bytes());
    v.extend_from_slice(&cipher.to_ne_bytes());
    if cipher == CHACHA20_POLY1305 {
        v.extend_from_slice(iv);
        v.extend_from_slice(key);
    } else {
        let mut explicit: [u8; 8] = iv[4..].try_into().ok()?;
        if version == TLS_1_2 && tx {
            explicit = u64::from_be_bytes(explicit)
                .wrapping_add(1 << 63)
                .to_be_bytes();
        }
        v.extend_from_slice(&explicit);
        v.extend_from_slice(key);
        v.extend_from_slice(&iv[..4]);
    }
    v.extend_from_slice(&seq.to_be_bytes());
    Some(v)
}

/// Writes straight to the socket (non-blocking): for rustls's last records before the
/// keys go to the kernel.
struct FdWriter(std::os::fd::RawFd);

impl Write for FdWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: a valid buffer of its length; `self.0` is the connection's socket,
        // open for the call (the TlsStream that owns it is alive).
        let n = unsafe { libc::send(self.0, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The socket under a TLS listener's rustls session. While `bounded` (a handshake that
/// may end in kTLS) a read never crosses a TLS record's end: it returns a record's
/// 5-byte header, then its body, so rustls never holds a part of a record the kernel
/// would need. Otherwise (and after [`TlsIo::unbound`]) it is the plain socket.
pub struct TlsIo {
    tcp: TcpStream,
    bounded: Option<Record>,
}

/// Where a bounded read is within the current record.
#[derive(Default)]
struct Record {
    header: [u8; 5],
    /// Header bytes read (5: in the body).
    got: usize,
    /// Body bytes still to come.
    left: usize,
}

impl TlsIo {
    pub fn new(tcp: TcpStream, bounded: bool) -> TlsIo {
        TlsIo {
            tcp,
            bounded: bounded.then(Record::default),
        }
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Reads are plain from now on.
    pub fn unbound(&mut self) {
        self.bounded = None;
    }

    pub fn into_tcp(self) -> TcpStream {
        self.tcp
    }
}

impl AsyncRead for TlsIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let Some(rec) = &mut this.bounded else {
            return Pin::new(&mut this.tcp).poll_read(cx, buf);
        };
        let want = if rec.got < 5 { 5 - rec.got } else { rec.left };
        let want = want.min(buf.remaining());
        if want == 0 {
            return Poll::Ready(Ok(()));
        }
        let dst = buf.initialize_unfilled_to(want);
        let mut part = ReadBuf::new(dst);
        std::task::ready!(Pin::new(&mut this.tcp).poll_read(cx, &mut part))?;
        let n = part.filled().len();
        if rec.got < 5 {
            rec.header[rec.got..rec.got + n].copy_from_slice(part.filled());
            rec.got += n;
            if rec.got == 5 {
                rec.left = u16::from_be_bytes([rec.header[3], rec.header[4]]) as usize;
                if rec.left == 0 {
                    rec.got = 0;
                }
            }
        } else {
            rec.left -= n;
            if rec.left == 0 {
                rec.got = 0;
            }
        }
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

super::delegate_async_write!(TlsIo, tcp);

/// An HTTP/2 connection's socket after kTLS: first the bytes rustls had already
/// decrypted (the client's preface, often), then the socket.
pub struct Prefixed {
    pub prefix: BytesMut,
    pub sock: super::Sock,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix.split_to(n));
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.sock).poll_read(cx, buf)
    }
}

super::delegate_async_write!(Prefixed, sock);

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's struct sizes: 40 bytes for AES-128-GCM, 56 for AES-256-GCM and
    /// ChaCha20-Poly1305, fields where `<linux/tls.h>` puts them.
    #[test]
    fn crypto_info_has_the_kernel_layout() {
        let iv: [u8; 12] = std::array::from_fn(|i| i as u8);
        let v = layout(TLS_1_3, AES_GCM_128, &[7u8; 16], &iv, 0x0102, true).unwrap();
        assert_eq!(v.len(), 40);
        assert_eq!(&v[..2], &TLS_1_3.to_ne_bytes());
        assert_eq!(&v[2..4], &AES_GCM_128.to_ne_bytes());
        assert_eq!(&v[4..12], &iv[4..], "the explicit IV");
        assert_eq!(&v[12..28], &[7u8; 16], "the key");
        assert_eq!(&v[28..32], &iv[..4], "the salt");
        assert_eq!(&v[32..], &[0, 0, 0, 0, 0, 0, 1, 2], "rec_seq, big-endian");
        assert!(
            layout(TLS_1_3, AES_GCM_128, &[7u8; 32], &iv, 0, true).is_none(),
            "key length"
        );
        assert!(
            layout(TLS_1_3, 99, &[7u8; 16], &iv, 0, true).is_none(),
            "unknown cipher"
        );
        let aes256 = ConnectionTrafficSecrets::Aes256Gcm {
            key: rustls::crypto::cipher::AeadKey::from([9u8; 32]),
            iv: rustls::crypto::cipher::Iv::new(iv),
        };
        let v = crypto_info(TLS_1_2, TlsDir::Rx, 5, &aes256).unwrap();
        assert_eq!(v.len(), 56);
        assert_eq!(&v[4..12], &iv[4..], "receiving: the explicit IV as it is");
        assert_eq!(&v[12..44], &[9u8; 32]);
        assert_eq!(&v[44..48], &iv[..4]);
        // Sending over TLS 1.2: the kernel's explicit nonces (counted up from `iv`)
        // start half the space away from rustls's (explicit XOR sequence number), so no
        // record the kernel sends reuses a nonce of one rustls sent.
        let v = crypto_info(TLS_1_2, TlsDir::Tx, 5, &aes256).unwrap();
        let explicit = u64::from_be_bytes(iv[4..].try_into().unwrap());
        let kernel = u64::from_be_bytes(v[4..12].try_into().unwrap());
        assert_eq!(kernel, explicit ^ (1 << 63));
        for rustls_seq in 0..1024u64 {
            for kernel_record in 0..1024u64 {
                assert_ne!(kernel.wrapping_add(kernel_record), explicit ^ rustls_seq);
            }
        }
        // TLS 1.3 sending XORs like rustls does, from the sequence number: as it is.
        let v = crypto_info(TLS_1_3, TlsDir::Tx, 5, &aes256).unwrap();
        assert_eq!(&v[4..12], &iv[4..]);
        let chacha = ConnectionTrafficSecrets::Chacha20Poly1305 {
            key: rustls::crypto::cipher::AeadKey::from([3u8; 32]),
            iv: rustls::crypto::cipher::Iv::new(iv),
        };
        let v = crypto_info(TLS_1_3, TlsDir::Tx, 1, &chacha).unwrap();
        assert_eq!(v.len(), 56);
        assert_eq!(&v[4..16], &iv, "the whole nonce as IV, no salt");
        assert_eq!(&v[16..48], &[3u8; 32]);
        assert_eq!(&v[48..], &[0, 0, 0, 0, 0, 0, 0, 1]);
    }

    /// Bounded reads stop at every record's header and body, whatever the socket holds
    /// and whatever the reader asks for.
    #[test]
    fn bounded_reads_stop_at_record_ends() {
        crate::rt::thread_runtime("test").unwrap().block_on(async {
            use tokio::io::AsyncReadExt;
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, _) = l.accept().await.unwrap();
            // Two records (bodies of 3 and 0 bytes) and a third one's first byte.
            c.write_all(&[22, 3, 3, 0, 3, b'a', b'b', b'c', 23, 3, 3, 0, 0, 23])
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
            let mut io = TlsIo::new(s, true);
            let mut buf = [0u8; 64];
            let mut reads = Vec::new();
            for _ in 0..4 {
                let n = io.read(&mut buf).await.unwrap();
                reads.push(buf[..n].to_vec());
            }
            let want: Vec<Vec<u8>> = vec![
                vec![22, 3, 3, 0, 3],
                b"abc".to_vec(),
                vec![23, 3, 3, 0, 0],
                vec![23],
            ];
            assert_eq!(reads, want);
            io.unbound();
            c.write_all(b"rest").unwrap();
            std::thread::sleep(std::time::Duration::from_millis(50));
            let n = io.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"rest", "unbounded: plain reads");
        });
    }
}
