//! A client connection: the socket plus its read buffer, with timeouts applied per
//! operation the way nginx applies them (`send_timeout` bounds each write's progress,
//! not the whole response).

use crate::net::Sock;
use bytes::BytesMut;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Initial read buffer; grows up to the head limit while a head is incomplete. 4 KiB
/// holds nearly every request head in one read (nginx starts at 1 KiB,
/// `client_header_buffer_size`), and it is what every busy connection holds: with 16 KiB,
/// a burst of new connections left RSS 12 KiB per connection higher for good.
pub const READ_BUF: usize = 4 * 1024;

pub struct Conn {
    pub io: ClientIo,
    pub rbuf: BytesMut,
    /// The TCP peer, as accepted (the load balancer, when one is in front).
    pub peer: SocketAddr,
    pub info: ConnInfo,
    /// The connection's client: the PROXY header's source on a `proxy_protocol`
    /// listener, else `peer` (see [`super::client_addr`]; a request's own client, after
    /// `real_ip`, is [`super::Exchange::client_addr`]).
    pub client: SocketAddr,
    /// The server its latest request's Host chose (see [`HostMemo`]).
    pub host_memo: Option<Box<HostMemo>>,
    /// The `limit_conn` counts this connection holds, given back when it closes (an
    /// HTTP/2 stream's are its connection's: [`Conn::held`]).
    pub held: crate::limit::Held,
}

/// The server a connection's latest request chose by its Host. A keep-alive connection
/// nearly always sends one Host: the next request with the same Host bytes, under the
/// same config generation, takes the same server without the name lookup. Only a
/// choice that left no regex captures is kept. A parked connection drops it (idle
/// connections hold nothing more), and a request with another Host replaces it.
#[derive(Debug)]
pub struct HostMemo {
    pub generation: u64,
    /// The Host as the request sent it (compared byte for byte).
    pub host: String,
    pub server: u16,
}

/// What the connection arrived on: the `[[listen]]` (its index in the config generation
/// it was accepted under), whether it is TLS, and which certificate the client's SNI
/// name chose (`$scheme`, `$server_port`, server selection, 421 Misdirected Request).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnInfo {
    pub listen: u16,
    pub tls: bool,
    /// The certificate index the SNI name chose by name (None: no SNI, or the default
    /// certificate for a name none covers).
    pub sni_cert: Option<u16>,
}

/// What a client's bytes travel over. Handlers write the bytes of a response (an HTTP/1
/// head as its encoder wrote it, body bytes) the same way over each; only the
/// file-body path asks for [`ClientIo::tcp`] (sendfile needs the socket).
pub enum ClientIo {
    /// Plain TCP (or kernel TLS): bodies go out by `sendfile`. Registered with the
    /// reactor only once it has to wait ([`Sock`]).
    Tcp(Sock),
    /// TLS in user space (rustls): bodies are read and encrypted.
    Tls(Box<tokio_rustls::server::TlsStream<crate::net::ktls::TlsIo>>),
    /// One HTTP/2 stream: the request arrives as a head built from its fields; the
    /// response head goes out as HEADERS (from the exchange's [`super::head::HeadSlot`])
    /// and the body's bytes written here as DATA frames.
    H2(Box<super::h2stream::StreamIo>),
    /// One HTTP/3 request stream: the head goes out as HEADERS (from the exchange's
    /// head slot, as on HTTP/2), the body's bytes as DATA frames.
    H3(Box<super::h3stream::StreamIo>),
}

impl ClientIo {
    /// A stream's head slot (HTTP/2, HTTP/3): where the exchange leaves the response
    /// head that goes out as HEADERS. None for a byte stream (HTTP/1.x).
    pub fn head_slot(&self) -> Option<std::rc::Rc<super::head::HeadSlot>> {
        match self {
            ClientIo::H2(s) => Some(s.head_slot()),
            ClientIo::H3(s) => Some(s.head_slot()),
            _ => None,
        }
    }

    /// A stream's answer to a request refused before it reached a handler: HEADERS
    /// with the status alone. None for a byte stream (HTTP/1.x writes an error page).
    pub fn refuse_stream(&mut self, status: u16) -> Option<std::io::Result<()>> {
        match self {
            ClientIo::H2(s) => Some(s.refuse(status)),
            ClientIo::H3(s) => Some(s.refuse(status)),
            _ => None,
        }
    }

    /// The socket, when bytes written to it reach the client as they are (sendfile,
    /// parking, readiness).
    pub fn tcp(&mut self) -> Option<&mut Sock> {
        match self {
            ClientIo::Tcp(s) => Some(s),
            _ => None,
        }
    }

    /// Whether bytes written reach the client as they are (sendfile applies).
    pub fn is_tcp(&self) -> bool {
        matches!(self, ClientIo::Tcp(_))
    }

