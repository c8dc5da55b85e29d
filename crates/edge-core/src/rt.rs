//! The tokio runtime each of the server's own threads runs on, and the thread's CPU
//! clock (what compression and the large-hit chooser measure their work by).

/// A current-thread runtime for one of the server's own threads (a worker, the admin
/// listener, the health checks); None, logged, when it cannot be built.
pub fn thread_runtime(what: &str) -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            tracing::error!("{what}: cannot build a runtime: {e}");
            None
        }
    }
}

/// CPU time of the calling thread, in nanoseconds: user and system, including the
/// softirq work the kernel charged to it.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID needs nothing
    // else and cannot fail on Linux (on error `ts` stays zero, which only undercounts).
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_thread_clock_moves_with_work() {
        let a = super::thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(super::thread_cpu_ns() > a, "{x}");
    }
}
