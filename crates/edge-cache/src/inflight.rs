//! The collapse lock: concurrent misses for one key make one origin fetch, and the
//! followers stream the body as it arrives.
//!
//! How it fits: after a [`crate::Lookup::Miss`] the server calls [`Inflight::join`].
//! The first request becomes the [`Join::Leader`]: it fetches from the origin, writes
//! the body through a [`crate::ObjectWriter`] and publishes through its [`FillHandle`]:
//! the response head (with a read handle on the temp file), then progress (body bytes
//! written so far), then `done`/`fail`/`uncacheable`. Every other request is a
//! [`Join::Follower`]: it waits for the head ([`Fill::wait_head`], bounded by its own
//! location's `cache_lock_timeout`, so two locations sharing a cache each keep theirs),
//! then reads newly written bytes from the SAME temp file at its
//! own offset ([`FillReader`]), woken by a `tokio::sync::watch` channel: no polling
//! (nginx polls every 500 ms), and one origin request however many followers.
//!
//! Failure semantics:
//! - leader fails (or its handle is dropped) BEFORE the head: followers get
//!   [`WaitHead::Retry`], join again, and exactly one of them becomes the new leader;
//! - leader fails AFTER the head: followers see [`FillError::LeaderFailed`] mid-body;
//!   they have already sent a head with a length, so the server must abort those
//!   connections (a truncated response is never passed off as complete);
//! - the response is not storable: followers get [`WaitHead::Uncacheable`] and fetch on
//!   their own;
//! - waiting longer than `cache_lock_timeout` for the head: [`WaitHead::TimedOut`], the
//!   server fetches uncached.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::key::KeyHash;
use crate::meta::{ObjectMeta, BODY_LEN_UNKNOWN};
use crate::sync::lock;

const SHARDS: usize = 64;

/// The response head of a fill, shared with every follower.
#[derive(Debug)]
pub struct FillHead {
    /// Status, ready-to-send header block, and `body_len` (or [`BODY_LEN_UNKNOWN`] for
    /// a chunked origin response).
    pub meta: Arc<ObjectMeta>,
    /// Read handle on the temp file being written (valid after the rename too), shared
    /// with its writer.
    pub file: Arc<File>,
    /// Where the body starts in `file`.
    pub body_offset: u64,
}

/// Where a fill is.
#[derive(Debug, Clone)]
pub enum FillState {
    /// The leader is waiting for the origin's response head.
    Pending,
    /// Head known; `written` body bytes are in the file.
    Streaming { head: Arc<FillHead>, written: u64 },
    /// The whole body (`len` bytes) is in the file and the object is committed.
    Done { head: Arc<FillHead>, len: u64 },
    /// The leader failed; `head` says whether it failed before or after the head.
    Failed { head: Option<Arc<FillHead>> },
    /// The response may not be stored: followers fetch on their own.
    Uncacheable,
}

/// One in-progress fill, shared by the leader's handle and the followers.
#[derive(Debug)]
pub struct Fill {
    hash: KeyHash,
    tx: watch::Sender<FillState>,
}

/// What a follower's wait for the head ended with.
#[derive(Debug)]
pub enum WaitHead {
    /// Stream the body with [`Fill::reader`].
    Head(Arc<FillHead>),
    /// The leader failed before the head: call [`Inflight::join`] again (one follower
    /// becomes the new leader).
    Retry,
    /// Not storable: fetch from the origin yourself.
    Uncacheable,
    /// `cache_lock_timeout` passed: fetch from the origin yourself, uncached.
    TimedOut,
}

/// A follower's body stream failed.
#[derive(Debug)]
pub enum FillError {
    /// The leader failed after the head: abort the client connection.
    LeaderFailed,
    /// Reading the temp file failed.
    Io(std::io::Error),
}

impl std::fmt::Display for FillError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FillError::LeaderFailed => f.write_str("cache fill leader failed mid-body"),
            FillError::Io(e) => write!(f, "reading cache fill: {e}"),
        }
    }
}

impl std::error::Error for FillError {}

impl Fill {
    pub fn hash(&self) -> KeyHash {
        self.hash
    }

