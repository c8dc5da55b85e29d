//! Serving a client from a fill in progress: collapsed followers (`X-Cache-Status:
//! HIT`) from the temp file, and the leader's own client (`MISS`/`EXPIRED`) from the
//! fill task's relay.
//!
//! How it fits: [`super::deliver`] calls [`stream_fill`] for a request that joined
//! someone else's fill ([`super::deliver::follow`]) and for the leader's client
//! ([`super::fill`]), unless the client wants the object compressed
//! ([`super::variant`]). Followers send the bytes already in the temp file and sleep on
//! the fill's watch channel until more arrive, so a slow client never slows the fill
//! (nor the other clients), and the first bytes reach everyone while the origin is
//! still sending. The leader's client of a miss instead gets each chunk the fill task
//! reads from the origin ([`Relay`], its head in one `writev` with the first bytes), and
//! never reads the file back; if it falls [`RELAY_DEPTH`] chunks behind, the fill task
//! stops feeding it and it continues from the file like a follower. One `Range` is
//! served as a 206 from the arriving bytes; several as a multipart/byteranges 206 whose
//! parts go out (from the file) as their bytes arrive. If the disk write fails
//! mid-body, the leader's client continues from the relay (the fill task then passes
//! it the rest of the origin's body at its pace), while the followers' connections are
//! cut.

use super::ctx::Ctx;
use super::head;
use crate::http::conn::Conn;
use crate::http::exchange::{BodyLen, Exchange, ExchangeError, Framing};
use crate::http::respond::bodiless;
use bytes::Bytes;
use edge_cache::inflight::{known_len, FillError};
use edge_cache::{policy, Fill, FillHead};
use edge_http::RangeOutcome;
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::mpsc;

/// What the fill task of a miss sends its leader's client: the origin's body as it is
/// read, so that client never reads the temp file back.
#[derive(Debug)]
pub enum Relay {
    /// The next body bytes (the first start at offset 0, each follows the last).
    Data(Bytes),
    /// The client fell [`RELAY_DEPTH`] messages behind: nothing more is relayed, it
    /// reads the rest from the file like a follower, from what it has got so far.
    Behind,
    /// After `Behind`, the disk write failed: the file holds the body up to this
    /// offset, the rest follows as `Data` (at the client's pace: nothing else is fed).
    From(u64),
    /// The origin's body ended cleanly (and the commit is over, so a client that has
    /// the whole body finds the object in the index).
    End,
}

/// Messages the relay buffers before the leader's client counts as behind (bounded
/// memory per fill: at most this many upstream reads, of up to 256 KiB each).
pub const RELAY_DEPTH: usize = 8;

/// The leader's extras when it streams its own fill.
pub struct Leader {
    /// Header lines the stored block lacks but this client must get (its
    /// `Set-Cookie`s, stored only with `cache_set_cookie`, never in the object).
    pub extra: Vec<u8>,
    /// The origin's body straight from the fill task (a miss); `None` streams the
    /// file like a follower (the production of a compressed copy).
    pub relay: Option<mpsc::Receiver<Relay>>,
    /// The bytes come from the origin (a miss), not from the cache (the production of
    /// a compressed copy from a stored object): for the byte counters.
    pub from_origin: bool,
}

