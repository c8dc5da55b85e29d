//! Purge indexes: primary keys in order (purge by prefix) and tag → objects (purge by
//! tag), so that no purge ever scans the disk.
//!
//! How it fits: the [`crate::index::Index`] updates a [`PurgeIndex`] whenever an entry
//! is inserted or removed (under the entry's shard lock, see the lock order in
//! `index.rs`). [`crate::Cache::purge_key`], `purge_prefix` and `purge_tag` ask it which
//! objects match and then delete them (hard purge) or mark them stale (soft purge).
//! While the loader is still walking the disk some objects are not indexed yet, so each
//! purge is also remembered as a [`PurgeRule`] until the loader is done; the loader and
//! the disk fallback in `lookup` apply those rules to the files they find.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::key::KeyHash;
use crate::key::{HashMapK, HashSetK};
use crate::meta::ObjectMeta;

/// Most purge rules kept while the loader runs; past it the oldest rule is dropped (a
/// bound on memory; documented in docs/cache.md as a limit of purging during loading).
pub const MAX_PENDING_RULES: usize = 10_000;

/// The directories of primary keys and the tag map.
///
/// Purge by prefix: every object's slot names the *directory* of its primary key (the
/// key up to and including its last `/`), a 4-byte id into this table of distinct
/// directories (reference counted, so a directory lives as long as one object in it).
/// A prefix selects the directories that start with it (all their objects match) and
/// at most one more, the prefix's own directory when the prefix ends inside a name,
/// whose objects are checked against their stored key. The purge then walks the index
/// in memory for slots in the selected directories: no per-object key is kept in RAM,
/// and no disk scan happens (only that one directory's headers are read, when asked).
///
/// Purge by tag: tag → objects, and object → tags for the tagged objects only (so
/// removing an object finds its tags without its metadata).
#[derive(Debug, Default)]
pub struct PurgeIndex {
    dirs: Mutex<Dirs>,
    tags: Mutex<Tags>,
}

#[derive(Debug, Default)]
struct Dirs {
    by_path: HashMap<Arc<str>, u32>,
    nodes: Vec<Option<DirNode>>,
    free: Vec<u32>,
}

#[derive(Debug)]
struct DirNode {
    path: Arc<str>,
    refs: u32,
}

#[derive(Debug, Default)]
struct Tags {
    by_tag: HashMap<Arc<str>, HashSetK>,
    of: HashMapK<Box<[Arc<str>]>>,
}

/// The directory of a primary key: up to and including its last `/` (empty without).
pub fn dir_of(primary: &str) -> &str {
    primary.rfind('/').map_or("", |i| &primary[..=i])
}

/// Which directories a purge by prefix selects (see [`PurgeIndex`]).
#[derive(Debug, Default)]
pub struct DirPick {
    /// Every object in these matches.
    pub all: HashSet<u32>,
    /// Objects in this one match when their key starts with the prefix.
    pub check: Option<u32>,
}

impl DirPick {
    pub fn wants(&self, dir: u32) -> bool {
        self.all.contains(&dir) || self.check == Some(dir)
    }
}

impl PurgeIndex {
    /// The id of `primary`'s directory, with one more reference.
    pub(crate) fn dir_acquire(&self, primary: &str) -> u32 {
        let path = dir_of(primary);
        let mut d = lock(&self.dirs);
        if let Some(&id) = d.by_path.get(path) {
            if let Some(n) = d.nodes[id as usize].as_mut() {
                n.refs += 1;
            }
            return id;
        }
        let path: Arc<str> = path.into();
        let node = DirNode {
            path: path.clone(),
            refs: 1,
        };
        let id = match d.free.pop() {
            Some(id) => {
                d.nodes[id as usize] = Some(node);
                id
            }
            None => {
                d.nodes.push(Some(node));
                (d.nodes.len() - 1) as u32
            }
        };
        d.by_path.insert(path, id);
        id
    }

    /// Drops one reference to a directory (the last one frees it).
    pub(crate) fn dir_release(&self, id: u32) {
        let mut d = lock(&self.dirs);
        let Some(Some(n)) = d.nodes.get_mut(id as usize) else {
            return;
        };
        n.refs -= 1;
        if n.refs == 0 {
            let path = n.path.clone();
            d.nodes[id as usize] = None;
            d.by_path.remove(&path);
            d.free.push(id);
        }
    }

