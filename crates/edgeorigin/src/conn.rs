//! One client connection: read requests, answer them in order, stream bodies.
//!
//! How it fits: the accept loop (`server.rs`) spawns [`serve`] per connection on the
//! thread's runtime. It keeps one read buffer (requests are parsed from it as they
//! complete, so pipelined requests are answered in order) and one write buffer (small
//! responses to pipelined requests go out in one write). Bodies are produced
//! [`CHUNK`] bytes at a time from their plan, so memory per connection stays flat for any
//! object size. Delays, pacing and the mid-body reset of the injection parameters are
//! acted out here; what to do was decided by `respond.rs`.

use crate::body::{Direct, Framing};
use crate::content::CHUNK;
use crate::request::{self, Parsed, MAX_HEADERS};
use crate::respond::{self, Ctx, Reply};
use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How much the read buffer grows by per read.
const READ_CHUNK: usize = 8 * 1024;
/// Idle time allowed between requests on a keep-alive connection (nginx's default).
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(75);
/// Time allowed for the rest of a request once its first byte arrived (head and any
/// body to discard), so a client trickling a byte a minute cannot hold a connection
/// forever (nginx's `client_header_timeout`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Time allowed for one write to make progress before the client is given up on.
const SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// Most a `reset=1` reply waits for the half body to reach the client before resetting.
const RESET_DRAIN_LIMIT: Duration = Duration::from_secs(2);
/// Paced bodies go out in about this many writes per second.
const PACE_WRITES_PER_SEC: u64 = 20;

/// How a reply ended, as far as the connection is concerned.
#[derive(Debug, PartialEq, Eq)]
enum After {
    KeepOpen,
    Close,
    /// The reply reset the connection (`reset=1`): the socket is already gone.
    Reset,
}

/// Serves one connection until the client closes, an error, or a reply that closes.
pub async fn serve(mut stream: TcpStream, ctx: Rc<RefCell<Ctx>>) {
    let _ = stream.set_nodelay(true);
    let _ = serve_inner(&mut stream, &ctx).await;
}

async fn serve_inner(stream: &mut TcpStream, ctx: &Rc<RefCell<Ctx>>) -> io::Result<()> {
    let mut rbuf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut wbuf: Vec<u8> = Vec::new();
    let mut start = 0usize; // parsed-and-answered prefix of rbuf
    let mut discard = 0u64; // request body bytes still to skip
    let mut request_started: Option<Instant> = None; // first byte of an unfinished request
    loop {
        loop {
            if discard > 0 {
                let n = discard.min((rbuf.len() - start) as u64);
                start += n as usize;
                discard -= n;
                if discard > 0 {
                    break;
                }
            }
            if start == rbuf.len() {
                break;
            }
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let (reply, consumed, body_len) = match request::parse(&rbuf[start..], &mut headers) {
                Parsed::Partial => break,
                Parsed::Complete(req) => {
                    let reply = respond::respond(&mut ctx.borrow_mut(), &req);
                    (reply, req.head_len, req.body_len)
                }
                Parsed::Invalid(inv) => {
                    let reply = respond::invalid_reply(&mut ctx.borrow_mut(), inv);
                    (reply, rbuf.len() - start, 0)
                }
            };
            start += consumed;
            request_started = None;
            discard = body_len;
            match send(stream, &mut wbuf, reply, ctx).await? {
                After::KeepOpen => {}
                After::Close => {
                    flush(stream, &mut wbuf).await?;
                    let _ = stream.shutdown().await;
                    return Ok(());
                }
                After::Reset => return Ok(()),
            }
        }
        flush(stream, &mut wbuf).await?;
        rbuf.drain(..start);
        start = 0;
        rbuf.reserve(READ_CHUNK);
        let wait = if rbuf.is_empty() && discard == 0 {
            KEEPALIVE_TIMEOUT
        } else {
            let since = *request_started.get_or_insert_with(Instant::now);
            REQUEST_TIMEOUT.saturating_sub(since.elapsed())
        };
        let n = match tokio::time::timeout(wait, stream.read_buf(&mut rbuf)).await {
            Ok(r) => r?,
            Err(_) => return Ok(()), // idle, or too slow to finish a request
        };
        if n == 0 {
            return Ok(());
        }
    }
}

/// Writes `wbuf` out and empties it.
async fn flush(stream: &mut TcpStream, wbuf: &mut Vec<u8>) -> io::Result<()> {
    if !wbuf.is_empty() {
        write_all(stream, wbuf).await?;
        wbuf.clear();
    }
    Ok(())
}