/// Sends a fill's object to one client as it is written (the caller has set the cache
/// status). `leader` is Some for the client of the request that leads the fill.
pub async fn stream_fill(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    fill: &Arc<Fill>,
    head: Arc<FillHead>,
    leader: Option<Leader>,
) -> Result<(), ExchangeError> {
    let shared = ctx.shared;
    let send = shared.timeouts.send;
    if ex.body.is_some()
        && ex
            .discard_body(conn, shared.timeouts.client_body, send)
            .await
            .is_err()
    {
        ex.keep_alive = false;
        ex.body = None;
    }
    let (extra, mut relay, from_origin) = match leader {
        Some(l) => (l.extra, l.relay, l.from_origin),
        None => (Vec::new(), None, false),
    };
    let meta = &head.meta;
    let now = SystemTime::now();
    let age = policy::age(meta, now).as_secs();
    ex.cache.ttl = Some(policy::ttl_secs(meta, now));
    let mut out = Vec::with_capacity(512 + meta.header_block.len() + extra.len());
    if edge_cache::hit::not_modified(meta, &ex.req.method, &ex.req.headers) {
        head::write_not_modified(ex, meta, age, &mut out);
        conn.write_all(&out, send).await?;
        return Ok(());
    }
    let no_body = bodiless(meta.status);
    // One range of a body whose length is known is streamed as a 206 while it arrives
    // (players send `Range` on every request, so a popular new video gets many ranged
    // followers). Several ranges, or an unknown length, get the whole body: a valid
    // answer to a Range request (RFC 9110 14.2).
    let mut want: Option<Range<u64>> = None;
    if let (Some(len), 200) = (known_len(meta), meta.status) {
        let v = edge_cache::hit::validators(meta);
        match edge_http::evaluate_range(&ex.req.method, &ex.req.headers, &v, len) {
            RangeOutcome::Partial(r) if r.len() == 1 => want = Some(r[0].as_range()),
            RangeOutcome::Partial(r) => {
                return multipart(ctx, conn, ex, fill, &head, &r, len, age, from_origin).await
            }
            RangeOutcome::Unsatisfiable => {
                head::write_unsatisfiable(ex, meta, len, age, &mut out);
                conn.write_all(&out, send).await?;
                return Ok(());
            }
            _ => {}
        }
    }
    let len = if let (Some(r), Some(len)) = (&want, known_len(meta)) {
        super::head::write_partial_head(ex, &mut out, meta, r, len);
        BodyLen::Known(r.end - r.start)
    } else {
        ex.begin_stored_head(&mut out, meta.status);
        out.extend_from_slice(&meta.header_block);
        match known_len(meta) {
            _ if no_body => BodyLen::None,
            Some(n) => {
                edge_http::write_header_u64(&mut out, "Content-Length", n);
                BodyLen::Known(n)
            }
            None => BodyLen::Unknown,
        }
    };
    out.extend_from_slice(&extra);
    let framing = head::finish_head(ex, age, &mut out, len);
    if ex.is_head() || no_body {
        conn.write_all(&out, send).await?;
        return Ok(());
    }
    let mut body = Body::new(ctx, conn, &head, out, want.unwrap_or(0..u64::MAX), framing);
    // A leader fed by the fill task (a miss) sends the origin's bytes as they come; it
    // reads the file only if it fell behind.
    let mut from_file = Some(0);
    let mut result = Ok(());
    if let Some(rx) = relay.as_mut() {
        match direct(&mut body, rx).await {
            Ok(at) => from_file = at,
            Err(e) => result = Err(e),
        }
    }
    if let (Some(at), Ok(())) = (from_file, &result) {
        result = follow_file(&mut body, fill, &head, at, relay.as_mut()).await;
    }
    // The head goes out even when the body failed before its first byte: the client
    // sees the response cut, as a follower does.
    let head_sent = body.flush_head().await;
    count_sent(ctx, ex, body.sent, from_origin);
    result?;
    head_sent?;
    if framing.wraps() {
        let mut end = Vec::new();
        framing.finish(&mut end);
        conn.write_all(&end, send).await?;
    }
    Ok(())
}

/// Sends the wanted bytes of a fill from body offset `at` on, as the fill writes them;
/// after a leader failure, from `relay` when there is one (the leader's own client),
/// else the body is cut.
async fn follow_file(
    body: &mut Body<'_>,
    fill: &Arc<Fill>,
    head: &Arc<FillHead>,
    at: u64,
    mut relay: Option<&mut mpsc::Receiver<Relay>>,
) -> Result<(), ExchangeError> {
    let mut reader = fill.reader(head.clone());
    reader.advance(at);
    loop {
        if reader.position() >= body.want.end {
            return Ok(()); // the requested range is complete
        }
        let avail = match reader.wait_available().await {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(()),
            Err(FillError::LeaderFailed) => match relay.as_mut() {
                Some(rx) => return relay_rest(body, reader.position(), rx).await,
                None => {
                    return Err(ExchangeError::Aborted(
                        "cache fill leader failed mid-body".into(),
                    ))
                }
            },
            Err(e) => return Err(ExchangeError::Aborted(e.to_string())),
        };
        body.file_part(avail.clone()).await?;
        reader.advance(avail.end - avail.start);
    }
}

/// Sends body bytes `want` of a fill in progress, with no head, as the fill writes
/// them (one slice of a `slice`d object, [`super::slice`]); a leader failing cuts it.
/// Returns the bytes sent.
pub async fn stream_range(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    fill: &Arc<Fill>,
    head: &Arc<FillHead>,
    want: Range<u64>,
) -> (Result<(), ExchangeError>, u64) {
    let mut body = Body::new(ctx, conn, head, Vec::new(), want, Framing::default());
    let r = follow_file(&mut body, fill, head, 0, None).await;
    (r, body.sent)
}