    /// The current state (a snapshot).
    pub fn state(&self) -> FillState {
        self.tx.borrow().clone()
    }

    /// Wait (asynchronously, woken by the leader) for the response head, at most
    /// `lock_timeout` (the follower's location's `cache_lock_timeout`). Needs a tokio
    /// runtime with the time driver enabled.
    pub async fn wait_head(&self, lock_timeout: Duration) -> WaitHead {
        let mut rx = self.tx.subscribe();
        let wait = async {
            loop {
                let st = rx.borrow_and_update().clone();
                match st {
                    FillState::Pending => {}
                    FillState::Streaming { head, .. } | FillState::Done { head, .. } => {
                        return WaitHead::Head(head)
                    }
                    FillState::Failed { head: None } => return WaitHead::Retry,
                    FillState::Failed { head: Some(head) } => return WaitHead::Head(head),
                    FillState::Uncacheable => return WaitHead::Uncacheable,
                }
                if rx.changed().await.is_err() {
                    // Unreachable while `self` holds the sender; treat as a failed leader.
                    return WaitHead::Retry;
                }
            }
        };
        match tokio::time::timeout(lock_timeout, wait).await {
            Ok(w) => w,
            Err(_) => WaitHead::TimedOut,
        }
    }

    /// A body stream starting at offset 0 (call after [`Fill::wait_head`] gave a head).
    pub fn reader(&self, head: Arc<FillHead>) -> FillReader {
        FillReader {
            rx: self.tx.subscribe(),
            head,
            pos: 0,
        }
    }
}

/// A follower's position in a fill's body.
#[derive(Debug)]
pub struct FillReader {
    rx: watch::Receiver<FillState>,
    head: Arc<FillHead>,
    pos: u64,
}

impl FillReader {
    /// Body bytes consumed so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    pub fn head(&self) -> &Arc<FillHead> {
        &self.head
    }

    /// Wait until body bytes past the current position exist; returns their range
    /// (relative to the body start; add `head.body_offset` for file offsets), or `None`
    /// at the end of a completed body. The caller sends them (e.g. `sendfile`) and
    /// calls [`FillReader::advance`].
    pub async fn wait_available(&mut self) -> Result<Option<Range<u64>>, FillError> {
        loop {
            let st = self.rx.borrow_and_update().clone();
            match st {
                FillState::Streaming { written, .. } if written > self.pos => {
                    return Ok(Some(self.pos..written))
                }
                FillState::Done { len, .. } => {
                    return Ok((len > self.pos).then_some(self.pos..len));
                }
                FillState::Failed { .. } | FillState::Uncacheable => {
                    return Err(FillError::LeaderFailed)
                }
                FillState::Pending | FillState::Streaming { .. } => {}
            }
            if self.rx.changed().await.is_err() {
                return Err(FillError::LeaderFailed);
            }
        }
    }

    /// Mark `n` bytes as sent.
    pub fn advance(&mut self, n: u64) {
        self.pos += n;
    }

    /// Copy the next available bytes into `buf` (waiting for them); `Ok(0)` is the end
    /// of the body. For callers that do not use `sendfile`.
    pub async fn read_chunk(&mut self, buf: &mut [u8]) -> Result<usize, FillError> {
        let Some(range) = self.wait_available().await? else {
            return Ok(0);
        };
        let want = ((range.end - range.start) as usize).min(buf.len());
        let n = self
            .head
            .file
            .read_at(&mut buf[..want], self.head.body_offset + range.start)
            .map_err(FillError::Io)?;
        if n == 0 && want > 0 {
            return Err(FillError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "fill file shorter than published progress",
            )));
        }
        self.advance(n as u64);
        Ok(n)
    }
}

/// The leader's side of a fill. Dropping it without `done`/`uncacheable` counts as a
/// failure, so followers never hang.
#[derive(Debug)]
pub struct FillHandle {
    fill: Arc<Fill>,
    table: Arc<Table>,
    head: Option<Arc<FillHead>>,
    finished: bool,
}

impl FillHandle {
    pub fn fill(&self) -> &Arc<Fill> {
        &self.fill
    }

