//! Worker threads: one OS thread per `-t`, each running a tokio `current_thread`
//! runtime with its share of the connections.
//!
//! How it fits: [`crate::run`] builds the [`Shared`] state, starts [`spawn`] once per
//! thread and waits for each thread's [`ThreadStats`]. Connection `g` belongs to thread
//! `g % threads`, so connections (and a `--ramp`) are spread evenly over the threads.
//! A thread stops at the deadline, when the stop signal (Ctrl-C) arrives, or when all of
//! its connections finished their `--requests` budget; dropping the `LocalSet` then
//! abandons whatever was still in flight, as wrk does.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::LocalSet;

pub use crate::shared::Shared;
use crate::stats::ThreadStats;

/// How often each thread samples its request rate (wrk's Req/Sec row uses 100 ms).
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Starts worker thread `idx`; when it ends it sends `(when it stopped measuring, stats)`
/// on `done`.
pub fn spawn(
    idx: usize,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    done: mpsc::UnboundedSender<(Instant, ThreadStats)>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("edgeload-{idx}"))
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("edgeload: thread {idx}: cannot build runtime: {e}");
                    let _ = done.send((Instant::now(), ThreadStats::new(shared.cfg.classes.len())));
                    return;
                }
            };
            let stats = Rc::new(RefCell::new(ThreadStats::new(shared.cfg.classes.len())));
            let local = LocalSet::new();
            let mut conns = Vec::new();
            local.block_on(&rt, async {
                for g in (idx..shared.cfg.connections).step_by(shared.cfg.threads) {
                    let (shared, stats) = (shared.clone(), stats.clone());
                    conns.push(if shared.cfg.h3 {
                        tokio::task::spawn_local(crate::h3::run(shared, stats, g))
                    } else {
                        tokio::task::spawn_local(crate::conn::run(shared, stats, g))
                    });
                }
                tokio::task::spawn_local(sample_rate(shared.start, stats.clone()));
                let all_done = async {
                    for c in conns.iter_mut() {
                        let _ = c.await;
                    }
                };
                tokio::select! {
                    () = all_done => {}
                    () = tokio::time::sleep_until(shared.deadline.into()) => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
            });
            // Measurement ends here; closing thousands of sockets below is not test time.
            let stopped = Instant::now();
            if shared.cfg.h3 {
                // QUIC has no FIN: tell the server the connections are over, once their
                // tasks are stopped (a request cut by the close is no error of the run,
                // and no connection is opened again).
                for c in &conns {
                    c.abort();
                }
                local.block_on(&rt, crate::h3::close_all(Duration::from_millis(200)));
            }
            // Dropping the LocalSet drops the connection tasks (and their sockets).
            drop(local);
            let stats = std::mem::replace(&mut *stats.borrow_mut(), ThreadStats::new(0));
            let _ = done.send((stopped, stats));
        })
}

/// Records this thread's completed-requests rate every [`SAMPLE_INTERVAL`] (zero
/// samples are skipped, as in wrk).
async fn sample_rate(start: Instant, stats: Rc<RefCell<ThreadStats>>) {
    let mut tick = tokio::time::interval_at((start + SAMPLE_INTERVAL).into(), SAMPLE_INTERVAL);
    // A busy loop that misses ticks must not catch up with a burst of tiny intervals.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut last_n, mut last_t) = (0u64, start);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let mut s = stats.borrow_mut();
        let n = s.completed;
        let secs = now.duration_since(last_t).as_secs_f64();
        if n > last_n && secs > 0.0 {
            let rate = ((n - last_n) as f64 / secs).round() as u64;
            s.req_rate.saturating_record(rate);
        }
        (last_n, last_t) = (n, now);
    }
}