/// Like [`flush`], but tells the kernel more data follows at once (`MSG_MORE`), so the
/// head of a big body leaves in the same segment as the body's first bytes instead of a
/// tiny packet of its own (what nginx gets from `tcp_nopush`). Clients paid for that extra
/// wakeup per response.
async fn flush_more(stream: &mut TcpStream, wbuf: &mut Vec<u8>) -> io::Result<()> {
    let mut rest: &[u8] = wbuf;
    while !rest.is_empty() {
        let step = async {
            loop {
                stream.writable().await?;
                let r = stream.try_io(tokio::io::Interest::WRITABLE, || {
                    socket2::SockRef::from(&*stream).send_with_flags(rest, libc::MSG_MORE)
                });
                match r {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    other => return other,
                }
            }
        };
        match tokio::time::timeout(SEND_TIMEOUT, step).await {
            Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => rest = &rest[n..],
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "send timeout")),
        }
    }
    wbuf.clear();
    Ok(())
}

/// Writes all of `bytes`, giving up when the client stops reading for [`SEND_TIMEOUT`].
async fn write_all(stream: &mut TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match tokio::time::timeout(SEND_TIMEOUT, stream.write(bytes)).await {
            Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => bytes = &bytes[n..],
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "send timeout")),
        }
    }
    Ok(())
}

/// Sends `len` bytes of `file` from `offset` with `sendfile(2)` (no copy through user
/// space), waiting for the socket to be writable and giving up after [`SEND_TIMEOUT`]
/// without progress.
async fn send_file(
    stream: &TcpStream,
    file: &std::fs::File,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    /// Linux moves at most this much per sendfile call.
    const MAX_SENDFILE: u64 = 0x7fff_f000;
    let (sock, fd) = (stream.as_raw_fd(), file.as_raw_fd());
    let end = offset.checked_add(len).ok_or(io::ErrorKind::InvalidInput)?;
    let mut pos = offset;
    while pos < end {
        let step = async {
            loop {
                stream.writable().await?;
                let count = (end - pos).min(MAX_SENDFILE) as usize;
                let r = stream.try_io(tokio::io::Interest::WRITABLE, || {
                    let mut off = pos as libc::off_t;
                    // SAFETY: `sock` and `fd` are open descriptors owned by `stream` and
                    // `file`, both borrowed for this call; `off` is a live local the
                    // kernel reads and updates; no user memory is passed.
                    let n = unsafe { libc::sendfile(sock, fd, &mut off, count) };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(n as u64)
                    }
                });
                match r {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    other => return other,
                }
            }
        };
        match tokio::time::timeout(SEND_TIMEOUT, step).await {
            Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()), // file shorter than said
            Ok(Ok(n)) => pos += n,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "send timeout")),
        }
    }
    Ok(())
}