    /// The directory table for a snapshot: the paths, and each live id's place in them.
    pub(crate) fn dir_table(&self) -> (Vec<String>, HashMap<u32, u32>) {
        let d = lock(&self.dirs);
        let mut paths = Vec::with_capacity(d.by_path.len());
        let mut ids = HashMap::with_capacity(d.by_path.len());
        for (path, &id) in d.by_path.iter() {
            ids.insert(id, paths.len() as u32);
            paths.push(path.to_string());
        }
        (paths, ids)
    }

    /// Every tagged object and its tags, for a snapshot.
    pub(crate) fn tag_table(&self) -> Vec<(KeyHash, Vec<String>)> {
        lock(&self.tags)
            .of
            .iter()
            .map(|(h, names)| (*h, names.iter().map(|n| n.to_string()).collect()))
            .collect()
    }

    /// Distinct directories of stored primary keys.
    pub fn dir_count(&self) -> usize {
        lock(&self.dirs).by_path.len()
    }

    /// The directories a purge of `prefix` selects.
    pub fn pick_dirs(&self, prefix: &str) -> DirPick {
        let own = dir_of(prefix);
        let d = lock(&self.dirs);
        let mut pick = DirPick::default();
        for (path, &id) in d.by_path.iter() {
            if path.starts_with(prefix) {
                pick.all.insert(id);
            } else if &**path == own {
                pick.check = Some(id);
            }
        }
        pick
    }

    /// The hosts of stored `http://host/...` primary keys (a purge by path on every
    /// host purges `http://<host><path>` for each).
    pub fn hosts(&self) -> Vec<String> {
        let d = lock(&self.dirs);
        let mut hosts: HashSet<&str> = HashSet::new();
        for path in d.by_path.keys() {
            if let Some(rest) = path.strip_prefix("http://") {
                let end = rest.find(['/', '?']).unwrap_or(rest.len());
                hosts.insert(&rest[..end]);
            }
        }
        hosts.into_iter().map(str::to_owned).collect()
    }

    pub(crate) fn add_tags(&self, hash: KeyHash, tags: &[String]) {
        if tags.is_empty() {
            return;
        }
        let mut t = lock(&self.tags);
        let mut names = Vec::with_capacity(tags.len());
        for tag in tags {
            let name = match t.by_tag.get_key_value(tag.as_str()) {
                Some((k, _)) => k.clone(),
                None => Arc::from(tag.as_str()),
            };
            t.by_tag.entry(name.clone()).or_default().insert(hash);
            names.push(name);
        }
        names.dedup();
        t.of.insert(hash, names.into_boxed_slice());
    }

    pub(crate) fn remove_tags(&self, hash: KeyHash) {
        let mut t = lock(&self.tags);
        let Some(names) = t.of.remove(&hash) else {
            return;
        };
        for name in names.iter() {
            if let Some(set) = t.by_tag.get_mut(name) {
                set.remove(&hash);
                if set.is_empty() {
                    t.by_tag.remove(name);
                }
            }
        }
    }

    /// How many tags `hash` has in the map.
    pub(crate) fn tags_of(&self, hash: KeyHash) -> usize {
        lock(&self.tags).of.get(&hash).map_or(0, |n| n.len())
    }

    /// Objects carrying `tag`.
    pub fn tagged(&self, tag: &str) -> Vec<KeyHash> {
        lock(&self.tags)
            .by_tag
            .get(tag)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Number of distinct tags (stats).
    pub fn tag_count(&self) -> usize {
        lock(&self.tags).by_tag.len()
    }
}

/// What a purge matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PurgeTarget {
    /// A primary key (all its variants).
    Key(String),
    /// A path and query on any host (`url=/path` without `host=`): every primary key
    /// `http://<host><path>`.
    Path(String),
    Prefix(String),
    Tag(String),
}

/// A purge remembered while the loader runs, applied to objects it finds later.
#[derive(Debug, Clone)]
pub struct PurgeRule {
    pub target: PurgeTarget,
    pub soft: bool,
    /// Objects stored at or after this time were fetched after the purge: kept.
    pub at: SystemTime,
}

