//! A location's body keys, checked: `slice` and `slice_prefetch` (how a large object
//! is fetched and stored), and the compression keys (how it is encoded for a client).
//! `validate.rs` calls these for every location.

use super::verr::{err, VErr};
use super::{Location, RangeFetch};
use std::ops::Range;

/// Smallest `slice` size, and the unit every size is a multiple of.
pub const SLICE_MIN: u64 = 64 * 1024;

const SLICE_UNIT: u64 = 4096;

/// Largest `slice` size: a slice is the unit of a fetch and of the RAM tier.
pub const SLICE_MAX: u64 = 1 << 30;

/// Most slices `slice_prefetch` may fetch ahead of one reader.
pub const SLICE_PREFETCH_MAX: u32 = 16;

/// `slice`: a multiple of 4 KiB from 64 KiB to 1 GiB, on a cached proxied location that
/// does not compress (a sliced location serves identity); `slice_prefetch` at most 16,
/// and only with `slice` (a key that would do nothing is rejected, not ignored).
pub(super) fn validate_slice(loc: &Location) -> Result<(), VErr> {
    if let Some(p) = &loc.slice_prefetch {
        if loc.slice.is_none() {
            let why = "has no effect without slice = \"1m\"";
            return err(Some(p.span()), "location.slice_prefetch", why);
        }
        if *p.get_ref() > SLICE_PREFETCH_MAX {
            let why = format!("{} slices: at most {SLICE_PREFETCH_MAX}", p.get_ref());
            return err(Some(p.span()), "location.slice_prefetch", why);
        }
    }
    let Some(s) = &loc.slice else {
        return Ok(());
    };
    let n = s.get_ref().0;
    if !(SLICE_MIN..=SLICE_MAX).contains(&n) || n % SLICE_UNIT != 0 {
        return err(
            Some(s.span()),
            "location.slice",
            format!("{n} bytes: a slice is a multiple of 4k from 64k to 1g"),
        );
    }
    if loc.proxy.is_none() || loc.cache.get_ref().is_empty() {
        return err(
            Some(s.span()),
            "location.slice",
            "slicing applies to cached proxied locations (proxy = \"...\" and cache = [...])",
        );
    }
    if !loc.compress.is_empty() {
        return err(
            Some(s.span()),
            "location.slice",
            "a sliced location serves identity: remove compress",
        );
    }
    // Slices are always collapsed, and a stale slice is fetched again: these keys
    // would do nothing on a sliced location.
    let idle = [
        ("location.cache_lock", !loc.cache_lock),
        ("location.use_stale", !loc.use_stale.is_empty()),
        ("location.background_update", loc.background_update),
        ("location.cache_revalidate", loc.cache_revalidate.is_some()),
        (
            "location.range_fetch",
            loc.range_fetch == RangeFetch::Forward,
        ),
    ];
    if let Some((key, _)) = idle.iter().find(|(_, set)| *set) {
        return err(
            Some(s.span()),
            key,
            "does not apply to a sliced location (slices are always collapsed and fetched by range, and a stale slice is fetched again)",
        );
    }
    Ok(())
}

/// A location's compression keys: known codings, each once; only on proxied locations;
/// patterns and levels in range; and no compression key without `compress` (a key that
/// would do nothing is refused, not ignored).
pub(super) fn validate_compress(loc: &Location, span: Range<usize>) -> Result<(), VErr> {
    let mut seen = Vec::new();
    for c in loc.compress.iter() {
        let Some(coding) = edge_compress::Coding::from_token(c) else {
            return err(
                Some(span),
                "location.compress",
                format!("unknown coding {c:?} (zstd, br, gzip)"),
            );
        };
        if seen.contains(&coding) {
            return err(
                Some(span),
                "location.compress",
                format!("{c:?} is listed twice"),
            );
        }
        seen.push(coding);
    }
    let others: [(&str, bool); 6] = [
        ("location.compress_offload", loc.compress_offload.is_some()),
        ("location.compress_types", loc.compress_types.is_some()),
        (
            "location.compress_min_length",
            loc.compress_min_length.is_some(),
        ),
        ("location.gzip_level", loc.gzip_level.is_some()),
        ("location.brotli_level", loc.brotli_level.is_some()),
        ("location.zstd_level", loc.zstd_level.is_some()),
    ];
    if loc.compress.is_empty() {
        if let Some((key, _)) = others.iter().find(|(_, set)| *set) {
            return err(
                Some(span),
                key,
                "has no effect without compress = [\"zstd\", \"br\", \"gzip\"] (or a subset)",
            );
        }
        return Ok(());
    }
    if loc.proxy.is_none() {
        return err(
            Some(span),
            "location.compress",
            "compression applies to proxied locations (proxy = \"...\")",
        );
    }
    for t in loc.compress_types.iter().flatten() {
        if !edge_compress::valid_type_pattern(t) {
            return err(
                Some(span),
                "location.compress_types",
                format!(
                    "{t:?} is not a media type pattern (type/subtype, type/*, application/*+json)"
                ),
            );
        }
    }
    let levels = [
        (
            "location.gzip_level",
            loc.gzip_level,
            edge_compress::codec::GZIP_LEVELS,
        ),
        (
            "location.brotli_level",
            loc.brotli_level,
            edge_compress::codec::BROTLI_LEVELS,
        ),
        (
            "location.zstd_level",
            loc.zstd_level,
            edge_compress::codec::ZSTD_LEVELS,
        ),
    ];
    for (key, v, range) in levels {
        if let Some(v) = v {
            if !range.contains(&v) {
                return err(
                    Some(span),
                    key,
                    format!("{v} is out of range ({}..={})", range.start(), range.end()),
                );
            }
        }
    }
    Ok(())
}
