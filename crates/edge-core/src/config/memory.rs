//! `[memory_cache] size`: `"auto"` (the default), `"off"`/`"0"`, or a size, and the rule
//! that turns `"auto"` into bytes.
//!
//! How it fits: the RAM tier is on by default, as Traffic Server sizes its RAM cache
//! from the disk cache and Varnish starts with a malloc store: a stock node answers a
//! small hit from memory (2 syscalls) instead of the disk tier (3.2; docs/background.md).
//! [`auto_size`] is pure (tested with made-up machines); [`physical_memory`] reads this
//! machine once per (re)load. docs/config.md and docs/cache.md give the same formula.

use super::units::parse_size;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;

/// `[memory_cache] size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemSize {
    /// Sized from this machine's memory and the disk caches ([`auto_size`]).
    #[default]
    Auto,
    /// No RAM tier (`"off"`, `"0"` or `0`).
    Off,
    /// Exactly this many bytes over all workers.
    Bytes(u64),
}

/// The auto size's share of physical memory: 1/16 (Traffic Server's rule of thumb is
/// about 1 MiB of RAM cache per GiB of disk, Varnish's malloc store is usually a fixed
/// fraction of RAM; 1/16 leaves the page cache, which serves the larger objects, most
/// of the memory).
pub const AUTO_MEMORY_SHARE: u64 = 16;
/// The auto size's share of the disk caches' `max_size` total: 1/8 (a RAM tier larger
/// than the disk tier's hot part holds objects nobody asks for).
pub const AUTO_DISK_SHARE: u64 = 8;
/// The disk term is raised to at least this (a small disk cache still gets a tier that
/// holds 512 objects of 32 KiB); the memory term is never raised.
pub const AUTO_FLOOR: u64 = 16 << 20;
/// The auto size never exceeds this (more is an operator's decision: write a size).
pub const AUTO_CEILING: u64 = 64 << 30;
/// Below this the tier is not worth its per-entry overhead (and an explicit size must
/// be at least this).
pub const MIN_SIZE: u64 = 1 << 20;

/// `"auto"` in bytes: `min(memory / 16, max(disk_total / 8, 16 MiB), 64 GiB)`, rounded
/// down to a MiB; 0 (no tier) when there is no disk cache or the result is under 1 MiB.
/// `memory` is physical memory as [`physical_memory`] reads it.
pub fn auto_size(memory: u64, disk_total: u64) -> u64 {
    if disk_total == 0 {
        return 0;
    }
    let disk_term = (disk_total / AUTO_DISK_SHARE).max(AUTO_FLOOR);
    let size = (memory / AUTO_MEMORY_SHARE)
        .min(disk_term)
        .min(AUTO_CEILING)
        & !((1 << 20) - 1);
    if size < MIN_SIZE {
        0
    } else {
        size
    }
}

/// Physical memory available to this process: `MemTotal` from `/proc/meminfo`, or the
/// memory limit of the process's cgroup (v2 `memory.max`, v1
/// `memory.limit_in_bytes`) when that is lower. 0 when neither can be read (then
/// `"auto"` turns the tier off, and the server logs a warning saying so).
pub fn physical_memory() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| meminfo_total(&t))
        .unwrap_or(0);
    match cgroup_limit() {
        Some(limit) if total == 0 || limit < total => limit,
        _ => total,
    }
}

/// `MemTotal:` of a `/proc/meminfo` text, in bytes.
fn meminfo_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line
        .trim_start_matches("MemTotal:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The memory limit of this process's cgroup, if it has one.
fn cgroup_limit() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    // v2: one line `0::/path`.
    if let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) {
        let file = format!("/sys/fs/cgroup{}/memory.max", path.trim_end_matches('/'));
        if let Some(n) = read_limit(&file) {
            return Some(n);
        }
    }
    // v1: the `memory` controller's line, `N:memory:/path`.
    let path = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
        ctrl.split(',').any(|c| c == "memory").then_some(path)
    })?;
    read_limit(&format!(
        "/sys/fs/cgroup/memory{}/memory.limit_in_bytes",
        path.trim_end_matches('/')
    ))
    .or_else(|| read_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
}

