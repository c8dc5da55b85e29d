//! The run: parse flags, start the worker threads, wait for the end of the test or
//! Ctrl-C, merge, print, write JSON, choose the exit code.
//!
//! How it fits: this is the only place that knows about processes (stdout, stderr, exit
//! codes, signals). Exit codes follow the project contract: 0 normal, 1 runtime failure
//! (body verification mismatches, no request answered at all, JSON not written), 2 bad
//! usage.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, watch};

use crate::cli::{self, CliError, Config};
use crate::stats::ThreadStats;
use crate::worker::{self, Shared};
use crate::{json, report};

/// Exit codes (docs/contracts.md "Exit codes").
pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILURE: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

/// What a finished run measured.
pub struct Outcome {
    pub stats: ThreadStats,
    pub runtime: Duration,
    /// Stopped early by SIGINT.
    pub interrupted: bool,
}

/// Parses `argv`, runs the test, prints the report; returns the process exit code.
pub fn main_with_args<I, T>(argv: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cfg = match cli::parse(argv) {
        Ok(c) => c,
        Err(CliError::Info(e)) => {
            let _ = e.print();
            return EXIT_OK;
        }
        Err(CliError::Usage(m)) => {
            let m = m.trim_end();
            if m.starts_with("error:") {
                eprintln!("{m}");
            } else {
                eprintln!("edgeload: {m}\nTry 'edgeload --help' for more information.");
            }
            return EXIT_USAGE;
        }
        Err(CliError::Runtime(m)) => {
            eprintln!("edgeload: {m}");
            return EXIT_FAILURE;
        }
    };
    print!("{}", report::header(&cfg));
    let _ = std::io::stdout().flush();
    let outcome = match execute(&cfg) {
        Ok(o) => o,
        Err(m) => {
            eprintln!("edgeload: {m}");
            return EXIT_FAILURE;
        }
    };
    print!("{}", report::render(&cfg, &outcome.stats, outcome.runtime));
    let _ = std::io::stdout().flush();
    if let Some(why) = &outcome.stats.tls_error {
        eprintln!(
            "edgeload: {} TLS handshake(s) failed; the first: {why}",
            outcome.stats.tls.failed
        );
    }
    let mut code = EXIT_OK;
    if let Some(path) = &cfg.json {
        if let Err(m) = json::write(path, &json::build(&cfg, &outcome.stats, outcome.runtime)) {
            eprintln!("edgeload: {m}");
            code = EXIT_FAILURE;
        }
    }
    let st = &outcome.stats;
    if st.verify.mismatched > 0 {
        eprintln!(
            "edgeload: {} response bodies did not match their X-Checksum: failing (exit 1)",
            st.verify.mismatched
        );
        code = EXIT_FAILURE;
    }
    if st.completed == 0 && !outcome.interrupted {
        let e = &st.errors;
        if e.connect + e.connect_timeout + e.read + e.write + e.timeout > 0 {
            eprintln!(
                "edgeload: no request completed (is the server at {} up?)",
                cfg.addr
            );
            code = EXIT_FAILURE;
        }
    }
    code
}

/// File descriptors kept free beyond one per connection (runtime, stdio, JSON file).
const SPARE_FDS: u64 = 64;

/// Raises the soft open-files limit towards the hard limit when `-c` needs more
/// descriptors than the soft limit allows (wrk leaves this to `ulimit -n`; edgeload does
/// it so that ramp tests with tens of thousands of connections just work). Returns the
/// soft limit in force afterwards.
pub fn raise_nofile_limit(connections: usize) -> Option<u64> {
    let want = connections as u64 + SPARE_FDS;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into the valid, exclusively borrowed `lim`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur >= want {
        return Some(lim.rlim_cur);
    }
    let raised = libc::rlimit {
        rlim_cur: want.min(lim.rlim_max),
        rlim_max: lim.rlim_max,
    };
    // SAFETY: setrlimit only reads the valid `raised` struct; lowering or raising the
    // soft limit within the hard limit cannot affect memory safety.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        return Some(lim.rlim_cur);
    }
    Some(raised.rlim_cur)
}

/// Runs the test described by `cfg` and returns the merged measurements.
pub fn execute(cfg: &Config) -> Result<Outcome, String> {
    if let Some(limit) = raise_nofile_limit(cfg.connections) {
        if limit < cfg.connections as u64 + SPARE_FDS {
            eprintln!(
                "edgeload: warning: open-files limit {limit} is below -c {} (+{SPARE_FDS}); raise the hard limit (ulimit -Hn)",
                cfg.connections
            );
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build runtime: {e}"))?;
    rt.block_on(async {
        // Installed before any worker starts, so an early Ctrl-C still prints a report.
        let mut sigint =
            signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;
        let start = Instant::now();
        let shared = Arc::new(Shared::new(cfg.clone(), start));
        let (stop_tx, stop_rx) = watch::channel(false);
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        let mut handles = Vec::with_capacity(cfg.threads);
        for idx in 0..cfg.threads {
            match worker::spawn(idx, shared.clone(), stop_rx.clone(), done_tx.clone()) {
                Ok(h) => handles.push(h),
                Err(e) => {
                    let _ = stop_tx.send(true);
                    return Err(format!("cannot start thread {idx}: {e}"));
                }
            }
        }
        drop(done_tx);
        let mut merged = ThreadStats::new(cfg.classes.len());
        let mut interrupted = false;
        let mut end = start;
        let mut received = 0;
        while received < cfg.threads {
            tokio::select! {
                msg = done_rx.recv() => match msg {
                    Some((stopped, st)) => {
                        merged.merge(&st);
                        received += 1;
                        end = end.max(stopped);
                    }
                    None => break, // a thread died without reporting
                },
                _ = sigint.recv(), if !interrupted => {
                    interrupted = true;
                    let _ = stop_tx.send(true);
                }
            }
        }
        for h in handles {
            let _ = h.join();
        }
        Ok(Outcome {
            stats: merged,
            runtime: end.duration_since(start),
            interrupted,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nofile_limit_is_raised_within_the_hard_limit() {
        let mut before = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: writes one rlimit into a valid local.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut before) };
        assert_eq!(rc, 0);
        // Asking for less than we have changes nothing.
        assert_eq!(raise_nofile_limit(1), Some(before.rlim_cur));
        // Asking for more gets at most the hard limit.
        let want = before.rlim_cur.saturating_add(10).min(before.rlim_max);
        let got = raise_nofile_limit(want as usize).unwrap();
        assert!(got >= before.rlim_cur && got <= before.rlim_max);
    }
}
