//! The objects requested most over the last minute, for `/status` `top_objects` and
//! the admin console.
//!
//! How it fits: the session calls [`record`] after each exchange with the worker's
//! request count before it; one request in [`SAMPLE_EVERY`] is counted into a
//! thread-local space-saving top-K (the worker's own thread: no lock, no shared
//! line), the rest return after one modulo. The worker's once-a-second clock calls
//! [`tick`], which merges the last minute's windows and publishes them to the worker's
//! [`Published`] (a mutex taken once a second by the worker and by `/status` readers,
//! never per request). Memory is bounded: [`WINDOWS`] windows of [`SLOTS`] keys of at
//! most [`KEY_MAX`] bytes per worker.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

/// One request in this many is sampled; counts are reported multiplied back by it.
pub const SAMPLE_EVERY: u64 = 8;
/// Keys tracked per window (space-saving: a new key replaces the least counted one).
pub const SLOTS: usize = 32;
/// Windows of [`WINDOW_S`] seconds: together, the last minute.
pub const WINDOWS: usize = 6;
pub const WINDOW_S: u64 = 10;
/// Longest key kept (host and path, cut at a character boundary).
pub const KEY_MAX: usize = 256;
/// Keys published per worker, and reported by [`merged`].
pub const PUBLISHED: usize = 20;

/// One window's counts (space-saving top-K over [`SLOTS`] keys).
#[derive(Default)]
struct Window {
    slots: Vec<(Box<str>, u64)>,
}

impl Window {
    fn record(&mut self, host: &str, path: &str) {
        let same = |k: &str| {
            k.len() == host.len() + path.len() && k.starts_with(host) && k.ends_with(path)
        };
        if let Some(slot) = self.slots.iter_mut().find(|(k, _)| same(k)) {
            slot.1 += 1;
            return;
        }
        let key: Box<str> = [host, path].concat().into_boxed_str();
        if self.slots.len() < SLOTS {
            self.slots.push((key, 1));
        } else if let Some(min) = self.slots.iter_mut().min_by_key(|(_, n)| *n) {
            // Space-saving: the newcomer inherits the evicted count, so a key that is
            // truly frequent cannot be kept out by churn.
            *min = (key, min.1 + 1);
        }
    }
}

/// A worker's windows (thread-local: only its own thread records and ticks).
#[derive(Default)]
struct Sampler {
    windows: [Window; WINDOWS],
    current: usize,
    seconds: u64,
}

thread_local! {
    static SAMPLER: RefCell<Sampler> = RefCell::default();
}

/// What a worker last published: its top keys over the last minute, counts as
/// sampled (not yet multiplied by [`SAMPLE_EVERY`]).
#[derive(Default)]
pub struct Published(Mutex<Vec<(String, u64)>>);

/// `s` cut to at most `max` bytes at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Counts one request for its host and path if it is a sampled one: `n` is the
/// worker's request count before this request. The others cost one test: the host
/// field is looked up only for a sampled request.
#[inline]
pub fn record(n: u64, req: &edge_http::RequestHead) {
    if n.is_multiple_of(SAMPLE_EVERY) {
        record_sampled(req.host(), req.path());
    }
}

#[inline(never)]
fn record_sampled(host: Option<&str>, path: &str) {
    let host = cut(host.unwrap_or(""), KEY_MAX / 2);
    let path = cut(path, KEY_MAX - host.len());
    SAMPLER.with_borrow_mut(|s| {
        let cur = s.current;
        s.windows[cur].record(host, path);
    });
}

/// The worker's once-a-second clock: publishes the last minute's counts to `out` and,
/// every [`WINDOW_S`] seconds, starts a new window in place of the oldest.
pub fn tick(out: &Published) {
    let top = SAMPLER.with_borrow_mut(|s| {
        s.seconds += 1;
        if s.seconds.is_multiple_of(WINDOW_S) {
            s.current = (s.current + 1) % WINDOWS;
            let cur = s.current;
            s.windows[cur].slots.clear();
        }
        let mut sum: HashMap<&str, u64> = HashMap::new();
        for w in &s.windows {
            for (k, n) in &w.slots {
                *sum.entry(k).or_default() += n;
            }
        }
        top_n(sum.into_iter().map(|(k, n)| (k.to_string(), n)).collect())
    });
    if let Ok(mut p) = out.0.lock() {
        *p = top;
    }
}

