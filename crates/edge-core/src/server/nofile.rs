//! The descriptor limit and `worker_connections`.
//!
//! How it fits: at start [`raise`] lifts the soft `RLIMIT_NOFILE` to the hard limit (as
//! nginx's `worker_rlimit_nofile`, without a key to set: a stock machine's soft limit is
//! 1024 while its hard one is far higher). [`worker_connections`] then takes the
//! configured value, or, when the config leaves it unset, sizes it to what that limit
//! allows, so that a worker refuses connections itself before `accept` fails with EMFILE.
//! Only a value the user set is warned about: a default never is.

/// The largest `worker_connections` chosen when the config leaves it unset.
pub const AUTO_MAX: usize = 65536;

/// Descriptors kept aside from the connections' share of `limit`: the listeners, the logs,
/// stdio, the admin and helper threads (64), and per worker its own listeners, epoll,
/// eventfds and io_uring ring (32) plus its open file cache (`open_file_cache.max`). At
/// most a quarter of the limit, so that a small limit still leaves most of it to
/// connections.
pub fn reserve(limit: u64, workers: usize, open_file_cache: usize) -> u64 {
    let per_worker = 32u64.saturating_add(open_file_cache as u64);
    (limit / 4).min(64u64.saturating_add((workers as u64).saturating_mul(per_worker)))
}

/// Descriptors `workers` workers of `worker_connections` may need: two per connection (the
/// client and an upstream connection or a cache file) plus the [`reserve`].
pub fn needed(workers: usize, worker_connections: usize, reserve: u64) -> u64 {
    (workers as u64)
        .saturating_mul(worker_connections as u64)
        .saturating_mul(2)
        .saturating_add(reserve)
}

/// `worker_connections` when the config leaves it unset: `(limit - reserve) / (2 *
/// workers)`, between 1 and [`AUTO_MAX`].
pub fn auto(limit: u64, workers: usize, open_file_cache: usize) -> usize {
    let r = reserve(limit, workers, open_file_cache);
    let per = limit.saturating_sub(r) / (workers.max(1) as u64).saturating_mul(2);
    per.clamp(1, AUTO_MAX as u64) as usize
}

/// What the effective `worker_connections` is, and whether to warn about it.
#[derive(Debug, PartialEq, Eq)]
pub struct Sizing {
    pub worker_connections: usize,
    /// Set only for a configured value the limit cannot carry: (needed, limit).
    pub short: Option<(u64, u64)>,
}

/// The effective `worker_connections` under `limit`: the configured one (`Some`), with
/// a shortfall noted when the limit is below what it needs, or [`auto`].
pub fn size(limit: u64, workers: usize, configured: Option<usize>, ofc: usize) -> Sizing {
    match configured {
        None => Sizing {
            worker_connections: auto(limit, workers, ofc),
            short: None,
        },
        Some(n) => {
            let want = needed(workers, n, reserve(limit, workers, ofc));
            Sizing {
                worker_connections: n,
                short: (want > limit).then_some((want, limit)),
            }
        }
    }
}

/// Raises the soft descriptor limit to the hard one; returns the soft limit in force
/// after (the old one when it cannot be read or raised, which is logged).
pub fn raise() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::warn!("getrlimit(RLIMIT_NOFILE) failed: {e}; assuming 1024 descriptors");
        return 1024;
    }
    if lim.rlim_cur >= lim.rlim_max {
        return lim.rlim_cur;
    }
    let new = libc::rlimit {
        rlim_cur: lim.rlim_max,
        rlim_max: lim.rlim_max,
    };
    // SAFETY: `new` is a valid rlimit; the soft limit stays within the hard one.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } != 0 {
        let e = std::io::Error::last_os_error();
        tracing::warn!(
            "setrlimit(RLIMIT_NOFILE, {}) failed: {e}; the limit stays {}",
            lim.rlim_max,
            lim.rlim_cur
        );
        return lim.rlim_cur;
    }
    lim.rlim_max
}

/// Raises the limit and sizes `worker_connections` (see the module doc); warns when a
/// configured value needs more descriptors than the hard limit allows.
pub fn worker_connections(workers: usize, configured: Option<usize>, ofc: usize) -> Sizing {
    let limit = raise();
    let s = size(limit, workers, configured, ofc);
    if let Some((want, limit)) = s.short {
        tracing::warn!(
            "descriptor limit {limit} is below the {want} that {workers} worker(s) of {} worker_connections may need (raise the hard limit, e.g. LimitNOFILE=, or leave worker_connections unset to size it to the limit): accept() may fail with EMFILE before worker_connections is reached",
            s.worker_connections
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_worker_connections_fit_the_limit() {
        // A stock shell's 1024, 2 workers, the default open file cache (1000 per worker):
        // the reserve is capped at a quarter, the rest is shared.
        assert_eq!(reserve(1024, 2, 1000), 256);
        assert_eq!(auto(1024, 2, 1000), 192);
        // The packaged unit's LimitNOFILE on 16 cores: 64 + 16 * 1032 kept aside.
        assert_eq!(reserve(1 << 20, 16, 1000), 16_576);
        assert_eq!(auto(1 << 20, 16, 1000), (1_048_576 - 16_576) / 32);
        // A large limit and few workers: capped.
        assert_eq!(auto(1 << 20, 2, 1000), AUTO_MAX);
        // Whatever the inputs, at least 1, and never more than the limit carries.
        assert_eq!(auto(0, 4, 1000), 1);
        assert_eq!(auto(10, 0, 0), 4);
        assert_eq!(auto(u64::MAX, 1, usize::MAX), AUTO_MAX);
        assert_eq!(auto(u64::MAX, usize::MAX, usize::MAX), 1);
        for limit in [64u64, 256, 1024, 4096, 65_536, 524_288, 1 << 20] {
            for workers in [1, 2, 3, 8, 16, 64, 256] {
                for ofc in [0, 1000] {
                    let n = auto(limit, workers, ofc);
                    let s = size(limit, workers, None, ofc);
                    assert_eq!(
                        s,
                        Sizing {
                            worker_connections: n,
                            short: None
                        }
                    );
                    if n > 1 {
                        let r = reserve(limit, workers, ofc);
                        assert!(needed(workers, n, r) <= limit, "{limit} {workers} {ofc}");
                    }
                }
            }
        }
    }

    #[test]
    fn only_a_configured_value_is_short() {
        let s = size(1024, 2, Some(65536), 1000);
        assert_eq!(s.worker_connections, 65536);
        assert_eq!(s.short, Some((2 * 2 * 65536 + 256, 1024)));
        assert_eq!(
            size(1 << 20, 2, Some(1000), 1000),
            Sizing {
                worker_connections: 1000,
                short: None
            }
        );
        assert_eq!(size(1024, 2, None, 1000).short, None);
    }
}