impl PurgeRule {
    /// Does this rule apply to an object found on disk?
    pub fn matches(&self, meta: &ObjectMeta) -> bool {
        if meta.response_time >= self.at {
            return false;
        }
        match &self.target {
            PurgeTarget::Key(k) => meta.primary_key() == k,
            PurgeTarget::Path(p) => key_path(meta.primary_key()) == Some(p.as_str()),
            PurgeTarget::Prefix(p) => meta.primary_key().starts_with(p.as_str()),
            PurgeTarget::Tag(t) => meta.tags.iter().any(|x| x == t),
        }
    }
}

/// What the loader should do with a file found on disk, given the pending rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleVerdict {
    Keep,
    /// Keep but serve as stale (soft purge).
    MarkStale,
    Delete,
}

/// Purges issued before the loader finished.
#[derive(Debug, Default)]
pub struct PendingRules {
    rules: Mutex<Vec<PurgeRule>>,
}

impl PendingRules {
    pub fn push(&self, rule: PurgeRule) {
        let mut r = lock(&self.rules);
        if r.len() >= MAX_PENDING_RULES {
            r.remove(0);
        }
        r.push(rule);
    }

    pub fn verdict(&self, meta: &ObjectMeta) -> RuleVerdict {
        let r = lock(&self.rules);
        let mut v = RuleVerdict::Keep;
        for rule in r.iter().filter(|rule| rule.matches(meta)) {
            if !rule.soft {
                return RuleVerdict::Delete;
            }
            v = RuleVerdict::MarkStale;
        }
        v
    }

    /// Drop every rule (the loader is done, everything is indexed).
    pub fn clear(&self) {
        lock(&self.rules).clear();
    }
}

impl crate::Cache {
    /// Purge a URL: every stored variant of the primary key and their compressed
    /// copies. `soft` marks them stale (served as STALE/UPDATING while revalidated)
    /// instead of deleting. Returns the number of objects affected.
    pub fn purge_key(&self, primary_key: &str, soft: bool) -> usize {
        let hashes = || {
            let mut h = self.with_copies(self.index.variants_of(crate::key::key_hash(primary_key)));
            h.extend(self.slices_of(primary_key));
            h
        };
        self.purge_hashes(PurgeTarget::Key(primary_key.to_owned()), hashes, soft)
    }

    /// Purge a path on every host (see [`PurgeTarget::Path`]): the primary key
    /// `http://<host><pq>` for every host with something stored.
    pub fn purge_path(&self, pq: &str, soft: bool) -> usize {
        let hashes = || {
            let mut hashes = Vec::new();
            for host in self.index.purge_index().hosts() {
                let key = format!("http://{host}{pq}");
                hashes.extend(self.index.variants_of(crate::key::key_hash(&key)));
                hashes.extend(self.slices_of(&key));
            }
            self.with_copies(hashes)
        };
        self.purge_hashes(PurgeTarget::Path(pq.to_owned()), hashes, soft)
    }

    /// Purge every object whose primary key starts with `prefix`: the directories that
    /// match (see [`PurgeIndex`]), then a walk of the index in memory; only when the
    /// prefix ends inside a name are that one directory's headers read, to check keys.
    pub fn purge_prefix(&self, prefix: &str, soft: bool) -> usize {
        let hashes = || {
            let pick = self.index.purge_index().pick_dirs(prefix);
            let mut hashes = Vec::new();
            if !pick.all.is_empty() || pick.check.is_some() {
                for (h, dir) in self.index.in_dirs(&|d| pick.wants(d)) {
                    // In a selected directory, or in the prefix's own (its key is
                    // checked).
                    let matches = pick.all.contains(&dir)
                        || self
                            .stored_meta(h)
                            .is_some_and(|(m, _)| m.primary_key().starts_with(prefix));
                    if matches {
                        hashes.push(h);
                    }
                }
            }
            hashes
        };
        self.purge_hashes(PurgeTarget::Prefix(prefix.to_owned()), hashes, soft)
    }

    /// Purge every object tagged `tag` (from `Cache-Tag` / `Surrogate-Key`).
    pub fn purge_tag(&self, tag: &str, soft: bool) -> usize {
        let hashes = || self.index.purge_index().tagged(tag);
        self.purge_hashes(PurgeTarget::Tag(tag.to_owned()), hashes, soft)
    }

