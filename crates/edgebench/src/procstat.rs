//! Server cost from `/proc`: CPU time (utime + stime) and resident memory, summed over a
//! process and all its descendants.
//!
//! How it fits: the runner samples [`cpu_time`] before and after each cell, so the
//! difference divided by the requests served is "server CPU µs per request", the fairest
//! figure when the client is the bottleneck (1 MiB objects). Descendants are included
//! because nginx's master forks workers and varnishd's manager forks the cache child.
//! Per-process `utime`/`stime` already include every thread.

use std::collections::HashMap;
use std::time::Duration;

/// Fields of `/proc/<pid>/stat` after the `(comm)` field.
struct Stat {
    ppid: u32,
    ticks: u64,
    sys_ticks: u64,
}

fn parse_stat(text: &str) -> Option<Stat> {
    // comm may contain spaces and ')', so split at the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] = state (field 3), ppid = field 4, utime = 14, stime = 15.
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(Stat {
        ppid,
        ticks: utime + stime,
        sys_ticks: stime,
    })
}

fn read_stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `pid` and every live descendant.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(st) = read_stat(p) {
                children.entry(st.ppid).or_default().push(p);
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        if let Some(c) = children.get(&out[i]) {
            out.extend(
                c.iter()
                    .copied()
                    .filter(|p| !out.contains(p))
                    .collect::<Vec<_>>(),
            );
        }
        i += 1;
    }
    out
}

fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// CPU time used so far by `pid` and its descendants.
pub fn cpu_time(pid: u32) -> Duration {
    let ticks: u64 = tree(pid)
        .into_iter()
        .filter_map(read_stat)
        .map(|s| s.ticks)
        .sum();
    Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64)
}

/// The system (kernel) part of [`cpu_time`]: page-cache reclaim, copies, disk I/O
/// submission show up here.
pub fn sys_time(pid: u32) -> Duration {
    let ticks: u64 = tree(pid)
        .into_iter()
        .filter_map(read_stat)
        .map(|s| s.sys_ticks)
        .sum();
    Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64)
}

/// Resident set size of `pid` and its descendants, in bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    tree(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| parse_vm_rss(&s))
        .sum()
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_comm() {
        let s = "1234 (we ird) name)) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 100 0 0";
        let st = parse_stat(s).unwrap();
        assert_eq!(st.ppid, 77);
        assert_eq!(st.ticks, 300);
        assert_eq!(st.sys_ticks, 50);
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn parses_vm_rss() {
        assert_eq!(
            parse_vm_rss("Name:\tx\nVmRSS:\t    2048 kB\n"),
            Some(2048 * 1024)
        );
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
    }

    /// A child that burns CPU shows up in its parent's tree total.
    #[test]
    fn counts_descendants() {
        let mut sh = std::process::Command::new("sh")
            .args([
                "-c",
                "(i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done) & wait",
            ])
            .spawn()
            .unwrap();
        let pid = sh.id();
        let mut best = Duration::ZERO;
        let mut saw_child = false;
        while sh.try_wait().unwrap().is_none() {
            saw_child |= tree(pid).len() > 1;
            best = best.max(cpu_time(pid));
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(saw_child, "the subshell was never seen as a descendant");
        assert!(best > Duration::ZERO, "no CPU time seen");
        assert!(rss_bytes(std::process::id()) > 0);
    }
}
