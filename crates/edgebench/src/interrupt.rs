//! Ctrl-C (SIGINT), SIGTERM and SIGHUP become a flag that every wait loop polls.
//!
//! How it fits: children run in their own process groups, so a terminal's Ctrl-C reaches
//! edgebench alone. The handler only stores to an atomic; the runner notices within one
//! poll slice ([`POLL`]), returns [`Error::interrupted`], and the drop of every
//! [`crate::process::Spawned`] stops what was started. A panic unwinds through the
//! same drops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How often wait loops look at the flag.
pub const POLL: Duration = Duration::from_millis(25);

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGINT, SIGTERM and SIGHUP.
pub fn install() -> std::io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is valid (empty mask, no flags); the handler is an
        // `extern "C" fn(c_int)` that only performs an atomic store, which is
        // async-signal-safe.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// True once a stop signal arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// `Err(Interrupted)` once a stop signal arrived.
pub fn check() -> Result<()> {
    if interrupted() {
        Err(Error::interrupted())
    } else {
        Ok(())
    }
}

/// Sleeps `d`, waking early (with an error) on a stop signal.
pub fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    loop {
        check()?;
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep(POLL.min(end - now));
    }
}

// The flag is process-global, so its test lives in `tests/interrupt.rs` (a process of
// its own) rather than here, where it would race the unit tests that wait on processes.