    /// Every stored slice of the object `primary_key` (`slice = "1m"`), by the tag each
    /// carries ([`crate::key::slice_tag`]): a purge of the URL reaches them all.
    pub fn slices_of(&self, primary_key: &str) -> Vec<KeyHash> {
        self.index
            .purge_index()
            .tagged(&crate::key::slice_tag(primary_key))
    }

    /// `hashes` and the compressed copies of their current bodies (read from the
    /// headers of the objects that have copies).
    fn with_copies(&self, mut hashes: Vec<KeyHash>) -> Vec<KeyHash> {
        let n = hashes.len();
        for i in 0..n {
            let h = hashes[i];
            if !self.index.has_copies(h) {
                continue;
            }
            let Some((m, _)) = self.stored_meta(h) else {
                continue;
            };
            for coding in crate::coded::CODINGS {
                let ck = crate::key::coded_key(&m.key, coding, m.body_id());
                let ch = crate::key::key_hash(&ck);
                if self.index.contains(ch) {
                    hashes.push(ch);
                }
            }
        }
        hashes
    }

    /// Purges what `hashes` finds, found after the loader gate is taken: while loading,
    /// an object is either indexed before the purge looks (and found) or checked
    /// against the purge's rule by the loader (never neither).
    fn purge_hashes(
        &self,
        target: PurgeTarget,
        hashes: impl FnOnce() -> Vec<KeyHash>,
        soft: bool,
    ) -> usize {
        use std::sync::atomic::Ordering;
        // While loading, remember the purge for files not indexed yet; the gate makes
        // "record + purge" atomic against the loader's "check + insert".
        let _gate = if self.loader.done.load(Ordering::Acquire) {
            None
        } else {
            let g = lock(&self.loader_gate);
            if !self.loader.done.load(Ordering::Acquire) {
                self.pending.push(PurgeRule {
                    target,
                    soft,
                    at: SystemTime::now(),
                });
            }
            Some(g)
        };
        let mut n = 0;
        for h in hashes() {
            if soft {
                if let Some(e) = self.index.set_soft_purged(h) {
                    // Persist the flag so a restart does not resurrect the object as
                    // fresh; best effort (the in-memory flag already applies).
                    if let Some((mut meta, body_offset)) = self.stored_meta(h) {
                        meta.soft_purged = true;
                        let path = self.layout.path_for(h);
                        let _ = crate::storage::rewrite_header_in_place(
                            &path,
                            h,
                            &meta,
                            body_offset,
                            e.ino,
                        );
                    }
                    n += 1;
                }
            } else if let Some(v) = self.index.remove(h, None) {
                self.delete_file(v.hash, v.ino);
                n += 1;
            }
        }
        self.purged.fetch_add(n as u64, Ordering::Relaxed);
        n
    }
}

// ---- Purge requests (the data port's PURGE and the admin `POST /purge`) ----

/// Longest `url=`/`prefix=`/`tag=` value accepted in a purge request.
pub const MAX_PURGE_ARG: usize = 8 * 1024;

/// `{"purged": N}` plus a newline.
pub fn purged_json(n: usize) -> String {
    format!("{{\"purged\": {n}}}\n")
}

/// A purge request that cannot be carried out; the message is for a 400 answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadPurge(pub String);

impl std::fmt::Display for BadPurge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for BadPurge {
    fn from(s: String) -> Self {
        BadPurge(s)
    }
}

impl From<&str> for BadPurge {
    fn from(s: &str) -> Self {
        BadPurge(s.to_owned())
    }
}

