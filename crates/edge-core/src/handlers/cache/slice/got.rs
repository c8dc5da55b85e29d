//! One slice as a request got it (stored, filling, relayed from the origin, or an
//! error), and the consistency check every slice passes: it must carry the first
//! slice's ETag (or Last-Modified) and complete length, or every slice of the object
//! is purged.
//!
//! How it fits: the types and checks shared by the request flow (`super`), getting a
//! slice ([`super::obtain`](mod@super::obtain)), the relay
//! ([`super::relay`](mod@super::relay)) and prefetching
//! ([`super::prefetch`](mod@super::prefetch)).

use super::plan::Slicer;
use crate::handlers::cache::ctx::Ctx;
use crate::http::exchange::ExchangeError;
use crate::upstream::{UpstreamError, UpstreamResponse};
use edge_cache::part::Part;
use edge_cache::{key_hash, pick, Fill, FillHead, HitEntry, ObjectMeta};
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// One slice, as this request got it.
pub(super) enum Got {
    /// Stored.
    Hit(HitEntry),
    /// Being written by a fill: ours (`ours`: the fetch runs in its own task) or
    /// another request's (collapsed).
    Fill {
        fill: Arc<Fill>,
        head: Arc<FillHead>,
        ours: bool,
    },
    /// An origin response relayed as it arrives: a slice that may not be stored, or
    /// the whole body from an origin that ignores `Range` (`at..end` = the whole
    /// object; then `store` cuts it into stored slices as it passes). `meta` has its
    /// validators and headers.
    Origin(Box<Relayed>),
    /// Not a slice of an object of known length (an error status, a 200 of unknown
    /// length): relayed as it is, uncached, when it answers the first slice.
    Other(UpstreamResponse),
    /// The origin's slice disagrees with the object's first slice.
    Mismatch,
    /// The origin answered a slice with the wrong bytes.
    Bad(String),
    Failed(UpstreamError),
}

/// An origin response relayed to the client as it arrives.
pub(super) struct Relayed {
    pub(super) up: UpstreamResponse,
    pub(super) meta: ObjectMeta,
    /// The object's bytes the body holds.
    pub(super) at: u64,
    pub(super) end: u64,
    pub(super) total: u64,
    /// Cut into stored slices as it passes.
    pub(super) store: bool,
}

impl Got {
    /// Whether a stored or filling slice holds the bytes `want` (anything else is
    /// taken as it is: it relays, or fails).
    pub(super) fn holds(&self, want: &Range<u64>) -> bool {
        match self {
            Got::Hit(e) => holds(&e.meta, want),
            Got::Fill { head, .. } => holds(&head.meta, want),
            _ => true,
        }
    }

    /// The metadata and the object's complete length of a slice.
    pub(super) fn meta(&self) -> Option<(&ObjectMeta, u64)> {
        match self {
            Got::Hit(e) => Some((&e.meta, Part::of(&e.meta)?.total)),
            Got::Fill { head, .. } => Some((&head.meta, Part::of(&head.meta)?.total)),
            Got::Origin(o) => Some((&o.meta, o.total)),
            _ => None,
        }
    }
}

/// What every slice of the object must agree with: the first slice's.
pub(super) struct Reference {
    pub(super) meta: ObjectMeta,
    pub(super) total: u64,
}

impl Reference {
    /// Same complete length, and the same ETag (or, without one, Last-Modified).
    pub(super) fn agrees(&self, meta: &ObjectMeta, total: u64) -> bool {
        total == self.total
            && match (&self.meta.etag, self.meta.last_modified) {
                (Some(e), _) => meta.etag.as_ref() == Some(e),
                (None, Some(lm)) => meta.etag.is_none() && meta.last_modified == Some(lm),
                (None, None) => meta.etag.is_none() && meta.last_modified.is_none(),
            }
    }
}

/// How answering from the first slice ended.
pub(super) enum Sent {
    Done(Result<(), ExchangeError>),
    /// The object changed before the head was sent: every slice is purged, start again.
    Changed,
}

/// Checks a slice against the reference: on a disagreement every slice of the object
/// is purged, the mismatch counted, and `Some(Changed)` returned.
pub(super) fn check(ctx: &Ctx<'_>, reference: &Reference, got: &Got) -> Option<Sent> {
    let agrees = match got {
        Got::Mismatch => false,
        g => g.meta().is_none_or(|(m, t)| reference.agrees(m, t)),
    };
    if agrees {
        return None;
    }
    ctx.w.stats().slice_mismatches.fetch_add(1, Relaxed);
    let n = purge_slices(ctx);
    tracing::warn!(
        "slice: {} changed between slices (ETag, Last-Modified or length); {n} slices purged",
        ctx.key
    );
    Some(Sent::Changed)
}

/// Purges every slice of this request's object from every cache of the location.
pub(super) fn purge_slices(ctx: &Ctx<'_>) -> usize {
    let target = edge_cache::purge::PurgeTarget::Key(ctx.key.clone());
    edge_cache::purge_all(&ctx.p.caches, &target, false)
}

/// The request context of slice `n`: its key, hash and cache (slices spread over the
/// location's caches by their own hash); fetches keep the object's upstream affinity.
pub(super) fn slice_ctx<'a>(ctx: &Ctx<'a>, sl: &Slicer, n: u64) -> Ctx<'a> {
    let key = edge_cache::key::slice_key(&ctx.key, sl.size, n);
    let hash = key_hash(&key);
    Ctx {
        w: ctx.w,
        shared: ctx.shared,
        route: ctx.route,
        p: ctx.p,
        affinity: ctx.affinity,
        cache: pick(&ctx.p.caches, hash),
        key,
        key_hash: hash,
    }
}

/// Whether the slice (or fill) with metadata `meta` holds every byte of `want`.
pub(super) fn holds(meta: &ObjectMeta, want: &Range<u64>) -> bool {
    Part::of(meta).is_some_and(|p| p.covers(want))
}