/// The [`PUBLISHED`] highest counts, ties by key.
fn top_n(mut v: Vec<(String, u64)>) -> Vec<(String, u64)> {
    v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(PUBLISHED);
    v
}

/// The workers' published counts summed, highest first, as estimated requests
/// (sampled counts times [`SAMPLE_EVERY`]).
pub fn merged<'a>(workers: impl Iterator<Item = &'a Published>) -> Vec<(String, u64)> {
    let mut sum: HashMap<String, u64> = HashMap::new();
    for p in workers {
        if let Ok(p) = p.0.lock() {
            for (k, n) in p.iter() {
                *sum.entry(k.clone()).or_default() += n * SAMPLE_EVERY;
            }
        }
    }
    top_n(sum.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`record`] for a request with this host and path.
    fn record_at(n: u64, host: Option<&str>, path: &str) {
        let head = match host {
            Some(h) => format!("GET {path} HTTP/1.1\r\nHost: {h}\r\n\r\n"),
            None => format!("GET {path} HTTP/1.0\r\n\r\n"),
        };
        let (req, _) = edge_http::parse_request(head.as_bytes(), &edge_http::Limits::default())
            .unwrap()
            .unwrap();
        record(n, &req);
    }

    /// Runs on a thread of its own, so the thread-local sampler starts empty.
    fn fresh<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().unwrap()
    }

    #[test]
    fn samples_one_in_n_and_reports_estimates() {
        let top = fresh(|| {
            let p = Published::default();
            for n in 0..80 {
                record_at(n, Some("a.test"), "/hot");
            }
            for n in 0..16 {
                record_at(n, Some("a.test"), "/warm");
            }
            tick(&p);
            merged(std::iter::once(&p))
        });
        assert_eq!(
            top,
            vec![
                ("a.test/hot".to_string(), 80),
                ("a.test/warm".to_string(), 16)
            ]
        );
    }

    #[test]
    fn frequent_key_survives_churn_and_memory_is_bounded() {
        let top = fresh(|| {
            let p = Published::default();
            for i in 0..10_000u64 {
                let path = if i % 3 == 0 {
                    "/hot".to_string()
                } else {
                    format!("/cold/{i}")
                };
                record_at(0, None, &path);
            }
            SAMPLER.with_borrow(|s| assert!(s.windows.iter().all(|w| w.slots.len() <= SLOTS)));
            tick(&p);
            merged(std::iter::once(&p))
        });
        assert_eq!(top[0].0, "/hot");
        assert!(top.len() <= PUBLISHED);
    }

    #[test]
    fn counts_older_than_a_minute_are_dropped() {
        let top = fresh(|| {
            let p = Published::default();
            record_at(0, Some("h"), "/old");
            for _ in 0..WINDOWS as u64 * WINDOW_S - 1 {
                tick(&p);
            }
            let before = merged(std::iter::once(&p));
            assert_eq!(before, vec![("h/old".to_string(), SAMPLE_EVERY)]);
            tick(&p);
            merged(std::iter::once(&p))
        });
        assert!(top.is_empty(), "{top:?}");
    }

    #[test]
    fn long_keys_are_cut_and_cuts_fall_on_a_character_boundary() {
        let key = fresh(|| {
            let p = Published::default();
            let host = "h".repeat(KEY_MAX);
            let path = format!("/{}", "p".repeat(KEY_MAX));
            record_at(0, Some(&host), &path);
            tick(&p);
            merged(std::iter::once(&p)).remove(0).0
        });
        assert_eq!(key.len(), KEY_MAX);
        assert!(key.starts_with("hhh") && key.ends_with("ppp"), "{key}");
        let e = "é".repeat(10);
        assert_eq!(cut(&e, 5), "éé");
        assert_eq!(cut(&e, 100), e);
    }
}