/// Parses purge parameters (`url=`, `prefix=`, `tag=`, `host=`, `soft=`) from a query
/// string and/or an `application/x-www-form-urlencoded` body. A `url=` that is a path
/// (`/a/b`) is completed with `host=` or, failing that, `default_host` (a configured
/// site); with neither it matches that path on every host. Returns the target and
/// whether the purge is soft.
pub fn parse_request(
    query: Option<&str>,
    body: &[u8],
    default_host: Option<&str>,
) -> Result<(PurgeTarget, bool), BadPurge> {
    let body = std::str::from_utf8(body).map_err(|_| BadPurge::from("form body is not UTF-8"))?;
    let mut url = None;
    let mut prefix = None;
    let mut tag = None;
    let mut host = None;
    let mut soft = false;
    for pair in query.unwrap_or("").split('&').chain(body.trim().split('&')) {
        if pair.is_empty() {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = form_decode(v).ok_or_else(|| format!("{k}: invalid percent-encoding"))?;
        if v.len() > MAX_PURGE_ARG {
            return Err(BadPurge(format!("{k}: longer than {MAX_PURGE_ARG} bytes")));
        }
        match k {
            "url" => url = Some(v),
            "prefix" => prefix = Some(v),
            "tag" => tag = Some(v),
            "host" => host = Some(v),
            "soft" => soft = matches!(v.as_str(), "1" | "true" | "yes" | "on"),
            _ => return Err(BadPurge(format!("unknown parameter {k:?}"))),
        }
    }
    let target = match (url, prefix, tag) {
        (Some(u), None, None) if u.starts_with('/') => match host.as_deref().or(default_host) {
            Some(h) => PurgeTarget::Key(format!("http://{}{u}", h.to_ascii_lowercase())),
            None => PurgeTarget::Path(u),
        },
        (Some(u), None, None) => PurgeTarget::Key(normalise_url(&u)),
        (None, Some(p), None) if !p.is_empty() => PurgeTarget::Prefix(lower_host(&p)),
        (None, None, Some(t)) if !t.is_empty() => PurgeTarget::Tag(t),
        (None, None, None) => return Err("one of url=, prefix=, tag= is required".into()),
        _ => return Err("exactly one non-empty url=, prefix= or tag= is allowed".into()),
    };
    Ok((target, soft))
}

/// Lower-cases the host of an `http://host/...` key (keys are built that way).
fn lower_host(u: &str) -> String {
    for scheme in ["http://", "https://"] {
        if let Some(rest) = u.strip_prefix(scheme) {
            let end = rest.find('/').unwrap_or(rest.len());
            return format!(
                "http://{}{}",
                rest[..end].to_ascii_lowercase(),
                &rest[end..]
            );
        }
    }
    u.to_string()
}

fn normalise_url(u: &str) -> String {
    if u.starts_with("http://") || u.starts_with("https://") {
        return lower_host(u);
    }
    u.to_string() // a custom cache_key template's key, as is
}

/// The path (and query) of an `http://host/...` key: what a path purge compares.
fn key_path(k: &str) -> Option<&str> {
    let rest = k.strip_prefix("http://")?;
    let i = rest.find(['/', '?'])?;
    Some(&rest[i..])
}

/// `application/x-www-form-urlencoded` value decoding (`+` is a space).
fn form_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                if !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Applies a purge to every cache in `caches`; returns the objects affected.
pub fn purge_all<'a>(
    caches: impl IntoIterator<Item = &'a std::sync::Arc<crate::Cache>>,
    target: &PurgeTarget,
    soft: bool,
) -> usize {
    caches.into_iter().map(|c| c.purge(target, soft)).sum()
}

