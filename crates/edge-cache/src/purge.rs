//! The index side of purging: primary keys by directory (purge by prefix) and tag →
//! objects (purge by tag), so that no purge ever scans the disk; and the purges issued
//! while the loader runs ([`PurgeRule`], [`PendingRules`]).
//!
//! How it fits: the [`crate::index::Index`] updates a [`PurgeIndex`] whenever an entry
//! is inserted or removed (under the entry's shard lock, see the lock order in
//! `index.rs`). The cache's purge operations (`cache/purge.rs`:
//! [`crate::Cache::purge_key`], `purge_prefix`, `purge_tag`) ask it which objects
//! match, and [`crate::zone::Zone::purge`] deletes them (hard purge) or marks them stale
//! (soft purge). While the loader is still walking the disk some objects are not indexed
//! yet, so each purge is also remembered as a [`PurgeRule`] until the loader is done;
//! the zone checks the files the loader and the lookups' disk fallback find against
//! those rules before it indexes them. Purge requests (the admin form, the `PURGE`
//! method) are parsed by the server (`edge-core`'s `purge.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::key::KeyHash;
use crate::key::{HashMapK, HashSetK};
use crate::meta::ObjectMeta;
use crate::sync::lock;

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

/// The path (and query) of an `http://host/...` key: what a path purge compares.
fn key_path(k: &str) -> Option<&str> {
    let rest = k.strip_prefix("http://")?;
    let i = rest.find(['/', '?'])?;
    Some(&rest[i..])
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