/// Sends one reply: delay, head, body (framed, maybe paced, maybe cut by a reset).
async fn send(
    stream: &mut TcpStream,
    wbuf: &mut Vec<u8>,
    reply: Reply,
    ctx: &Rc<RefCell<Ctx>>,
) -> io::Result<After> {
    if !reply.delay.is_zero() {
        flush(stream, wbuf).await?;
        tokio::time::sleep(reply.delay).await;
    }
    wbuf.extend_from_slice(&reply.head);
    let mut sent = 0u64;
    // Body bytes already counted in /stats: a streamed body counts as it is flushed.
    let mut counted = 0u64;
    let count = |n: u64| {
        if let Some(class) = reply.class {
            let c = ctx.borrow();
            c.stats.add_bytes(c.thread, class, n);
        }
    };
    let plain = reply.framing == Framing::Length && reply.slow_bps.is_none() && !reply.reset;
    let direct = reply
        .body
        .as_ref()
        .and_then(|b| b.direct())
        .filter(|_| plain);
    if let Some(direct) = direct {
        // A cached object sent as it is: small ones join the write buffer (pipelined
        // replies go out together), big ones go straight from the cache.
        match direct {
            Direct::Bytes(bytes) if bytes.len() <= CHUNK => wbuf.extend_from_slice(bytes),
            Direct::Bytes(bytes) => {
                flush_more(stream, wbuf).await?;
                write_all(stream, bytes).await?;
            }
            Direct::File(file, offset, len) => {
                flush_more(stream, wbuf).await?;
                send_file(stream, file, offset, len).await?;
            }
        }
        sent = reply.body.as_ref().map_or(0, |b| b.len);
    } else if let Some(body) = &reply.body {
        let limit = if reply.reset { body.len / 2 } else { body.len };
        let slice = match reply.slow_bps {
            Some(bps) => (bps / PACE_WRITES_PER_SEC).clamp(1, CHUNK as u64) as usize,
            None => CHUNK,
        };
        let paced_from = Instant::now();
        while sent < limit {
            let max = (limit - sent).min(slice as u64) as usize;
            if reply.framing == Framing::Chunked {
                wbuf.extend_from_slice(format!("{max:x}\r\n").as_bytes());
            }
            let n = body.produce(sent, max, wbuf);
            debug_assert_eq!(n, max);
            if reply.framing == Framing::Chunked {
                wbuf.extend_from_slice(b"\r\n");
            }
            sent += n as u64;
            if n == 0 {
                break; // cannot happen (limit <= len); never spin
            }
            if let Some(bps) = reply.slow_bps {
                flush(stream, wbuf).await?;
                count(sent - counted);
                counted = sent;
                let due = paced_from + Duration::from_micros(sent.saturating_mul(1_000_000) / bps);
                tokio::time::sleep_until(due.into()).await;
            } else if wbuf.len() >= CHUNK {
                flush(stream, wbuf).await?;
                count(sent - counted);
                counted = sent;
            }
        }
        if reply.framing == Framing::Chunked && !reply.reset {
            wbuf.extend_from_slice(b"0\r\n\r\n");
        }
    }
    {
        let c = ctx.borrow();
        if let Some(class) = reply.class {
            c.stats
                .record(c.thread, class, reply.status, sent - counted);
        }
    }
    if reply.reset {
        flush(stream, wbuf).await?;
        reset(stream).await;
        return Ok(After::Reset);
    }
    Ok(if reply.close {
        After::Close
    } else {
        After::KeepOpen
    })
}

/// Waits (bounded) until the peer has acknowledged everything written, then closes
/// with `SO_LINGER` 0 so the kernel sends RST instead of FIN.
async fn reset(stream: &mut TcpStream) {
    let until = Instant::now() + RESET_DRAIN_LIMIT;
    while unacked_bytes(stream).is_some_and(|n| n > 0) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let _ = stream.set_zero_linger();
    // The caller drops the stream right after; close(2) with zero linger sends RST.
}

/// Bytes written to `stream` that the peer has not acknowledged yet (`SIOCOUTQ`), or
/// `None` if the kernel will not say.
fn unacked_bytes(stream: &TcpStream) -> Option<i32> {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: `stream` owns a valid, open socket fd for the duration of this call, and
    // TIOCOUTQ (SIOCOUTQ) writes exactly one c_int through the pointer, which points at
    // a live local.
    let rc = unsafe {
        libc::ioctl(
            stream.as_raw_fd(),
            libc::TIOCOUTQ,
            &mut n as *mut libc::c_int,
        )
    };
    (rc == 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_file_sends_the_slice() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let data: Vec<u8> = (0..600_000u32).map(|i| (i % 251) as u8).collect();
            let file = crate::body_cache::memfd(&data).unwrap();
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let reader = tokio::spawn(async move {
                let mut c = TcpStream::connect(addr).await.unwrap();
                let mut got = Vec::new();
                c.read_to_end(&mut got).await.unwrap();
                got
            });
            let (mut server, _) = l.accept().await.unwrap();
            // More than a socket buffer, so the WouldBlock path runs too.
            send_file(&server, &file, 1000, 500_000).await.unwrap();
            server.shutdown().await.unwrap();
            drop(server);
            assert_eq!(reader.await.unwrap(), &data[1000..501_000]);
            let (server, _) = (TcpStream::connect(addr).await.unwrap(), ());
            let err = send_file(&server, &file, 599_000, 5000).await.unwrap_err();
            assert_eq!(
                err.kind(),
                io::ErrorKind::WriteZero,
                "past the end of the file"
            );
        });
    }

    #[test]
    fn unacked_bytes_reads_the_send_queue() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let mut client = TcpStream::connect(addr).await.unwrap();
            let (_server, _) = l.accept().await.unwrap();
            assert_eq!(unacked_bytes(&client), Some(0));
            client.write_all(b"hello").await.unwrap();
            // Loopback acknowledges almost at once; the call must succeed and settle at 0.
            let until = Instant::now() + Duration::from_secs(2);
            while unacked_bytes(&client) != Some(0) && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            assert_eq!(unacked_bytes(&client), Some(0));
        });
    }
}
