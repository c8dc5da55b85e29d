//! Request and connection limits held for the whole node (nginx's `limit_req` and
//! `limit_conn`; `docs/limits.md` is the user's side).
//!
//! # Why no lock
//! nginx keeps its limits in a shared-memory red-black tree under a mutex: every
//! request to a limited location takes the lock. Here a zone is a fixed array of atomic
//! words that every worker reads and writes with compare-and-swap ([`table`]):
//! - a rate limit's whole state for one key is one `u64`, its GCRA *theoretical arrival
//!   time* ([`gcra`]), so taking a request is one CAS on that word (looped only when
//!   another worker changed it in between: lock-free, and each lost race is another
//!   worker's progress);
//! - a connection count and the key it belongs to share one word, so counting,
//!   giving back and claiming a free slot are single CASes too;
//! - the table never grows, never rehashes and needs no garbage collection: a key has
//!   two candidate buckets of one cache line each, and a rate table replaces the
//!   candidate with the oldest TAT when a new key arrives (least recently seen, and
//!   the state worth least: a TAT in the past is no state at all).
//!
//! The limit is one for the node because the state is: a key's connections may land on
//! any worker (`reuseport` spreads them by address and port) and all of them read and
//! advance the same word. The cost per limited request is a key rendered into a
//! worker-local buffer, one xxh3 hash, one or two cache lines read and one CAS, plus
//! one relaxed add on the worker's own counter line ([`zone::Counters`]).
//!
//! Per-worker token leases (each worker holding a share of the rate) were the other
//! way; they avoid even the shared cache line but are exact only when the load is even
//! over workers, which one client's few connections never are.
//!
//! # Layout
//! - [`gcra`]: the arithmetic (burst, nodelay, delay), pure.
//! - [`table`]: the atomic tables.
//! - [`key`]: the key template and its seeded hash.
//! - [`zone`]: zones, their counters, and [`Zones`], rebuilt on reload from the
//!   previous generation so that unchanged zones keep their state.
//! - [`rules`]: a location's limits ([`RouteLimits`]), [`check_req`], the counts a
//!   connection holds ([`Held`]) and those taken at accept ([`accept_rules`],
//!   [`admit`]).

pub mod gcra;
pub mod key;
pub mod rules;
pub mod table;
pub mod zone;

pub use gcra::{Gcra, Verdict};
pub use key::Key;
pub use rules::{accept_rules, admit, check_req, ConnRule, Held, ReqOutcome, ReqRule, RouteLimits};
pub use table::ConnRefusal;
pub use zone::{clock, ConnGuard, ConnZone, ReqResult, ReqZone, Zones};

#[cfg(test)]
mod tests;