    /// Registers `cx`'s waker for the socket's next readiness, or says it is readable
    /// now (an HTTP/2 stream, never parked, counts as readable).
    pub fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            ClientIo::Tcp(s) => s.poll_read_ready(cx),
            ClientIo::Tls(t) => t.get_ref().0.tcp().poll_read_ready(cx),
            ClientIo::H2(_) | ClientIo::H3(_) => Poll::Ready(Ok(())),
        }
    }

    /// Whether the connection may be parked while idle: the socket's readiness then
    /// says when its next bytes come. Over TLS only when the session holds no
    /// decrypted bytes not yet read and nothing left to send (a pipelined request
    /// already inside rustls would never make the socket readable again).
    pub fn parkable(&mut self) -> bool {
        match self {
            ClientIo::Tcp(_) => true,
            ClientIo::Tls(t) => {
                let tls = t.get_mut().1;
                !tls.wants_write()
                    && tls
                        .process_new_packets()
                        .is_ok_and(|s| s.plaintext_bytes_to_read() == 0)
            }
            ClientIo::H2(_) | ClientIo::H3(_) => false,
        }
    }

    /// TCP_NODELAY on the connection's socket (an HTTP/2 stream's is the connection's
    /// business).
    pub fn set_nodelay(&self) {
        let _ = match self {
            ClientIo::Tcp(s) => s.set_nodelay(true),
            ClientIo::Tls(t) => t.get_ref().0.tcp().set_nodelay(true),
            ClientIo::H2(_) | ClientIo::H3(_) => return,
        };
    }

    /// Ends a response that cannot be completed so the client cannot take it for a
    /// whole one: a TCP reset, or RST_STREAM on HTTP/2.
    pub fn abort(self) {
        match self {
            ClientIo::Tcp(s) => s.close_with_reset(),
            ClientIo::Tls(t) => crate::net::sys::close_with_reset(t.into_inner().0.into_tcp()),
            ClientIo::H2(mut s) => s.reset(),
            ClientIo::H3(mut s) => s.reset(),
        }
    }
}

crate::net::delegate_async_io!(ClientIo { Tcp, Tls, H2, H3 });

pub fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out"))
}

impl Conn {
    pub fn new(io: Sock, peer: SocketAddr, info: ConnInfo) -> Conn {
        Conn::over(ClientIo::Tcp(io), peer, info)
    }

    pub fn over(io: ClientIo, peer: SocketAddr, info: ConnInfo) -> Conn {
        Conn {
            io,
            info,
            // Allocated when the first bytes are about to arrive (see the session: an
            // idle connection holds no read buffer).
            rbuf: BytesMut::new(),
            peer,
            client: peer,
            host_memo: None,
            held: crate::limit::Held::default(),
        }
    }

    /// The `limit_conn` counts of the connection this request came on: this
    /// connection's, or an HTTP/2 stream's connection's.
    pub fn held(&self) -> &crate::limit::Held {
        match &self.io {
            ClientIo::H2(s) => s.held(),
            ClientIo::H3(s) => s.held(),
            _ => &self.held,
        }
    }

    /// Reads more bytes into the buffer. Ok(0) is EOF.
    pub async fn fill(&mut self, limit: Duration) -> io::Result<usize> {
        if self.rbuf.capacity() - self.rbuf.len() < 4096 {
            self.rbuf.reserve(READ_BUF);
        }
        match tokio::time::timeout(limit, self.io.read_buf(&mut self.rbuf)).await {
            Ok(r) => r,
            Err(_) => Err(timed_out("client read")),
        }
    }

    /// Reads more bytes into the buffer with no timeout (the caller bounds the wait).
    pub async fn fill_untimed(&mut self) -> io::Result<usize> {
        if self.rbuf.capacity() - self.rbuf.len() < 4096 {
            self.rbuf.reserve(READ_BUF);
        }
        self.io.read_buf(&mut self.rbuf).await
    }

    /// Writes all of `buf`; each write must make progress within `limit`. On an
    /// HTTP/2 stream the response head the exchange ended goes out first, even when
    /// `buf` is empty (the head's buffer, whose field lines went to the stream).
    pub async fn write_all(&mut self, buf: &[u8], limit: Duration) -> io::Result<()> {
        match &mut self.io {
            ClientIo::Tcp(s) => write_all_timed(s, buf, limit).await,
            ClientIo::H2(s) if buf.is_empty() => s.start(),
            ClientIo::H3(s) if buf.is_empty() => s.start(),
            io => write_all_io(io, buf, limit).await,
        }
    }

