//! Opening the `[[cache]]` zones. Caches live for the whole process: they are opened
//! once at startup (before any socket, so a bad cache path fails early) and carried over
//! by name on reload, because each one owns a loader, a manager and an index that must
//! not be rebuilt on every SIGHUP.

use super::error::StateError;
use crate::config::{validate::parse_levels, Config};
use edge_cache::{Cache, CacheConfig};
use std::collections::HashMap;
use std::sync::Arc;

pub type Caches = HashMap<String, Arc<Cache>>;

/// Opens every zone of `cfg`, reusing the already open ones from `existing` by name.
pub fn open_caches(cfg: &Config, existing: Option<&Caches>) -> Result<Caches, StateError> {
    let mut out = HashMap::new();
    for z in &cfg.cache {
        let name = z.name.get_ref().clone();
        if let Some(c) = existing.and_then(|e| e.get(&name)) {
            if c.config().path != z.path {
                tracing::warn!(
                    "cache \"{name}\": a new path needs a restart; keeping {}",
                    c.config().path.display()
                );
            }
            c.set_verify(z.cache_verify.to_cache());
            out.insert(name, c.clone());
            continue;
        }
        let lock_timeout = cfg
            .location
            .iter()
            .filter(|l| l.cache.get_ref().contains(&name))
            .map(|l| l.cache_lock_timeout.0)
            .max()
            .unwrap_or(std::time::Duration::from_secs(5));
        let cc = CacheConfig {
            name: name.clone(),
            path: z.path.clone(),
            levels: parse_levels(z.levels.get_ref())?,
            max_size: z.max_size.0,
            min_free: z.min_free.0,
            inactive: z.inactive.0,
            keys_zone: z.keys_zone.0,
            loader_files: z.loader_files,
            loader_sleep: z.loader_sleep.0,
            manager_files: z.manager_files,
            manager_threshold: z.manager_threshold.0,
            lock_timeout,
            verify: z.cache_verify.to_cache(),
            ..CacheConfig::default()
        };
        let cache = Cache::open(cc).map_err(|source| StateError::CacheOpen {
            name: name.clone(),
            path: z.path.clone(),
            source,
        })?;
        out.insert(name, cache);
    }
    Ok(out)
}
