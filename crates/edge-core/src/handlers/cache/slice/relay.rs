//! Relaying an origin response to the client as it arrives: a slice that may not be
//! stored, or the whole body from an origin that ignores `Range`, cut into stored
//! slices as the bytes pass ([`Cutter`]).
//!
//! How it fits: the request flow (`super`) relays a [`super::got::Relayed`] slice with
//! [`relay`]; each cut slice is written like a fill, under its own slice key.

use super::got::slice_ctx;
use super::plan::Slicer;
use crate::handlers::cache::ctx::Ctx;
use crate::handlers::cache::store::{publish, Store};
use crate::http::conn::Conn;
use crate::http::exchange::{Exchange, ExchangeError};
use crate::upstream::UpstreamResponse;
use edge_cache::part::Part;
use edge_cache::ObjectMeta;
use std::ops::Range;

/// Upstream read buffer growth when relaying an origin response.
const UP_BUF: usize = 64 * 1024;

/// Cuts an origin's whole body into stored slices as it passes (an origin that
/// ignores `Range`): each slice from its first byte to its last, written like a fill.
pub(super) struct Cutter {
    sl: Slicer,
    total: u64,
    /// The whole response's slice metadata (its `Content-Range` is replaced per slice).
    meta: ObjectMeta,
    /// The slice being written and its store.
    open: Option<(u64, Store)>,
    /// No slice starting at or past this offset is stored (the end of the slice that
    /// holds the client's last byte: the relay stops there).
    until: u64,
}

impl Cutter {
    pub(super) fn new(sl: Slicer, total: u64, meta: ObjectMeta, want: &Range<u64>) -> Cutter {
        let last = sl.of(want.end.saturating_sub(1).max(want.start));
        Cutter {
            sl,
            total,
            meta,
            open: None,
            until: sl.bytes(last, total).end,
        }
    }

    /// Stores `data`, the body bytes at object offset `at`.
    async fn write(&mut self, ctx: &Ctx<'_>, mut at: u64, mut data: &[u8]) {
        while !data.is_empty() {
            let n = self.sl.of(at);
            let bytes = self.sl.bytes(n, self.total);
            if self.open.as_ref().is_none_or(|(m, _)| *m != n) {
                self.open = None; // a slice not written from its start is dropped
                if at == bytes.start && at < self.until {
                    self.open = self.begin(ctx, n, &bytes).await.map(|s| (n, s));
                }
            }
            let k = ((bytes.end - at) as usize).min(data.len());
            if let Some((_, s)) = self.open.as_mut() {
                if !s.write(&ctx.w.file_io, &data[..k]).await {
                    self.open = None;
                }
            }
            at += k as u64;
            data = &data[k..];
            if at == bytes.end {
                if let Some((_, s)) = self.open.take() {
                    s.finish(&ctx.w.file_io).await;
                }
            }
        }
    }

    /// Opens the writer of slice `n`.
    async fn begin(&self, ctx: &Ctx<'_>, n: u64, bytes: &Range<u64>) -> Option<Store> {
        let sc = slice_ctx(ctx, &self.sl, n);
        if sc.cache.index_probe(sc.key_hash) {
            return None; // stored already
        }
        let part = Part {
            start: bytes.start,
            end: bytes.end,
            total: self.total,
        };
        let mut meta = self.meta.clone();
        meta.header_block = edge_cache::part::block_of_part(&meta.header_block, &part);
        meta.body_len = part.len();
        meta.key = match meta.key.split_once('\0') {
            Some((_, values)) => format!("{}\0{values}", sc.key),
            None => sc.key.clone(),
        };
        let w = ctx.w.file_io.begin_write(sc.cache, meta).await?;
        publish(Some(w), None)
    }

    /// Whether a slice is being written (the relay reads on to its end).
    fn writing(&self) -> bool {
        self.open.is_some()
    }
}

/// Relays an origin response whose body starts at object offset `at`: the bytes of
/// `want` go to the client as they arrive, and with `cut` every whole slice that
/// passes is stored. Reads until `want` is sent and the slice being stored is
/// complete (a client gone meanwhile still completes that slice). Returns the bytes
/// sent.
pub(super) async fn relay(
    ctx: &Ctx<'_>,
    conn: &mut Conn,
    ex: &mut Exchange,
    mut up: UpstreamResponse,
    at: u64,
    want: Range<u64>,
    mut cut: Option<Cutter>,
) -> (Result<(), ExchangeError>, u64) {
    let group = &ctx.p.upstream;
    let send = ctx.shared.timeouts.send;
    ex.cache.fwd_status = Some(up.head.status);
    let mut pos = at;
    let mut sent = 0u64;
    let mut client: Option<std::io::Error> = None;
    let result: Result<(), String> = loop {
        let mut bad = None;
        loop {
            let p = match up.next_piece() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => {
                    bad = Some(e);
                    break;
                }
            };
            let data = &up.buf[p.data()];
            if !data.is_empty() {
                if let Some(c) = cut.as_mut() {
                    c.write(ctx, pos, data).await;
                }
                let end = pos + data.len() as u64;
                let (lo, hi) = (pos.max(want.start), end.min(want.end));
                if client.is_none() && lo < hi {
                    let part = &data[(lo - pos) as usize..(hi - pos) as usize];
                    match conn.write_all(part, send).await {
                        Ok(()) => sent += part.len() as u64,
                        Err(e) => client = Some(e),
                    }
                }
                pos = end;
            }
            bytes::Buf::advance(&mut up.buf, p.consumed);
        }
        if let Some(b) = bad {
            break Err(b);
        }
        let storing = cut.as_ref().is_some_and(Cutter::writing);
        if up.body_done() || (!storing && (client.is_some() || pos >= want.end)) {
            break Ok(());
        }
        match up.read_body(group, UP_BUF, ctx.w.stats()).await {
            Ok(true) => {}
            // A body that ends with the origin's close.
            Ok(false) => break Ok(()),
            Err(why) => break Err(why),
        }
    };
    up.release(&ctx.w.pool, group);
    let r = match (client, result) {
        (Some(e), _) => Err(ExchangeError::Client(e)),
        (None, Err(why)) => Err(ExchangeError::Aborted(why)),
        (None, Ok(())) if pos < want.end => {
            Err(ExchangeError::Aborted("upstream body ended early".into()))
        }
        (None, Ok(())) => Ok(()),
    };
    (r, sent)
}