    /// Sends what TLS or HTTP/2 still buffers of the response (a no-op on TCP), within
    /// `limit`.
    pub async fn flush(&mut self, limit: Duration) -> io::Result<()> {
        if matches!(self.io, ClientIo::Tcp(_)) {
            return Ok(());
        }
        bounded(self.io.flush(), limit).await
    }

    /// Ends an HTTP/2 stream's response (one whose body runs until the end); within
    /// `limit`.
    pub async fn end_stream(&mut self, limit: Duration) -> io::Result<()> {
        bounded(self.io.shutdown(), limit).await
    }
}

/// `op` within `limit`, polled once first: usually done at once, with no deadline
/// computed and no timer armed.
async fn bounded(op: impl Future<Output = io::Result<()>>, limit: Duration) -> io::Result<()> {
    let mut op = std::pin::pin!(op);
    let noop = &mut Context::from_waker(std::task::Waker::noop());
    if let Poll::Ready(r) = op.as_mut().poll(noop) {
        return r;
    }
    match tokio::time::timeout(limit, op).await {
        Ok(r) => r,
        Err(_) => Err(timed_out("send")),
    }
}

/// `write_all` over any stream (TLS, an HTTP/2 stream, or a socket whose first try
/// would block): each write must make progress within `limit`.
async fn write_all_io<W: AsyncWrite + Unpin>(
    io: &mut W,
    mut buf: &[u8],
    limit: Duration,
) -> io::Result<()> {
    while !buf.is_empty() {
        match tokio::time::timeout(limit, io.write(buf)).await {
            Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => buf = &buf[n..],
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(timed_out("send")),
        }
    }
    Ok(())
}

/// A socket with a non-blocking write that needs no task context.
pub trait TryWrite {
    fn try_write(&self, buf: &[u8]) -> io::Result<usize>;
}

impl TryWrite for TcpStream {
    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        TcpStream::try_write(self, buf)
    }
}

impl TryWrite for Sock {
    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        Sock::try_write(self, buf)
    }
}

/// `write_all` where each write must make progress within `limit`. The first attempt
/// is a plain non-blocking write (a response usually fits the socket buffer at once):
/// no deadline is computed and no timer armed unless the socket is full. Nothing to
/// write makes no system call (a head already sent, as before a sliced range's second
/// slice).
pub async fn write_all_timed<S: TryWrite + AsyncWrite + Unpin>(
    io: &mut S,
    mut buf: &[u8],
    limit: Duration,
) -> io::Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    match io.try_write(buf) {
        Ok(n) => buf = &buf[n..],
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    write_all_io(io, buf, limit).await
}

impl Conn {
    /// Writes `a` then `b` with `writev` (a head and a body from memory in one
    /// syscall); each write must make progress within `limit`.
    pub async fn write_two(
        &mut self,
        mut a: &[u8],
        mut b: &[u8],
        limit: Duration,
    ) -> io::Result<()> {
        // Over TLS or HTTP/2 the first attempt is an ordinary write (there is no
        // non-blocking try without a context).
        let mut first = matches!(self.io, ClientIo::Tcp(_));
        while !a.is_empty() {
            let iov = [io::IoSlice::new(a), io::IoSlice::new(b)];
            let r = if first {
                first = false;
                let ClientIo::Tcp(s) = &self.io else {
                    continue;
                };
                match s.try_write_vectored(&iov) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => r,
                }
            } else {
                match tokio::time::timeout(limit, self.io.write_vectored(&iov)).await {
                    Ok(r) => r,
                    Err(_) => return Err(timed_out("send")),
                }
            };
            match r? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n if n >= a.len() => {
                    b = &b[n - a.len()..];
                    a = &[];
                }
                n => a = &a[n..],
            }
        }
        if b.is_empty() {
            return Ok(());
        }
        self.write_all(b, limit).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A socket that counts its writes and takes every byte.
    #[derive(Default)]
    struct Counting {
        calls: std::cell::Cell<usize>,
        got: Vec<u8>,
    }

    impl TryWrite for Counting {
        fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
            self.calls.set(self.calls.get() + 1);
            Ok(buf.len().min(3))
        }
    }

    impl AsyncWrite for Counting {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let me = self.get_mut();
            me.calls.set(me.calls.get() + 1);
            me.got.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn nothing_to_write_is_no_write_at_all() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let limit = Duration::from_secs(1);
        let mut s = Counting::default();
        rt.block_on(write_all_timed(&mut s, b"", limit)).unwrap();
        assert_eq!(s.calls.get(), 0, "an empty buffer makes no system call");
        // A partial first write: the rest goes through the waiting path.
        rt.block_on(write_all_timed(&mut s, b"abcdef", limit))
            .unwrap();
        assert_eq!((s.calls.get(), &s.got[..]), (2, &b"def"[..]));
    }
}