/// The leader's client of a miss, fed from the fill task's relay: `Ok(None)` when it
/// has its whole body (or range), `Ok(Some(at))` when it fell behind and continues from
/// the file at body offset `at`. A relay that ends without `End` is a failed origin.
async fn direct(
    body: &mut Body<'_>,
    rx: &mut mpsc::Receiver<Relay>,
) -> Result<Option<u64>, ExchangeError> {
    let mut at = 0u64;
    while at < body.want.end {
        match rx.recv().await {
            Some(Relay::Data(b)) => {
                body.memory_part(at, &b).await?;
                at += b.len() as u64;
            }
            Some(Relay::End) => return Ok(None),
            Some(Relay::Behind) => return Ok(Some(at)),
            Some(Relay::From(_)) | None => {
                return Err(ExchangeError::Aborted("origin failed mid-body".into()))
            }
        }
    }
    Ok(None)
}

/// Several ranges of a fill in progress: a multipart/byteranges 206 (RFC 9110 14.6),
/// each part sent from the file once the fill has written it (parts in the order the
/// client asked; one that lies behind the fill's position goes at once).
#[allow(clippy::too_many_arguments)]
async fn multipart(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    fill: &Arc<Fill>,
    head: &Arc<FillHead>,
    ranges: &[edge_http::ByteRange],
    len: u64,
    age: u64,
    from_origin: bool,
) -> Result<(), ExchangeError> {
    let send = ctx.shared.timeouts.send;
    let meta = &head.meta;
    let boundary = edge_http::Boundary::from_seed(edge_cache::key_hash(&meta.key) as u64);
    let layout = edge_http::MultipartLayout::new(
        ranges,
        len,
        edge_cache::hit::content_type(meta),
        boundary.as_str(),
    );
    let mut out = Vec::with_capacity(512 + meta.header_block.len());
    head::write_multipart_head(ex, meta, &layout, age, &mut out);
    if ex.is_head() {
        conn.write_all(&out, send).await?;
        return Ok(());
    }
    let mut reader = fill.reader(head.clone());
    let mut sent = 0u64;
    let mut result = Ok(());
    for part in layout.parts() {
        let r = part.range.as_range();
        // Wait until the fill has written this part.
        while reader.position() < r.end {
            match reader.wait_available().await {
                Ok(Some(avail)) => reader.advance(avail.end - avail.start),
                Ok(None) => break,
                Err(e) => {
                    result = Err(ExchangeError::Aborted(format!("cache fill: {e}")));
                    break;
                }
            }
        }
        if result.is_err() {
            break;
        }
        out.extend_from_slice(part.head);
        sent += part.head.len() as u64;
        conn.write_all(&std::mem::take(&mut out), send).await?;
        let n = r.end - r.start;
        match crate::http::send::send_file_range(
            conn,
            &ctx.w.file_io,
            &head.file,
            head.body_offset + r.start,
            n,
            ctx.shared.send.streaming(),
            send,
        )
        .await
        {
            Ok(k) => sent += k,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                result = Err(ExchangeError::Aborted(format!("reading cache fill: {e}")));
                break;
            }
            Err(e) => return Err(ExchangeError::Client(e)),
        }
    }
    if result.is_ok() {
        conn.write_all(layout.tail(), send).await?;
        sent += layout.tail().len() as u64;
    }
    count_sent(ctx, ex, sent, from_origin);
    result
}

/// Body bytes sent to one client of a fill: the access log's, and the origin or hit
/// byte counter (the leader's client counts as from the origin).
fn count_sent(ctx: &Ctx<'_>, ex: &mut Exchange, sent: u64, from_origin: bool) {
    ex.body_bytes_sent = sent;
    let stats = ctx.w.stats();
    if from_origin {
        stats.cache_bytes_origin.fetch_add(sent, Relaxed);
    } else {
        stats.cache_bytes_hit.add(sent);
    }
}

/// Where one client's body goes, and which part of the object it wants.
struct Body<'a> {
    conn: &'a mut Conn,
    /// The response head until it is sent: with the first body bytes from memory (one
    /// `writev`), else before the first file part.
    head: Vec<u8>,
    file: &'a std::fs::File,
    body_offset: u64,
    want: Range<u64>,
    framing: Framing,
    io: &'a crate::aio::FileBackend,
    send_mode: crate::http::send::SendMode,
    send: std::time::Duration,
    sent: u64,
}

/// The part of body bytes `have` that the client wants (`want`), if any.
fn clip(have: Range<u64>, want: &Range<u64>) -> Option<Range<u64>> {
    let (lo, hi) = (have.start.max(want.start), have.end.min(want.end));
    (lo < hi).then_some(lo..hi)
}