    /// Publish the response head; followers start streaming.
    pub fn publish_head(&mut self, meta: Arc<ObjectMeta>, file: Arc<File>, body_offset: u64) {
        let head = Arc::new(FillHead {
            meta,
            file,
            body_offset,
        });
        self.head = Some(head.clone());
        self.fill
            .tx
            .send_replace(FillState::Streaming { head, written: 0 });
    }

    /// `written` body bytes are now in the file (call after each write).
    pub fn progress(&self, written: u64) {
        if let Some(head) = &self.head {
            self.fill.tx.send_replace(FillState::Streaming {
                head: head.clone(),
                written,
            });
        }
    }

    /// The body is complete (and committed, so new requests hit the index).
    pub fn done(mut self, len: u64) {
        self.finished = true;
        match self.head.clone() {
            Some(head) => {
                self.fill.tx.send_replace(FillState::Done { head, len });
            }
            None => {
                self.fill.tx.send_replace(FillState::Failed { head: None });
            }
        }
        self.table.remove(&self.fill);
    }

    /// The response is not storable: followers fetch on their own.
    pub fn uncacheable(mut self) {
        self.finished = true;
        self.fill.tx.send_replace(FillState::Uncacheable);
        self.table.remove(&self.fill);
    }

    /// The fetch or the write failed.
    pub fn fail(mut self) {
        self.finish_failed();
    }

    fn finish_failed(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.fill.tx.send_replace(FillState::Failed {
            head: self.head.clone(),
        });
        self.table.remove(&self.fill);
    }
}

impl Drop for FillHandle {
    fn drop(&mut self) {
        self.finish_failed();
    }
}

/// Result of [`Inflight::join`].
#[derive(Debug)]
pub enum Join {
    Leader(FillHandle),
    Follower(Arc<Fill>),
}

type FillMap = HashMap<KeyHash, Arc<Fill>>;

#[derive(Debug)]
struct Table {
    shards: Box<[Mutex<FillMap>]>,
    collapsed: AtomicU64,
    leaders: AtomicU64,
}

impl Table {
    fn remove(&self, fill: &Arc<Fill>) {
        let mut s = lock(&self.shards[(fill.hash as usize) & (SHARDS - 1)]);
        if s.get(&fill.hash).is_some_and(|f| Arc::ptr_eq(f, fill)) {
            s.remove(&fill.hash);
        }
    }
}

/// The table of fills in progress (sharded by key hash).
#[derive(Debug)]
pub struct Inflight {
    table: Arc<Table>,
}

impl Default for Inflight {
    fn default() -> Self {
        Inflight::new()
    }
}

impl Inflight {
    pub fn new() -> Inflight {
        Inflight {
            table: Arc::new(Table {
                shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
                collapsed: AtomicU64::new(0),
                leaders: AtomicU64::new(0),
            }),
        }
    }

    /// Become the leader for `hash`, or follow the fill already in progress.
    pub fn join(&self, hash: KeyHash) -> Join {
        let mut s = lock(&self.table.shards[(hash as usize) & (SHARDS - 1)]);
        if let Some(f) = s.get(&hash) {
            self.table.collapsed.fetch_add(1, Ordering::Relaxed);
            return Join::Follower(f.clone());
        }
        let (tx, _rx) = watch::channel(FillState::Pending);
        let fill = Arc::new(Fill { hash, tx });
        s.insert(hash, fill.clone());
        self.table.leaders.fetch_add(1, Ordering::Relaxed);
        Join::Leader(FillHandle {
            fill,
            table: self.table.clone(),
            head: None,
            finished: false,
        })
    }

    /// Fills in progress.
    pub fn len(&self) -> usize {
        self.table.shards.iter().map(|s| lock(s).len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Requests that followed a fill instead of going to the origin (metric).
    pub fn collapsed(&self) -> u64 {
        self.table.collapsed.load(Ordering::Relaxed)
    }

    /// Fills started (metric).
    pub fn leaders(&self) -> u64 {
        self.table.leaders.load(Ordering::Relaxed)
    }
}

/// Whether a published body length is known.
pub fn known_len(meta: &ObjectMeta) -> Option<u64> {
    (meta.body_len != BODY_LEN_UNKNOWN).then_some(meta.body_len)
}

#[cfg(test)]
mod tests;
