//! The config in force ([`Current`]): the [`Shared`] state behind an `ArcSwap`, and
//! its generation as a plain atomic, so a worker can tell per request, with one load
//! of a line only SIGHUP writes, that its own snapshot is still the current one.
//!
//! How it fits: the main thread builds a new [`Shared`] on SIGHUP and [`Current::store`]s
//! it; each worker keeps an `Rc` of the snapshot it last took and compares that
//! snapshot's `generation` with [`Current::generation`] per request, taking the
//! `ArcSwap` (a SeqCst load and a debt slot, then an `Arc` clone) only when they
//! differ. The admin listener and the health checks, which are not per request, take
//! the `ArcSwap` as before ([`Current::load`], [`Current::load_full`]).

use super::Shared;
use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// See the module documentation.
pub struct Current {
    swap: ArcSwap<Shared>,
    /// The generation of the state being published: written (Release) *before* the
    /// swap, so it may name a state not yet in `swap`, never an older one.
    generation: AtomicU64,
}

impl Current {
    pub fn new(s: Shared) -> Current {
        Current {
            generation: AtomicU64::new(s.generation),
            swap: ArcSwap::from_pointee(s),
        }
    }

    /// The state as it is now (a guard: keep it short).
    pub fn load(&self) -> arc_swap::Guard<Arc<Shared>> {
        self.swap.load()
    }

    pub fn load_full(&self) -> Arc<Shared> {
        self.swap.load_full()
    }

    /// The generation being published. A worker whose snapshot has another
    /// generation takes [`Current::load_full`]; one whose snapshot has this one keeps
    /// it.
    ///
    /// Ordering: [`Current::store`] writes the generation (Release) before it swaps
    /// the state in. A worker that reads the new generation while the old state is
    /// still in the swap takes the old state, whose generation still differs, so it
    /// looks again on its next request (never stuck on the old state). Whoever has
    /// seen the new state (a `/status` answer, the reload's log line) was ordered
    /// after the generation's write, so a request it sends next reads the new
    /// generation and gets the new state: a reload applies to the next request.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Publishes `s`, whose generation must be above every earlier one (a worker
    /// whose snapshot has `s.generation` would not take it).
    pub fn store(&self, s: Arc<Shared>) {
        debug_assert!(s.generation > self.swap.load().generation);
        self.generation.store(s.generation, Ordering::Release);
        self.swap.store(s);
    }
}
