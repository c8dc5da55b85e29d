//! The cache's purge operations: which objects a purge by key, path, prefix or tag
//! reaches (every variant, their compressed copies and slices), found through the
//! index and its purge indexes ([`crate::purge`]); the zone then purges them
//! ([`crate::zone::Zone::purge`], which also remembers the purge while loading).
//!
//! How it fits: the server calls these off its event loop (they unlink files and may
//! read headers): the admin listener's `POST /purge`, the `PURGE` method, and purges on
//! invalidation. Parsing those requests is the server's (`edge-core`'s `purge.rs`).

use std::sync::Arc;

use super::Cache;
use crate::key::KeyHash;
use crate::purge::PurgeTarget;

impl Cache {
    /// Purge a URL: every stored variant of the primary key and their compressed
    /// copies. `soft` marks them stale (served as STALE/UPDATING while revalidated)
    /// instead of deleting. Returns the number of objects affected.
    pub fn purge_key(&self, primary_key: &str, soft: bool) -> usize {
        let hashes = || {
            let mut h = self.with_copies(
                self.zone
                    .index()
                    .variants_of(crate::key::key_hash(primary_key)),
            );
            h.extend(self.slices_of(primary_key));
            h
        };
        self.zone
            .purge(PurgeTarget::Key(primary_key.to_owned()), soft, hashes)
    }

    /// Purge a path on every host (see [`PurgeTarget::Path`]): the primary key
    /// `http://<host><pq>` for every host with something stored.
    pub fn purge_path(&self, pq: &str, soft: bool) -> usize {
        let hashes = || {
            let mut hashes = Vec::new();
            for host in self.zone.index().purge_index().hosts() {
                let key = format!("http://{host}{pq}");
                hashes.extend(self.zone.index().variants_of(crate::key::key_hash(&key)));
                hashes.extend(self.slices_of(&key));
            }
            self.with_copies(hashes)
        };
        self.zone
            .purge(PurgeTarget::Path(pq.to_owned()), soft, hashes)
    }

    /// Purge every object whose primary key starts with `prefix`: the directories that
    /// match (see [`crate::purge::PurgeIndex`]), then a walk of the index in memory; only when the
    /// prefix ends inside a name are that one directory's headers read, to check keys.
    pub fn purge_prefix(&self, prefix: &str, soft: bool) -> usize {
        let hashes = || {
            let pick = self.zone.index().purge_index().pick_dirs(prefix);
            let mut hashes = Vec::new();
            if !pick.all.is_empty() || pick.check.is_some() {
                for (h, dir) in self.zone.index().in_dirs(&|d| pick.wants(d)) {
                    // In a selected directory, or in the prefix's own (its key is
                    // checked).
                    let matches = pick.all.contains(&dir)
                        || self
                            .zone
                            .stored_meta(h)
                            .is_some_and(|(m, _)| m.primary_key().starts_with(prefix));
                    if matches {
                        hashes.push(h);
                    }
                }
            }
            hashes
        };
        self.zone
            .purge(PurgeTarget::Prefix(prefix.to_owned()), soft, hashes)
    }

    /// Purge every object tagged `tag` (from `Cache-Tag` / `Surrogate-Key`).
    pub fn purge_tag(&self, tag: &str, soft: bool) -> usize {
        let hashes = || self.zone.index().purge_index().tagged(tag);
        self.zone
            .purge(PurgeTarget::Tag(tag.to_owned()), soft, hashes)
    }

    /// Every stored slice of the object `primary_key` (`slice = "1m"`), by the tag each
    /// carries ([`crate::key::slice_tag`]): a purge of the URL reaches them all.
    pub fn slices_of(&self, primary_key: &str) -> Vec<KeyHash> {
        self.zone
            .index()
            .purge_index()
            .tagged(&crate::key::slice_tag(primary_key))
    }

    /// `hashes` and the compressed copies of their current bodies (read from the
    /// headers of the objects that have copies).
    fn with_copies(&self, mut hashes: Vec<KeyHash>) -> Vec<KeyHash> {
        let n = hashes.len();
        for i in 0..n {
            let h = hashes[i];
            if !self.zone.index().has_copies(h) {
                continue;
            }
            let Some((m, _)) = self.zone.stored_meta(h) else {
                continue;
            };
            for coding in crate::coded::CODINGS {
                let ck = crate::key::coded_key(&m.key, coding, m.body_id());
                let ch = crate::key::key_hash(&ck);
                if self.zone.index().contains(ch) {
                    hashes.push(ch);
                }
            }
        }
        hashes
    }
}

/// Applies a purge to every cache in `caches`; returns the objects affected.
pub fn purge_all<'a>(
    caches: impl IntoIterator<Item = &'a Arc<Cache>>,
    target: &PurgeTarget,
    soft: bool,
) -> usize {
    caches.into_iter().map(|c| c.purge(target, soft)).sum()
}

impl Cache {
    /// Applies one purge target (see [`Cache::purge_key`] and friends).
    pub fn purge(&self, target: &PurgeTarget, soft: bool) -> usize {
        match target {
            PurgeTarget::Key(k) => self.purge_key(k, soft),
            PurgeTarget::Path(p) => self.purge_path(p, soft),
            PurgeTarget::Prefix(p) => self.purge_prefix(p, soft),
            PurgeTarget::Tag(t) => self.purge_tag(t, soft),
        }
    }
}