impl<'a> Body<'a> {
    /// `response_head`: the head bytes still to send (empty when already sent).
    fn new(
        ctx: &'a Ctx<'_>,
        conn: &'a mut Conn,
        head: &'a FillHead,
        response_head: Vec<u8>,
        want: Range<u64>,
        framing: Framing,
    ) -> Body<'a> {
        Body {
            conn,
            head: response_head,
            file: &head.file,
            body_offset: head.body_offset,
            want,
            framing,
            io: &ctx.w.file_io,
            send_mode: ctx.shared.send.streaming(),
            send: ctx.shared.timeouts.send,
            sent: 0,
        }
    }

    /// Sends the wanted part of body bytes `avail` from the file.
    async fn file_part(&mut self, avail: Range<u64>) -> Result<(), ExchangeError> {
        let Some(Range { start: lo, end: hi }) = clip(avail, &self.want) else {
            return Ok(());
        };
        let n = hi - lo;
        self.flush_head().await?;
        self.chunk_header(n).await?;
        let off = self.body_offset + lo;
        let send = crate::http::send::send_file_range(
            self.conn,
            self.io,
            self.file,
            off,
            n,
            self.send_mode,
            self.send,
        );
        match send.await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(ExchangeError::Aborted(format!("reading cache fill: {e}")))
            }
            Err(e) => return Err(ExchangeError::Client(e)),
        }
        self.chunk_end().await?;
        self.sent += n;
        Ok(())
    }

    /// Sends the wanted part of relayed bytes that start at body offset `at`.
    async fn memory_part(&mut self, at: u64, data: &[u8]) -> Result<(), ExchangeError> {
        let end = at + data.len() as u64;
        let Some(Range { start: lo, end: hi }) = clip(at..end, &self.want) else {
            // Before the client's range: its head need not wait for the range's bytes.
            return Ok(self.flush_head().await?);
        };
        let part = &data[(lo - at) as usize..(hi - at) as usize];
        if self.framing.wraps() {
            self.flush_head().await?;
            self.chunk_header(part.len() as u64).await?;
            self.conn.write_all(part, self.send).await?;
            self.chunk_end().await?;
        } else if self.head.is_empty() {
            self.conn.write_all(part, self.send).await?;
        } else {
            let head = std::mem::take(&mut self.head);
            self.conn.write_two(&head, part, self.send).await?;
        }
        self.sent += part.len() as u64;
        Ok(())
    }

    /// Sends the head if it has not gone out yet.
    async fn flush_head(&mut self) -> std::io::Result<()> {
        if self.head.is_empty() {
            return Ok(());
        }
        let head = std::mem::take(&mut self.head);
        self.conn.write_all(&head, self.send).await
    }

    /// What the protocol's framing puts before a piece of `n` body bytes.
    async fn chunk_header(&mut self, n: u64) -> std::io::Result<()> {
        if self.framing.wraps() {
            let mut ch = Vec::with_capacity(16);
            self.framing.open(&mut ch, n as usize);
            self.conn.write_all(&ch, self.send).await?;
        }
        Ok(())
    }

    /// What the protocol's framing puts after a piece.
    async fn chunk_end(&mut self) -> std::io::Result<()> {
        if self.framing.wraps() {
            let mut ch = Vec::with_capacity(2);
            self.framing.close(&mut ch);
            self.conn.write_all(&ch, self.send).await?;
        }
        Ok(())
    }
}

/// The leader's client that fell behind (and reads the file) after a disk write error:
/// the file's bytes up to the failure (still readable through the open handle), then
/// the relayed rest of the origin's body. Without a clean end (the origin failed too)
/// the connection is cut.
async fn relay_rest(
    body: &mut Body<'_>,
    pos: u64,
    rx: &mut mpsc::Receiver<Relay>,
) -> Result<(), ExchangeError> {
    let cut = || ExchangeError::Aborted("origin failed mid-body".into());
    let Some(Relay::From(mut at)) = rx.recv().await else {
        return Err(cut());
    };
    if at > pos {
        body.file_part(pos..at).await?;
    }
    at = at.max(pos);
    loop {
        if at >= body.want.end {
            return Ok(());
        }
        match rx.recv().await {
            Some(Relay::Data(b)) => {
                body.memory_part(at, &b).await?;
                at += b.len() as u64;
            }
            Some(Relay::End) => return Ok(()),
            Some(Relay::From(_) | Relay::Behind) | None => return Err(cut()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_only_the_wanted_bytes() {
        let all = 0..u64::MAX;
        assert_eq!(clip(0..10, &all), Some(0..10));
        assert_eq!(clip(0..10, &(5..7)), Some(5..7));
        assert_eq!(clip(0..10, &(8..20)), Some(8..10));
        assert_eq!(clip(10..20, &(5..15)), Some(10..15));
        assert_eq!(clip(0..10, &(10..20)), None, "ends where the range starts");
        assert_eq!(clip(20..30, &(10..20)), None, "past the range");
        assert_eq!(clip(5..5, &all), None, "nothing arrived");
        assert_eq!(clip(0..10, &(0..0)), None, "a 416 wants nothing");
    }
}
