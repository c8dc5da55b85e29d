//! The manager: removes inactive objects and evicts least recently used ones to keep
//! the cache within `max_size`, `min_free` and `keys_zone`, in bounded batches.
//!
//! How it fits: one background thread per [`crate::Cache`], on its [`Zone`]. Each pass does at most
//! `manager_files` removals or `manager_threshold` of work (nginx's budget), then sleeps
//! `manager_sleep` if work is left, or up to [`IDLE_SLEEP`] otherwise. Writers that push
//! the zone over budget wake it early. This module decides how many objects go; the zone
//! removes them ([`Zone::expire`], [`Zone::evict`]: the index picks the victims, their
//! files are deleted only if still the ones the index knew, and the removals counted).
//! Every limit is read from [`crate::Limits`] once per pass, so a reload's smaller
//! `max_size` (which also wakes the manager) is evicted down to at once.

use std::io;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::zone::Zone;

/// Sleep between passes when there is nothing to do.
pub const IDLE_SLEEP: Duration = Duration::from_secs(1);
/// Victims taken from the index per eviction step (then the budget is re-checked).
const EVICT_STEP: usize = 16;

/// Start the manager thread for `zone` (it ends when the zone stops or is dropped).
pub(crate) fn spawn(zone: &Arc<Zone>) -> io::Result<JoinHandle<()>> {
    let weak = Arc::downgrade(zone);
    std::thread::Builder::new()
        .name(format!("cache-manager-{}", zone.name()))
        .spawn(move || run(weak))
        .map_err(|e| io::Error::new(e.kind(), format!("spawn manager thread: {e}")))
}

fn run(weak: Weak<Zone>) {
    let mut trimmed_at = 0u64;
    loop {
        let Some(zone) = weak.upgrade() else { return };
        if zone.stopping() {
            return;
        }
        let outcome = pass(&zone);
        if !outcome.more {
            maybe_trim(&zone, &mut trimmed_at);
        }
        let sleep = if outcome.more {
            zone.limits().manager_sleep
        } else {
            IDLE_SLEEP
        };
        zone.wait_for_work(sleep);
    }
}

/// Gives the heap's free pages back to the system (glibc `malloc_trim`): the index's
/// tables double as it grows, and the tables they replace stay resident in the heap,
/// about 10 bytes per object at a million objects, until trimmed. Returns whether
/// anything was released.
pub fn trim_heap() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only walks glibc's own heap under its own locks; the
        // argument is a byte count to keep at the top of the heap.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Entries added or removed since the last trim that make the next one worth its cost.
pub const TRIM_AFTER_CHANGE: u64 = 65_536;
/// At most one trim per process per this long.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// Trims the heap when this zone's index changed by [`TRIM_AFTER_CHANGE`] entries since
/// its last trim and no cache of the process trimmed in the last [`TRIM_INTERVAL`].
fn maybe_trim(zone: &Zone, last_entries: &mut u64) {
    static LAST: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
    let entries = zone.index().entries();
    if entries.abs_diff(*last_entries) < TRIM_AFTER_CHANGE {
        return;
    }
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if last.is_some_and(|t| t.elapsed() < TRIM_INTERVAL) {
        return;
    }
    *last = Some(Instant::now());
    drop(last);
    *last_entries = entries;
    trim_heap();
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PassOutcome {
    pub expired: usize,
    pub evicted: usize,
    /// The budget ran out with work left.
    pub more: bool,
}

/// One bounded manager pass (also callable directly, e.g. by tests or an admin hook).
pub fn pass(zone: &Zone) -> PassOutcome {
    let start = Instant::now();
    // One copy per pass: a reload's new limits apply from the next pass.
    let cfg = zone.limits();
    let budget = cfg.manager_files.max(1);
    let mut out = PassOutcome::default();

    // 1. inactive expiry (a bounded sweep of the index, resumed by the next pass).
    let index = zone.index();
    let now = index.now_ticks();
    let inactive = crate::index::Index::ticks_of(cfg.inactive);
    if now > inactive {
        out.expired = zone.expire(now - inactive, budget);
        if out.expired == budget {
            out.more = true;
            return out;
        }
    }

    // 2. size, free space and index memory.
    let mut free = if cfg.min_free > 0 {
        free_space(&zone.layout().root).ok()
    } else {
        None
    };
    loop {
        let over_disk = index.disk_bytes() > cfg.max_size;
        let over_mem = index.mem_bytes() > cfg.keys_zone;
        let low_free = free.is_some_and(|f| f < cfg.min_free);
        if !(over_disk || over_mem || low_free) {
            break;
        }
        if out.expired + out.evicted >= budget || start.elapsed() >= cfg.manager_threshold {
            out.more = true;
            break;
        }
        // Evict about as many as needed (by average object size), not a whole step.
        let entries = index.entries().max(1);
        let need = |over: u64, total: u64| over.div_ceil((total / entries).max(1));
        let mut wanted = 1u64;
        if over_disk {
            let d = index.disk_bytes();
            wanted = wanted.max(need(d.saturating_sub(cfg.max_size), d));
        }
        if over_mem {
            let m = index.mem_bytes();
            wanted = wanted.max(need(m.saturating_sub(cfg.keys_zone), m));
        }
        if let (true, Some(f)) = (low_free, free) {
            wanted = wanted.max(need(cfg.min_free.saturating_sub(f), index.disk_bytes()));
        }
        let n = EVICT_STEP
            .min(budget - out.expired - out.evicted)
            .min(usize::try_from(wanted).unwrap_or(usize::MAX));
        let (evicted, freed) = zone.evict(n);
        if evicted == 0 {
            break; // everything left is in use
        }
        out.evicted += evicted;
        if let Some(f) = free.as_mut() {
            *f += freed;
        }
    }
    out
}

/// Bytes available to unprivileged users on the filesystem holding `path`.
pub fn free_space(path: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call, and `st`
    // points to writable memory of the right type; statvfs only writes into it.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("statvfs() failed: {e}")));
    }
    // SAFETY: statvfs returned 0, so it fully initialised `st`.
    let st = unsafe { st.assume_init() };
    // The field types differ between platforms (u32 on some 32-bit targets).
    #[allow(clippy::unnecessary_cast)]
    let (avail, frsize) = (st.f_bavail as u64, st.f_frsize as u64);
    Ok(avail.saturating_mul(frsize))
}

#[cfg(test)]
mod tests {
    #[test]
    fn trimming_the_heap_keeps_live_memory_intact() {
        // Fragment the heap (every other block freed), trim, and check the survivors.
        let mut blocks: Vec<Vec<u8>> = (0..64u8).map(|i| vec![i; 100_000]).collect();
        let kept: Vec<Vec<u8>> = blocks.drain(..).step_by(2).collect();
        let _ = super::trim_heap();
        for (n, b) in kept.iter().enumerate() {
            assert!(b.iter().all(|&x| x as usize == 2 * n), "block {n} intact");
        }
    }

    use super::*;

    #[test]
    fn statvfs_reports_free_space_and_errors() {
        let d = tempfile::tempdir().unwrap();
        let free = free_space(d.path()).unwrap();
        assert!(free > 0);
        let missing = d.path().join("missing");
        let e = free_space(&missing).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("statvfs"));
    }
}