/// A cgroup limit file: a number of bytes, or `max` (v2) / a huge number (v1) for none.
fn read_limit(file: &str) -> Option<u64> {
    let n: u64 = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
    (n < 1 << 60).then_some(n)
}

impl<'de> Deserialize<'de> for MemSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MemSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"auto\", \"off\", \"0\" or a size such as \"256m\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MemSize, E> {
                match v.trim() {
                    "auto" => Ok(MemSize::Auto),
                    "off" => Ok(MemSize::Off),
                    s => match parse_size(s) {
                        Ok(0) => Ok(MemSize::Off),
                        Ok(n) => Ok(MemSize::Bytes(n)),
                        Err(_) => Err(E::custom(format!(
                            "invalid value {v:?}: expected \"auto\", \"off\", \"0\" or a size such as \"256m\""
                        ))),
                    },
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MemSize, E> {
                match u64::try_from(v) {
                    Ok(0) => Ok(MemSize::Off),
                    Ok(n) => Ok(MemSize::Bytes(n)),
                    Err(_) => Err(E::custom("a size cannot be negative")),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;
    const G: u64 = 1 << 30;

    #[test]
    fn auto_takes_the_smaller_share() {
        // The embedded default (1g disk) on an 8 GiB machine: the disk term, 128 MiB.
        assert_eq!(auto_size(8 * G, G), 128 * M);
        // A 1400g disk on a 64 GiB node: the memory term, 4 GiB.
        assert_eq!(auto_size(64 * G, 1400 * G), 4 * G);
        // Disks add up.
        assert_eq!(auto_size(64 * G, 2 * 8 * G), 2 * G);
        // A tiny disk cache still gets the floor, if memory allows it...
        assert_eq!(auto_size(8 * G, 10 * M), 16 * M);
        // ... but the memory term is never raised: a 128 MiB machine gets 8 MiB.
        assert_eq!(auto_size(128 * M, 10 * G), 8 * M);
        // The ceiling.
        assert_eq!(auto_size(4096 * G, 4096 * G), 64 * G);
        // Rounded down to a MiB.
        assert_eq!(auto_size(16 * (100 * M + 12345), 100 * G), 100 * M);
    }

    #[test]
    fn auto_is_off_without_a_disk_cache_or_memory() {
        assert_eq!(auto_size(64 * G, 0), 0);
        assert_eq!(auto_size(0, 10 * G), 0, "memory unknown");
        assert_eq!(auto_size(15 * M, 10 * G), 0, "under 1 MiB");
    }

    #[test]
    fn meminfo_is_read_in_bytes() {
        let text = "MemTotal:        8041548 kB\nMemFree:         1234 kB\n";
        assert_eq!(meminfo_total(text), Some(8041548 * 1024));
        assert_eq!(meminfo_total("MemFree: 1 kB\n"), None);
        assert!(physical_memory() > 0, "this machine has /proc/meminfo");
    }

    #[test]
    fn sizes_parse() {
        #[derive(Deserialize)]
        struct T {
            size: MemSize,
        }
        let t = |s: &str| toml::from_str::<T>(s).map(|t| t.size);
        assert_eq!(t("size = \"auto\"").unwrap(), MemSize::Auto);
        assert_eq!(t("size = \"off\"").unwrap(), MemSize::Off);
        assert_eq!(t("size = \"0\"").unwrap(), MemSize::Off);
        assert_eq!(t("size = 0").unwrap(), MemSize::Off);
        assert_eq!(t("size = \"256m\"").unwrap(), MemSize::Bytes(256 * M));
        assert_eq!(t("size = 4096").unwrap(), MemSize::Bytes(4096));
        for bad in ["\"lots\"", "\"on\"", "\"1.5g\"", "-1", "true"] {
            let e = t(&format!("size = {bad}")).unwrap_err().to_string();
            assert!(e.contains("auto") || e.contains("negative"), "{bad}: {e}");
        }
    }
}