impl crate::Cache {
    /// Applies one purge target (see [`crate::Cache::purge_key`] and friends).
    pub fn purge(&self, target: &PurgeTarget, soft: bool) -> usize {
        match target {
            PurgeTarget::Key(k) => self.purge_key(k, soft),
            PurgeTarget::Path(p) => self.purge_path(p, soft),
            PurgeTarget::Prefix(p) => self.purge_prefix(p, soft),
            PurgeTarget::Tag(t) => self.purge_tag(t, soft),
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn prefixes_pick_whole_directories_and_at_most_one_to_check() {
        let p = PurgeIndex::default();
        let mut ids = Vec::new();
        for k in [
            "http://a/x/1",
            "http://a/x/2",
            "http://a/x/y/3",
            "http://a/xy",
            "http://a/y",
            "http://b/x",
        ] {
            ids.push(p.dir_acquire(k));
        }
        assert_eq!(
            p.dir_count(),
            4,
            "http://a/, http://a/x/, http://a/x/y/, http://b/"
        );
        let pick = p.pick_dirs("http://a/x/");
        assert_eq!(pick.all.len(), 2, "a/x/ and a/x/y/");
        assert!(pick.check.is_none());
        let pick = p.pick_dirs("http://a/x");
        assert_eq!(pick.all.len(), 2);
        assert_eq!(
            pick.check,
            Some(ids[3]),
            "http://a/ holds xy and y: keys checked"
        );
        let pick = p.pick_dirs("http://c");
        assert!(pick.all.is_empty() && pick.check.is_none());
        let mut hosts = p.hosts();
        hosts.sort();
        assert_eq!(hosts, vec!["a", "b"]);
        for id in ids {
            p.dir_release(id);
        }
        assert_eq!(p.dir_count(), 0);
        assert_eq!(dir_of("no-slash"), "");
        assert_eq!(dir_of("http://h/a/b?c=/d"), "http://h/a/b?c=/");
    }

    #[test]
    fn tags_add_remove() {
        let p = PurgeIndex::default();
        p.add_tags(1, &["a".into(), "b".into()]);
        p.add_tags(2, &["a".into()]);
        let mut a = p.tagged("a");
        a.sort();
        assert_eq!(a, vec![1, 2]);
        assert_eq!(p.tags_of(1), 2);
        p.remove_tags(1);
        assert_eq!(p.tags_of(1), 0);
        assert_eq!(p.tagged("a"), vec![2]);
        assert!(p.tagged("b").is_empty());
        assert_eq!(p.tag_count(), 1);
    }

    #[test]
    fn pending_rules_only_hit_older_objects() {
        let now = SystemTime::now();
        let rules = PendingRules::default();
        let mut m = ObjectMeta::new("http://a/x\0gzip", 200, now - Duration::from_secs(10));
        m.tags = vec!["t".into()];
        assert_eq!(rules.verdict(&m), RuleVerdict::Keep);
        rules.push(PurgeRule {
            target: PurgeTarget::Tag("t".into()),
            soft: true,
            at: now,
        });
        assert_eq!(rules.verdict(&m), RuleVerdict::MarkStale);
        rules.push(PurgeRule {
            target: PurgeTarget::Key("http://a/x".into()),
            soft: false,
            at: now,
        });
        assert_eq!(rules.verdict(&m), RuleVerdict::Delete);
        m.response_time = now + Duration::from_secs(1);
        assert_eq!(rules.verdict(&m), RuleVerdict::Keep);
        rules.clear();
    }
}

#[cfg(test)]
mod request_tests {
    use super::*;

    #[test]
    fn admin_parameters() {
        let p = |q: Option<&str>, b: &str| parse_request(q, b.as_bytes(), Some("Admin:9090"));
        assert_eq!(
            p(None, "url=http%3A%2F%2FEx.com%2Fa%3Fb%3D1").unwrap(),
            (PurgeTarget::Key("http://ex.com/a?b=1".into()), false)
        );
        assert_eq!(
            p(Some("url=/a/b&host=h"), "").unwrap(),
            (PurgeTarget::Key("http://h/a/b".into()), false)
        );
        assert_eq!(
            p(Some("url=/a"), "").unwrap().0,
            PurgeTarget::Key("http://admin:9090/a".into()),
            "a configured default host completes a path"
        );
        assert_eq!(
            parse_request(Some("url=/a?b"), b"", None).unwrap().0,
            PurgeTarget::Path("/a?b".into()),
            "a path alone: every host"
        );
        assert_eq!(
            p(None, "prefix=http://H/img/&soft=1\n").unwrap(),
            (PurgeTarget::Prefix("http://h/img/".into()), true)
        );
        assert_eq!(
            p(Some("tag=a+b"), "").unwrap().0,
            PurgeTarget::Tag("a b".into())
        );
        assert!(p(None, "").is_err());
        assert!(p(None, "url=x&tag=y").is_err());
        assert!(p(None, "tag=").is_err());
        assert!(p(None, "bogus=1").is_err());
        assert!(p(None, "tag=%zz").is_err());
        assert!(p(None, "tag=%4").is_err());
        let long = format!("tag={}", "x".repeat(MAX_PURGE_ARG + 1));
        assert!(p(None, &long).is_err());
    }

    #[test]
    fn purge_json() {
        assert_eq!(purged_json(3), "{\"purged\": 3}\n");
    }
}
