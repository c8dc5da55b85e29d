//! Small synchronisation helpers shared by the whole crate: [`lock`] (a mutex whose
//! poisoning is ignored) and [`Signal`] (a flag and a condition variable, how a zone
//! wakes its manager early or stops its background threads).
//!
//! How it fits: a leaf module. Nothing here knows about caches; every module that holds
//! a lock uses [`lock`], and [`crate::zone::Zone`] owns the two signals its loader and
//! manager threads wait on.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Locks `m`; a poisoned lock (a thread panicked holding it) is taken anyway: every
/// structure behind these locks stays consistent between statements.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A flag and a condition variable: one side raises it, the other waits for it.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    flag: Mutex<bool>,
    cv: Condvar,
}

impl Signal {
    /// Raises the flag and wakes every waiter.
    pub(crate) fn raise(&self) {
        *lock(&self.flag) = true;
        self.cv.notify_all();
    }

    /// Waits up to `d` unless the flag is up; the flag stays as it is (a stop signal,
    /// raised once for good).
    pub(crate) fn wait_unless_raised(&self, d: Duration) {
        let g = lock(&self.flag);
        if !*g {
            let _ = self.cv.wait_timeout(g, d);
        }
    }

    /// Waits up to `d` unless the flag is up, then lowers it (a wake-up signal, raised
    /// again for each new reason to wake).
    pub(crate) fn wait_and_lower(&self, d: Duration) {
        let mut g = lock(&self.flag);
        if !*g {
            g = self
                .cv
                .wait_timeout(g, d)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        *g = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_raised_signal_ends_waits_and_a_wake_up_is_consumed() {
        let s = Arc::new(Signal::default());
        let t = {
            let s = s.clone();
            std::thread::spawn(move || s.wait_and_lower(Duration::from_secs(3600)))
        };
        // Raised repeatedly until the waiter has consumed one (it may not wait yet).
        while !t.is_finished() {
            s.raise();
            std::thread::sleep(Duration::from_millis(1));
        }
        t.join().unwrap();
        s.raise();
        s.wait_and_lower(Duration::from_secs(3600)); // raised: returns at once, lowers
        assert!(!*lock(&s.flag), "a wake-up is consumed by the wait");
        s.raise();
        s.wait_unless_raised(Duration::from_secs(3600)); // returns at once
        assert!(*lock(&s.flag), "a stop stays raised");
        let quiet = Signal::default();
        quiet.wait_unless_raised(Duration::from_millis(1));
        assert!(!*lock(&quiet.flag));
    }
}
